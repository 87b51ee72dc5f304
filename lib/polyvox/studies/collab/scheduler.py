"""The scheduler: agents pass a task state by hand-offs until one confirms, at most ``t_max`` turns.

Algorithm, per question (the study's rule, stated in its README and config):

1. The ``first`` agent receives the state prompt (:func:`.protocol.state_prompt`) and
   writes one turn: reasoning, a tentative answer, an action.
2. ``handoff NAME | note``: NAME speaks next (its own name continues the thread).
   ``stop`` with a tentative answer: the question ends, *confirmed*, with that answer.
3. A ``stop`` without a tentative answer, or a protocol violation (no action, several,
   malformed, an agent outside the pool), is retried: the same agent is asked again with
   a fresh seed, up to ``max_retries`` times; after that the state is *forced* to the next
   agent in pool order (``forced_handoff`` on the turn). Every attempt is a model call and
   a turn in the record.
4. After ``t_max`` turns without a confirmation the question ends with status ``t_max``
   (no confirmed answer; :mod:`.projections` decides what is scored).

Departure: the study counts protocol turns; here every model call, retries included,
counts toward ``t_max``, so a run's cost is bounded by ``t_max`` calls per question.

Agents are backends of the one sampling layer (:func:`polyvox.backends.make_backend`):
in-process transformers, or any OpenAI-compatible endpoint. Every turn is sampled by
:func:`polyvox.runs.sample_texts`, as :func:`polyvox.runs.sample` samples: the prompt is
``backend.prompt(fmt, state)`` (default ``think``: the model's chat template, which an
OpenAI-compatible server applies itself) and the seed :func:`polyvox.runs.sample_seed` of
(seed, question id, turn index), so a retry (a new turn) has a fresh seed. Questions advance in
lock-step: each round, the pending turns of all open questions are grouped by agent and sent as
one batch.

Records: :func:`run` (and :func:`run_solo`: one model alone, one turn per question) writes one
trajectory per question to ``trajectories.jsonl`` with a ``manifest.json`` of settings (kind
``collab trajectories``); questions are appended as they finish (flushed), a rerun skips recorded
ids, a torn last line is cut, and a folder holding another run's settings or another kind of run
is refused before anything is written — so a killed run loses only unfinished questions and never
duplicates one. One writer per folder
(:class:`polyvox.records.RunLock`). A recorded line is read back as a typed record
(:class:`TrajectoryRecord`, its turns :class:`TurnRecord`, checked strictly by
:func:`polyvox.records.from_dict`): a malformed one is an error naming file, line and field.
A backend that still fails after its own bounded retries stops the run with one line
naming the agent (:class:`AgentError`).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import pydantic

from ... import runs
from ...backends.base import SamplingParams
from ...records import (Problem, RecordError, RunLock, append_jsonl, from_dict, iter_jsonl, now_iso,
                        repair_truncated_tail, write_manifest)
from ...stages import KIND_TRAJECTORIES, check_kind, foreign_files
from ...statuses import StrEnum
from .protocol import parse_turn, state_prompt

TRAJECTORIES = "trajectories.jsonl"
T_MAX = 12


class AgentError(RuntimeError):
    """An agent's backend failed after its retries; the message is one line naming the agent."""


class TrajectoryStatus(StrEnum):
    """``status`` of a trajectory (a :class:`polyvox.statuses` enum: each member is its string)."""
    OPEN = "open"  # in memory only: still running
    CONFIRMED = "confirmed"  # an agent stopped with a tentative answer (a solo run: it gave one)
    T_MAX = "t_max"  # t_max turns without a confirmation
    NO_ANSWER = "no_answer"  # a solo run's reply without an answer


@dataclass
class TurnRecord:
    """One turn of a recorded trajectory (one model call)."""
    agent: str
    attempt: int
    prompt_tokens: int
    completion_tokens: int
    answer: str | None
    action: str | None
    target: str | None
    note: str
    violation: str | None
    forced_handoff: str | None
    latency_s: float
    text: str


