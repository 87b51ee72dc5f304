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

Answer selection (``math``)
---------------------------
The answer is the completion's last *final-answer statement*. A statement is
either a closed ``\\boxed{...}``/``\\fbox{...}`` or a phrase "final answer ... is"
(or "are") / "final answer:" (case-insensitive, at most 100 characters between
the two words, on one line). Boxes separated only by spacing, ``$``, ``\\(``/``\\)``,
commas, semicolons, ``\\quad`` and the words "and"/"or" belong to one statement;
its boxes form one answer, the set of their values (a box holding a set adds its
elements), as math-verify joins ``$\\boxed{a}$ and $\\boxed{b}$``; identical
repeated boxes are one value. Statements are looked for in the whole
completion; the one that starts last wins. A phrase counts only if math-verify
extracts something from the 300 characters after it; otherwise the statement
before it is taken. An unclosed ``\\boxed{`` (a truncated answer) is no
statement (and is hidden from math-verify). With no statement at all,
math-verify's own search runs on the whole completion (its anchored patterns,
rightmost first).

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

math-verify's log records are kept off stderr (its time-out warnings repeat the
whole input, tens of kilobytes per pathological item); a verdict that is wrong
after one of its parses or comparisons timed out has ``status="timeout"``.

Numbers in ``integer`` and ``gsm*`` graders: a comma is a thousands separator
only between a first group of one to three digits and groups of exactly three
(``1,234`` and ``12,345,678`` are numbers; ``1,2,3`` is the three numbers 1, 2
and 3, and ``1,23`` is 1 and 23): a list written without spaces is never read
as one number, at the price of reading ``100,200,300`` as one. An integer gold
may be written ``12.0``. Integers are compared as digit strings, so any length
compares exactly (a float round trip changed 20-digit answers). These graders
get only the plain Unicode normalisation (:func:`normalize_unicode_plain`:
zero-width characters, odd spaces, full-width forms, the minus sign), since
``½`` → ``\\frac{1}{2}`` would put two integers where a number was.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import logging
import math
import re
import string
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass
from fractions import Fraction

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
PHRASE_WINDOW_CHARS = 300  # text after "final answer is" that math-verify reads
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


# ---------------------------------------------------------------- Unicode

_DROP = "\u200b\u200c\u200d\u2060\ufeff\u00ad"  # zero-width characters and the soft hyphen
_SPACES = "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000"
_PLAIN = {**{ord(c): None for c in _DROP}, **{ord(c): " " for c in _SPACES},
          **{c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)},  # full-width ASCII forms
          0x2212: "-", 0xFE63: "-", 0x2044: "/"}  # minus sign, small hyphen-minus, fraction slash
_MATH_SYMBOLS = {"×": r"\times ", "·": r"\cdot ", "⋅": r"\cdot ", "÷": r"\div ", "≤": r"\le ",
                 "⩽": r"\le ", "≥": r"\ge ", "⩾": r"\ge ", "≠": r"\ne ", "±": r"\pm ", "∓": r"\mp ",
                 "∈": r"\in ", "∉": r"\notin ", "∪": r"\cup ", "∩": r"\cap ", "∞": r"\infty ",
                 "π": r"\pi ", "°": r"^\circ ", "∅": r"\emptyset ", "⊆": r"\subseteq ", "⊂": r"\subset "}
_SUPERSCRIPT = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ", "0123456789+-=()ni"))
_SUBSCRIPT = dict(zip("₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎", "0123456789+-=()"))
_VULGAR = "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅐⅛⅜⅝⅞⅑⅒↉"
_SUP_RUN = re.compile(f"[{''.join(_SUPERSCRIPT)}]+")
_SUB_RUN = re.compile(f"[{''.join(_SUBSCRIPT)}]+")
_ROOT = re.compile(r"([√∛∜])\s*(\d+(?:\.\d+)?|[A-Za-z]|\([^()]*\)|\{[^{}]*\})")
_ROOT_INDEX = {"√": "", "∛": "[3]", "∜": "[4]"}


def normalize_unicode_plain(text: str) -> str:
    """Zero-width characters dropped, odd spaces → space, full-width ASCII → ASCII, − → -."""
    return text if text.isascii() else text.translate(_PLAIN)


