"""What Part III's chapter computes from the trajectory records (nothing here samples).

- :func:`derived_systems`: majority vote over the three agents alone (ties → the largest
  agent's answer) and the cascade small → mid → large, built from the recorded solo and
  sampled calls: a model's answer is *accepted* when its greedy answer equals a second
  answer sampled at the scale's cascade temperature (agreement as the confidence signal,
  since the backends return no log-probabilities — FrugalGPT scores answers, RouteLLM
  routes before answering; both are stand-ins here). Each derived record holds exactly the
  calls the system would make, so its cost is recomputed like any other.
- :func:`score`: per question, the projected answer (:mod:`.projections`), correct (EM),
  F1, source, weighted cost and calls (:mod:`.cost`). Each turn is charged at the weight of
  the model that wrote it: :func:`role_models` reads which model plays which role in each
  CL system off the pipeline's wiring (:func:`.pipeline.eval_systems`), so ``homo``'s three
  roles are all charged as ``mid``; solo, sample, vote and cascade turns name their model.
- :func:`summary`: accuracy with a Wilson 95 % interval, F1, mean weighted output tokens
  and calls per system and task; :func:`pareto` marks the accuracy-vs-cost frontier;
  :func:`transitions` counts hand-offs between agents; :func:`by_turns` accuracy by turns used.
- :func:`paired` / :func:`exact_mcnemar` / :func:`verdict`: every comparison the chapter states is an
  exact paired test on the shared questions at :data:`ALPHA`; :func:`handoffs` and :func:`topology`
  classify each step (retry, forced, voluntary, end) and count turns per agent from the turn
  records; :func:`provenance` reads each arm's manifest (commit, device, versions) beside
  the weights its models carry (:func:`arm_weights`, from the pipeline's own wiring).
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


def role_models(full: bool = False, pd_dir: str | Path | None = None) -> dict[str, dict[str, str]]:
    """CL system → role → the base model whose parameters wrote that role's turns, read off the
    pipeline's own wiring (:func:`.pipeline.eval_systems`). A role run on a base model with or without
    an adapter is that base; a fully fine-tuned PD model (``full``) has its base's parameters, and the
    LoRA wiring of the same system and role names that base (``pd/homo`` is trained from ``mid``). With
    ``pd_dir``, each PD card's recorded ``base`` must agree. Systems not listed (solo, sample, vote,
    cascade) record the model's own name as the agent."""
    from pathlib import PurePosixPath as P

    from .pipeline import eval_systems

    lora = eval_systems(P("models"), P("pd"), P("rl"), False)
    out: dict[str, dict[str, str]] = {}
    for system, spec in eval_systems(P("models"), P("pd"), P("rl"), full).items():
        out[system] = {}
        for role, (model, _adapter) in spec.items():
            base = model.parts[1] if model.parts[0] == "models" else lora[system][role][0].parts[1]
            if model.parts[0] != "models" and pd_dir is not None:
                card = Path(pd_dir) / model.parts[1] / "card.json"
                recorded = json.loads(card.read_text()).get("base") if card.exists() else None
                if recorded is not None and recorded != base:
                    raise ValueError(f"{system}/{role}: {card} records base {recorded!r}, the wiring says {base!r}")
            out[system][role] = base
    return out


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


def score(records: list[dict], weights: dict, projection: str = MAIN_PROJECTION,
          models: dict[str, str] | None = None) -> pd.DataFrame:
    """Per-question scores of one system's records; ``models``: role → model that wrote the turns
    (``role_models()[system]`` for a CL system; None when every agent is named by its model)."""
    rows = []
    for r in records:
        ans, src = project(r, projection)
        correct, f1 = grade_answer(ans, r["gold"], r["metadata"])
        c = costs.question_cost(r, weights, models)
        rows.append({"id": r["id"], "task": r["metadata"].get("task"), "level": r["metadata"].get("level"),
                     "answer": ans, "source": src, "correct": correct, "f1": f1, "status": r["status"],
                     "weighted_tokens": c["weighted_tokens"], "calls": c["calls"], "turns": r["n_turns"]})
    return pd.DataFrame(rows)


def summary(systems: dict[str, list[dict]], weights: dict, projection: str = MAIN_PROJECTION,
            models: dict[str, dict[str, str]] | None = None) -> pd.DataFrame:
    """Per system and task; ``models``: system → role → model (default :func:`role_models`)."""
    models = role_models() if models is None else models
    rows = []
    for name, recs in systems.items():
        df = score(recs, weights, projection if name in CL else "final", models.get(name))
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


