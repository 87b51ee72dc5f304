"""Benchmarks by name: one Problem shape (id, text, gold, metadata) for every source.

Names
- ``math500``: MATH-500; ``level=`` filters (int or list); the grading task is ``math``.
- ``math500_slice50``: a stratified slice, ``per_level`` problems (default 10) from
  each level 1–5, drawn with ``seed`` (numpy default_rng, per level, sorted by id).
- ``aime2024`` / ``aime2025``: all 30 problems of a year; ``aime_panel``: the panel
  study's subset, the first 10 rows of each year (ids ``2024_0`` … ``2025_9``).
- ``gsm8k``, ``gsmhard``: gold is the final number (GSM-Hard's may be a float).
- ``olympiad`` (the 877-problem pool) and ``olympiad_heldout`` (100 problems).
- ``math_train``: the MATH training split for RL stages, read from
  ``data/benchmarks/math_train/train.jsonl`` (MATH-500's fields). It is not shipped (the
  book needs only evaluation sets); training on ``math500`` would train on the evaluation set.

``load(name, data_dir="data", limit=None, **filters)``; an unknown name raises
ValueError listing the valid ones.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .records import Problem, read_jsonl

GRADING_TASK = {"math_train": "math", "math500": "math", "math500_slice50": "math", "aime2024": "aime", "aime2025": "aime",
                "aime_panel": "aime", "gsm8k": "gsm8k", "gsmhard": "gsmhard", "olympiad": "math",
                "olympiad_heldout": "math"}
NAMES = tuple(GRADING_TASK)


def _math500(data_dir) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / "benchmarks/math500/test.jsonl")
    return [Problem(r["unique_id"], r["problem"], str(r["answer"]),
                    {"level": int(r["level"]), "subject": r["subject"]}) for r in rows]


def _aime(data_dir, year: int) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / f"benchmarks/aime{year}/test.jsonl")
    return [Problem(f"{year}_{i}", r["problem"], str(r["answer"]), {"year": year, "index": i})
            for i, r in enumerate(rows)]


def _gsm8k(data_dir) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / "benchmarks/gsm8k/test.jsonl")
    return [Problem(f"gsm8k_{i}", r["question"], r["answer"].split("####")[-1].strip().replace(",", ""),
                    {"solution": r["answer"]}) for i, r in enumerate(rows)]


def _gsmhard(data_dir) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / "benchmarks/gsmhard/gsmhardv2.jsonl")
    return [Problem(f"gsmhard_{i}", r["input"], str(r["target"]), {}) for i, r in enumerate(rows)]


def _olympiad(data_dir, file: str) -> list[Problem]:
    rows = read_jsonl(Path(data_dir) / "multipersona/data/olympiad_pool" / file)
    return [Problem(r["uid"], r["problem"], str(r["gold"]), {"source": r["source"], "year": r.get("year")})
            for r in rows]


def stratified_slice(problems: list[Problem], per_level: int, seed: int) -> list[Problem]:
    rng = np.random.default_rng(seed)
    out = []
    for level in sorted({p.metadata["level"] for p in problems}):
        pool = sorted((p for p in problems if p.metadata["level"] == level), key=lambda p: p.id)
        pick = rng.choice(len(pool), size=min(per_level, len(pool)), replace=False)
        out += [pool[i] for i in sorted(pick)]
    return out


def load(name: str, data_dir="data", limit: int | None = None, level=None, per_level: int = 10,
         seed: int = 0, ids: list[str] | None = None) -> list[Problem]:
    """Problems of a benchmark by name, optionally filtered by level, ids and a limit."""
    if name not in GRADING_TASK:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(NAMES)}")
    if name == "math500":
        problems = _math500(data_dir)
    elif name == "math_train":
        path = Path(data_dir) / "benchmarks/math_train/train.jsonl"
        if not path.exists():
            raise ValueError(f"task math_train needs {path} (the MATH training split, MATH-500's fields: problem, "
                             "answer, level, subject, unique_id); it is not shipped with the book")
        rows = read_jsonl(path)
        problems = [Problem(r["unique_id"], r["problem"], str(r["answer"]),
                            {"level": int(r["level"]), "subject": r.get("subject", "")}) for r in rows]
    elif name == "math500_slice50":
        problems = stratified_slice(_math500(data_dir), per_level, seed)
    elif name in ("aime2024", "aime2025"):
        problems = _aime(data_dir, int(name[-4:]))
    elif name == "aime_panel":
        problems = _aime(data_dir, 2024)[:10] + _aime(data_dir, 2025)[:10]
    elif name == "gsm8k":
        problems = _gsm8k(data_dir)
    elif name == "gsmhard":
        problems = _gsmhard(data_dir)
    elif name == "olympiad":
        problems = _olympiad(data_dir, "all.jsonl")
    else:
        problems = _olympiad(data_dir, "heldout_eval.jsonl")
    if level is not None:
        levels = {int(x) for x in (level if isinstance(level, (list, tuple)) else [level])}
        problems = [p for p in problems if p.metadata.get("level") in levels]
    if ids is not None:
        wanted = set(ids)
        problems = [p for p in problems if p.id in wanted]
    return problems[:limit] if limit else problems


def problem_hash(problems: list[Problem]) -> str:
    import hashlib

    h = hashlib.sha256()
    for p in problems:
        h.update(json.dumps([p.id, p.text, p.gold]).encode())
    return h.hexdigest()
