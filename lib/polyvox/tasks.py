"""Tasks by name: a registry of problem sources, each with one Problem shape and a grader.

``TASKS`` maps a name to a :class:`Task` — a loader ``(data_dir, **options) ->
[Problem]``, the name of its grader in :mod:`polyvox.grading`, and whether its
problems have levels. Loaders register with ``@register_task`` (a plain dict, as
lm-evaluation-harness registers its tasks). The benchmarks below register here;
the studies register their own from modules named as ``polyvox.tasks`` entry points
in pyproject.toml (the miniature world's ``world`` task), found by :func:`discover`
the first time an unknown name is asked for.

Benchmarks
- ``math500``: MATH-500; grader ``math``.
- ``math500_slice50``: a stratified slice, ``per_level`` problems (default 10) from
  each level 1–5, drawn with ``seed`` (numpy default_rng, per level, sorted by id).
- ``aime2024`` / ``aime2025``: all 30 problems of a year; ``aime_panel``: the panel
  study's subset, the first 10 rows of each year (ids ``2024_0`` … ``2025_9``).
- ``gsm8k``, ``gsmhard``: gold is the final number (GSM-Hard's may be a float).
- ``olympiad`` (the 877-problem pool) and ``olympiad_heldout`` (100 problems).
- ``math_train``: the MATH training split for RL stages, read from
  ``data/benchmarks/math_train/train.jsonl`` (MATH-500's fields). It is not shipped (the
  book needs only evaluation sets); training on ``math500`` would train on the evaluation set.

``load(name, data_dir="data", limit=None, level=None, ids=None, **options)``:
``level`` filters tasks with levels (int or list), ``ids`` keeps the named problems,
``limit`` the first N; ``options`` go to the loader (``per_level``, ``seed`` …). An
unknown name or option raises ValueError listing the valid ones.
"""
from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pydantic

from .grading import GradeOptions
from .records import Problem, read_jsonl, validation_message


@dataclass(frozen=True)
class Task:
    name: str
    loader: Callable[..., list[Problem]]  # (data_dir, **options)
    grader: str  # a name in polyvox.grading.GRADERS
    levels: bool  # problems carry metadata["level"], so level= filters apply
    # polyvox.grading.GradeOptions fields for this task, checked when it registers. No benchmark here
    # sets any (their golds are LaTeX, math-verify's defaults suit them); runs and explore read them.
    grade_options: dict = field(default_factory=dict)

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(list(inspect.signature(self.loader).parameters)[1:])


TASKS: dict[str, Task] = {}


def register_task(name: str, grader: str, levels: bool = False, grade_options: dict | None = None):
    """Register a loader as task ``name``; ``grade_options`` are the task's comparison options
    (``float_rounding``, ``allow_set_relation_comp``, ``gold_as``: see polyvox.grading.GradeOptions),
    checked here, so a misspelt or ill-typed option fails when the task registers, not when it grades."""
    options = dict(grade_options or {})
    try:
        GradeOptions(**options)
    except pydantic.ValidationError as exc:
        raise ValueError(f"task {name!r}: grade_options: {validation_message(exc, 'GradeOptions')}") from None

    def deco(fn):
        if name in TASKS:
            raise ValueError(f"task {name!r} is registered twice")
        TASKS[name] = Task(name, fn, grader, levels, options)
        return fn
    return deco


_discovered = False


def discover() -> dict[str, Task]:
    """Import the modules that register tasks from outside core (the studies), once.

    They are named as entry points of the group ``polyvox.tasks`` in pyproject.toml — the
    standard plugin mechanism — so core never imports a study, yet ``load("world")`` works
    from any caller.
    """
    global _discovered
    if not _discovered:
        from importlib.metadata import entry_points

        _discovered = True
        for ep in entry_points(group="polyvox.tasks"):
            ep.load()
    return TASKS


def get(name: str) -> Task:
    if name not in TASKS:
        discover()
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; tasks: {', '.join(sorted(TASKS))}") from None


def _math500_rows(data_dir) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / "benchmarks/math500/test.jsonl")
    return [Problem(r["unique_id"], r["problem"], str(r["answer"]),
                    {"level": int(r["level"]), "subject": r["subject"]}) for r in rows]


@register_task("math500", grader="math", levels=True)
def math500(data_dir) -> list[Problem]:
    return _math500_rows(data_dir)