def projection_table(records: list[dict], weights: dict, models: dict[str, str] | None = None) -> pd.DataFrame:
    rows = []
    for how in PROJECTIONS:
        df = score(records, weights, how, models)
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


def by_turns(records: list[dict], weights: dict, projection: str = MAIN_PROJECTION,
             models: dict[str, str] | None = None) -> pd.DataFrame:
    df = score(records, weights, projection, models)
    return df.groupby("turns").agg(questions=("correct", "size"), accuracy=("correct", "mean")).reset_index()


def violations(records: list[dict]) -> dict:
    turns = [t for r in records for t in r["turns"]]
    return {"turns": len(turns), "violations": sum(t["violation"] is not None for t in turns),
            "forced": sum(t["forced_handoff"] is not None for t in turns),
            "confirmed": float(np.mean([r["status"] == "confirmed" for r in records])) if records else 0.0}


# --- paired tests, topology, provenance (every verdict on the chapter's page comes from here) ---

ALPHA = 0.05  # two-sided level of the exact paired tests below


def exact_mcnemar(a_correct, b_correct) -> dict:
    """Exact McNemar test on paired 0/1 outcomes: a two-sided binomial test (p = 1/2) on the
    discordant pairs. ``a_only``: questions only A got right; ``b_only``: only B."""
    from scipy.stats import binomtest

    a, b = np.asarray(a_correct, bool), np.asarray(b_correct, bool)
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    n = a_only + b_only
    p = 1.0 if n == 0 else float(binomtest(a_only, n, 0.5).pvalue)
    return {"n": len(a), "a_only": a_only, "b_only": b_only, "p": p}


def verdict(test: dict, alpha: float = ALPHA) -> str:
    if test["p"] < alpha:
        return "higher" if test["a_only"] > test["b_only"] else "lower"
    return f"not distinguishable (p ≥ {alpha})"


def scores(systems: dict[str, list[dict]], weights: dict, projection: str = MAIN_PROJECTION,
           models: dict[str, dict[str, str]] | None = None) -> dict[str, pd.DataFrame]:
    """Per-question scores of every system (CL systems under ``projection``, others 'final'), indexed by id;
    ``models``: system → role → model (default :func:`role_models`)."""
    models = role_models() if models is None else models
    return {k: score(v, weights, projection if k in CL else "final", models.get(k)).set_index("id")
            for k, v in systems.items()}


def paired(sc: dict[str, pd.DataFrame], a: str, b: str, alpha: float = ALPHA) -> dict:
    """A against B on their shared questions: accuracy difference, exact McNemar, verdict, cost ratio."""
    ids = sc[a].index.intersection(sc[b].index)
    x, y = sc[a].loc[ids], sc[b].loc[ids]
    t = exact_mcnemar(x.correct.values, y.correct.values)
    return {"A": a, "B": b, **t, "acc A": x.correct.mean(), "acc B": y.correct.mean(),
            "diff (points)": 100 * (x.correct.mean() - y.correct.mean()), "verdict": verdict(t, alpha),
            "cost ratio A/B": x.weighted_tokens.mean() / y.weighted_tokens.mean()}


def handoffs(records: list[dict], agents=("small", "mid", "big")) -> pd.DataFrame:
    """Every turn-to-turn step of the trajectories, classified from the turn records:
    ``retry`` (same agent again after a violation, no forced hand-off), ``forced`` (the scheduler
    moved the state after the retries ran out), ``voluntary`` (a valid handoff action), ``end``
    (the last turn). Columns: from, to, kind, violation (of the 'from' turn)."""
    rows = []
    for r in records:
        ts = r["turns"]
        for i, t in enumerate(ts):
            nxt = ts[i + 1]["agent"] if i + 1 < len(ts) else "end"
            if nxt == "end":
                kind = "end"
            elif t["forced_handoff"] is not None:
                kind = "forced"
            elif t["violation"] is not None:
                kind = "retry"
            else:
                kind = "voluntary"
            rows.append({"from": t["agent"], "to": nxt, "kind": kind, "violation": t["violation"]})
    return pd.DataFrame(rows)


