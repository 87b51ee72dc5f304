"""One system's samples of one problem summarised for the table and the explorer (shared by both)."""
from __future__ import annotations

import pandas as pd

NO_ANSWER = "no answer"  # graded, but the grader found no answer in the trace


def _missing(x) -> bool:
    """None, NaN or pandas' NA: no value (pandas turns a column of Nones into NaN)."""
    if x is None:
        return True
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def summarize(samples: pd.DataFrame) -> dict:
    """One system's samples of one problem: ``n``; ``graded`` and ``correct`` counts; ``answer``, the most
    frequent graded answer (None when nothing is graded or the grader found no answer; ties: the
    first seen); ``length`` (mean); ``cap`` (cap hits); ``invalid`` (samples failing the format check)."""
    graded = [(c, e) for c, e in zip(samples["correct"], samples["extracted"]) if not _missing(c)]
    counts: dict = {}
    for _, e in graded:
        key = None if _missing(e) else str(e).strip()
        counts[key] = counts.get(key, 0) + 1
    answer = max(counts, key=counts.get) if counts else None  # max keeps the first of equal counts
    fmt = samples["format_ok"] if "format_ok" in samples else pd.Series([None] * len(samples))
    return {"n": int(len(samples)), "graded": len(graded), "correct": sum(bool(c) for c, _ in graded),
            "answer": answer, "length": float(samples["length"].mean()), "cap": int(samples["cap_hit"].sum()),
            "invalid": int(sum(v is False or v == False for v in fmt if not _missing(v)))}  # noqa: E712


def answer_text(st: dict) -> str:
    """A summary's answer for display: the graded answer, ``no answer``, or ``not graded``."""
    if not st["graded"]:
        return "not graded"
    return NO_ANSWER if st["answer"] is None else st["answer"]


def _outcome(correct) -> str:
    if correct is None or (isinstance(correct, float) and pd.isna(correct)):
        return "not graded"
    return "correct" if bool(correct) else "wrong"