@register_task("math_train", grader="math", levels=True)
def math_train(data_dir) -> list[Problem]:
    path = Path(data_dir) / "benchmarks/math_train/train.jsonl"
    if not path.exists():
        raise ValueError(f"task math_train needs {path} (the MATH training split, MATH-500's fields: problem, "
                         "answer, level, subject, unique_id); it is not shipped with the book")
    return [Problem(r["unique_id"], r["problem"], str(r["answer"]),
                    {"level": int(r["level"]), "subject": r.get("subject", "")}) for r in read_jsonl(path)]


def stratified_slice(problems: list[Problem], per_level: int, seed: int) -> list[Problem]:
    rng = np.random.default_rng(seed)
    out = []
    for level in sorted({p.metadata["level"] for p in problems}):
        pool = sorted((p for p in problems if p.metadata["level"] == level), key=lambda p: p.id)
        pick = rng.choice(len(pool), size=min(per_level, len(pool)), replace=False)
        out += [pool[i] for i in sorted(pick)]
    return out


@register_task("math500_slice50", grader="math", levels=True)
def math500_slice50(data_dir, per_level: int = 10, seed: int = 0) -> list[Problem]:
    return stratified_slice(_math500_rows(data_dir), per_level, seed)


def _aime(data_dir, year: int) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / f"benchmarks/aime{year}/test.jsonl")
    return [Problem(f"{year}_{i}", r["problem"], str(r["answer"]), {"year": year, "index": i})
            for i, r in enumerate(rows)]


@register_task("aime2024", grader="aime")
def aime2024(data_dir) -> list[Problem]:
    return _aime(data_dir, 2024)


@register_task("aime2025", grader="aime")
def aime2025(data_dir) -> list[Problem]:
    return _aime(data_dir, 2025)


@register_task("aime_panel", grader="aime")
def aime_panel(data_dir) -> list[Problem]:
    return _aime(data_dir, 2024)[:10] + _aime(data_dir, 2025)[:10]


@register_task("gsm8k", grader="gsm8k")
def gsm8k(data_dir) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / "benchmarks/gsm8k/test.jsonl")
    return [Problem(f"gsm8k_{i}", r["question"], r["answer"].split("####")[-1].strip().replace(",", ""),
                    {"solution": r["answer"]}) for i, r in enumerate(rows)]


@register_task("gsmhard", grader="gsmhard")
def gsmhard(data_dir) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / "benchmarks/gsmhard/gsmhardv2.jsonl")
    return [Problem(f"gsmhard_{i}", r["input"], str(r["target"]), {}) for i, r in enumerate(rows)]


def _olympiad(data_dir, file: str) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / "multipersona/data/olympiad_pool" / file)
    return [Problem(r["uid"], r["problem"], str(r["gold"]), {"source": r["source"], "year": r.get("year")})
            for r in rows]


@register_task("olympiad", grader="math")
def olympiad(data_dir) -> list[Problem]:
    return _olympiad(data_dir, "all.jsonl")


@register_task("olympiad_heldout", grader="math")
def olympiad_heldout(data_dir) -> list[Problem]:
    return _olympiad(data_dir, "heldout_eval.jsonl")


def load(name: str, data_dir="data", limit: int | None = None, level=None, ids: list[str] | None = None,
         **options) -> list[Problem]:
    """Problems of a task by name, optionally filtered by level, ids and a limit."""
    task = get(name)
    unknown = sorted(set(options) - set(task.options))
    if unknown:
        raise ValueError(f"task {name}: unknown option(s) {', '.join(unknown)}; "
                         f"options: {', '.join(task.options) or 'none'}")
    if level is not None and not task.levels:
        raise ValueError(f"task {name} has no levels; --level applies to: "
                         f"{', '.join(sorted(t.name for t in TASKS.values() if t.levels))}")
    problems = task.loader(data_dir, **options)
    if level is not None:
        levels = {str(x) for x in (level if isinstance(level, (list, tuple)) else [level])}
        problems = [p for p in problems if str(p.metadata.get("level")) in levels]
    if ids is not None:
        wanted = set(ids)
        problems = [p for p in problems if p.id in wanted]
    return problems[:limit] if limit else problems


def problem_hash(problems: list[Problem]) -> str:
    h = hashlib.sha256()
    for p in problems:
        h.update(json.dumps([p.id, p.text, p.gold]).encode())
    return h.hexdigest()


def labels_hash(problems: list[Problem]) -> str:
    """A digest of the problems' labels (``metadata``: level, subject …) by id. :func:`problem_hash`
    covers id, text and gold only (and shipped runs record it, so it stays as it is); a sample run
    records this one beside it so a grade against data whose labels were edited is refused."""
    h = hashlib.sha256()
    for p in problems:
        h.update(json.dumps([p.id, p.metadata], sort_keys=True, default=str).encode())
    return h.hexdigest()
