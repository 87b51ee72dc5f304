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
"""
from __future__ import annotations

from collections import Counter

PROJECTIONS = ("final", "final_or_last", "first", "last", "vote", "study")


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