@dataclass
class TrajectoryRecord:
    """A line of ``trajectories.jsonl``: one finished question; ``turns`` are :class:`TurnRecord` s."""
    id: str
    question: str
    gold: str
    first: str
    status: Annotated[TrajectoryStatus, pydantic.Strict(False)]
    final: str | None
    n_turns: int
    turns: list[dict]
    metadata: dict = field(default_factory=dict)


def read_record(obj, path: Path | str = "<memory>", line: int | None = None) -> TrajectoryRecord:
    """A recorded trajectory checked as :class:`TrajectoryRecord` and each turn as :class:`TurnRecord`
    (strictly, :func:`polyvox.records.from_dict`); a finished one whose ``n_turns`` counts its turns, else a
    :class:`~polyvox.records.RecordError` naming path, line and field."""
    rec = from_dict(TrajectoryRecord, obj, path, line)
    for k, turn in enumerate(rec.turns):
        try:
            from_dict(TurnRecord, turn)
        except RecordError as exc:
            raise RecordError(path, line, f"turns[{k}]: {str(exc).split(': ', 1)[1]}") from None
    if rec.status == TrajectoryStatus.OPEN:
        raise RecordError(path, line, f"question {rec.id!r} is recorded unfinished (status 'open')")
    if rec.n_turns != len(rec.turns):
        raise RecordError(path, line, f"question {rec.id!r}: n_turns {rec.n_turns} but {len(rec.turns)} turns")
    return rec


@dataclass
class Trajectory:
    id: str
    question: str
    gold: object
    first: str
    turns: list = field(default_factory=list)
    status: TrajectoryStatus = TrajectoryStatus.OPEN  # open | confirmed | t_max
    final: str | None = None  # the confirmed answer (None unless status is confirmed)
    metadata: dict = field(default_factory=dict)
    next_agent: str | None = None
    retries: int = 0

    def record(self) -> dict:
        return {"id": self.id, "question": self.question, "gold": self.gold, "first": self.first,
                "status": self.status, "final": self.final, "n_turns": len(self.turns),
                "turns": self.turns, "metadata": self.metadata}


class _Agent:
    """An agent's backend whose failure (after the backend's own retries) is one line naming the agent."""

    def __init__(self, name: str, backend):
        self.agent, self.backend, self.name = name, backend, getattr(backend, "name", "?")

    def prompt(self, fmt: str, text: str):
        return self.backend.prompt(fmt, text)

    def generate(self, reqs, params):
        try:
            return self.backend.generate(reqs, params)
        except Exception as exc:  # noqa: BLE001 - any backend failure after its own retries
            ident = getattr(self.backend, "identity", lambda: {})()
            where = ident.get("base_url") or ident.get("model") or "?"
            msg = " ".join(str(exc).split())[:200]
            raise AgentError(f"agent {self.agent} ({where}) failed after retries: {msg}") from None


