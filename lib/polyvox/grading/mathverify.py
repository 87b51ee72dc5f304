"""The ``math`` grader: math-verify, with polyvox's answer selection (see :mod:`polyvox.grading`).

math-verify times out with ``signal.alarm``, which works only in a process's main thread:
:func:`grade_math` refuses any other thread, and batches run it in worker processes
(:mod:`polyvox.grading.pool`). Its time-outs are read from its own API (``raise_on_error=True``,
its ``TimeoutException`` caught and counted in ``_TIMEOUTS``); its log records are kept off
stderr and nothing is read from them.
"""
from __future__ import annotations

import functools
import logging
import re
import threading

from ..answers import (Statement, _phrase_text, _unclosed_boxes_dropped, answer_body, final_statements,
                       normalize_unicode_math)
from ..statuses import GradeStatus
from .graders import DEFAULT_OPTIONS, Grade, GradeOptions, register_grader

MV_TIMEOUT_S = 5  # math-verify's own parse and compare limits
_TIMEOUTS = 0  # math-verify time-outs in this process (its TimeoutException, caught in _parse and _verify)


@functools.lru_cache(maxsize=1)
def _math_verify():
    """math-verify, imported once per process, its loggers kept off stderr (nothing is read from them)."""
    import math_verify

    for name in ("math_verify", "latex2sympy2_extended"):
        log = logging.getLogger(name)
        log.addHandler(logging.NullHandler())
        log.propagate = False  # no root or last-resort handler prints them
    return math_verify


@functools.lru_cache(maxsize=1)
def _timeout_exception() -> type:
    from math_verify.errors import TimeoutException

    return TimeoutException


def _parse(text: str, expr_only: bool = False) -> list:
    """math-verify's parse; a time-out is counted (and is no answer), any other failure is no answer,
    as math-verify itself returns it."""
    global _TIMEOUTS
    mv = _math_verify()
    config = [mv.ExprExtractionConfig()] if expr_only else [mv.LatexExtractionConfig(), mv.ExprExtractionConfig()]
    try:
        return mv.parse(text, extraction_config=config, parsing_timeout=MV_TIMEOUT_S, raise_on_error=True)
    except _timeout_exception():
        _TIMEOUTS += 1
        return []
    except Exception:  # noqa: BLE001 - math-verify's default for an unreadable expression: no answer
        return []


_MATH_DOLLAR = re.compile(r"(?<!\\)\$")


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str, gold_as: str = "latex"):
    if gold_as == "expr":
        return _parse(gold, expr_only=True)
    delimited = _MATH_DOLLAR.search(gold) or "\\boxed" in gold  # an escaped \$ is a currency sign, not math
    return _parse(gold if delimited else f"${gold}$")


def _verify(gold_parsed, parsed, opts: GradeOptions) -> bool:
    """math-verify's verify over every (gold, answer) pair, as it loops itself; a pair that times out
    is counted and does not match, and the other pairs are still compared."""
    global _TIMEOUTS
    kwargs = {"allow_set_relation_comp": opts.allow_set_relation_comp, "timeout_seconds": MV_TIMEOUT_S,
              "raise_on_error": True}
    if opts.float_rounding is not None:
        kwargs["float_rounding"] = opts.float_rounding
    verify = _math_verify().verify
    for g in gold_parsed:
        for t in parsed:
            try:
                if verify(g, t, **kwargs):
                    return True
            except _timeout_exception():
                _TIMEOUTS += 1
            except Exception:  # noqa: BLE001 - math-verify's default for a failed comparison: no match
                pass
    return False


def _canonical(expr: str) -> str:
    """Spacing and display macros removed: equal canonical strings are the same answer."""
    s = re.sub(r"\\(left|right|displaystyle|!|,|;|:)", "", expr)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("$", "")
    return re.sub(r"\s+", "", s).rstrip(".")


def _parse_boxes(contents: tuple[str, ...]) -> list:
    """One box as math-verify parses it; several joined into one set, as math-verify joins them."""
    if len(contents) == 1:
        return _parse(f"\\boxed{{{contents[0]}}}")
    import sympy

    elements = []
    for c in contents:
        parsed = _parse(f"\\boxed{{{c}}}")
        value = next((p for p in parsed if not isinstance(p, str)), None)
        if value is None:  # one unreadable box: the statement is its text, which verifies only by string
            return [", ".join(contents)]
        elements.extend(value.args if isinstance(value, sympy.FiniteSet) else [value])
    return [sympy.FiniteSet(*elements), ", ".join(contents)]


def _chosen(text: str, statements: list[Statement]) -> tuple[list, str | None]:
    """The final answer, parsed, and its text as written (None where there is no statement)."""
    for st in statements:
        if st.is_box:
            return _parse_boxes(st.contents), ", ".join(st.contents)
        parsed = _parse("final answer is " + st.after)
        if parsed:
            return parsed, _phrase_text(st.after)
    return _parse(_unclosed_boxes_dropped(text)), None


@register_grader("math")
def grade_math(completion: str, gold, options: GradeOptions | None = None) -> Grade:
    """Runs inside a worker process (math-verify's signal.alarm needs a main thread)."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("the math grader needs a process's main thread (math-verify times out with "
                           "signal.alarm): grade through grade_many, which runs it in worker processes")
    opts = options or DEFAULT_OPTIONS
    text = normalize_unicode_math(completion)
    gold = normalize_unicode_math(str(gold)).strip()
    statements = final_statements(text)
    if statements:
        last = statements[0]
        written = ", ".join(last.contents) if last.is_box else _phrase_text(last.after)
        if written and _canonical(written) == _canonical(gold):
            return Grade(True, written)  # identical strings need no parsing
    timeouts_before = _TIMEOUTS
    gold_parsed = _parse_gold(gold, opts.gold_as)
    if not gold_parsed:
        return Grade(False, None, GradeStatus.UNGRADABLE)
    first_extracted = None
    for parsed in _candidates(text, statements, opts):
        if not parsed:
            continue
        first_extracted = first_extracted or str(parsed[-1])
        if _verify(gold_parsed, parsed, opts):
            return Grade(True, str(parsed[-1]))
    if _TIMEOUTS > timeouts_before:  # math-verify gave up on a parse or a comparison
        return Grade(False, first_extracted, GradeStatus.TIMEOUT)
    return Grade(False, first_extracted, GradeStatus.OK if first_extracted else GradeStatus.NO_ANSWER)


def _candidates(text: str, statements: list[Statement], opts: GradeOptions):
    """Parsed answers to try in order: the final statement, its expression reading, the <answer> body."""
    parsed, written = _chosen(text, statements)
    yield parsed
    if opts.gold_as == "expr" and written:
        yield _parse(written, expr_only=True)  # a decimal comma reads as in the gold
    body = answer_body(text)
    if body:
        yield _parse(body if "$" in body or "\\boxed" in body else f"${body}$")
