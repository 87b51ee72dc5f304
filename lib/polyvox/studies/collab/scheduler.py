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
in-process transformers, or any OpenAI-compatible endpoint; prompts go through
``backend.prompt(fmt, state)`` (default ``think``: the model's chat template, which an
OpenAI-compatible server applies itself). Questions advance in lock-step: each round,
the pending turns of all open questions are grouped by agent and sent as one batch.

Records: :func:`run` (and :func:`run_solo`: one model alone, one turn per question) writes one
trajectory per question to ``trajectories.jsonl`` with a ``manifest.json`` of settings (kind
``collab trajectories``); questions are appended as they finish (flushed), a rerun skips recorded
ids, a torn last line is cut, and a folder holding another run's settings or another kind of run
is refused before anything is written — so a killed run loses only unfinished questions and never
duplicates one. One writer per folder
(:class:`polyvox.records.RunLock`).
A backend that still fails after its own bounded retries stops the run with one line
naming the agent (:class:`AgentError`).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...backends.base import Request, SamplingParams
from ...records import (Problem, RecordError, RunLock, append_jsonl, iter_jsonl, now_iso, read_jsonl,
                        repair_truncated_tail, write_manifest)
from ...stages import KIND_TRAJECTORIES, check_kind, foreign_files
from .protocol import parse_turn, state_prompt

TRAJECTORIES = "trajectories.jsonl"
T_MAX = 12


class AgentError(RuntimeError):
    """An agent's backend failed after its retries; the message is one line naming the agent."""


@dataclass
class Trajectory:
    id: str
    question: str
    gold: object
    first: str
    turns: list = field(default_factory=list)
    status: str = "open"  # open | confirmed | t_max
    final: str | None = None  # the confirmed answer (None unless status is confirmed)
    metadata: dict = field(default_factory=dict)
    next_agent: str | None = None
    retries: int = 0

    def record(self) -> dict:
        return {"id": self.id, "question": self.question, "gold": self.gold, "first": self.first,
                "status": self.status, "final": self.final, "n_turns": len(self.turns),
                "turns": self.turns, "metadata": self.metadata}


