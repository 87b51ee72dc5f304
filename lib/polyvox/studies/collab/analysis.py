"""What Part III's chapter computes from the trajectory records (nothing here samples).

- :func:`derived_systems`: majority vote over the three agents alone (ties → the largest agent's
  answer) and the cascade small → mid → large from the recorded solo and sampled calls: an answer is
  *accepted* when the greedy answer equals one sampled at the cascade temperature (agreement as the
  confidence signal: the backends return no log-probabilities). Each derived record holds exactly
  the calls the system would make, so its cost is recomputed like any other.
- :func:`score`: per question, the projected answer (:mod:`.projections`; a malformed one is no answer,
  :func:`.tasks.grade_answer`'s rule), correct (EM), F1, source, both cost views and calls (:mod:`.cost`),
  each turn charged at the weight of the model that wrote it (:func:`role_models`, :func:`.pipeline.eval_systems`).
- :func:`summary`: accuracy with a Wilson 95 % interval, F1, mean weighted output tokens
  and calls per system and task; :func:`pareto` marks the accuracy-vs-cost frontier;
  :func:`transitions` counts hand-offs between agents; :func:`by_turns` accuracy by turns used.
- :func:`paired` / :func:`exact_mcnemar` / :func:`verdict`: every comparison the chapter states is an
  exact paired test on the shared questions at :data:`ALPHA`; :func:`handoffs` and :func:`topology`
  classify each step (retry, forced, voluntary, end) and count turns per agent from the turn
  records; :func:`provenance` reads each arm's manifest (commit, device, versions) beside
  the weights its models carry (:func:`arm_weights`, from the pipeline's own wiring).
- :func:`seed_evals`: a run's seeds and each one's eval folder (``seed-<k>/eval``, or ``eval`` unseeded);
  across seeds (:func:`.verdicts.seed_family`): :func:`signflip_test` (exact, on the per-question mean
  differences; with one seed the exact McNemar test), :func:`bootstrap_interval` (crossed over seeds and
  questions), :func:`paired_n` / :func:`paired_mde` (Connor's formula with the mean squared difference) and
  :func:`identical_across_seeds`.
- :func:`ordering_check` (solo accuracy rises with size) and :func:`pool_vs_single` (refused unless it
  does); :func:`holm`, :func:`family`, :func:`mcnemar_n` (Connor 1987); the chapter's verdicts: :mod:`.verdicts`.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from ... import jsonl, metrics
from ...records import read_jsonl
from . import cost as costs
from .cost import cost_weights, pareto  # noqa: F401 - the chapter reads them here
from .projections import PROJECTIONS, malformed, project, same_answer  # noqa: F401
from .tasks import grade_answer

SOLO = ("solo-small", "solo-mid", "solo-big", "solo-large")
CL = ("cl", "cl-pd", "cl-base", "homo")
MAIN_PROJECTION = "final_or_last"


def seed_evals(run_dir: str | Path) -> dict[int | None, Path]:
    """A pipeline run's seeds, each with its eval folder, in seed order: ``{k: run_dir/seed-<k>/eval}`` for a
    run of a scale with seeds (:mod:`.pipeline`'s layout), ``{None: run_dir/eval}`` for the unseeded layout
    (the recorded runs). A seed whose eval stage has not run yet is listed all the same (its folder may not
    exist: :func:`load` it once it does). Raises one line for a folder holding neither layout, or both."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: no such run folder")
    found = (re.fullmatch(r"seed-(0|[1-9][0-9]*)", d.name) for d in run_dir.iterdir() if d.is_dir())
    seeded = sorted(int(m.group(1)) for m in found if m)  # numerically: seed-10 after seed-2
    unseeded = (run_dir / "eval").is_dir() or (run_dir / "pd").is_dir()
    if seeded and unseeded:
        raise ValueError(f"{run_dir}: holds both an unseeded run (pd/ or eval/) and seed-<k>/ folders; a run folder "
                         "holds one layout")
    if seeded:
        return {k: run_dir / f"seed-{k}" / "eval" for k in seeded}
    if unseeded or (run_dir / "models").is_dir():
        return {None: run_dir / "eval"}
    raise ValueError(f"{run_dir}: not a collab pipeline run (no eval/, pd/, models/ or seed-<k>/ folder)")


def load(eval_dir: str | Path) -> dict[str, list[dict]]:
    eval_dir = Path(eval_dir)
    runs = {}
    for d in sorted(eval_dir.iterdir()):
        if jsonl.exists(d / "trajectories.jsonl"):  # plain, or gzipped as a shipped run keeps it
            runs[d.name] = sorted(read_jsonl(d / "trajectories.jsonl"), key=lambda r: r["id"])
    return runs