class Scheduler:
    def __init__(self, agents: dict, first: str, t_max: int = T_MAX, max_retries: int = 1,
                 params: SamplingParams | None = None, fmt: str = "think", seed: int = 0, history_window: int = 4):
        if first not in agents:
            raise ValueError(f"first agent {first!r} is not in the pool {sorted(agents)}")
        if fmt == "panel":  # its stop string (</answer>) would cut every turn before its action
            raise ValueError("the scheduler's turns end with an action after the answer: use the think or plain "
                             "format, not panel")
        self.agents, self.names = agents, tuple(agents)
        self.first, self.t_max, self.max_retries = first, t_max, max_retries
        self.params = params or SamplingParams(96, 0.0)
        self.fmt, self.seed, self.window = fmt, seed, history_window
        runs.check_sample_args(fmt, 1, self.params, None, 0, 1, 1, seed)

    def start(self, p: Problem) -> Trajectory:
        return Trajectory(p.id, p.text, p.gold, self.first, metadata=dict(p.metadata), next_agent=self.first)

    def _forced_target(self, agent: str) -> str:
        i = self.names.index(agent)
        return self.names[(i + 1) % len(self.names)] if len(self.names) > 1 else agent

    def step(self, open_: list[Trajectory]) -> None:
        """One round: every open trajectory's next turn, batched per agent, sampled by
        :func:`polyvox.runs.sample_texts` (sample index: the turn's index in its trajectory)."""
        by_agent: dict[str, list[Trajectory]] = {}
        for t in open_:
            by_agent.setdefault(t.next_agent, []).append(t)
        for name, group in by_agent.items():
            states = [Problem(t.id, state_prompt(t.question, self.names, name,
                                                 t.turns[-self.window:] if self.window else []), str(t.gold))
                      for t in group]
            t0 = time.perf_counter()
            samples = runs.sample_texts(_Agent(name, self.agents[name]), self.fmt, states, self.params, self.seed,
                                        indices=[len(t.turns) for t in group])
            wall = (time.perf_counter() - t0) / max(1, len(group))
            for t, x in zip(group, samples):
                self.advance(t, name, x.completion, x.prompt_tokens, x.completion_tokens, x.latency_s or wall)

    def advance(self, t: Trajectory, name: str, text: str, prompt_tokens: int, completion_tokens: int,
                latency_s: float) -> None:
        turn = parse_turn(text, self.names)
        rec = {"agent": name, "attempt": t.retries, "prompt_tokens": int(prompt_tokens),
               "completion_tokens": int(completion_tokens), "answer": turn.answer, "action": turn.action,
               "target": turn.target, "note": turn.note, "violation": turn.violation,
               "forced_handoff": None, "latency_s": round(float(latency_s), 4), "text": text}
        t.turns.append(rec)
        if turn.violation is None and turn.action == "stop":
            t.status, t.final = TrajectoryStatus.CONFIRMED, turn.answer
        elif turn.violation is None:
            t.next_agent, t.retries = turn.target, 0
        elif t.retries < self.max_retries:
            t.retries += 1  # same agent again, fresh seed (the seed depends on the turn index)
        else:
            rec["forced_handoff"] = self._forced_target(name)
            t.next_agent, t.retries = rec["forced_handoff"], 0
        if t.status == TrajectoryStatus.OPEN and len(t.turns) >= self.t_max:
            t.status = TrajectoryStatus.T_MAX

    def run_all(self, problems: list[Problem], on_finished=None) -> list[Trajectory]:
        open_ = [self.start(p) for p in problems]
        done: list[Trajectory] = []
        while open_:
            self.step(open_)
            finished = [t for t in open_ if t.status != TrajectoryStatus.OPEN]
            open_ = [t for t in open_ if t.status == TrajectoryStatus.OPEN]
            if finished and on_finished:
                on_finished(finished)
            done += finished
        return done


def _existing(path: Path, repair: bool = True) -> set[str]:
    """The question ids recorded in a trajectories file, each line read as a :class:`TrajectoryRecord`
    (:func:`read_record`); a malformed line or a repeated id is an error naming the file and line.
    ``repair``: cut a torn last line first (else it is skipped)."""
    if not path.exists():
        return set()
    if repair:
        repair_truncated_tail(path)
    seen: set[str] = set()
    for line, obj in iter_jsonl(path, tolerate_truncated_tail=not repair):
        rec = read_record(obj, path, line)
        if rec.id in seen:
            raise RecordError(path, line, f"duplicate question {rec.id!r}")
        seen.add(rec.id)
    return seen


def check_settings(out: Path, settings: dict) -> None:
    """Read-only: ``out`` is new, or holds a collaboration run with these settings."""
    old = check_kind(out, KIND_TRAJECTORIES).get("settings")
    if old is None:
        if out.is_dir() and foreign_files(out):
            raise ValueError(f"{out}: holds files but no manifest settings: use a new folder")
        return
    if old != settings:
        changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
        raise ValueError(f"{out}: holds a collaboration run with other settings ({', '.join(changed)}); "
                         "use a new folder")
    _existing(out / TRAJECTORIES, repair=False)


