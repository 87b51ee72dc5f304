"""Answer projections: which answer of a trajectory is scored.

A trajectory holds several tentative answers and, when confirmed, a final one. A
projection picks one answer per question and says where it came from:

- ``final``: the confirmed answer; a question never confirmed (``t_max``) scores nothing;
- ``final_or_last``: the confirmed answer, else the last tentative answer;
- ``first``: the first tentative answer written in the trajectory;
- ``last``: the last tentative answer;
- ``vote``: the most frequent tentative answer (ties: the later one);
- ``study``: the rule the study's MATH log states — the final answer when at most three
  turns were recorded and the third did not fail to stop, otherwise the first tentative
  answer (in miniature: confirmed within three turns → final, else first tentative).
Each returns (answer, source), source ∈ {final, first_tentative, last_tentative, vote, none}.

:func:`malformed`: an answer string that carries the protocol's own tags (``<answer>``, ``</think>``
…) is not an answer body but a parsing remnant — a turn that opened ``<answer>`` twice leaves
``"1 ÷ 11 ÷ 111.</think> <answer>1"`` as its tentative answer. The ``integer`` grader, fed such a
string as a bare body, grades the last ``<answer>`` block inside it ("1") and credits it; the
collaboration's grader grades a malformed answer as no answer (:func:`.tasks.grade_answer`, so every
reader agrees), which moves ``cl-base`` of the recorded run from 5 to 4 correct of 240 (2.1 % → 1.7 %)
and no other system.

:func:`unevaluated`: an arithmetic answer that ends in an operand (``"5 ÷ 1"``, ``"7 - 2"``) is an expression
left unevaluated; the ``integer`` grader's last-integer rule would read ``"5 ÷ 1"`` as 1 and credit it where the
gold is 1. The collaboration's grader grades it as no answer for integer-graded tasks (the shipped
``collab-h200-ordered-v3``: 3 of ``cl-base``'s 2,497 answers per seed, and no other system's).
"""
from __future__ import annotations

import re
from collections import Counter

PROJECTIONS = ("final", "final_or_last", "first", "last", "vote", "study")


_TAG = re.compile(r"</?\s*(?:answer|think|action)\s*>", re.I)
# an operand, an operator, then a number at the end: "5 ÷ 1", "(2+3) * 4."; a leading sign ("-3", "x = -3") is not one
_UNEVALUATED = re.compile(r"[\d)]\s*[÷×*/+\-−]\s*[-+−]?\d[\d,]*(?:\.\d+)?\s*\.?\s*$")


def malformed(answer: str | None) -> bool:
    """True when the answer string holds a protocol tag (it is a remnant of a broken turn, not a body)."""
    return answer is not None and bool(_TAG.search(answer))


def unevaluated(answer: str | None) -> bool:
    """True when an arithmetic answer ends in an operand of an operator: an expression, not its value."""
    return answer is not None and bool(_UNEVALUATED.search(answer))


def _tentatives(t: dict) -> list[str]:
    return [x["answer"] for x in t["turns"] if x.get("answer")]


def project(t: dict, how: str) -> tuple[str | None, str]:
    tent = _tentatives(t)
    confirmed = t["status"] == "confirmed" and t.get("final")
    if how == "final":
        return (t["final"], "final") if confirmed else (None, "none")
    if how == "final_or_last":
        if confirmed:
            return t["final"], "final"
        return (tent[-1], "last_tentative") if tent else (None, "none")
    if how == "first":
        return (tent[0], "first_tentative") if tent else (None, "none")
    if how == "last":
        return (tent[-1], "last_tentative") if tent else (None, "none")
    if how == "vote":
        if not tent:
            return None, "none"
        counts = Counter(tent)
        best = max(counts.values())
        return next(a for a in reversed(tent) if counts[a] == best), "vote"
    if how == "study":
        if confirmed and len(t["turns"]) <= 3:
            return t["final"], "final"
        return (tent[0], "first_tentative") if tent else (None, "none")
    raise ValueError(f"unknown projection {how!r}; projections: {', '.join(PROJECTIONS)}")


def same_answer(records_a: list[dict], proj_a: str, records_b: list[dict], proj_b: str) -> tuple[int, int]:
    """Questions on which both projected answers exist and are equal, out of the shared questions."""
    b = {r["id"]: r for r in records_b}
    same = n = 0
    for r in records_a:
        if r["id"] not in b:
            continue
        n += 1
        x, y = project(r, proj_a)[0], project(b[r["id"]], proj_b)[0]
        same += x is not None and x == y
    return same, n