def role_models(full: bool = False, pd_dir: str | Path | None = None) -> dict[str, dict[str, str]]:
    """CL system → role → the base model whose parameters wrote that role's turns (the pipeline's wiring:
    a fully fine-tuned PD model has its base's parameters, the LoRA wiring names that base); with
    ``pd_dir`` each PD card's recorded ``base`` must agree. Other systems name the model as the agent."""
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
        correct, f1 = grade_answer(ans, r["gold"], r["metadata"])  # a malformed answer is no answer (its rule)
        c = costs.question_cost(r, weights, models)
        full = costs.question_cost(r, weights, models, "full")["weighted_tokens"]
        rows.append({"id": r["id"], "task": r["metadata"].get("task"), "level": r["metadata"].get("level"),
                     "answer": ans, "source": src, "correct": correct, "f1": f1, "status": r["status"],
                     "malformed": malformed(ans), "weighted_tokens": c["weighted_tokens"],
                     "full_weighted_tokens": full, "calls": c["calls"], "turns": r["n_turns"]})
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
                         "f1": g.f1.mean(), "weighted_tokens": g.weighted_tokens.mean(),
                         "full_weighted_tokens": g.full_weighted_tokens.mean(), "calls": g.calls.mean()})
    return pd.DataFrame(rows)


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
            kind = ("end" if nxt == "end" else "forced" if t["forced_handoff"] is not None
                    else "retry" if t["violation"] is not None else "voluntary")
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
    """The device an arm ran on: its manifest's ``device``; else the torch build (``2.x+cu128`` → ``cu128``);
    else a ``gpu`` token of the platform string (marked inferred); else ``not recorded``."""
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
        if not jsonl.exists(d / "trajectories.jsonl") or not m.exists():
            continue
        man = json.loads(m.read_text())
        v = man.get("versions", {})
        rows.append({"arm": d.name, "commit": man.get("git_commit"), "started": man.get("started"),
                     "device": device_of(man), "torch": v.get("torch", ""), "transformers": v.get("transformers"), "python": v.get("python"),
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


# --- issue 23: the size ordering, Holm, power (conditions of the chapter's verdicts) ---

SIZES = ("small", "mid", "big", "large")  # by parameter count, as the scales define them


def ordering_check(results: dict) -> tuple[bool, str]:
    """Does solo accuracy rise with size? ``results``: model (``small`` or ``solo-small`` …) → (correct, n),
    {"correct", "n"} or a :func:`score` frame. Holds when accuracy rises strictly from each model to the next
    larger and the smallest's and largest's 95 % Wilson intervals are disjoint. Returns (ok, one line)."""
    got = {str(k).removeprefix("solo-"): v for k, v in results.items()}
    if [m for m in SIZES if m not in got]:
        return False, f"size ordering not checked: no solo results for {', '.join(m for m in SIZES if m not in got)}"
    k = {m: (int(v.correct.sum()), len(v)) if hasattr(v, "correct") else (int(v["correct"]), int(v["n"]))
         if isinstance(v, dict) else (int(v[0]), int(v[1])) for m, v in got.items() if m in SIZES}
    acc, ci = {m: k[m][0] / k[m][1] for m in SIZES}, {m: metrics.wilson_interval(*k[m]) for m in SIZES}
    bad = "; ".join(f"{b} {100 * acc[b]:.1f} % ≤ {a} {100 * acc[a]:.1f} %" for a, b in zip(SIZES, SIZES[1:])
                    if not acc[b] > acc[a])
    if bad:
        return False, (f"solo accuracy does not rise with size: {bad} (large {100 * acc['large']:.1f} % against small "
                       f"{100 * acc['small']:.1f} %, n = {k['small'][1]}); the pool-vs-single comparison cannot be "
                       "asked of this pool")
    line = " < ".join(f"{m} {100 * acc[m]:.1f} %" for m in SIZES)
    span = ", ".join(f"{m} [{100 * ci[m][0]:.1f}, {100 * ci[m][1]:.1f}] %" for m in ("small", "large"))
    if not ci["large"][0] > ci["small"][1]:
        return False, f"solo accuracy rises with size ({line}) but the 95 % Wilson intervals overlap: {span}"
    return True, f"solo accuracy rises with size: {line}; 95 % Wilson intervals disjoint: {span}"


def pool_vs_single(sc: dict[str, pd.DataFrame], ordering: tuple[bool, str], pool: str = "cl",
                   single: str = "solo-large", alpha: float = ALPHA) -> dict:
    """:func:`paired` of the pool against the single larger model, or refused (``refused``: the reason, no
    test) unless ``ordering`` (:func:`ordering_check`) holds: a single model weaker than the pool's own
    members is no reference for whether a pool of smaller models beats one larger model."""
    return {"A": pool, "B": single, "refused": ordering[1]} if not ordering[0] else \
        {**paired(sc, pool, single, alpha), "refused": None}


def holm(p_values, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down correction: adjusted p (given order) and the nulls rejected at family-wise ``alpha``;
    p sorted ascending, adjusted p₍ᵢ₎ = max over j ≤ i of min(1, (m − j + 1) p₍ⱼ₎)."""
    p = np.asarray(p_values, float)
    order, adj = np.argsort(p, kind="stable"), np.empty(len(p))
    adj[order] = np.minimum(1.0, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))
    return adj, adj < alpha


def mcnemar_n(diff: float, discordance: float, alpha: float = ALPHA, power: float = 0.8) -> int:
    """Paired questions needed to detect an accuracy difference δ = p₁₀ − p₀₁ by McNemar's test at two-sided
    ``alpha`` with ``power``, given a pilot's discordant share ψ = p₁₀ + p₀₁ — Connor (1987):
    n = [z₁₋α/₂ √ψ + z₁₋β √(ψ − δ²)]² / δ²."""
    from scipy.stats import norm

    d, psi, za, zb = abs(diff), discordance, norm.ppf(1 - alpha / 2), norm.ppf(power)
    if not 0 < d <= psi <= 1:
        raise ValueError(f"need 0 < |diff| ≤ discordance ≤ 1, got diff {diff}, discordance {discordance}")
    return int(np.ceil((za * np.sqrt(psi) + zb * np.sqrt(psi - d * d)) ** 2 / d ** 2))


def mcnemar_mde(n: int, discordance: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """Minimum detectable effect: the smallest |p₁₀ − p₀₁| that ``n`` paired questions of discordant share ψ
    detect at ``alpha`` with ``power`` (:func:`mcnemar_n`'s formula solved for δ; nan when none can)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(power)
    f = lambda d: np.sqrt(n) * d - za * np.sqrt(discordance) - zb * np.sqrt(max(discordance - d * d, 0.0))  # noqa: E731
    return float(brentq(f, 1e-12, discordance)) if n > 0 and discordance > 0 and f(discordance) >= 0 else float("nan")


def family(tests: pd.DataFrame, alpha: float = ALPHA, power: float = 0.8) -> pd.DataFrame:
    """The chapter's McNemar family (rows of :func:`paired`) with Holm-adjusted p, the Holm verdict and each
    null's minimum detectable effect in points (its own n and discordance, at ``alpha`` and ``power``)."""
    adj, rejected = holm(tests.p.to_numpy(), alpha)
    return tests.assign(**{"p (Holm)": adj, "verdict (Holm)": [
        ("higher" if a > b else "lower") if r else f"not distinguishable (Holm, α = {alpha})"
        for a, b, r in zip(tests.a_only, tests.b_only, rejected)], "MDE (points)": [
        100 * mcnemar_mde(n, (a + b) / n, alpha, power) if n else float("nan")
        for n, a, b in zip(tests.n, tests.a_only, tests.b_only)]})


# --- issue 23, item 4: several seeds of one run (every seed on the same test questions) ---


def signflip_test(diffs, seeds: int = 1) -> float:
    """Exact two-sided sign-flip (paired permutation) test of per-question differences ``diffs`` — each question's
    mean correctness over ``seeds`` seeds of A minus B's, so a multiple of 1/``seeds`` in [−1, 1]. Under the null
    (on every question A's and B's outcomes are exchangeable) each difference is as likely to carry either sign;
    p = P(|Σ ±|dᵢ|| ≥ |Σ dᵢ|) over the 2ⁿ equally likely sign patterns, computed exactly by convolving the integer
    differences (k·dᵢ), not sampled. With one seed the differences are −1, 0 or 1 and this is the exact McNemar
    test (:func:`exact_mcnemar`: the symmetric binomial on the discordant questions), so the seeded verdicts
    generalise the unseeded ones; unlike a McNemar test on per-question majorities it keeps a 1-of-3 against a
    2-of-3 question and needs no tie rule for an even number of seeds."""
    k = int(seeds)
    d = np.rint(np.asarray(diffs, float) * k).astype(int)
    if not np.allclose(d, np.asarray(diffs, float) * k, atol=1e-9):
        raise ValueError(f"differences are not multiples of 1/{k}")
    d = np.abs(d[d != 0])
    observed = abs(int(np.rint(np.asarray(diffs, float).sum() * k)))
    if len(d) == 0:
        return 1.0
    total = int(d.sum())
    dist = np.zeros(2 * total + 1)
    dist[total] = 1.0  # index total + s holds P(S = s)
    for v in d:
        dist = 0.5 * (np.roll(dist, v) + np.roll(dist, -v))  # the support never wraps: |S| ≤ total
    s = np.arange(-total, total + 1)
    return float(min(1.0, dist[np.abs(s) >= observed].sum()))


def bootstrap_draws(a, b, draws: int = 10_000, seed: int = 0) -> np.ndarray:
    """Means of A − B over a crossed bootstrap of a (seeds × questions) pair of 0/1 tables: each draw resamples
    the seeds with replacement (whole seeds: a seed's outcomes on every question share its trained models) and,
    independently, the questions with replacement, and averages the differences over the drawn cells."""
    a, b = np.atleast_2d(np.asarray(a, float)), np.atleast_2d(np.asarray(b, float))
    d = a - b
    k, n = d.shape
    rng = np.random.default_rng(seed)
    cs = rng.multinomial(k, np.full(k, 1 / k), size=draws)  # how often each seed is drawn
    cq = rng.multinomial(n, np.full(n, 1 / n), size=draws)  # how often each question is drawn
    return np.einsum("rk,kq,rq->r", cs, d, cq) / (k * n)


def bootstrap_interval(a, b, level: float = 0.95, draws: int = 10_000, seed: int = 0,
                       small_k: bool = True) -> tuple[float, float]:
    """Interval of the accuracy difference A − B from :func:`bootstrap_draws` (crossed over seeds and questions),
    within [−1, 1]; with one seed the percentile bootstrap over questions.

    With a few seeds the percentile interval is too narrow where the training runs' own variation dominates
    (simulated, 3 seeds of 1,357 questions, each seed shifting each system's accuracy by σ: 0.93 coverage of a
    nominal 95 % at σ = 2 points, 0.86 at 4; and 1.00 at σ = 0, where resampling seeds counts the questions'
    sampling twice). So with k > 1 seeds its width is calibrated to the t interval on the seeds' mean
    differences, t_{k−1} s / √k (s their sample standard deviation): each side of the percentile interval is
    scaled about the point so that its mean half-width is that (its shape kept), then cut to [−1, 1]
    (``small_k=False``: the plain percentile interval). As :func:`polyvox.studies.world.inference.seeds_problems`
    does for Part IV; the verdicts come from the Holm-adjusted sign-flip tests, not from this interval."""
    d = np.atleast_2d(np.asarray(a, float)) - np.atleast_2d(np.asarray(b, float))
    q = np.percentile(bootstrap_draws(a, b, draws, seed), [50 * (1 - level), 50 * (1 + level)])
    lo, hi = float(q[0]), float(q[1])
    k = d.shape[0]
    if small_k and k > 1 and hi > lo:
        from scipy.stats import t as student

        per_seed = d.mean(axis=1)
        spread = float(per_seed.std(ddof=1))
        if spread > 0:
            half = float(student.ppf((1 + level) / 2, k - 1)) * spread / np.sqrt(k)
            lo, hi = metrics.widen_interval(float(d.mean()), lo, hi, half, (-1.0, 1.0))
    return lo, hi


def paired_n(diff: float, second_moment: float, alpha: float = ALPHA, power: float = 0.8) -> int:
    """Questions needed to detect a mean per-question difference δ by the sign-flip test, two-sided ``alpha``, with
    ``power``, from a pilot's mean squared per-question difference ψ = mean dᵢ² (the null variance of one
    question's flipped difference; under the alternative the variance is ψ − δ²): Connor's (1987) formula
    n = [z₁₋α/₂ √ψ + z₁₋β √(ψ − δ²)]² / δ², which it is with one seed (ψ is then the discordant share).
    Fractional differences allow |δ| up to √ψ."""
    from scipy.stats import norm

    d, psi, za, zb = abs(diff), second_moment, norm.ppf(1 - alpha / 2), norm.ppf(power)
    if not (0 < d and d * d <= psi <= 1):
        raise ValueError(f"need 0 < |diff| ≤ √ψ ≤ 1, got diff {diff}, ψ {second_moment}")
    return int(np.ceil((za * np.sqrt(psi) + zb * np.sqrt(psi - d * d)) ** 2 / d ** 2))


def paired_mde(n: int, second_moment: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """The smallest |mean difference| ``n`` questions of mean squared difference ψ detect by the sign-flip test at
    ``alpha`` with ``power`` (:func:`paired_n` solved for δ on (0, √ψ]; nan when none can)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    za, zb, psi = norm.ppf(1 - alpha / 2), norm.ppf(power), second_moment
    f = lambda d: np.sqrt(n) * d - za * np.sqrt(psi) - zb * np.sqrt(max(psi - d * d, 0.0))  # noqa: E731
    top = np.sqrt(psi) if psi > 0 else 0.0
    return float(brentq(f, 1e-12, top)) if n > 0 and psi > 0 and f(top) >= 0 else float("nan")


def identical_across_seeds(frames: list[pd.DataFrame], column: str = "correct") -> bool:
    """Whether one system's per-question ``column`` (correctness, or ``answer``) is the same in every seed's
    :func:`score` frame (same questions, same values): computed, never assumed from how the system decodes."""
    first = frames[0][column]
    return all(f.index.equals(first.index) and f[column].astype(object).equals(first.astype(object))
               for f in frames[1:])


# ---------------------------------------------------------------- the RL stage's curves (issue 23, item 3)

RL_WINDOW = 10  # steps averaged at each end of an RL curve: one step's mean reward is prompts × group completions (16-32)


def rl_curves(run_dir: str | Path, agents=("small", "mid", "big")) -> pd.DataFrame:
    """Every RL step of every seed and agent (``seed-<k>/rl/<agent>/train_log.jsonl``, or ``rl/`` of an unseeded
    run): seed (None unseeded), agent, step, mean reward, share of protocol-valid completions, accuracy."""
    run_dir = Path(run_dir)
    rows = []
    for seed in seed_evals(run_dir):
        base = run_dir if seed is None else run_dir / f"seed-{seed}"
        for a in agents:
            rows += rl_steps(base / "rl" / a / "train_log.jsonl", seed, a)
    return pd.DataFrame(rows, columns=RL_COLUMNS)


RL_COLUMNS = ["seed", "agent", "step", "reward", "valid", "accuracy", "all_equal"]


def rl_steps(log: str | Path, seed, agent: str) -> list[dict]:
    """One agent's RL steps from its ``train_log.jsonl`` (plain or gzipped; none when absent) in
    :data:`RL_COLUMNS`: mean reward, protocol-valid share, accuracy, share of groups scoring all alike."""
    if not jsonl.exists(log):
        return []
    return [{"seed": seed, "agent": agent, "step": int(r["step"]), "reward": float(r["reward_mean"]),
             "valid": float(r["format_valid"]), "accuracy": float(r.get("accuracy", np.nan)),
             "all_equal": float(r.get("frac_groups_all_equal", np.nan))}
            for r in read_jsonl(log) if "reward_mean" in r]


def rl_change(curves: pd.DataFrame, window: int = RL_WINDOW) -> pd.DataFrame:
    """Per agent: steps, seeds, the mean reward (and valid share) over the first and the last ``window`` steps
    (means over seeds), the change, and in how many seeds the last window's mean reward is above the first's.
    A one-step mean is prompts × group completions (16-32), so single first and last steps are noise; windows are the
    least a curve's direction needs."""
    rows = []
    for a, g in curves.groupby("agent", sort=False):
        per = []
        for _seed, s in g.groupby("seed", dropna=False, sort=True):
            s = s.sort_values("step")
            per.append((s["reward"].head(window).mean(), s["reward"].tail(window).mean(),
                        s["valid"].head(window).mean(), s["valid"].tail(window).mean(), len(s)))
        first, last, vf, vl, n = (np.array(x, dtype=float) for x in zip(*per))
        rows.append({"agent": a, "steps": int(n.max()), "seeds": len(per), "reward, first steps": first.mean(),
                     "reward, last steps": last.mean(), "change": (last - first).mean(),
                     "seeds rising": int((last > first).sum()), "valid, first steps": vf.mean(),
                     "valid, last steps": vl.mean()})
    return pd.DataFrame(rows)


def rl_line(change: pd.DataFrame, window: int = RL_WINDOW, min_steps: int = 100,
            noise: pd.DataFrame | None = None) -> tuple[bool, str]:
    """(whether RL trained, the sentence): it trained when every agent ran at least ``min_steps`` steps and its mean
    reward over the last ``window`` steps is above that over the first in every seed. With ``noise``
    (:func:`rl_noise`), each agent's count of seeds whose rise exceeds two standard errors is said beside it (the
    rule itself, stated before the runs were read, does not test against noise)."""
    if change.empty:
        return False, "No RL records."
    short = change[change["steps"] < min_steps]
    flat = change[change["seeds rising"] < change["seeds"]]
    trained = short.empty and flat.empty
    beyond = ({a: int((g["z"] > 2).sum()) for a, g in noise.groupby("agent", sort=False)} if noise is not None
              else {})
    parts = "; ".join(f"`{r['agent']}` {r['reward, first steps']:.3f} → {r['reward, last steps']:.3f} "
                      f"(rising in {r['seeds rising']} of {r['seeds']} seeds"
                      + (f", by more than two standard errors of the window means in {beyond[r['agent']]}"
                         if r["agent"] in beyond else "") + ")" for _, r in change.iterrows())
    head = (f"**RL {'trained' if trained else 'did not train'}** by this rule (every agent at least {min_steps} steps, "
            f"its mean reward over the last {window} steps above that over the first {window} in every seed): mean "
            f"reward, first {window} → last {window} steps, mean over seeds: {parts}")
    why = []
    if not short.empty:
        why.append(f"{', '.join(f'`{a}`' for a in short['agent'])} ran fewer than {min_steps} steps")
    if not flat.empty:
        why.append(f"the reward did not rise in every seed for {', '.join(f'`{a}`' for a in flat['agent'])}")
    quiet = [a for a, k in beyond.items() if k == 0]
    noisy = (f" By the noise check, `{'`, `'.join(quiet)}`'s rise is within two standard errors in every seed: not "
             "distinguishable from step-to-step noise seed by seed." if quiet else "")
    return trained, head + ("." if trained else f"; {' and '.join(why)}.") + noisy


def rl_noise(curves: pd.DataFrame, window: int = RL_WINDOW) -> pd.DataFrame:
    """Per agent and seed: the last-minus-first window difference of mean reward over its standard error (the two
    windows' step means taken as independent samples): how far a rise stands above the step-to-step noise."""
    rows = []
    for (a, seed), s in curves.groupby(["agent", "seed"], sort=False, dropna=False):
        s = s.sort_values("step")
        f, la = s["reward"].head(window), s["reward"].tail(window)
        se = float(np.sqrt(f.var(ddof=1) / len(f) + la.var(ddof=1) / len(la)))
        rows.append({"agent": a, "seed": seed, "change": la.mean() - f.mean(), "se": se,
                     "z": (la.mean() - f.mean()) / se if se > 0 else np.nan})
    return pd.DataFrame(rows)


def rl_validity(curves: pd.DataFrame, window: int = RL_WINDOW) -> pd.DataFrame:
    """Per agent and seed: the protocol-valid share of RL completions over the last ``window`` steps and the lowest
    rolling ``window``-step share over training (with its step)."""
    rows = []
    for (a, seed), s in curves.groupby(["agent", "seed"], sort=False, dropna=False):
        s = s.sort_values("step")
        roll = s["valid"].rolling(window, min_periods=min(window, len(s))).mean()  # a shorter run: one window
        low = roll.idxmin()
        rows.append({"agent": a, "seed": seed, "valid, first steps": float(s["valid"].head(window).mean()),
                     "valid, last steps": float(s["valid"].tail(window).mean()),
                     "lowest rolling share": float(roll.min()), "at step": int(s.loc[low, "step"])})
    return pd.DataFrame(rows)


def rl_validity_line(validity: pd.DataFrame, temperature: float, window: int = RL_WINDOW, fall: float = 0.05) -> str:
    """:func:`rl_validity` in words: each agent's valid share over the first and the last ``window`` steps, its lowest
    rolling share, and the seeds where it fell by more than ``fall``. RL's completions are sampled at
    ``temperature``, PD's validity check is greedy, so the two shares are not one measure: the comparison is within
    RL, first steps against last. The reward (:func:`.judge.pyramid_reward`) scores correctness and the step judge,
    not the protocol's validity or the action chosen."""
    from .judge import BASE_WEIGHT, JUDGE_WEIGHT

    parts, fell = [], {}
    for a, g in validity.groupby("agent", sort=False):
        worst = g.loc[g["lowest rolling share"].idxmin()]
        parts.append(f"`{a}` " + ", ".join(f"{f:.2f} → {la:.2f}" for f, la in zip(g["valid, first steps"], g["valid, last steps"]))
                     + f" (lowest rolling {window}-step share {worst['lowest rolling share']:.2f}"
                     + (f", seed {worst['seed']}" if len(g) > 1 else "") + f", step {worst['at step']})")
        down = g[g["valid, last steps"] < g["valid, first steps"] - fall]
        if not down.empty:
            fell[a] = (len(down), len(g))
    seeds = "seeds " + "/".join(str(s) for s in validity.seed.unique()) if validity.seed.nunique() > 1 else "the run"
    return (f"**Protocol validity over RL.** The reward is {BASE_WEIGHT:g} × correct + {JUDGE_WEIGHT:g} × step judge: "
            "it does not score whether a turn is a valid protocol action, nor which action (stop or hand-off) it takes. "
            f"Valid share of RL completions (sampled at temperature {temperature:g}; PD's check above is greedy, so the "
            f"two are not one measure), first {window} → last {window} steps ({seeds}): " + "; ".join(parts) + ". "
            + ("Falling by more than " + f"{100 * fall:.0f} points: "
               + ", ".join(f"`{a}` in {k} of {n} seeds" for a, (k, n) in fell.items()) + "."
               if fell else f"No agent's share falls by more than {100 * fall:.0f} points in any seed."))


def protocol_by_seed(runs_by_seed: dict, systems=("cl", "cl-pd"), agents=("small", "mid", "big")) -> pd.DataFrame:
    """Per system and seed, from the trajectories (:func:`handoffs`): each agent's share of turns, whose turn was
    the last of each question, hand-offs small→mid and mid→big by kind, and violations — every seed's view of what
    seed 0's topology tables show. ``runs_by_seed``: seed → {system: records}."""
    rows = []
    for seed, runs in runs_by_seed.items():
        for name in systems:
            if name not in runs:
                continue
            h = handoffs(runs[name], agents)
            row = {"system": name, "seed": seed, "turns": len(h)}
            row.update({f"{a} share": float((h["from"] == a).mean()) if len(h) else np.nan for a in agents})
            ends = h[h.kind == "end"]
            row.update({f"last turn {a}": int((ends["from"] == a).sum()) for a in agents})
            for f, t in zip(agents, agents[1:]):
                g = h[(h["from"] == f) & (h["to"] == t)]
                row[f"{f}→{t} voluntary"] = int((g.kind == "voluntary").sum())
                row[f"{f}→{t} forced"] = int((g.kind == "forced").sum())
            row["violations"] = int(h.violation.notna().sum())
            rows.append(row)
    return pd.DataFrame(rows)


def reach_line(by_seed: pd.DataFrame, system: str = "cl", via: str = "mid", to: str = "big") -> str:
    """How ``to`` is reached in ``system`` over the seeds of :func:`protocol_by_seed`: by voluntary hand-offs or
    only by the scheduler's forced ones (after ``via``'s violations)."""
    g = by_seed[by_seed.system == system]
    vol, forced = int(g[f"{via}→{to} voluntary"].sum()), int(g[f"{via}→{to} forced"].sum())
    per = ", ".join(f"{int(r[f'{via}→{to} voluntary'])}/{int(r[f'{via}→{to} forced'])}" for _, r in g.iterrows())
    head = f"`{via}`→`{to}` hand-offs in `{system}`, voluntary/forced per seed: {per}. "
    if vol == 0 and forced == 0:
        return head + f"`{to}` is never reached: in effect the pool is its other agents."
    if vol == 0:
        return head + (f"`{to}` is reached only when the scheduler forces a hand-off after `{via}`'s violations, "
                       f"never by `{via}`'s choice: in effect the trained pool is its other agents.")
    return head + f"`{to}` is reached by `{via}`'s choice {vol} times over the seeds."


def _span(counts) -> str:
    """A count, or the range of several ("24–35"; one value when they agree)."""
    counts = [counts] if isinstance(counts, int) else list(counts)
    return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}–{max(counts)}"


def rl_scope_line(rl: dict, carried, qa_states: dict | None = None, qa_test: float | None = None) -> str:
    """What the RL reward is measured on, from the scale's ``rl`` settings, and whether its change carried to the
    test set: ``carried`` is the across-seed verdict of ``cl`` (PD + RL) against ``cl-pd`` (PD only; a
    :class:`.verdicts.Verdict` with ``word`` and ``sentence()``). The stage (:func:`.pipeline.rl_problems`) draws
    ``problems`` agent states from the distillation traces of training questions — scripted drafts, not the pool's
    own turns — and samples ``prompts`` of them per step, so each state is drawn steps × prompts / problems times on
    average; the train log records no held-out reward. ``qa_states``: agent → its QA states among ``problems``, one
    count per seed's draw (:func:`.pipeline.rl_problems`; an int for one draw); ``qa_test``: the QA share of the
    test questions."""
    draws = rl["steps"] * rl["prompts"] / rl["problems"]
    head = (f"The reward above is measured on the RL stage's own training states: {rl['problems']} per agent, taken "
            "from the distillation traces of the training questions PD trained on (scripted states, not the pool's "
            "own turns; `small`'s draft turns with a planted slip are left out, a checker's turn after one is kept), "
            f"each drawn about {draws:.1f} times over {rl['steps']} steps of {rl['prompts']} prompts × {rl['group']} "
            "completions; no held-out reward is recorded. The reward does not score the action a turn takes, so it "
            "does not reward the hand-off a wrong draft calls for. "
            + (f"QA questions are " + ", ".join(f"{_span(n)} of `{a}`'s" for a, n in qa_states.items())
               + f" {rl['problems']} states (over the seeds' draws), against {100 * qa_test:.1f} % of the test "
               "questions. " if qa_states else ""))
    tail = {"higher": "on the pool's test questions RL raised accuracy",
            "lower": "on the pool's test questions RL **lowered** accuracy",
            "not distinguishable": "no change from RL is detected on the pool's test questions"}.get(carried.word)
    if tail is None:
        return head + f"`cl` against `cl-pd` is not tested ({carried.word})."
    return head + f"On the test set, `cl` (PD + RL) against `cl-pd` (PD only): {carried.sentence()}: {tail}."


def checker_actions(records: list[dict], drafter: str = "small", checker: str = "mid") -> dict:
    """What the checker did with the drafter's last valid draft, over the questions where both wrote a valid turn:
    the protocol (and the PD traces, :func:`.traces.coordination_trace`) has the checker confirm when its answer
    equals the draft and hand off to the next agent when it differs. Counts: ``questions``, ``equal`` (its answer is
    the draft's), ``differ``, ``differ_stop`` (it differs and stops anyway), ``differ_handoff``, ``equal_stop``."""
    out = dict.fromkeys(("questions", "equal", "differ", "differ_stop", "differ_handoff", "equal_stop"), 0)
    for r in records:
        valid = [t for t in r["turns"] if t.get("violation") is None]
        drafts = [t for t in valid if t["agent"] == drafter]
        checks = [t for t in valid if t["agent"] == checker]
        if not drafts or not checks:
            continue
        c, d = checks[0], drafts[-1]
        same = c.get("answer") == d.get("answer")
        out["questions"] += 1
        out["equal" if same else "differ"] += 1
        key = {(True, "stop"): "equal_stop", (False, "stop"): "differ_stop",
               (False, "handoff"): "differ_handoff"}.get((same, c.get("action")))
        if key:
            out[key] += 1
    return out


def checker_line(counts: dict, drafter: str = "small", checker: str = "mid", nxt: str = "big") -> str:
    """:func:`checker_actions` in words: why the next agent speaks as often as it does."""
    q, d = counts["questions"], counts["differ"]
    if not q:
        return f"`{checker}` never checked a valid draft of `{drafter}`."
    return (f"Why `{nxt}` rarely speaks: the protocol, like the distillation traces, has `{checker}` confirm "
            f"`{drafter}`'s draft when its own answer equals it and hand off to `{nxt}` when it differs. Of the {q:,} "
            f"questions `{checker}` checked, its answer differs from the draft on **{d:,}**, and on **{counts['differ_stop']:,}"
            f"** of those it stopped anyway ({counts['differ_handoff']:,} hand-offs to `{nxt}`): `{checker}` did not learn "
            "the comparison the traces teach, so the question rarely reaches the largest agent of the pool.")


def speaker_shares(records: list[dict], agents=("small", "mid", "big")) -> dict[str, tuple[int, int]]:
    """Per agent: (turns it wrote, all turns) over the records."""
    total = sum(len(r["turns"]) for r in records)
    return {a: (sum(t["agent"] == a for r in records for t in r["turns"]), total) for a in agents}


def ender_accuracy(pool: list[dict], solo: list[dict], agent: str = "mid") -> dict:
    """On the questions whose last valid turn in ``pool`` is ``agent``'s stop: how often that (PD fine-tuned)
    agent's answer is right, and how often the base model's solo answer (``solo``'s final) is right on the same
    questions — what protocol distillation did to the agent's own skill, read from records the run has."""
    solo_by = {r["id"]: r for r in solo}
    n = right_pool = right_solo = 0
    for r in pool:
        valid = [t for t in r["turns"] if t.get("violation") is None]
        if not valid or valid[-1]["agent"] != agent or valid[-1].get("action") != "stop" or r["id"] not in solo_by:
            continue
        n += 1
        right_pool += bool(grade_answer(valid[-1].get("answer"), r["gold"], r.get("metadata", {}))[0])
        s = solo_by[r["id"]]
        right_solo += bool(grade_answer(s.get("final"), s["gold"], s.get("metadata", {}))[0])
    return {"questions": n, "pool_right": int(right_pool), "solo_right": int(right_solo)}