def _vulgar(ch: str) -> str:
    value = Fraction(unicodedata.numeric(ch)).limit_denominator(12)
    return rf"\frac{{{value.numerator}}}{{{value.denominator}}}"


def normalize_unicode_math(text: str) -> str:
    """:func:`normalize_unicode_plain`, then Unicode math written as LaTeX.

    ``2½`` becomes ``2\\frac{1}{2}``, which math-verify reads as the mixed number 5/2.
    """
    if text.isascii():  # the common case costs one scan
        return text
    text = normalize_unicode_plain(text)
    text = re.sub(f"[{_VULGAR}]", lambda m: _vulgar(m.group(0)), text)
    text = _SUP_RUN.sub(lambda m: "^{" + "".join(_SUPERSCRIPT[c] for c in m.group(0)) + "}", text)
    text = _SUB_RUN.sub(lambda m: "_{" + "".join(_SUBSCRIPT[c] for c in m.group(0)) + "}", text)
    text = _ROOT.sub(lambda m: rf"\sqrt{_ROOT_INDEX[m.group(1)]}{{{m.group(2).strip('{}')}}}", text)
    for ch, latex in _MATH_SYMBOLS.items():
        if ch in text:
            text = text.replace(ch, latex)
    return text.replace("√", r"\sqrt").replace("∛", r"\sqrt[3]").replace("∜", r"\sqrt[4]")


# ---------------------------------------------------------------- extraction

_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"\\.|[{}]", re.S)  # an escaped character (\{ …) is skipped as a unit


def answer_body(text: str) -> str | None:
    """Body of the last <answer>…</answer> block (an unclosed final block counts)."""
    found = _ANSWER_TAG.findall(text)
    return found[-1].strip() if found else None


def _closing_braces(text: str) -> dict[int, int]:
    """Position of each opening brace → position of its closing brace (one linear pass)."""
    stack, close = [], {}
    for m in _BRACE.finditer(text):
        ch = m.group(0)
        if ch == "{":
            stack.append(m.start())
        elif ch == "}" and stack:
            close[stack.pop()] = m.start()
    return close


def _box_openers(text: str) -> list[tuple[re.Match, int | None]]:
    """Each \\boxed{ / \\fbox{ with the position of its closing brace (None: unclosed)."""
    if "\\boxed" not in text and "\\fbox" not in text:
        return []
    close = _closing_braces(text)
    return [(m, close.get(m.end() - 1)) for m in _BOX_OPEN.finditer(text)]


def boxes(text: str) -> list[tuple[int, int, str]]:
    """Every closed \\boxed{...}/\\fbox{...}: (start, end, content), in order; unclosed ones skipped."""
    return [(m.start(), end + 1, text[m.end():end].strip()) for m, end in _box_openers(text) if end is not None]


