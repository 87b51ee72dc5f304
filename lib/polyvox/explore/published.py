"""The panel-of-experts study's published case study as rollouts (``load(None)``): 20 problems, one
``panel`` and one ``thinking`` trace each (the study's own file, read here without importing the study:
the explorer depends on core only).

Problems in ``graded_categories`` are graded against the first number of the study's ``expected``
text (grader ``math``, through :func:`polyvox.runs.grade_completions`); the others have no single
checkable answer (correctness ``None``). These records carry no finish reason or token count: a trace
without its closing marker (``</answer>`` for the panel, ``</think>`` for thinking) counts as a cap
hit, and length is in words.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from .. import runs
from ..records import RecordError, portable_path, read_json
from .rollouts import Rollouts

CASE_STUDY = "multipersona/reports/case_study/transcripts.json"
GRADED_CATEGORIES = ("two_route", "distractor", "multistep")


def _leading_number(text: str):
    m = re.search(r"-?\d+(?:/\d+)?(?:\.\d+)?", text.replace(",", ""))
    return m.group(0) if m else None


def published(data_dir="data", graded_categories=GRADED_CATEGORIES) -> Rollouts:
    """The published case study: 20 problems × {panel, thinking}, one trace each (see the module docstring)."""
    path = Path(data_dir) / CASE_STUDY
    data = read_json(path)
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise RecordError(path, None, "expected an object with a non-empty list 'items'")
    systems = ("panel", "thinking")
    for i, it in enumerate(items):
        for key in ("id", "category_short", "problem", "expected", *systems):
            if key not in it:
                raise RecordError(path, None, f"items[{i}]: missing field {key!r}")
        for s in systems:
            if not isinstance(it[s], dict) or not isinstance(it[s].get("raw"), str):
                raise RecordError(path, None, f"items[{i}].{s}: expected an object with a string 'raw'")
    golds = {it["id"]: _leading_number(it["expected"]) for it in items
             if it["category_short"] in graded_categories and _leading_number(it["expected"])}
    grades = {}
    for s in systems:
        ids = list(golds)
        raws = [next(it for it in items if it["id"] == i)[s]["raw"] for i in ids]
        for i, g in zip(ids, runs.grade_completions("math", raws, [golds[i] for i in ids], workers=1)):
            grades[(s, i)] = g
    rows = []
    for it in items:
        for s in systems:
            tr = it[s]
            raw = tr["raw"]
            g = grades.get((s, it["id"]))
            reasoning, final = runs.split_trace("panel" if s == "panel" else "think", raw)
            final = tr.get("answer") if isinstance(tr.get("answer"), str) else final
            final = final.replace("<|im_end|>", "").strip()
            closing = "</answer>" if s == "panel" else "</think>"
            rows.append({"system": s, "problem_id": it["id"], "sample_index": 0, "completion": raw,
                         "reasoning": tr.get("reasoning") if isinstance(tr.get("reasoning"), str) else reasoning,
                         "final": final, "correct": None if g is None else g.correct,
                         "length": len(raw.split()), "cap_hit": closing not in raw,
                         "extracted": None if g is None else g.extracted,
                         "format_ok": runs.format_ok("panel" if s == "panel" else "think", raw),
                         "benchmark": "case study"})
    problems = {it["id"]: {"text": it["problem"], "gold": it["expected"], "label": it["category_short"]}
                for it in items}
    ro = Rollouts(pd.DataFrame(rows), problems, list(systems), "words", portable_path(path),
                  benchmarks={s: "case study" for s in systems})
    ro.meta = data.get("metadata", {})
    return ro
