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
import pydantic

from .. import runs
from ..records import RecordError, portable_path, read_json
from .rollouts import Rollouts

CASE_STUDY = "multipersona/reports/case_study/transcripts.json"
GRADED_CATEGORIES = ("two_route", "distractor", "multistep")


def _leading_number(text: str):
    m = re.search(r"-?\d+(?:/\d+)?(?:\.\d+)?", text.replace(",", ""))
    return m.group(0) if m else None


class Trace(pydantic.BaseModel):
    """One system's trace of a case-study problem: its raw text (``reasoning`` and ``answer``, when
    given as text, are used as they are)."""

    model_config = pydantic.ConfigDict(strict=True, extra="allow", frozen=True)

    raw: str


class CaseItem(pydantic.BaseModel):
    """One case-study problem: its id, category, text, expected answer, and both systems' traces."""

    model_config = pydantic.ConfigDict(strict=True, extra="allow", frozen=True)

    id: str
    category_short: str
    problem: str
    expected: str
    panel: Trace
    thinking: Trace


class CaseStudy(pydantic.BaseModel):
    """The study's ``transcripts.json``: a non-empty list of items, and its metadata."""

    model_config = pydantic.ConfigDict(strict=True, extra="allow", frozen=True)

    items: list[CaseItem] = pydantic.Field(min_length=1)
    metadata: dict = pydantic.Field(default_factory=dict)


def _case_message(error: dict) -> str:
    loc, kind, got = error["loc"], error["type"], type(error["input"]).__name__
    if len(loc) < 2:  # the file itself, or its items list
        if loc == ("metadata",):
            return f"field 'metadata' should be an object, got {got}"
        return "expected an object with a non-empty list 'items'"
    where = f"items[{loc[1]}]"
    if len(loc) == 2:
        return f"{where}: expected an object, got {got}"
    if loc[2] in ("panel", "thinking") and (len(loc) > 3 or kind != "missing"):
        return f"{where}.{loc[2]}: expected an object with a string 'raw'"
    return f"{where}: missing field {loc[2]!r}" if kind == "missing" else \
        f"{where}: field {loc[2]!r} should be a string, got {got}"


def check_case_study(path: Path, data) -> CaseStudy:
    """The case study's file as a :class:`CaseStudy`; a bad one is a :class:`RecordError` in one line
    naming the file and the item (JSON arrays have no line numbers)."""
    if not isinstance(data, dict):
        raise RecordError(path, None, "expected an object with a non-empty list 'items'")
    try:
        return CaseStudy.model_validate(data)
    except pydantic.ValidationError as exc:
        # the first item's error first, and in an item a missing field before a wrong one
        errors = sorted(exc.errors(include_url=False),
                        key=lambda e: (e["loc"][1] if len(e["loc"]) > 1 and e["loc"][0] == "items" else -1,
                                       e["type"] != "missing"))
        raise RecordError(path, None, _case_message(errors[0])) from None


def published(data_dir="data", graded_categories=GRADED_CATEGORIES) -> Rollouts:
    """The published case study: 20 problems × {panel, thinking}, one trace each (see the module docstring)."""
    path = Path(data_dir) / CASE_STUDY
    data = read_json(path)
    check_case_study(path, data)
    items, systems = data["items"], ("panel", "thinking")
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