def _unclosed_boxes_dropped(text: str) -> str:
    """The macro name of every unclosed box removed (its brace kept).

    An unclosed box is no answer here, and math-verify's own box pattern would
    otherwise read a truncated box up to some later brace, scanning to the end
    of the text once per opener (quadratic: 17 s on 50,000 openers).
    """
    cuts = [(m.start(), m.end() - 1) for m, end in _box_openers(text) if end is None]
    if not cuts:
        return text
    pieces, at = [], 0
    for start, brace in cuts:
        pieces.append(text[at:start])
        at = brace
    return "".join(pieces) + text[at:]


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces balanced; None if that box is unclosed."""
    starts = [m.end() for m in _BOX_OPEN.finditer(text)]
    if not starts:
        return None
    i = starts[-1]
    depth, j = 1, i
    for m in _BRACE.finditer(text, i):
        depth += {"{": 1, "}": -1}.get(m.group(0), 0)
        j = m.end()
        if depth == 0:
            return text[i:j - 1].strip()
    return None


# Between two boxes of one statement: only spacing, math delimiters, commas and "and"/"or".
_BOX_JOINER = re.compile(r"(?:\s|\$|\\[()\[\]]|[,;&]|\\q?quad|\\text\{\s*(?:and|or|,)?\s*\}|\band\b|\bor\b|\\\\)*")
_PHRASE = re.compile(r"(?i)\bfinal\s+answers?\b[^\n]{0,100}?(?:\bis\b|\bare\b|:)")


@dataclass(frozen=True)
class Statement:
    """A final-answer statement: boxes (their contents) or a phrase (the text after it)."""
    start: int
    contents: tuple[str, ...] = ()
    after: str | None = None  # a phrase's following text

    @property
    def is_box(self) -> bool:
        return self.after is None


def _box_statements(text: str) -> list[Statement]:
    groups: list[list[tuple[int, int, str]]] = []
    for box in boxes(text):
        if groups and box[0] - groups[-1][-1][1] <= 60 and _BOX_JOINER.fullmatch(text, groups[-1][-1][1], box[0]):
            groups[-1].append(box)
        else:
            groups.append([box])
    out = []
    for g in groups:
        contents = tuple(dict.fromkeys(c for _, _, c in g))  # identical repeats are one value
        out.append(Statement(g[0][0], contents))
    return out


def final_statements(text: str) -> list[Statement]:
    """All final-answer statements, last first."""
    found = _box_statements(text)
    found += [Statement(m.start(), after=text[m.end():m.end() + PHRASE_WINDOW_CHARS])
              for m in _PHRASE.finditer(text)]
    return sorted(found, key=lambda s: s.start, reverse=True)


def _phrase_text(after: str) -> str:
    """The answer right after a final-answer phrase, as written: ``$10,455$.`` → ``10,455``."""
    line = after.strip().split("\n", 1)[0].strip().strip("*").strip()
    m = re.match(r"\$\$?(.+?)\$\$?|\\\((.+?)\\\)", line)
    if m:
        return (m.group(1) or m.group(2)).strip()
    return re.split(r"[.;]\s|[.;]?$", line, maxsplit=1)[0].strip()


# ---------------------------------------------------------------- numbers

# A comma separates thousands only as d{1,3}(,ddd)+; otherwise it separates numbers.
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")
_INTEGER_FORM = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.0*)?")


def _numbers(text: str) -> list[str]:
    return [m.group(0) for m in _NUMBER.finditer(text)]


def _to_float(s: str) -> float | None:
    s = s.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        return float(s)
    except ValueError:
        return None


def integer_string(s: str) -> str | None:
    """Canonical digits of an integer written ``033``, ``1,234``, ``12.0`` or ``+5``; else None.

    A string, not an int: Python refuses int() of more than 4,300 digits.
    """
    m = _INTEGER_FORM.fullmatch(s.replace("$", "").strip().rstrip("."))
    if not m:
        return None
    digits = m.group(2).replace(",", "").lstrip("0") or "0"
    return digits if m.group(1) != "-" or digits == "0" else "-" + digits


def _last_integer_string(text: str | None) -> str | None:
    if not text:
        return None
    for tok in reversed(_numbers(text)):
        value = integer_string(tok)
        if value is not None:
            return value
    return None


def last_integer(text: str | None) -> int | None:
    """The last integer written in text (``204.0`` counts), else None."""
    value = _last_integer_string(text)
    return int(value) if value is not None and len(value) < 4000 else None


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

class _TimeoutCounter(logging.Handler):
    """Takes math-verify's log records off stderr, counting its time-outs (their text is the whole input)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.timeouts = 0

    def emit(self, record):
        if str(record.msg).startswith("Timeout"):
            self.timeouts += 1


_TIMEOUTS = _TimeoutCounter()


@functools.lru_cache(maxsize=1)
def _math_verify():
    """math-verify, imported once per process, its loggers kept off stderr."""
    import math_verify

    for name in ("math_verify", "latex2sympy2_extended"):
        log = logging.getLogger(name)
        log.addHandler(_TIMEOUTS)
        log.propagate = False  # no root or last-resort handler prints them
    return math_verify


def _parse(text: str, expr_only: bool = False) -> list:
    mv = _math_verify()
    config = [mv.ExprExtractionConfig()] if expr_only else [mv.LatexExtractionConfig(), mv.ExprExtractionConfig()]
    return mv.parse(text, extraction_config=config, parsing_timeout=MV_TIMEOUT_S)


