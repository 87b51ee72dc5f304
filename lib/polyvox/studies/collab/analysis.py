"""What Part III's chapter computes from the trajectory records (nothing here samples).

- :func:`derived_systems`: majority vote over the three agents alone (ties → the largest
  agent's answer) and the cascade small → mid → large, built from the recorded solo and
  sampled calls: a model's answer is *accepted* when its greedy answer equals a second
  answer sampled at the scale's cascade temperature (agreement as the confidence signal,
  since the backends return no log-probabilities — FrugalGPT scores answers, RouteLLM
  routes before answering; both are stand-ins here). Each derived record holds exactly the
  calls the system would make, so its cost is recomputed like any other.
- :func:`score`: per question, the projected answer (:mod:`.projections`), correct (EM),
  F1, source, weighted cost and calls (:mod:`.cost`).
- :func:`summary`: accuracy with a Wilson 95 % interval, F1, mean weighted output tokens
  and calls per system and task; :func:`pareto` marks the accuracy-vs-cost frontier;
  :func:`transitions` counts hand-offs between agents; :func:`by_turns` accuracy by turns used.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from ... import metrics
from ...records import read_jsonl
from . import cost as costs
from .projections import PROJECTIONS, project
from .tasks import grade_answer

SOLO = ("solo-small", "solo-mid", "solo-big", "solo-large")
CL = ("cl", "cl-pd", "cl-base", "homo")
MAIN_PROJECTION = "final_or_last"


def load(eval_dir: str | Path) -> dict[str, list[dict]]:
    eval_dir = Path(eval_dir)
    runs = {}
    for d in sorted(eval_dir.iterdir()):
        if (d / "trajectories.jsonl").exists():
            runs[d.name] = sorted(read_jsonl(d / "trajectories.jsonl"), key=lambda r: r["id"])
    return runs


def cost_weights(models_dir: str | Path) -> dict[str, float]:
    params = json.loads((Path(models_dir) / "params.json").read_text())
    return costs.weights_from_params(params)


def _by_id(records):
    return {r["id"]: r for r in records}


def derived_systems(runs: dict) -> dict[str, list[dict]]:
    out = {}
    solo = {k: _by_id(runs[k]) for k in SOLO if k in runs}
    sample = {k: _by_id(runs[k]) for k in ("sample-small", "sample-mid") if k in runs}
    ids = sorted(solo.get("solo-small", {}))
    if all(k in solo for k in ("solo-small", "solo-mid", "solo-big")):
        recs = []
        for i in ids:
            parts = [solo[k][i] for k in ("solo-small", "solo-mid", "solo-big")]
            answers = [p["final"] for p in parts]
            counts = Counter(a for a in answers if a)
            best = max(counts.values()) if counts else 0
            final = next((a for a in reversed(answers) if a and counts[a] == best), None)
            recs.append({**parts[0], "first": "small", "turns": [p["turns"][0] for p in parts], "n_turns": 3,
                         "final": final, "status": "confirmed" if final else "no_answer"})
        out["vote"] = recs
    if len(sample) == 2 and "solo-large" in solo:
        recs = []
        for i in ids:
            turns, final = [], None
            for m in ("small", "mid"):
                g, s = solo[f"solo-{m}"][i], sample[f"sample-{m}"][i]
                turns += [g["turns"][0], s["turns"][0]]
                if g["final"] and g["final"] == s["final"]:
                    final = g["final"]
                    break
            else:
                turns.append(solo["solo-large"][i]["turns"][0])
                final = solo["solo-large"][i]["final"]
            base = solo["solo-small"][i]
            recs.append({**base, "first": "small", "turns": turns, "n_turns": len(turns), "final": final,
                         "status": "confirmed" if final else "no_answer"})
        out["cascade"] = recs
    return out


def score(records: list[dict], weights: dict, projection: str = MAIN_PROJECTION) -> pd.DataFrame:
    rows = []
    for r in records:
        ans, src = project(r, projection)
        correct, f1 = grade_answer(ans, r["gold"], r["metadata"])
        c = costs.question_cost(r, weights)
        rows.append({"id": r["id"], "task": r["metadata"].get("task"), "level": r["metadata"].get("level"),
                     "answer": ans, "source": src, "correct": correct, "f1": f1, "status": r["status"],
                     "weighted_tokens": c["weighted_tokens"], "calls": c["calls"], "turns": r["n_turns"]})
    return pd.DataFrame(rows)


def summary(systems: dict[str, list[dict]], weights: dict, projection: str = MAIN_PROJECTION) -> pd.DataFrame:
    rows = []
    for name, recs in systems.items():
        df = score(recs, weights, projection if name in CL else "final")
        for task, g in [("all", df)] + list(df.groupby("task")):
            lo, hi = metrics.wilson_interval(int(g.correct.sum()), len(g))
            rows.append({"system": name, "task": task, "n": len(g), "accuracy": g.correct.mean(), "lo": lo, "hi": hi,
                         "f1": g.f1.mean(), "weighted_tokens": g.weighted_tokens.mean(), "calls": g.calls.mean()})
    return pd.DataFrame(rows)


def pareto(df: pd.DataFrame) -> pd.Series:
    """True where no other system is at least as accurate and cheaper (or more accurate and as cheap)."""
    flags = []
    for _, r in df.iterrows():
        dominated = ((df.accuracy >= r.accuracy) & (df.weighted_tokens <= r.weighted_tokens)
                     & ((df.accuracy > r.accuracy) | (df.weighted_tokens < r.weighted_tokens))).any()
        flags.append(not dominated)
    return pd.Series(flags, index=df.index)


def projection_table(records: list[dict], weights: dict) -> pd.DataFrame:
    rows = []
    for how in PROJECTIONS:
        df = score(records, weights, how)
        shares = df.source.value_counts(normalize=True).to_dict()
        correct_src = df[df.correct].source.value_counts().to_dict()
        rows.append({"projection": how, "accuracy": df.correct.mean(), "f1": df.f1.mean(),
                     **{f"share {k}": v for k, v in sorted(shares.items())},
                     **{f"correct from {k}": int(v) for k, v in sorted(correct_src.items())}})
    return pd.DataFrame(rows).fillna(0)


def transitions(records: list[dict], agents=("small", "mid", "big")) -> pd.DataFrame:
    """Counts of who spoke after whom (rows: from, columns: to; 'end' when the question ended)."""
    m = pd.DataFrame(0, index=list(agents), columns=list(agents) + ["end"])
    for r in records:
        names = [t["agent"] for t in r["turns"]]
        for a, b in zip(names, names[1:] + ["end"]):
            m.loc[a, b] += 1
    return m


def by_turns(records: list[dict], weights: dict, projection: str = MAIN_PROJECTION) -> pd.DataFrame:
    df = score(records, weights, projection)
    return df.groupby("turns").agg(questions=("correct", "size"), accuracy=("correct", "mean")).reset_index()


def violations(records: list[dict]) -> dict:
    turns = [t for r in records for t in r["turns"]]
    return {"turns": len(turns), "violations": sum(t["violation"] is not None for t in turns),
            "forced": sum(t["forced_handoff"] is not None for t in turns),
            "confirmed": float(np.mean([r["status"] == "confirmed" for r in records])) if records else 0.0}
