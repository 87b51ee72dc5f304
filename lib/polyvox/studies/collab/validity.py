"""Does protocol distillation teach the protocol? Each PD'd agent on the validation split, before RL.

The design asks for at least 90 % protocol-valid turns on validation after PD (a turn is valid when
:func:`.protocol.parse_turn` finds no violation: exactly one well-formed action naming an agent of the pool,
a ``stop`` with an answer). :func:`validity_check` asks each agent (``small``, ``mid``, ``big``, and ``homo``
for every role) for its turn in every state it meets in the scripted traces of the validation questions
(:func:`.traces.coordination_trace`, drawn at the stage's seed + :data:`VALIDITY_SEED_OFFSET`), greedy at
``eval.max_tokens`` as the eval stage samples, and writes ``validity.json`` in the pd stage's folder: per
agent the share of valid turns, the violations by kind and the first invalid turns' texts. An agent below
the threshold fails the check; the pipeline stops there with one line when the scale says so
(:func:`polyvox.studies.collab.pipeline.stop_if_invalid`).
"""
from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from ...records import Problem
from .protocol import parse_turn
from .traces import AGENTS, coordination_trace

VALIDITY_SEED_OFFSET = 9  # from the pd stage's seed: the slips of the validation traces
VALID_MIN = 0.9  # the design's threshold: valid turns on validation after PD
EXAMPLES = 3  # invalid turns kept per agent in the record


def validity_states(problems: list[Problem], seed: int, slip: float, agents=AGENTS) -> dict[str, list[Problem]]:
    """Per agent, the states (user messages) it meets in the scripted traces of ``problems``, slipped drafts'
    states included (a checker must answer those too); ``homo``: every role's."""
    rng = random.Random(seed)
    out: dict[str, list[Problem]] = {a: [] for a in agents}
    for p in problems:
        for k, t in enumerate(coordination_trace(p, rng, slip, agents)):
            out[t["agent"]].append(Problem(f"{p.id}-{k}-{t['agent']}", t["prompt"], p.gold, dict(p.metadata)))
    out["homo"] = [st for a in agents for st in out[a]]
    return out


def valid_turns(backend, states: list[Problem], params, agents=AGENTS) -> dict:
    """One greedy turn per state (:func:`polyvox.runs.sample_texts`, the ``think`` format the scheduler uses),
    parsed against the pool: the valid share, the violations by kind, the first invalid turns."""
    from ... import runs

    samples = runs.sample_texts(backend, "think", states, params, 0)
    kinds: Counter = Counter()
    bad = []
    for st, x in zip(states, samples):
        v = parse_turn(x.completion, tuple(agents)).violation
        if v is not None:
            kinds[v.split(" '")[0].split(' "')[0]] += 1
            if len(bad) < EXAMPLES:
                bad.append({"state": st.text, "turn": x.completion, "violation": v})
    n = len(states)
    valid = n - sum(kinds.values())
    return {"valid": valid, "n": n, "share": valid / n if n else None,
            "violations": dict(kinds.most_common()), "invalid_examples": bad}


def validity_check(out: Path, problems: list[Problem], backend_for, params, seed: int, slip: float,
                   threshold: float = VALID_MIN, stop: bool = False, agents=("small", "mid", "big", "homo")) -> dict:
    """Each of ``agents`` (``backend_for(a)``: its PD'd backend) on its validation states
    (:func:`validity_states`); writes ``out/validity.json`` and returns it. ``ok``: every agent's share at
    least ``threshold``. ``stop``: a failed check raises one line naming each agent's share."""
    states = validity_states(problems, seed, slip)
    results = {a: valid_turns(backend_for(a), states[a], params) for a in agents if states[a]}
    low = {a: r for a, r in results.items() if r["share"] < threshold}
    turns = sum(r["n"] for r in results.values())
    record = {"ok": not low, "threshold": threshold, "questions": len(problems), "turns": turns,
              "share": sum(r["valid"] for r in results.values()) / turns if turns else None,
              "seed": seed, "max_tokens": params.max_tokens, "agents": results}
    out.mkdir(parents=True, exist_ok=True)
    (out / "validity.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    if low and stop:
        def why(r):
            top = next(iter(r["violations"]), "")
            return f"{100 * r['share']:.1f} % ({r['valid']} of {r['n']}" + (f"; mostly {top!r})" if top else ")")
        raise ValueError(f"pd stage: protocol distillation did not teach the protocol — valid turns on the "
                         f"validation split below {100 * threshold:.0f} %: "
                         + ", ".join(f"{a} {why(r)}" for a, r in low.items()) + f" ({out / 'validity.json'})")
    return record