_MATH_DOLLAR = re.compile(r"(?<!\\)\$")


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str, gold_as: str = "latex"):
    if gold_as == "expr":
        return _parse(gold, expr_only=True)
    delimited = _MATH_DOLLAR.search(gold) or "\\boxed" in gold  # an escaped \$ is a currency sign, not math
    return _parse(gold if delimited else f"${gold}$")


def _verify(gold_parsed, parsed, opts: GradeOptions) -> bool:
    kwargs = {"allow_set_relation_comp": opts.allow_set_relation_comp, "timeout_seconds": MV_TIMEOUT_S}
    if opts.float_rounding is not None:
        kwargs["float_rounding"] = opts.float_rounding
    return _math_verify().verify(gold_parsed, parsed, **kwargs)


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
    opts = options or DEFAULT_OPTIONS
    text = normalize_unicode_math(completion)
    gold = normalize_unicode_math(str(gold)).strip()
    statements = final_statements(text)
    if statements:
        last = statements[0]
        written = ", ".join(last.contents) if last.is_box else _phrase_text(last.after)
        if written and _canonical(written) == _canonical(gold):
            return Grade(True, written)  # identical strings need no parsing
    timeouts_before = _TIMEOUTS.timeouts
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
    if _TIMEOUTS.timeouts > timeouts_before:  # math-verify gave up on a parse or a comparison
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

def grader(name: str):
    """The grader registered under name; an unknown name lists the registered ones."""
    try:
        return GRADERS[name]
    except KeyError:
        raise ValueError(f"unknown grader {name!r}; graders: {', '.join(sorted(GRADERS))}") from None


def grade(name: str, completion: str, gold, options: GradeOptions | None = None) -> Grade:
    """Grade one completion in this process (math runs math-verify here: call from a main thread)."""
    return grader(name)(completion, gold, options=options)


def _grade_chunk(task: str, items: list[tuple[str, object]], options: GradeOptions | None = None) -> list[Grade]:
    return [grade(task, c, g, options) for c, g in items]


def grade_many(task: str, completions: list[str], golds: list, workers: int | None = None,
               chunk: int = 64, item_timeout_s: float = 20.0,
               options: GradeOptions | None = None) -> list[Grade]:
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
        return [grade(task, c, g, options) for c, g in items]
    import multiprocessing as mp
    import os

    workers = workers or max(1, min(os.cpu_count() or 1, 8))
    # Items grouped by gold (stably) before chunking: a gold's items land in one or two
    # chunks, so each worker parses only its own golds instead of nearly all of them.
    order = sorted(range(len(items)), key=lambda i: str(items[i][1]))
    ordered = [items[i] for i in order]
    chunks = [ordered[i:i + chunk] for i in range(0, len(ordered), chunk)]
    results: list[list[Grade] | None] = [None] * len(chunks)
    ctx = mp.get_context("fork") if hasattr(os, "fork") else mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(_grade_chunk, task, ch, options): i for i, ch in enumerate(chunks)}
        for fut, i in futures.items():
            try:
                results[i] = fut.result(timeout=item_timeout_s * len(chunks[i]) + 30)
            except Exception:  # noqa: BLE001 - time-out, dead worker or grader bug: re-grade item by item
                results[i] = None
        for proc in list(getattr(pool, "_processes", {}).values()):
            if any(r is None for r in results) and proc.is_alive():
                proc.kill()
    graded: list[Grade] = []
    for i, res in enumerate(results):
        graded.extend(res if res is not None else
                      [_grade_isolated(task, c, g, item_timeout_s, ctx, options) for c, g in chunks[i]])
    out: list[Grade | None] = [None] * len(items)
    for position, g in zip(order, graded):
        out[position] = g
    return out


def _grade_isolated(task: str, completion: str, gold, timeout_s: float, ctx,
                    options: GradeOptions | None = None) -> Grade:
    with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        fut = pool.submit(grade, task, completion, gold, options)
        try:
            return fut.result(timeout=timeout_s)
        except cf.TimeoutError:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.kill()
            return Grade(False, None, "timeout")
        except Exception:  # noqa: BLE001 - a crashed worker or a grader bug on this one item
            return Grade(False, None, "ungradable")
