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

Two views (:data:`VIEWS`), side by side in the chapter:

- ``study``: the study's formula above — parameters × *output* tokens, each turn charged to the
  model that wrote it;
- ``full``: the cost as a reader would count it — each turn's *prompt* tokens (the task state it
  read, which grows with every hand-off: the question, the pool, every earlier turn's answer,
  action and note) plus its output tokens, at the weight of the model that processed them.
  A prompt token is charged like an output token (one forward pass of the model per token; a
  served model's prefill is cheaper per token than decoding, so this is an upper view, the
  study's a lower one).

:func:`question_cost` / :func:`run_cost` take the view; :func:`views` gives both for a run and
:func:`views_table` for every system;
:func:`pareto_chart` draws accuracy against either view's cost with that view's frontier.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

STUDY_WEIGHTS = {"small": 1.7, "mid": 4.0, "big": 8.0, "large": 14.0}
VIEWS = {"study": "parameter-weighted output tokens (the study's formula)",
         "full": "parameter-weighted prompt + output tokens (every token each model processed)"}


def _turn_tokens(turn: dict, view: str) -> int:
    if view not in VIEWS:
        raise ValueError(f"unknown cost view {view!r}; views: {', '.join(VIEWS)}")
    return int(turn["completion_tokens"]) + (int(turn["prompt_tokens"]) if view == "full" else 0)


def question_cost(trajectory: dict, weights: dict[str, float], models: dict[str, str] | None = None,
                  view: str = "study") -> dict:
    """Weighted tokens of the ``view`` (output tokens: ``study``; prompt + output: ``full``), raw tokens
    per role (``tokens``) and per model that wrote them (``model_tokens``), and calls for one trajectory
    record; ``models`` maps a role to its model."""
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
        n = _turn_tokens(turn, view)
        tokens[role] = tokens.get(role, 0) + n
        by_model[model] = by_model.get(model, 0) + n
    weighted = sum(weights[m] * t for m, t in by_model.items()) / norm
    return {"weighted_tokens": weighted, "tokens": tokens, "model_tokens": by_model,
            "calls": len(trajectory["turns"])}


def run_cost(trajectories: list[dict], weights: dict[str, float], models: dict[str, str] | None = None,
             view: str = "study") -> dict:
    """Mean weighted tokens of the ``view`` and mean calls per question over a run (``models``: role → model)."""
    per = [question_cost(t, weights, models, view) for t in trajectories]
    return {"weighted_tokens": float(np.mean([c["weighted_tokens"] for c in per])) if per else 0.0,
            "calls": float(np.mean([c["calls"] for c in per])) if per else 0.0, "questions": len(per)}


def cost_weights(models_dir: str | Path) -> dict[str, float]:
    """Cost weights from a models folder's ``params.json`` (parameters in millions)."""
    return weights_from_params(json.loads((Path(models_dir) / "params.json").read_text()))


def pareto(df):
    """True where no other system is at least as accurate and cheaper (or more accurate and as cheap), by the
    frame's ``accuracy`` and ``weighted_tokens`` columns (a pandas Series on the frame's index)."""
    import pandas as pd

    flags = []
    for _, r in df.iterrows():
        dominated = ((df.accuracy >= r.accuracy) & (df.weighted_tokens <= r.weighted_tokens)
                     & ((df.accuracy > r.accuracy) | (df.weighted_tokens < r.weighted_tokens))).any()
        flags.append(not dominated)
    return pd.Series(flags, index=df.index)


def weights_from_params(params: dict[str, int], unit: float = 1e6) -> dict[str, float]:
    """Cost weights from parameter counts (in ``unit``s: millions in miniature, billions at full scale)."""
    return {k: v / unit for k, v in params.items()}


def views(trajectories: list[dict], weights: dict[str, float], models: dict[str, str] | None = None) -> dict:
    """Both views of one run: mean weighted tokens per question under ``study`` and ``full``, their ratio
    (how much the study's formula leaves out), and mean calls."""
    study, full = (run_cost(trajectories, weights, models, v) for v in ("study", "full"))
    ratio = full["weighted_tokens"] / study["weighted_tokens"] if study["weighted_tokens"] else float("nan")
    return {"study": study["weighted_tokens"], "full": full["weighted_tokens"], "full / study": ratio,
            "calls": study["calls"], "questions": study["questions"]}


def views_table(systems: dict[str, list[dict]], weights: dict[str, float],
                models: dict[str, dict[str, str]] | None = None):
    """:func:`views` of every system side by side (a pandas frame, one row per system, cheapest by the study's
    formula first); ``models``: system → role → model (:func:`.analysis.role_models`)."""
    import pandas as pd

    rows = [{"system": k, **views(v, weights, (models or {}).get(k))} for k, v in systems.items()]
    return pd.DataFrame(rows).sort_values("study").reset_index(drop=True)


def pareto_chart(table, view: str = "study", ax=None, label: bool = True):
    """Accuracy (95 % Wilson bars) against the ``view``'s weighted tokens per question (log axis), with that
    view's Pareto frontier (:func:`.analysis.pareto`). ``table``: one row per system with ``system``,
    ``accuracy``, ``lo``, ``hi`` and the view's cost column (``weighted_tokens`` for ``study``,
    ``full_weighted_tokens`` for ``full``, as :func:`.analysis.summary` writes them). Returns (ax, frontier)."""
    import matplotlib.pyplot as plt

    from .analysis import CL

    col = cost_column(view)
    t = table.reset_index(drop=True).assign(weighted_tokens=table[col].to_numpy())
    front = t[pareto(t).to_numpy()].sort_values("weighted_tokens")
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    for _, r in t.iterrows():
        cl = r.system in CL
        ax.errorbar(r.weighted_tokens, r.accuracy, yerr=[[r.accuracy - r.lo], [r.hi - r.accuracy]],
                    fmt="o" if cl else "s", color="C3" if r.system == "cl" else ("C1" if cl else "C0"), capsize=3)
        if label:
            ax.annotate(r.system, (r.weighted_tokens, r.accuracy), textcoords="offset points", xytext=(4, 3), fontsize=8)
    ax.step(list(front.weighted_tokens) + [t.weighted_tokens.max()], list(front.accuracy) + [front.accuracy.iloc[-1]],
            where="post", color="grey", lw=1, ls="--", label="Pareto frontier")
    ax.set_xscale("log")
    ax.set_xlabel(f"{VIEWS[view]} per question (log)")
    ax.set_ylabel("accuracy (95% Wilson)")
    ax.set_title(f"cost view: {view}")
    return ax, list(front.system)


def cost_column(view: str) -> str:
    """The summary's column holding the ``view``'s mean weighted tokens."""
    if view not in VIEWS:
        raise ValueError(f"unknown cost view {view!r}; views: {', '.join(VIEWS)}")
    return "weighted_tokens" if view == "study" else "full_weighted_tokens"
