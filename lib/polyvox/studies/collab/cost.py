"""Cost accounting, recomputed from trajectory records.

The study's cost per question is parameter-weighted output tokens,
(1.7·T₁.₇ + 4·T₄ + 8·T₈ + 14·T₁₄) / 27.7, where T_m is the output (completion) tokens
model m wrote for the question and 27.7 the sum of the weights of *all* its models
(the three agents and the single Qwen3-14B reference) — plus the number of model calls.
Here the weights are the pool's actual parameter counts (and the study's 1.7/4/8/14 at
full scale); the normaliser is the sum of the weights in the accounting, so a cost is in
"tokens of an average-sized model". Every attempt counts: a retried or violating turn
was paid for.

A turn is charged at the weight of the *model that wrote it*, not of the role it played: a
trajectory records roles (``small``/``mid``/``big``), and in the homogeneous pool every role
is played by one copy of ``mid``. ``models`` (role → model, from the pipeline's wiring:
:func:`.analysis.role_models`) says which; without it a role is taken to be the model of
the same name (right for the solo runs, vote, cascade and the heterogeneous pools only).
"""
from __future__ import annotations

import numpy as np

STUDY_WEIGHTS = {"small": 1.7, "mid": 4.0, "big": 8.0, "large": 14.0}


def question_cost(trajectory: dict, weights: dict[str, float], models: dict[str, str] | None = None) -> dict:
    """Weighted output tokens, raw output tokens per role (``tokens``) and per model that wrote them
    (``model_tokens``), and calls for one trajectory record; ``models`` maps a role to its model."""
    norm = float(sum(weights.values()))
    models = models or {}
    tokens: dict[str, int] = {}
    by_model: dict[str, int] = {}
    for turn in trajectory["turns"]:
        role = turn["agent"]
        model = models.get(role, role)
        if model not in weights:
            raise ValueError(f"question {trajectory['id']}: agent {role!r} (model {model!r}) has no weight "
                             f"(weights: {sorted(weights)})")
        tokens[role] = tokens.get(role, 0) + int(turn["completion_tokens"])
        by_model[model] = by_model.get(model, 0) + int(turn["completion_tokens"])
    weighted = sum(weights[m] * t for m, t in by_model.items()) / norm
    return {"weighted_tokens": weighted, "tokens": tokens, "model_tokens": by_model,
            "calls": len(trajectory["turns"])}


def run_cost(trajectories: list[dict], weights: dict[str, float], models: dict[str, str] | None = None) -> dict:
    """Mean weighted output tokens and mean calls per question over a run (``models``: role → model)."""
    per = [question_cost(t, weights, models) for t in trajectories]
    return {"weighted_tokens": float(np.mean([c["weighted_tokens"] for c in per])) if per else 0.0,
            "calls": float(np.mean([c["calls"] for c in per])) if per else 0.0, "questions": len(per)}


def weights_from_params(params: dict[str, int], unit: float = 1e6) -> dict[str, float]:
    """Cost weights from parameter counts (in ``unit``s: millions in miniature, billions at full scale)."""
    return {k: v / unit for k, v in params.items()}
