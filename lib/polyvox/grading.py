"""Grade completions against gold answers: graders by name in a registry.

``GRADERS`` maps a name to a function ``(completion, gold) -> Grade``; a task in
:mod:`polyvox.tasks` names its grader. Registered graders:
- ``math``: math-verify (HF Math-Verify) parses gold and completion and checks
  equivalence; when the whole completion does not verify, the ``<answer>``
  body is tried (the panel study's rule). math-verify times out with
  ``signal.alarm``, which works only in a process's main thread, so batched
  grading runs in a *process* pool; an item that still hangs or kills its
  worker gets ``status="timeout"``/``"ungradable"`` instead of a dead run.
- ``integer`` (also registered as ``aime``, the panel study's AIME rule): the last
  integer in ``<answer>``, else in the last ``\\boxed{}``, compared as integers;
  the miniature world's problems use it.
- ``gsm8k`` / ``gsmhard``: the final number after an answer marker
  (``####``, "The answer is"), else in ``<answer>`` or the last ``\\boxed{}``,
  else the last number; commas, ``$`` and a trailing period stripped;
  GSM-Hard's float golds compared with a relative tolerance.
- ``qa``: SQuAD-style normalised exact match and token F1, max over aliases
  (gold may be a string or a list of aliases); ``correct`` = exact match.

Departure from the reference graders: the panel study ran math-verify on the
whole completion first. Here, when the completion has a ``\\boxed{}``, the
*last* one is the answer math-verify checks (math-verify on a whole text takes
the first boxed it meets, which grades a self-corrected answer wrong); without
one, math-verify reads the completion's last ``MATH_TAIL_CHARS`` characters.
Golds are parsed once per distinct gold, and a boxed answer whose canonical
string equals the gold's is correct without a symbolic check. Both keep the
verdicts and make grading several times faster.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import math
import re
import string
from collections import Counter
from dataclasses import dataclass

GRADERS: dict = {}


def register_grader(*names: str):
    """Register a grader function under one or more names."""
    def deco(fn):
        for name in names:
            if name in GRADERS:
                raise ValueError(f"grader {name!r} is registered twice")
            GRADERS[name] = fn
        return fn
    return deco


MATH_TAIL_CHARS = 1500
GSMHARD_RTOL = 1e-4


@dataclass(frozen=True)
class Grade:
    correct: bool
    extracted: str | None
    status: str = "ok"  # ok | no_answer | ungradable | timeout
    f1: float | None = None


# ---------------------------------------------------------------- extraction

_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)


def answer_body(text: str) -> str | None:
    """Body of the last <answer>…</answer> block (an unclosed final block counts)."""
    found = _ANSWER_TAG.findall(text)
    return found[-1].strip() if found else None


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces balanced."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    i, depth = starts[-1], 1
    j = i
    while j < len(text) and depth:
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
        j += 1
    return text[i:j - 1].strip() if depth == 0 else None


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")


def _numbers(text: str) -> list[str]:
    return [m.group(0) for m in _NUMBER.finditer(text)]


def _to_float(s: str) -> float | None:
    s = s.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        return float(s)
    except ValueError:
        return None


def last_integer(text: str | None) -> int | None:
    if not text:
        return None
    for tok in reversed(_numbers(text)):
        v = _to_float(tok)
        if v is not None and float(v).is_integer():
            return int(v)
    return None


# ---------------------------------------------------------------- per task

@register_grader("integer", "aime")
def grade_integer(completion: str, gold) -> Grade:
    gold = str(gold)
    value = last_integer(answer_body(completion))
    if value is None:
        value = last_integer(last_boxed(completion))
    if value is None:
        return Grade(False, None, "no_answer")
    try:
        return Grade(value == int(str(gold).strip()), str(value))
    except ValueError:
        return Grade(False, str(value), "ungradable")


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
def grade_gsm(completion: str, gold, rtol: float = 0.0) -> Grade:
    extracted = gsm_final_number(completion)
    if extracted is None:
        return Grade(False, None, "no_answer")
    got, want = _to_float(extracted), _to_float(str(gold))
    if got is None or want is None:
        return Grade(False, extracted, "ungradable")
    ok = math.isclose(got, want, rel_tol=rtol, abs_tol=1e-9) if rtol else abs(got - want) < 1e-9
    return Grade(ok, extracted.replace(",", "").rstrip("."))


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
def grade_gsmhard(completion: str, gold) -> Grade:
    return grade_gsm(completion, gold, rtol=GSMHARD_RTOL)


@register_grader("qa")
def grade_qa(completion: str, gold) -> Grade:
    pred = answer_body(completion) or last_boxed(completion) or completion.strip().splitlines()[-1] if completion.strip() else ""
    aliases = gold if isinstance(gold, (list, tuple)) else [gold]
    em = max(float(_normalize_qa(pred) == _normalize_qa(str(a))) for a in aliases)
    f1 = max(_f1(pred, str(a)) for a in aliases)
    return Grade(bool(em), pred, "ok", f1)


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str):
    from math_verify import parse

    return parse(gold if "$" in gold or "\\boxed" in gold else f"${gold}$", parsing_timeout=5)


def _canonical(expr: str) -> str:
    """Spacing and display macros removed: equal canonical strings are the same answer."""
    s = re.sub(r"\\(left|right|displaystyle|!|,|;|:)", "", expr)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("$", "")
    return re.sub(r"\s+", "", s).rstrip(".")


@register_grader("math")
def grade_math(completion: str, gold) -> Grade:
    """Runs inside a worker process (math-verify's signal.alarm needs a main thread)."""
    from math_verify import parse, verify

    gold = str(gold)
    gold_parsed = _parse_gold(gold)
    if not gold_parsed:
        return Grade(False, None, "ungradable")
    boxed = last_boxed(completion)
    if boxed is not None and _canonical(boxed) == _canonical(gold):
        return Grade(True, boxed)  # identical strings need no symbolic check
    candidates = [f"\\boxed{{{boxed}}}" if boxed is not None else completion[-MATH_TAIL_CHARS:]]
    body = answer_body(completion)
    if body:
        candidates.append(body if "$" in body or "\\boxed" in body else f"${body}$")
    first_extracted = None
    for text in candidates:
        parsed = parse(text, parsing_timeout=5)
        if not parsed:
            continue
        extracted = str(parsed[-1])
        first_extracted = first_extracted or extracted
        if verify(gold_parsed, parsed, timeout_seconds=5):
            return Grade(True, extracted)
    return Grade(False, first_extracted, "ok" if first_extracted else "no_answer")


def grader(name: str):
    """The grader registered under name; an unknown name lists the registered ones."""
    try:
        return GRADERS[name]
    except KeyError:
        raise ValueError(f"unknown grader {name!r}; graders: {', '.join(sorted(GRADERS))}") from None


def grade(name: str, completion: str, gold) -> Grade:
    """Grade one completion in this process (math runs math-verify here: call from a main thread)."""
    return grader(name)(completion, gold)


def _grade_chunk(task: str, items: list[tuple[str, object]]) -> list[Grade]:
    return [grade(task, c, g) for c, g in items]


def grade_many(task: str, completions: list[str], golds: list, workers: int | None = None,
               chunk: int = 64, item_timeout_s: float = 20.0) -> list[Grade]:
    """Grade many completions. math runs in a process pool with a per-chunk deadline.

    A chunk whose worker dies or overruns ``item_timeout_s × len(chunk)`` is
    re-graded item by item in fresh single-use processes, so only the
    pathological item is marked ``timeout`` / ``ungradable``.
    """
    grader(task)  # an unknown name fails here, before any work
    if len(completions) != len(golds):
        raise ValueError("grade_many: completions and golds differ in length")
    items = list(zip(completions, golds))
    if task != "math":
        return [grade(task, c, g) for c, g in items]
    import multiprocessing as mp
    import os

    workers = workers or max(1, min(os.cpu_count() or 1, 8))
    chunks = [items[i:i + chunk] for i in range(0, len(items), chunk)]
    results: list[list[Grade] | None] = [None] * len(chunks)
    ctx = mp.get_context("fork") if hasattr(os, "fork") else mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(_grade_chunk, task, ch): i for i, ch in enumerate(chunks)}
        for fut, i in futures.items():
            try:
                results[i] = fut.result(timeout=item_timeout_s * len(chunks[i]) + 30)
            except Exception:  # noqa: BLE001 - time-out, dead worker or grader bug: re-grade item by item
                results[i] = None
        for proc in list(getattr(pool, "_processes", {}).values()):
            if any(r is None for r in results) and proc.is_alive():
                proc.kill()
    out: list[Grade] = []
    for i, res in enumerate(results):
        out.extend(res if res is not None else [_grade_isolated(task, c, g, item_timeout_s, ctx) for c, g in chunks[i]])
    return out


def _grade_isolated(task: str, completion: str, gold, timeout_s: float, ctx) -> Grade:
    with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        fut = pool.submit(grade, task, completion, gold)
        try:
            return fut.result(timeout=timeout_s)
        except cf.TimeoutError:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.kill()
            return Grade(False, None, "timeout")
        except Exception:  # noqa: BLE001 - a crashed worker or a grader bug on this one item
            return Grade(False, None, "ungradable")
