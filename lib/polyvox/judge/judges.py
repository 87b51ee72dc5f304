"""The judges: one interface (``identity()``, ``ask(calls, attempt) -> [raw text]``, ``parse(raw)``), a program
judge (:class:`RubricJudge`) and a model judge (:class:`LLMJudge`), and the verdict parser."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Callable, Protocol

JUDGE_TEMPLATE = (
    "You compare two answers to a user's request.\n"
    "The user's preference: {preference}.\n"
    "Request: {prompt}\n\n"
    "Answer A: {first}\n\n"
    "Answer B: {second}\n\n"
    "Which answer is correct and better suits the user's preference? "
    "Reply with [[A]], [[B]] or [[tie]]."
)


@dataclass(frozen=True)
class Call:
    prompt_id: str
    prompt: str
    preference: str
    first: str
    second: str
    row: dict = field(default_factory=dict, compare=False, hash=False)  # the systems row (gold, labels)


class Judge(Protocol):
    name: str

    def identity(self) -> dict: ...

    def ask(self, calls: list[Call], attempt: int) -> list[str]: ...

    def parse(self, raw: str) -> str | None: ...


class RubricJudge:
    """A program judge: ``score(text, row) -> float``; the higher-scored text wins, equal scores tie."""

    name = "rubric"

    def __init__(self, score: Callable[[str, dict], float], version: str):
        self.score, self.version = score, version

    def identity(self) -> dict:
        return {"judge": "rubric", "version": self.version}

    def ask(self, calls: list[Call], attempt: int = 0) -> list[str]:
        out = []
        for c in calls:
            a, b = self.score(c.first, c.row), self.score(c.second, c.row)
            out.append("[[A]]" if a > b + 1e-9 else "[[B]]" if b > a + 1e-9 else "[[tie]]")
        return out

    def parse(self, raw: str) -> str | None:
        return parse_verdict(raw)


class LLMJudge:
    """A judge model behind any backend (``openai`` for an OpenAI-compatible endpoint): greedy, seeded."""

    name = "llm"

    def __init__(self, backend, template: str = JUDGE_TEMPLATE, max_tokens: int = 16, seed: int = 0):
        self.backend, self.template, self.max_tokens, self.seed = backend, template, max_tokens, seed

    def identity(self) -> dict:
        return {"judge": "llm", **self.backend.identity(), "max_tokens": self.max_tokens,
                "template_sha256": hashlib.sha256(self.template.encode()).hexdigest()[:16]}

    def ask(self, calls: list[Call], attempt: int = 0) -> list[str]:
        from ..backends import Request, SamplingParams

        reqs = [Request(self.template.format(preference=c.preference, prompt=c.prompt, first=c.first,
                                             second=c.second), seed=self.seed + attempt, chat=True)
                for c in calls]
        return [c.text for c in self.backend.generate(reqs, SamplingParams(self.max_tokens, 0.0))]

    def parse(self, raw: str) -> str | None:
        return parse_verdict(raw)


_VERDICT = re.compile(r"\[\[\s*(A|B|tie)\s*\]\]", re.I)


def parse_verdict(raw: str) -> str | None:
    """'A', 'B' or 'tie' from ``[[A]]``/``[[B]]``/``[[tie]]`` (or a bare reply of just that word); else None."""
    found = {m.group(1).upper() if m.group(1).lower() != "tie" else "tie" for m in _VERDICT.finditer(raw or "")}
    if len(found) == 1:
        return found.pop()
    bare = (raw or "").strip().strip(".").strip()
    return {"a": "A", "b": "B", "tie": "tie"}.get(bare.lower())
