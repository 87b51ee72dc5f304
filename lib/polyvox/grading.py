"""Grade completions against gold answers: graders by name in a registry.

``GRADERS`` maps a name to a function ``(completion, gold, *, options=None) -> Grade``;
a task in :mod:`polyvox.tasks` names its grader, and may give :class:`GradeOptions`
(math-verify's comparison options; graders that have none ignore them).
Registered graders:

- ``math``: math-verify (HF Math-Verify 0.9) parses gold and answer and checks
  equivalence; the answer is chosen by the rule below. math-verify times out with
  ``signal.alarm``, which works only in a process's main thread, so batched
  grading runs in a *process* pool; an item that still hangs or kills its worker
  gets ``status="timeout"``/``"ungradable"`` instead of a dead run.
- ``integer`` (also registered as ``aime``, the panel study's AIME rule): the last
  integer in ``<answer>``, else in the last ``\\boxed{}``, compared as integers;
  the miniature world's problems use it.
- ``gsm8k`` / ``gsmhard``: the final number after an answer marker
  (``####``, "The answer is"), else in ``<answer>`` or the last ``\\boxed{}``,
  else the last number; ``$`` and a trailing period stripped; GSM-Hard's float
  golds compared with a relative tolerance.
- ``qa``: SQuAD-style normalised exact match and token F1, max over aliases
  (gold may be a string or a list of aliases); ``correct`` = exact match.

Answer selection (``math``) is :mod:`polyvox.answers`'s rule: the completion's last
final-answer statement (a closed box, or "final answer … is"), several boxes of one
statement forming one set, no tail window.

The panel study's fallback is kept: when the chosen answer does not verify and
the completion has an ``<answer>…</answer>`` body (an unclosed final block
counts), the body is tried too (wrapped in ``$…$`` unless it has ``$`` or a box),
and either one verifying is correct. So in a panel completion without a box or
a final-answer phrase, a correct number in the debate counts, as the study graded.

Departures from math-verify run on the whole completion, and why:

1. *A later statement beats an earlier box.* math-verify ranks patterns before
   position: "final answer ... is" ties with a box and position decides, but a
   box anywhere outranks "Final answer: …" and any plain math after it.
   polyvox ranks by position among statements only, so a self-corrected answer
   is graded as the corrected one, whichever form the correction takes. (The
   previous polyvox rule, the last box, graded a box followed by a corrected
   "final answer is …" as the box; and without a box it read only the last
   1,500 characters, missing a final answer further up.)
2. *Any number of boxes in one statement.* math-verify joins at most six, and
   only when they sit in ``$…$`` or similar environments; here ``\\boxed{-2}
   and \\boxed{1}`` is the set {-2, 1} however it is written.
3. *Identical strings first.* The chosen box (or the text after a final-answer
   phrase) equal to the gold once spacing, ``\\left``/``\\right``, ``\\dfrac`` and
   ``$`` are removed is correct with no parsing, which is faster and grades
   answers math-verify cannot parse (a 10,000-digit number exceeds Python's
   integer-string limit) by what they are.
4. *Unicode math is rewritten as LaTeX first* (:func:`normalize_unicode_math`):
   ``½`` → ``\\frac{1}{2}``, ``2√3`` → ``2\\sqrt{3}``, ``x²`` → ``x^{2}``,
   ``≤``/``∈``/``π`` → ``\\le``/``\\in``/``\\pi``, full-width digits → ASCII,
   zero-width characters removed, non-breaking spaces → spaces. math-verify
   reads none of these.
5. *The gold is parsed once per distinct (gold, options)* and wrapped in
   ``$…$`` unless it has an unescaped ``$`` or a box (``gold_as="latex"``, the
   default: LaTeX golds such as MATH's, where ``\\$36`` is a price), or
   parsed as a plain expression (``gold_as="expr"``, math-verify's reading of a
   plain string, where ``1,22`` is the decimal 1.22). With ``gold_as="expr"`` the
   chosen answer's text is also read as an expression, so ``\\boxed{1,22}`` is
   1.22 there and the set {1, 22} otherwise.
6. *Options*: ``float_rounding`` (``None`` keeps math-verify's 6 places) and
   ``allow_set_relation_comp`` (``-2 \\le x \\le 7`` equals ``x \\in [-2, 7]``)
   go to ``math_verify.verify`` unchanged.

Time-outs are read from math-verify's own API: every parse and comparison runs with
``raise_on_error=True``, its ``TimeoutException`` is caught and counted, and a verdict
that is wrong after one of its parses or comparisons timed out has ``status="timeout"``.
Any other exception inside math-verify keeps math-verify's documented default (a parse
that fails is no answer, a comparison that fails is no match). math-verify's log
records are kept off stderr (its warnings repeat the whole input, tens of kilobytes
per pathological item), and nothing is read from them.

Errors are not verdicts: a grader that raises (anything but a time-out) stops
:func:`grade_many` with :class:`GradingError`, naming the item. Grading workers die
with the process that started them (``PR_SET_PDEATHSIG`` on Linux, a watchdog
thread elsewhere), so a killed ``polyvox grade`` leaves no worker behind.

Numbers for the ``integer`` and ``gsm*`` graders: see :mod:`polyvox.answers`.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import logging
import math
import os
import re
import signal
import string
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass

# the answer-selection rule and number reading live in polyvox.answers; re-exported here for callers
from .answers import (PHRASE_WINDOW_CHARS, Statement, _last_integer_string, _numbers, _phrase_text,  # noqa: F401
                      _to_float, _unclosed_boxes_dropped, answer_body, boxes, final_statements, integer_string,
                      last_boxed, last_integer, normalize_unicode_math, normalize_unicode_plain)

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
MV_TIMEOUT_S = 5  # math-verify's own parse and compare limits


@dataclass(frozen=True)
class GradeOptions:
    """How a task's answers are compared (math-verify's options; other graders ignore them).

    ``float_rounding``: decimal places a float answer is rounded to before it is
    compared (``None``: math-verify's default, 6). ``allow_set_relation_comp``:
    a relation such as ``-2 \\le x \\le 7`` may equal a set ``[-2, 7]``.
    ``gold_as``: ``"latex"`` (the gold is LaTeX, wrapped in ``$…$``) or ``"expr"``
    (a plain expression, where a comma may be a decimal comma).
    """
    float_rounding: int | None = None
    allow_set_relation_comp: bool = False
    gold_as: str = "latex"

    def __post_init__(self):
        if self.gold_as not in ("latex", "expr"):
            raise ValueError(f"GradeOptions.gold_as must be 'latex' or 'expr', not {self.gold_as!r}")
        if self.float_rounding is not None and (not isinstance(self.float_rounding, int) or self.float_rounding < 0):
            raise ValueError(f"GradeOptions.float_rounding must be None or an integer >= 0, not {self.float_rounding!r}")

    def as_dict(self) -> dict:
        """Plain values for a manifest."""
        return asdict(self)


DEFAULT_OPTIONS = GradeOptions()


@dataclass(frozen=True)
class Grade:
    correct: bool
    extracted: str | None
    status: str = "ok"  # ok | no_answer | ungradable | timeout
    f1: float | None = None


# ---------------------------------------------------------------- per task

@register_grader("integer", "aime")
def grade_integer(completion: str, gold, options: GradeOptions | None = None) -> Grade:
    completion = normalize_unicode_plain(completion)
    value = _last_integer_string(answer_body(completion))
    if value is None:
        value = _last_integer_string(last_boxed(completion))
    if value is None:
        return Grade(False, None, "no_answer")
    want = integer_string(normalize_unicode_plain(str(gold)))
    if want is None:
        return Grade(False, value, "ungradable")
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
        return Grade(False, None, "no_answer")
    shown = extracted.replace(",", "").rstrip(".")
    gold = normalize_unicode_plain(str(gold)).strip()
    if shown == gold.replace(",", "").replace("$", "").strip().rstrip("."):
        return Grade(True, shown)  # identical numbers need no float (a 400-digit one overflows)
    got, want = _to_float(extracted), _to_float(gold)
    if got is None or want is None or math.isinf(got) or math.isinf(want):
        return Grade(False, extracted, "ungradable")
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
    return Grade(bool(em), pred, "ok", f1)


# ---------------------------------------------------------------- math-verify

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
        return Grade(False, None, "ungradable")
    first_extracted = None
    for parsed in _candidates(text, statements, opts):
        if not parsed:
            continue
        first_extracted = first_extracted or str(parsed[-1])
        if _verify(gold_parsed, parsed, opts):
            return Grade(True, str(parsed[-1]))
    if _TIMEOUTS > timeouts_before:  # math-verify gave up on a parse or a comparison
        return Grade(False, first_extracted, "timeout")
    return Grade(False, first_extracted, "ok" if first_extracted else "no_answer")


def _candidates(text: str, statements: list[Statement], opts: GradeOptions):
    """Parsed answers to try in order: the final statement, its expression reading, the <answer> body."""
    parsed, written = _chosen(text, statements)
    yield parsed
    if opts.gold_as == "expr" and written:
        yield _parse(written, expr_only=True)  # a decimal comma reads as in the gold
    body = answer_body(text)
    if body:
        yield _parse(body if "$" in body or "\\boxed" in body else f"${body}$")


# ---------------------------------------------------------------- batches

class GradingError(RuntimeError):
    """A grader raised (anything but a time-out) on one item: an error to fix, never a verdict.

    ``index`` is the item's position in the batch given to :func:`grade_many`.
    """

    def __init__(self, index: int, grader: str, error: str, worker_traceback: str | None = None):
        self.index, self.grader, self.error = index, grader, error
        super().__init__(f"grader {grader!r} raised {error} (item {index} of the batch)")
        if worker_traceback:
            self.add_note(f"in the grading worker:\n{worker_traceback.rstrip()}")  # shown with --debug


def grader(name: str):
    """The grader registered under name; an unknown name lists the registered ones."""
    try:
        return GRADERS[name]
    except KeyError:
        raise ValueError(f"unknown grader {name!r}; graders: {', '.join(sorted(GRADERS))}") from None


def grade(name: str, completion: str, gold, options: GradeOptions | None = None) -> Grade:
    """Grade one completion in this process (math runs math-verify here: call from a main thread)."""
    return grader(name)(completion, gold, options=options)


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else text[:300] + " …"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class _Raised:
    """What a worker sends back when a grader raised on item ``index`` of its chunk."""
    index: int
    error: str
    traceback: str = ""


def _grade_chunk(task: str, items: list[tuple[str, object]], options: GradeOptions | None = None):
    """The chunk's grades, or _Raised for the first item whose grader raised (the rest are not graded)."""
    out = []
    for i, (c, g) in enumerate(items):
        try:
            out.append(grade(task, c, g, options))
        except Exception as exc:  # noqa: BLE001 - sent back to the parent, which stops with GradingError
            import traceback

            return _Raised(i, _describe(exc), traceback.format_exc())
    return out


def _die_with_parent(parent: int) -> None:
    """In a worker: be killed when the process that started it dies, a SIGKILL included.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, then a check that the parent did not die before
    it took effect. Elsewhere: a daemon thread that exits when the worker is orphaned.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ok = ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL) == 0  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            ok = False
        if ok:
            if os.getppid() != parent:
                os._exit(1)
            return

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="polyvox-orphan-watch", daemon=True).start()


def _worker_init(parent: int, pids) -> None:
    _die_with_parent(parent)
    pids.put(os.getpid())


class _Workers:
    """A process pool whose workers die with this process, and which kills its own workers on request
    through public APIs only (each worker reports its pid; ``multiprocessing.active_children``)."""

    def __init__(self, n: int, ctx):
        self._reported = ctx.SimpleQueue()
        self._pids: set[int] = set()
        self.kill_on_exit = False
        self.pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_worker_init,
                                           initargs=(os.getpid(), self._reported))

    def kill(self) -> None:
        import multiprocessing as mp

        while not self._reported.empty():
            self._pids.add(self._reported.get())
        for proc in mp.active_children():
            if proc.pid in self._pids:
                proc.kill()

    def __enter__(self) -> "_Workers":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None or self.kill_on_exit:
            self.kill()  # a hung worker, or an error: nothing left running
        self.pool.shutdown(wait=True, cancel_futures=True)


def _pool_context():
    import multiprocessing as mp

    return mp.get_context("fork") if hasattr(os, "fork") else mp.get_context("spawn")


def grade_many(task: str, completions: list[str], golds: list, workers: int | None = None,
               chunk: int = 64, item_timeout_s: float = 20.0,
               options: GradeOptions | None = None) -> list[Grade]:
    """Grade many completions. math runs in a process pool with a per-chunk deadline.

    A chunk whose worker dies or overruns ``item_timeout_s × len(chunk)`` is
    re-graded item by item in fresh single-use processes, so only the
    pathological item is marked ``timeout`` (it overran) or ``ungradable`` (its
    worker died). A grader that raises stops the batch with :class:`GradingError`
    naming the item; the workers are killed first. Workers die with this process.
    """
    grader(task)  # an unknown name fails here, before any work
    if len(completions) != len(golds):
        raise ValueError("grade_many: completions and golds differ in length")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an integer ≥ 1 (or None), got {workers!r}")
    items = list(zip(completions, golds))
    if task != "math":
        graded_here = []
        for i, (c, g) in enumerate(items):
            try:
                graded_here.append(grade(task, c, g, options))
            except Exception as exc:  # noqa: BLE001 - an error, not a verdict
                raise GradingError(i, task, _describe(exc)) from exc
        return graded_here
    if not items:
        return []
    workers = workers or max(1, min(os.cpu_count() or 1, 8))
    # Items grouped by gold (stably) before chunking: a gold's items land in one or two
    # chunks, so each worker parses only its own golds instead of nearly all of them.
    order = sorted(range(len(items)), key=lambda i: str(items[i][1]))
    ordered = [items[i] for i in order]
    starts = list(range(0, len(ordered), chunk))
    chunks = [ordered[i:i + chunk] for i in starts]
    results: list[list[Grade] | None] = [None] * len(chunks)
    ctx = _pool_context()
    with _Workers(workers, ctx) as w:
        futures = {w.pool.submit(_grade_chunk, task, ch, options): i for i, ch in enumerate(chunks)}
        for fut, i in futures.items():
            try:
                res = fut.result(timeout=item_timeout_s * len(chunks[i]) + 30)
            except KeyboardInterrupt:
                raise
            except BaseException:  # noqa: BLE001 - time-out or dead worker: re-graded item by item below
                res = None
            if isinstance(res, _Raised):
                raise GradingError(order[starts[i] + res.index], task, res.error, res.traceback)
            results[i] = res
        w.kill_on_exit = any(r is None for r in results)
    graded: list[Grade] = []
    for i, res in enumerate(results):
        graded.extend(res if res is not None else
                      [_grade_isolated(task, c, g, item_timeout_s, ctx, options, order[starts[i] + j])
                       for j, (c, g) in enumerate(chunks[i])])
    out: list[Grade | None] = [None] * len(items)
    for position, g in zip(order, graded):
        out[position] = g
    return out


def _grade_isolated(task: str, completion: str, gold, timeout_s: float, ctx,
                    options: GradeOptions | None = None, index: int = 0) -> Grade:
    """One item in a fresh single-use process: its grade, ``timeout`` when it overruns, ``ungradable``
    when its worker dies; a grader that raises is a GradingError."""
    with _Workers(1, ctx) as w:
        fut = w.pool.submit(_grade_chunk, task, [(completion, gold)], options)
        try:
            res = fut.result(timeout=timeout_s)
        except cf.TimeoutError:
            w.kill_on_exit = True
            return Grade(False, None, "timeout")
        except cf.BrokenExecutor:
            return Grade(False, None, "ungradable")  # the worker died (a crash, an exhausted stack): no verdict
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - raised outside the grader's own call
            if isinstance(exc, _timeout_exception()):
                return Grade(False, None, "timeout")
            raise GradingError(index, task, _describe(exc)) from None
    if isinstance(res, _Raised):
        raise GradingError(index, task, res.error, res.traceback)
    return res[0]