def turn_seed(seed: int, qid: str, turn: int) -> int:
    h = hashlib.sha256(f"{seed}|{qid}|{turn}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


class Scheduler:
    def __init__(self, agents: dict, first: str, t_max: int = T_MAX, max_retries: int = 1,
                 params: SamplingParams | None = None, fmt: str = "think", seed: int = 0, history_window: int = 4):
        if first not in agents:
            raise ValueError(f"first agent {first!r} is not in the pool {sorted(agents)}")
        self.agents, self.names = agents, tuple(agents)
        self.first, self.t_max, self.max_retries = first, t_max, max_retries
        self.params = params or SamplingParams(96, 0.0)
        self.fmt, self.seed, self.window = fmt, seed, history_window

    def start(self, p: Problem) -> Trajectory:
        return Trajectory(p.id, p.text, p.gold, self.first, metadata=dict(p.metadata), next_agent=self.first)

    def _forced_target(self, agent: str) -> str:
        i = self.names.index(agent)
        return self.names[(i + 1) % len(self.names)] if len(self.names) > 1 else agent

    def _generate(self, name: str, reqs: list[Request]):
        try:
            return self.agents[name].generate(reqs, self.params)
        except Exception as exc:  # noqa: BLE001 - any backend failure after its own retries
            ident = getattr(self.agents[name], "identity", lambda: {})()
            where = ident.get("base_url") or ident.get("model") or "?"
            msg = " ".join(str(exc).split())[:200]
            raise AgentError(f"agent {name} ({where}) failed after retries: {msg}") from None

    def step(self, open_: list[Trajectory]) -> None:
        """One round: every open trajectory's next turn, batched per agent."""
        by_agent: dict[str, list[Trajectory]] = {}
        for t in open_:
            by_agent.setdefault(t.next_agent, []).append(t)
        for name, group in by_agent.items():
            backend = self.agents[name]
            prompts = [backend.prompt(self.fmt, state_prompt(t.question, self.names, name,
                                                             t.turns[-self.window:] if self.window else []))
                       for t in group]
            reqs = [Request.of(pr, turn_seed(self.seed, t.id, len(t.turns))) for pr, t in zip(prompts, group)]
            t0 = time.perf_counter()
            comps = self._generate(name, reqs)
            wall = (time.perf_counter() - t0) / max(1, len(group))
            for t, c in zip(group, comps):
                self.advance(t, name, c.text, c.prompt_tokens, c.completion_tokens, c.latency_s or wall)

    def advance(self, t: Trajectory, name: str, text: str, prompt_tokens: int, completion_tokens: int,
                latency_s: float) -> None:
        turn = parse_turn(text, self.names)
        rec = {"agent": name, "attempt": t.retries, "prompt_tokens": int(prompt_tokens),
               "completion_tokens": int(completion_tokens), "answer": turn.answer, "action": turn.action,
               "target": turn.target, "note": turn.note, "violation": turn.violation,
               "forced_handoff": None, "latency_s": round(float(latency_s), 4), "text": text}
        t.turns.append(rec)
        if turn.violation is None and turn.action == "stop":
            t.status, t.final = "confirmed", turn.answer
        elif turn.violation is None:
            t.next_agent, t.retries = turn.target, 0
        elif t.retries < self.max_retries:
            t.retries += 1  # same agent again, fresh seed (the seed depends on the turn index)
        else:
            rec["forced_handoff"] = self._forced_target(name)
            t.next_agent, t.retries = rec["forced_handoff"], 0
        if t.status == "open" and len(t.turns) >= self.t_max:
            t.status = "t_max"

    def run_all(self, problems: list[Problem], on_finished=None) -> list[Trajectory]:
        open_ = [self.start(p) for p in problems]
        done: list[Trajectory] = []
        while open_:
            self.step(open_)
            finished = [t for t in open_ if t.status != "open"]
            open_ = [t for t in open_ if t.status == "open"]
            if finished and on_finished:
                on_finished(finished)
            done += finished
        return done


def _existing(path: Path, repair: bool = True) -> set[str]:
    """The question ids recorded in a trajectories file; a line without its id, or a repeated id, is an
    error naming the file and line. ``repair``: cut a torn last line first (else it is skipped)."""
    if not path.exists():
        return set()
    if repair:
        repair_truncated_tail(path)
    seen: set[str] = set()
    for line, rec in iter_jsonl(path, tolerate_truncated_tail=not repair):
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
            raise RecordError(path, line, "a trajectory needs its question 'id' (a string)")
        if rec["id"] in seen:
            raise RecordError(path, line, f"duplicate question {rec['id']!r}")
        seen.add(rec["id"])
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
            reqs = [Request.of(backend.prompt("think", p.text), turn_seed(seed, p.id, 0)) for p in batch]
            append([_solo_record(p, name, c) for p, c in zip(batch, backend.generate(reqs, params))])

    return _resumable(Path(out), problems, settings, work)


def _solo_record(p: Problem, name: str, c) -> dict:
    turn = parse_turn(c.text, (name,))
    return {"id": p.id, "question": p.text, "gold": p.gold, "first": name,
            "status": "confirmed" if turn.answer else "no_answer", "final": turn.answer, "n_turns": 1,
            "metadata": p.metadata,
            "turns": [{"agent": name, "attempt": 0, "prompt_tokens": c.prompt_tokens,
                       "completion_tokens": c.completion_tokens, "answer": turn.answer, "action": None,
                       "target": None, "note": "", "violation": None, "forced_handoff": None,
                       "latency_s": round(c.latency_s, 4), "text": c.text}]}


def load(out: str | Path) -> list[dict]:
    return read_jsonl(Path(out) / TRAJECTORIES)