def topology(records: list[dict], agents=("small", "mid", "big")) -> pd.DataFrame:
    """Per agent: turns spoken, violations, retries, voluntary and forced hand-offs out, confirmations."""
    h = handoffs(records, agents)
    stops = Counter(t["agent"] for r in records for t in r["turns"]
                    if t["violation"] is None and t["action"] == "stop")
    rows = []
    for a in agents:
        g = h[h["from"] == a]
        rows.append({"agent": a, "turns": len(g), "violations": int(g.violation.notna().sum()),
                     "retries": int((g.kind == "retry").sum()), "voluntary hand-offs": int((g.kind == "voluntary").sum()),
                     "forced hand-offs": int((g.kind == "forced").sum()), "valid stops": int(stops[a])})
    return pd.DataFrame(rows)


def caps(records: list[dict]) -> int:
    """Questions that ended at t_max."""
    return sum(r["status"] == "t_max" for r in records)


def same_answer(records_a: list[dict], proj_a: str, records_b: list[dict], proj_b: str) -> tuple[int, int]:
    """Questions on which both projected answers exist and are equal, out of the shared questions."""
    b = _by_id(records_b)
    same = n = 0
    for r in records_a:
        if r["id"] not in b:
            continue
        n += 1
        x, y = project(r, proj_a)[0], project(b[r["id"]], proj_b)[0]
        same += x is not None and x == y
    return same, n


def arm_weights(full: bool) -> dict[str, str]:
    """Which weights each evaluated arm's models carry, read off the pipeline's own wiring."""
    from pathlib import PurePosixPath as P

    from .pipeline import AGENTS, eval_systems

    def describe(model, adapter):
        base = {"models": "base (no PD)", "pd": "PD " + ("full fine-tune" if full else "LoRA")}[model.parts[0]]
        if adapter is None:
            return base
        return base + (" + RL LoRA" if adapter.parts[0] == "rl" else " + PD LoRA")

    out = {f"{k}-{m}": "base (no PD)" for k in ("solo", "sample") for m in ("small", "mid", "big", "large")}
    for system, spec in eval_systems(P("models"), P("pd"), P("rl"), full).items():
        out[system] = ", ".join(sorted({describe(*spec[a]) for a in AGENTS}))
    return out


def device_of(manifest: dict) -> str:
    """The device an arm ran on, as far as its manifest says: its ``device`` field; else the torch
    build's local version (``2.x+cu128`` → ``cu128``); else a GPU named by the platform string (a
    ``gpu`` token, e.g. ``…-gpu-x86_64``), marked as inferred; else ``not recorded``."""
    import re

    if manifest.get("device"):
        return str(manifest["device"])
    v = manifest.get("versions", {})
    torch_v = str(v.get("torch") or "")
    if "+" in torch_v:
        return torch_v.split("+", 1)[1]
    if "gpu" in re.split(r"[^a-z0-9]+", str(v.get("platform") or "").lower()):
        return "GPU host (inferred from platform)"
    return "not recorded"


def provenance(eval_dir: str | Path, full: bool) -> pd.DataFrame:
    """Each recorded arm's manifest: commit, device (:func:`device_of`), versions, and its models' weights."""
    w = arm_weights(full)
    rows = []
    for d in sorted(Path(eval_dir).iterdir()):
        m = d / "manifest.json"
        if not (d / "trajectories.jsonl").exists() or not m.exists():
            continue
        man = json.loads(m.read_text())
        v = man.get("versions", {})
        torch_v = v.get("torch", "")
        rows.append({"arm": d.name, "commit": man.get("git_commit"), "started": man.get("started"),
                     "device": device_of(man),
                     "torch": torch_v, "transformers": v.get("transformers"), "python": v.get("python"),
                     "platform": v.get("platform"), "weights": w.get(d.name, "?")})
    return pd.DataFrame(rows)


def p_text(p: float) -> str:
    """``p < 0.001`` below 0.001, else ``p = 0.012``."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def paired_sentence(sc: dict[str, pd.DataFrame], a: str, b: str, alpha: float = ALPHA) -> str:
    """:func:`paired` as the chapter says it: difference, cost ratio, discordant questions, exact McNemar
    p and the verdict."""
    t = paired(sc, a, b, alpha)
    return (f"{t['diff (points)']:+.1f} points at {t['cost ratio A/B']:.2f}× the cost; discordant questions "
            f"{t['a_only']} / {t['b_only']}, exact McNemar {p_text(t['p'])}: {t['verdict']}")
