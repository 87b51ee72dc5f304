"""Worked solutions and coordination traces, generated in the miniature world.

- :func:`solo` — a single model's answer to a bare question: ``<think>steps</think>
  <answer>N</answer>`` (the base models are trained on these; the single-agent
  baselines are asked this way).
- :func:`coordination_trace` — a scripted collaboration over the pool, the data of
  protocol distillation. ``small`` drafts; on an easy question (world level 1, two-hop
  QA) it confirms and stops, otherwise it hands off to ``mid`` with a note. With
  probability ``slip`` the draft carries a planted slip (a world step off by 1–2 and
  propagated, or a wrong entity at one hop). ``mid`` recomputes from the question: when
  its answer equals the draft's it confirms, otherwise it hands off to ``big`` naming
  both answers; ``big`` recomputes and stops. Each agent is fine-tuned on its own turns
  (:func:`sft_examples`); a slipped draft is a state the checkers learn from, never a
  turn the drafter is taught to write.
"""
from __future__ import annotations

import random

from ...records import Problem
from .protocol import format_turn, state_prompt

AGENTS = ("small", "mid", "big")


def reasoning(p: Problem) -> str:
    m = p.metadata
    if m.get("task") == "qa":
        return " ".join(m["steps"])
    return " ".join([m["start"]] + [s + "." for s in m["steps"]])


def solo(p: Problem) -> str:
    return f"<think>{reasoning(p)}</think> <answer>{p.gold}</answer>"


def _slipped(p: Problem, rng: random.Random) -> tuple[str, str]:
    """Reasoning with one planted slip, and the answer it leads to."""
    m = p.metadata
    if m.get("task") == "qa":
        from .tasks import REGIONS, COUNTRIES, TOWNS

        pool = {2: TOWNS, 3: REGIONS, 4: COUNTRIES}[m["hops"]]
        wrong = rng.choice([x for x in pool if x != p.gold])
        steps = list(m["steps"])
        steps[-1] = steps[-1].replace(p.gold, wrong)
        return " ".join(steps), wrong
    # world: recompute with one step's result off by a small amount, then carry on correctly
    import re

    calcs = m["steps"]
    k = rng.randrange(len(calcs))
    value = None
    out = [m["start"]]
    for i, c in enumerate(calcs):
        a, op, b, _ = re.match(r"(-?\d+) (.) (-?\d+) = (-?\d+)", c).groups()
        a = int(a) if value is None else value
        b = int(b)
        r = {"+": a + b, "-": a - b, "×": a * b, "÷": a // b if b else a}[op]
        if i == k:
            r += rng.choice([-2, -1, 1, 2])
        out.append(f"{a} {op} {b} = {r}.")
        value = r
    return " ".join(out), str(value)


def hard(p: Problem) -> bool:
    m = p.metadata
    return (m.get("hops") or 0) >= 3 if m.get("task") == "qa" else int(m.get("level", 1)) >= 2


def coordination_trace(p: Problem, rng: random.Random, slip: float = 0.3, agents=AGENTS) -> list[dict]:
    """The turns of one scripted collaboration: (agent, state prompt, turn text, slipped)."""
    small, mid, big = agents
    history: list[dict] = []
    turns = []

    def add(agent, reason, answer, action, target=None, note="", slipped=False):
        turns.append({"agent": agent, "prompt": state_prompt(p.text, agents, agent, history),
                      "text": format_turn(reason, answer, action, target, note), "slipped": slipped})
        history.append({"agent": agent, "answer": answer, "action": action, "target": target, "note": note})

    slipped = hard(p) and rng.random() < slip
    draft, draft_answer = _slipped(p, rng) if slipped else (reasoning(p), str(p.gold))
    if not hard(p):
        add(small, draft, draft_answer, "stop")
        return turns
    add(small, draft, draft_answer, "handoff", mid, "please check", slipped)
    if draft_answer == str(p.gold):
        add(mid, reasoning(p), str(p.gold), "stop")
        return turns
    add(mid, reasoning(p), str(p.gold), "handoff", big, f"draft {draft_answer}, mine {p.gold}")
    add(big, reasoning(p), str(p.gold), "stop")
    return turns


def sft_examples(problems: list[Problem], seed: int = 0, slip: float = 0.3, agents=AGENTS) -> dict[str, list]:
    """Per agent, (user message, assistant turn) pairs from the traces; slipped drafts are not taught."""
    rng = random.Random(seed)
    out: dict[str, list] = {a: [] for a in agents}
    for p in problems:
        for t in coordination_trace(p, rng, slip, agents):
            if not t["slipped"]:
                out[t["agent"]].append((t["prompt"], t["text"]))
    return out