def run_settings(problems: list[Problem], scheduler: Scheduler, settings: dict) -> dict:
    """The settings a run's manifest records: the caller's, the scheduler's and the question set's."""
    import json

    return json.loads(json.dumps({**settings, "t_max": scheduler.t_max, "max_retries": scheduler.max_retries,
                                  "first": scheduler.first, "agents": list(scheduler.names),
                                  "fmt": scheduler.fmt, "seed": scheduler.seed,
                                  "sampling": {"max_tokens": scheduler.params.max_tokens,
                                               "temperature": scheduler.params.temperature},
                                  "problems_sha256": hashlib.sha256("\n".join(sorted(p.id for p in problems))
                                                                    .encode()).hexdigest(),
                                  "n_problems": len(problems)}, default=str))


def _resumable(out: Path, problems: list[Problem], settings: dict, work) -> Path:
    """The trajectories of every problem not yet recorded in out/trajectories.jsonl: validate first, then under
    the folder's lock ``work(todo, append)`` appends them as they finish; the manifest says running, then complete."""
    check_settings(out, settings)  # validate first: a refused run writes nothing
    with RunLock(out):
        check_settings(out, settings)
        done = _existing(out / TRAJECTORIES)
        started = now_iso()
        write_manifest(out, kind=KIND_TRAJECTORIES, settings=settings, started=started, status="running")
        t0 = time.time()
        work([p for p in problems if p.id not in done], lambda recs: append_jsonl(out / TRAJECTORIES, recs))
        write_manifest(out, kind=KIND_TRAJECTORIES, settings=settings, started=started, finished=now_iso(),
                       status="complete", records=len(problems), seconds=round(time.time() - t0, 2))
    return out


def run(out: str | Path, problems: list[Problem], scheduler: Scheduler, settings: dict, chunk: int = 64) -> Path:
    """Trajectories for every problem not yet recorded in out/trajectories.jsonl (resumable)."""
    def work(todo, append):
        for b in range(0, len(todo), chunk):
            scheduler.run_all(todo[b:b + chunk], on_finished=lambda ts: append([t.record() for t in ts]))

    return _resumable(Path(out), problems, run_settings(problems, scheduler, settings), work)


def run_solo(out: str | Path, problems: list[Problem], name: str, backend, params: SamplingParams, settings: dict,
             seed: int = 0, chunk: int = 64) -> Path:
    """One call per question (the agent ``name`` alone), written as one-turn trajectories (resumable)."""
    import json

    settings = json.loads(json.dumps({**settings, "agent": name, "temperature": params.temperature,
                                      "max_tokens": params.max_tokens, "seed": seed,
                                      "questions": sorted(p.id for p in problems)}))

    def work(todo, append):
        for b in range(0, len(todo), chunk):
            batch = todo[b:b + chunk]
            samples = runs.sample_texts(backend, "think", batch, params, seed)  # as runs.sample: one sample each
            append([_solo_record(p, name, x) for p, x in zip(batch, samples)])

    return _resumable(Path(out), problems, settings, work)


def _solo_record(p: Problem, name: str, x) -> dict:
    """A solo run's one-turn trajectory from its :class:`~polyvox.records.Sample`."""
    turn = parse_turn(x.completion, (name,))
    return {"id": p.id, "question": p.text, "gold": p.gold, "first": name,
            "status": TrajectoryStatus.CONFIRMED if turn.answer else TrajectoryStatus.NO_ANSWER,
            "final": turn.answer, "n_turns": 1, "metadata": p.metadata,
            "turns": [{"agent": name, "attempt": 0, "prompt_tokens": x.prompt_tokens,
                       "completion_tokens": x.completion_tokens, "answer": turn.answer, "action": None,
                       "target": None, "note": "", "violation": None, "forced_handoff": None,
                       "latency_s": round(x.latency_s, 4), "text": x.completion}]}


def load(out: str | Path) -> list[dict]:
    """The recorded trajectories as read (dicts), each checked by :func:`read_record`."""
    path = Path(out) / TRAJECTORIES
    recs = []
    for line, obj in iter_jsonl(path):
        read_record(obj, path, line)
        recs.append(obj)
    return recs
