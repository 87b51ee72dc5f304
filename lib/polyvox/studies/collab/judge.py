"""The programmatic step judge and the pyramid reward.

The study's pyramid ("step-level") supervision rewards each turn with
0.35 × base (final correctness) + 0.65 × judge, the judge a Qwen3-14B grading the
intermediate steps. In miniature the judge is a program: the problem's gold steps are
known (world: each operation's calculation, ``"17 × 3 = 51"``; QA: each hop's fact), and

    judge = (gold steps found in the turn's reasoning, in order) / (gold steps)
            − 0.5 × (calculations written that are false) / (gold steps), clipped to [0, 1].

A false calculation is an ``a op b = c`` that does not hold. The same interface —
``judge(reasoning, problem) -> float`` — takes an LLM judge over an OpenAI-compatible
endpoint at full scale (``llm_judge``). :func:`pyramid_reward` is the
``RLConfig.reward_fn`` of :mod:`polyvox.train.grpo`: (completion, problem) → (reward,
correct, format_valid), format valid = the turn parses without a protocol violation.
"""
from __future__ import annotations

import re

from .protocol import parse_turn

BASE_WEIGHT, JUDGE_WEIGHT = 0.35, 0.65
_CALC = re.compile(r"(-?\d+)\s*([+\-×÷*/])\s*(-?\d+)\s*=\s*(-?\d+)")


def _false_calcs(text: str) -> int:
    bad = 0
    for a, op, b, c in _CALC.findall(text):
        a, b, c = int(a), int(b), int(c)
        ok = {"+": a + b == c, "-": a - b == c, "×": a * b == c, "*": a * b == c,
              "÷": b != 0 and a == b * c, "/": b != 0 and a == b * c}[op]
        bad += not ok
    return bad


def step_judge(reasoning: str, meta: dict) -> float:
    steps = meta.get("steps") or []
    if not steps:
        return 0.0
    norm = " ".join(reasoning.split())
    pos, found = 0, 0
    for s in steps:
        i = norm.find(s, pos)
        if i >= 0:
            found += 1
            pos = i + len(s)
    score = found / len(steps) - 0.5 * _false_calcs(norm) / len(steps)
    return float(min(1.0, max(0.0, score)))


def pyramid_reward(completion: str, problem, agents=("small", "mid", "big")) -> tuple[float, bool, bool]:
    from .tasks import grade_answer

    turn = parse_turn(completion, tuple(agents))
    correct, _ = grade_answer(turn.answer, problem.gold, problem.metadata)
    judge = step_judge(turn.reasoning, problem.metadata)
    return BASE_WEIGHT * float(correct) + JUDGE_WEIGHT * judge, correct, turn.violation is None


def llm_judge(reasoning: str, problem, backend, max_tokens: int = 8) -> float:
    """Full scale: ask a judge endpoint for a 0–10 step score (same interface as :func:`step_judge`)."""
    from ...backends.base import Request, SamplingParams
    from ...grading import last_integer

    prompt = (f"Problem: {problem.text}\nSteps: {reasoning}\nRate the correctness of every intermediate step "
              "from 0 (wrong) to 10 (all correct). Reply with the number only.")
    c = backend.generate([Request(prompt, 0, True, {"enable_thinking": False})], SamplingParams(max_tokens, 0.0))[0]
    v = last_integer(c.text)
    return 0.0 if v is None else min(10, max(0, v)) / 10
