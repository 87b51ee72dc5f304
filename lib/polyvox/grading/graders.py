"""The grader registry, grade options and the graders that need no worker process.

``GRADERS`` maps a name to ``fn(completion, gold, *, options=None) -> Grade``; graders register
with :func:`register_grader`. ``integer``/``aime``, ``gsm8k``, ``gsmhard`` and ``qa`` are here;
``math`` (math-verify) is in :mod:`polyvox.grading.mathverify`. What each reads and compares:
the package docstring (:mod:`polyvox.grading`).
"""
from __future__ import annotations

import math
import re
import string
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Annotated, Literal

import pydantic

from ..answers import _last_integer_string, _numbers, _to_float, answer_body, integer_string, last_boxed
from ..answers import normalize_unicode_plain
from ..statuses import GradeStatus

GRADERS: dict = {}


def register_grader(*names: str):
    """Register a grader ``fn(completion, gold, *, options=None) -> Grade`` under one or more names."""
    def deco(fn):
        for name in names:
            if name in GRADERS:
                raise ValueError(f"grader {name!r} is registered twice")
            GRADERS[name] = fn
        return fn
    return deco


GSMHARD_RTOL = 1e-4


@pydantic.dataclasses.dataclass(frozen=True, config=pydantic.ConfigDict(strict=True, extra="forbid"))
class GradeOptions:
    """How a task's answers are compared (math-verify's options; other graders ignore them).

    ``float_rounding``: decimal places a float answer is rounded to before it is
    compared (``None``: math-verify's default, 6). ``allow_set_relation_comp``:
    a relation such as ``-2 \\le x \\le 7`` may equal a set ``[-2, 7]``.
    ``gold_as``: ``"latex"`` (the gold is LaTeX, wrapped in ``$…$``) or ``"expr"``
    (a plain expression, where a comma may be a decimal comma). Checked by pydantic
    (strict: ``True`` is no rounding); a wrong value is a ``ValidationError`` (a ValueError).
    """
    float_rounding: Annotated[int, pydantic.Field(ge=0)] | None = None
    allow_set_relation_comp: bool = False
    gold_as: Literal["latex", "expr"] = "latex"

    def as_dict(self) -> dict:
        """Plain values for a manifest."""
        return asdict(self)


DEFAULT_OPTIONS = GradeOptions()


@dataclass(frozen=True)
class Grade:
    correct: bool
    extracted: str | None
    status: GradeStatus = GradeStatus.OK
    f1: float | None = None


# ---------------------------------------------------------------- per task

@register_grader("integer", "aime")
def grade_integer(completion: str, gold, options: GradeOptions | None = None) -> Grade:
    completion = normalize_unicode_plain(completion)
    value = _last_integer_string(answer_body(completion))
    if value is None:
        value = _last_integer_string(last_boxed(completion))
    if value is None:
        return Grade(False, None, GradeStatus.NO_ANSWER)
    want = integer_string(normalize_unicode_plain(str(gold)))
    if want is None:
        return Grade(False, value, GradeStatus.UNGRADABLE)
    return Grade(value == want, value)


_GSM_MARKERS = (re.compile(r"####\s*(.+)"), re.compile(r"(?i)the (?:final )?answer is[:\s]*(.+)"))


def gsm_final_number(completion: str) -> str | None:
    for source in (answer_body(completion), last_boxed(completion)):
        if source:
            nums = _numbers(source)
            if nums:
                return nums[-1]
    for marker in _GSM_MARKERS:
        hits = marker.findall(completion)
        if hits:
            nums = _numbers(hits[-1])
            if nums:
                return nums[0]
    nums = _numbers(completion)
    return nums[-1] if nums else None


@register_grader("gsm8k")
def grade_gsm(completion: str, gold, rtol: float = 0.0, options: GradeOptions | None = None) -> Grade:
    extracted = gsm_final_number(normalize_unicode_plain(completion))
    if extracted is None:
        return Grade(False, None, GradeStatus.NO_ANSWER)
    shown = extracted.replace(",", "").rstrip(".")
    gold = normalize_unicode_plain(str(gold)).strip()
    if shown == gold.replace(",", "").replace("$", "").strip().rstrip("."):
        return Grade(True, shown)  # identical numbers need no float (a 400-digit one overflows)
    got, want = _to_float(extracted), _to_float(gold)
    if got is None or want is None or math.isinf(got) or math.isinf(want):
        return Grade(False, extracted, GradeStatus.UNGRADABLE)
    ok = math.isclose(got, want, rel_tol=rtol, abs_tol=1e-9) if rtol else abs(got - want) < 1e-9
    return Grade(ok, shown)


def _normalize_qa(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _f1(pred: str, gold: str) -> float:
    p, g = _normalize_qa(pred).split(), _normalize_qa(gold).split()
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if not p or not g:
        return float(p == g)
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


@register_grader("gsmhard")
def grade_gsmhard(completion: str, gold, options: GradeOptions | None = None) -> Grade:
    return grade_gsm(completion, gold, rtol=GSMHARD_RTOL)


@register_grader("qa")
def grade_qa(completion: str, gold, options: GradeOptions | None = None) -> Grade:
    pred = answer_body(completion) or last_boxed(completion) or completion.strip().splitlines()[-1] if completion.strip() else ""
    aliases = gold if isinstance(gold, (list, tuple)) else [gold]
    em = max(float(_normalize_qa(pred) == _normalize_qa(str(a))) for a in aliases)
    f1 = max(_f1(pred, str(a)) for a in aliases)
    return Grade(bool(em), pred, GradeStatus.OK, f1)


def grader(name: str):
    """The grader registered under name; an unknown name lists the registered ones."""
    try:
        return GRADERS[name]
    except KeyError:
        raise ValueError(f"unknown grader {name!r}; graders: {', '.join(sorted(GRADERS))}") from None


def grade(name: str, completion: str, gold, options: GradeOptions | None = None) -> Grade:
    """Grade one completion in this process (math runs math-verify here: call from a main thread)."""
    return grader(name)(completion, gold, options=options)
