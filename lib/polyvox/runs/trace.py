"""A completion's parts as a prompt format writes them: the reasoning and the final answer, and
whether the completion keeps the format."""
from __future__ import annotations

import re

from .. import formats
from ..answers import answer_body

# the debate block, closed or cut off (by the token cap, or by the answer block beginning)
_DEBATE = re.compile(r"<mutipersonaDebate>(.*?)(?:</mutipersonaDebate>|<answer>|$)", re.S)


def split_trace(fmt: str, completion: str) -> tuple[str, str]:
    """(reasoning, final answer) of a completion in a prompt format (panel, think, plain)."""
    if fmt == "think":
        return formats.split_think(completion)
    if fmt == "panel":
        m = _DEBATE.search(completion)
        reasoning = m.group(1) if m else completion.split("<answer>", 1)[0]
        return reasoning.strip(), (answer_body(completion) or "")
    return "", completion.strip()


def format_ok(fmt: str, completion: str):
    """The run format's validity check (:func:`polyvox.formats.format_valid`: panel tags in order;
    a closed think block then a boxed answer); None for ``plain``, which has no format to break."""
    return formats.format_valid(fmt, completion) if fmt in ("panel", "think") else None
