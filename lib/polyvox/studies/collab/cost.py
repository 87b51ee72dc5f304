"""Cost accounting, recomputed from trajectory records.

The study's cost per question is parameter-weighted output tokens,
(1.7·T₁.₇ + 4·T₄ + 8·T₈ + 14·T₁₄) / 27.7, where T_m is the output (completion) tokens
model m wrote for the question and 27.7 the sum of the weights of *all* its models
(the three agents and the single Qwen3-14B reference) — plus the number of model calls.
Here the weights are the pool's actual parameter counts (and the study's 1.7/4/8/14 at
full scale); the normaliser is the sum of the weights in the accounting, so a cost is in
"tokens of an average-sized model". Every attempt counts: a retried or violating turn
was paid for.
"""
from __future__ import annotations

import numpy as np

STUDY_WEIGHTS = {"small": 1.7, "mid": 4.0, "big": 8.0, "large": 14.0}


def question_cost(trajectory: dict, weights: dict[str, float]) -> dict:
    """Weighted output tokens, raw output tokens per agent, and calls for one trajectory record."""
    norm = float(sum(weights.values()))
    tokens: dict[str, int] = {}
    for turn in trajectory["turns"]:
        if turn["agent"] not in weights:
            raise ValueError(f"question {trajectory['id']}: agent {turn['agent']!r} has no weight "
                             f"(weights: {sorted(weights)})")
        tokens[turn["agent"]] = tokens.get(turn["agent"], 0) + int(turn["completion_tokens"])
    weighted = sum(weights[a] * t for a, t in tokens.items()) / norm
    return {"weighted_tokens": weighted, "tokens": tokens, "calls": len(trajectory["turns"])}


def run_cost(trajectories: list[dict], weights: dict[str, float]) -> dict:
    """Mean weighted output tokens and mean calls per question over a run."""
    per = [question_cost(t, weights) for t in trajectories]
    return {"weighted_tokens": float(np.mean([c["weighted_tokens"] for c in per])) if per else 0.0,
            "calls": float(np.mean([c["calls"] for c in per])) if per else 0.0, "questions": len(per)}


def weights_from_params(params: dict[str, int], unit: float = 1e6) -> dict[str, float]:
    """Cost weights from parameter counts (in ``unit``s: millions in miniature, billions at full scale)."""
    return {k: v / unit for k, v in params.items()}
