"""Prompt formats and parsers for the panel study.

- ``panel``: the exact raw prompt of the published adapter (a base model: no chat
  template), generation stops at ``</answer>``. The tag name keeps the study's
  spelling, ``mutipersonaDebate``.
- ``think``: the model's own chat template with ``enable_thinking=True``; the
  ``<think>…</think>`` block is split off and measured separately.
- ``plain``: the chat template without thinking.

Format validity (the reward's format term): for ``panel`` both blocks present,
non-empty, in the order debate then answer; for ``think`` a closed non-empty think
block followed by a ``\\boxed{}`` answer. The reward itself is in
:func:`polyvox.train.grpo.reward`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

PANEL_PROMPT = (
    "A conversation between User and Multi-Persona Panel of Experts. "
    "The user asks a question, and the Multi-Persona Panel of Experts solves it. "
    "The Multi-Persona Panel of Experts first deliberates and debates the reasoning "
    "process with each other and then provides the user with the answer. "
    "The deliberation process and answer are enclosed within "
    "<mutipersonaDebate>...</mutipersonaDebate> and <answer>...</answer> tags, "
    "respectively, i.e., <mutipersonaDebate> deliberation process here "
    "</mutipersonaDebate> <answer>answer here </answer>. "
    "User: {problem}. Assistant: "
)
PANEL_STOP = ["</answer>"]
FORMATS = ("panel", "think", "plain")


@dataclass(frozen=True)
class Prompt:
    text: str  # what the backend receives: templated text, or the user message for a chat endpoint
    stop: tuple[str, ...]
    # True: ``text`` is the user message and whoever receives it applies the chat template (a chat endpoint, or
    # backends.base.local_prompt); False: ``text`` is what the model reads, already templated where the format
    # has a template. A local backend's think/plain prompt is templated here, so it is False: marking it True
    # made local_prompt template it a second time (a user turn inside a user turn, without enable_thinking),
    # which the thinking arm of Part IV's recording sampled under in its pilot, evaluations and bands.
    chat: bool
    template_kwargs: dict = field(default_factory=dict)  # chat endpoints template on the server: these options


def panel_prompt(problem: str) -> str:
    return PANEL_PROMPT.format(problem=problem)


def build_prompt(fmt: str, problem: str, tokenizer=None) -> Prompt:
    """The prompt text for a format; chat formats need the model's tokenizer (its template).

    Callers go through ``Backend.prompt(fmt, text)``: a local backend passes its tokenizer
    here, a server backend sends chat formats as messages and lets the server template them.
    """
    if fmt == "panel":
        return Prompt(panel_prompt(problem), tuple(PANEL_STOP), False)
    if fmt in ("think", "plain"):
        if tokenizer is None:
            raise ValueError(f"format {fmt!r} needs the model's tokenizer for its chat template")
        text = tokenizer.apply_chat_template([{"role": "user", "content": problem}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=(fmt == "think"))
        return Prompt(text, (), False)  # templated already: not a chat request (see Prompt.chat)
    raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")


def finish_panel(completion: str, finish_reason: str) -> str:
    """Stop strings are cut by backends; restore the closing tag so the record is the full answer."""
    if finish_reason == "stop" and "<answer>" in completion and not completion.rstrip().endswith("</answer>"):
        return completion + "</answer>"
    return completion


_DEBATE = re.compile(r"<mutipersonaDebate>(.*?)</mutipersonaDebate>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def tags_valid(completion: str) -> bool:
    """Both blocks present and non-empty, debate before answer."""
    d, a = _DEBATE.search(completion), _ANSWER.search(completion)
    return bool(d and a and d.group(1).strip() and a.group(1).strip() and d.end() <= a.start())


def split_think(completion: str) -> tuple[str, str]:
    """(think block, the rest); a missing </think> means the whole text is thinking (cut off)."""
    text = completion
    if "<think>" in text:
        text = text.split("<think>", 1)[1]
    elif "</think>" not in text:
        return "", completion.strip()
    if "</think>" in text:
        think, rest = text.split("</think>", 1)
        return think.strip(), rest.strip()
    return text.strip(), ""


def think_valid(completion: str) -> bool:
    """A non-empty closed ``<think>`` block followed by a boxed answer (the think arm's format term)."""
    from .grading import last_boxed

    think, rest = split_think(completion)
    return bool("</think>" in completion and think and last_boxed(rest) is not None)


def format_valid(fmt: str, completion: str) -> bool:
    """The format term of the RL reward: panel tags, or a closed think block and a box."""
    return tags_valid(completion) if fmt == "panel" else think_valid(completion)
