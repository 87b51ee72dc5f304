"""Which answer a completion gives: the final-answer statement, Unicode math, numbers.

Used by :mod:`polyvox.grading`, whose docstring states how the chosen answer is compared
and why each step departs from math-verify run on the whole completion.

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

The ``integer`` rule is the panel study's for AIME: *the last integer* written, so numbers that
are not integers are passed over on the way back — ``1/7`` answers 7, ``7.5`` after ``7``
answers 7, ``0x7`` answers 7. A stricter rule (the last number must itself be an integer)
would grade the study's records by another rule than the study's; ``tests/test_grading.py``
pins these cases so a change of rule is a visible decision.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

PHRASE_WINDOW_CHARS = 300  # text after "final answer is" that math-verify reads

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
