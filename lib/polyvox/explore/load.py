"""Loading rollouts to explore: run folders read, problems loaded and ungraded runs graded in memory,
all through :mod:`polyvox.runs` (:func:`~polyvox.runs.load`, :func:`~polyvox.runs.load_problems`,
:func:`~polyvox.runs.grade_samples`, :func:`~polyvox.runs.split_trace`); or the published case study."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..paths import find_root
from ..records import portable_path
from ..runs import find_runs, format_ok, grade_samples, load_problems, split_trace
from ..runs import load as load_run
from .published import GRADED_CATEGORIES, published
from .rollouts import Rollouts


def load(runs=None, data_dir="data", grade: bool = True,
         graded_categories=GRADED_CATEGORIES) -> Rollouts:
    """Rollouts from ``runs`` (None → the published case study; a path, a list of paths or {name: path})."""
    data_dir = _data_dir(data_dir)
    if runs is None or runs == "":
        return published(data_dir, graded_categories)
    if isinstance(runs, dict):
        named = [(str(k), _data_dir(v)) for k, v in runs.items()]
    elif isinstance(runs, (list, tuple)):
        named = [(_name(_data_dir(r), _data_dir(r)), _data_dir(r)) for r in runs]
    else:
        root = _data_dir(runs)
        named = [(_name(d, root), d) for d in find_runs(root)]
    frames, problems, notes = [], {}, []
    for name, folder in named:
        df, probs, note = _load_run(folder, name, data_dir, grade)
        frames.append(df)
        problems.update(probs)
        notes += note
    traces = pd.concat(frames, ignore_index=True)
    benchmarks = {n: str(f["benchmark"].iloc[0]) for (n, _), f in zip(named, frames)}
    source = ", ".join(portable_path(p) for _, p in named) if isinstance(runs, (dict, list, tuple)) \
        else portable_path(_data_dir(runs))
    return Rollouts(traces, problems, [n for n, _ in named], "tokens", source, notes, benchmarks)


def _data_dir(data_dir) -> Path:
    """A relative path as given when it exists, else against the repository root (a notebook
    opened from notebooks/<part>/ names runs/ and data/ as the book's build does)."""
    p = Path(data_dir)
    if p.is_absolute() or p.exists():
        return p
    try:  # a chapter opened from notebooks/<part>/ in Jupyter: the repository's data/
        return find_root() / p
    except Exception:  # noqa: BLE001 — outside a checkout the path is used as given
        return p


def _name(folder: Path, root: Path) -> str:
    rel = folder.resolve().relative_to(root.resolve()) if folder.resolve() != root.resolve() else Path(".")
    return folder.resolve().name if str(rel) == "." else rel.as_posix()


def _load_run(folder: Path, name: str, data_dir: Path, grade: bool):
    """One run folder as rows of traces, its problems (id → text, gold, label) and notes."""
    run = load_run(folder)
    notes, problems = [], {}
    try:
        problems = load_problems(run, data_dir)
    except Exception as exc:  # noqa: BLE001 — the traces are still worth showing
        notes.append(f"{name}: problem texts not available (task {run.task!r} under {data_dir}: {exc})")
    records = list(run.samples)
    if not run.graded and grade and problems:  # graded in memory with the task's grader: nothing written
        todo = [i for i, r in enumerate(records) if r.problem_id in problems]
        for i, g in zip(todo, grade_samples(run.task, [records[i] for i in todo], problems, workers=1)):
            records[i] = g
    rows = []
    for r in records:
        reasoning, final = split_trace(run.format, r.completion)
        rows.append({"system": name, "problem_id": r.problem_id, "sample_index": r.sample_index,
                     "completion": r.completion, "reasoning": reasoning, "final": final,
                     "correct": getattr(r, "correct", None), "length": r.completion_tokens,
                     "cap_hit": r.finish_reason == "length", "extracted": getattr(r, "extracted", None),
                     "format_ok": format_ok(run.format, r.completion), "benchmark": str(run.task)})
    shown = {p.id: {"text": p.text, "gold": p.gold,
                    "label": " ".join(str(p.metadata[k]) for k in ("level", "subject", "source") if k in p.metadata)}
             for p in problems.values()}
    return pd.DataFrame(rows), shown, notes
