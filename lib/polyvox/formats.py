"""Prompt formats and parsers for the panel study.

- ``panel``: the exact raw prompt of the published adapter (a base model: no chat
  template), generation stops at ``</answer>``. The tag name keeps the study's
  spelling, ``mutipersonaDebate``.
- ``think``: the model's own chat template with ``enable_thinking=True``; the
  ``<think>…</think>`` block is split off and measured separately.
- ``plain``: the chat template without thinking.

Tag validity (the reward's format term): both blocks present, non-empty, in the
order debate then answer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

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
    text: str  # what the backend receives (already templated for chat formats)
    stop: tuple[str, ...]
    chat: bool  # True when text came from a chat template


def panel_prompt(problem: str) -> str:
    return PANEL_PROMPT.format(problem=problem)


def build_prompt(fmt: str, problem: str, tokenizer=None) -> Prompt:
    """The prompt text for a format; chat formats need the model's tokenizer (its template)."""
    if fmt == "panel":
        return Prompt(panel_prompt(problem), tuple(PANEL_STOP), False)
    if fmt in ("think", "plain"):
        if tokenizer is None:
            raise ValueError(f"format {fmt!r} needs the model's tokenizer for its chat template")
        text = tokenizer.apply_chat_template([{"role": "user", "content": problem}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=(fmt == "think"))
        return Prompt(text, (), True)
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


def panel_reward(correct: bool, completion: str, tag_coef: float = 0.2) -> float:
    """The study's reward: correct + tag_coef × (tags_valid − 1)."""
    return float(correct) + tag_coef * (float(tags_valid(completion)) - 1.0)
