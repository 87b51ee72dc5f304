"""What the Part I chapters compute from the panel study's published records, shared with the findings
summary on the intro page (one computation, one tolerance, one place):

- :func:`accuracy_table`: per-sample accuracy per benchmark and system with Wilson and prompt-level
  bootstrap intervals, beside the published accuracy and Wilson bounds;
- :func:`passk_compare`: the published pass@k crossover tables, recomputed from per-problem counts;
- :func:`dispersion_compare`: the published dispersion summary, recomputed from per-problem values;
- :func:`token_consistency`: tokens per correct derived from the token summary's own aggregates;
- :func:`band_counts`, :func:`heldout_overall`: variance bands and the RL follow-up's held-out mean;
- :func:`length_buckets`: paired completion lengths by outcome, in the study's bucket names
  (``panel_only``, ``thinking_only`` …; the generic computation is :func:`polyvox.metrics.paired_length_buckets`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ... import metrics
from . import published as P

SYSTEMS = ("panel", "thinking")
BENCHES = {"math_l5": "MATH-500 level 5", "aime": "AIME 2024 + 2025 (first 10 each)"}
PASSK_VALUES = ("panel_pass_at_k", "thinking_pass_at_k", "delta_mean", "delta_se", "t")

# the published token summary's bucket and field names; the generic ones are polyvox.metrics'
LENGTH_BUCKETS = ("both_correct", "panel_only", "thinking_only", "neither", "all_paired")
_BUCKET = dict(zip(metrics.PAIR_BUCKETS, LENGTH_BUCKETS))
_FIELD = {"a_tokens_median": "panel_tokens_median", "b_tokens_median": "think_tokens_median",
          "b_longer_frac": "thinking_longer_frac"}


def length_buckets(panel: pd.DataFrame, thinking: pd.DataFrame) -> dict:
    """:func:`polyvox.metrics.paired_length_buckets` of (panel, thinking) samples, named as the study's
    token summary names them (buckets ``panel_only`` / ``thinking_only``, fields ``panel_tokens_median``,
    ``think_tokens_median``, ``thinking_longer_frac``; ratios are thinking ÷ panel)."""
    out = metrics.paired_length_buckets(panel, thinking)
    return {_BUCKET.get(k, k): ({_FIELD.get(f, f): v for f, v in b.items()} if k in _BUCKET else b)
            for k, b in out.items()}


def accuracy_table(counts: dict, benches: dict = BENCHES, n_boot: int = 4000) -> pd.DataFrame:
    """One row per (benchmark, system) of per-problem ``counts`` (n_samples, n_correct): accuracy with
    Wilson and prompt-level bootstrap intervals; where the counts carry the published summary
    (``attrs["summary"]``), the published accuracy and Wilson bounds and each difference (``… Δ``)."""
    rows = []
    for (b, s), df in counts.items():
        n, c = int(df.n_samples.sum()), int(df.n_correct.sum())
        lo, hi = metrics.wilson_interval(c, n)
        _, blo, bhi = metrics.bootstrap_ci((df.n_correct / df.n_samples).to_numpy(), n_boot=n_boot, seed=0)
        row = {"benchmark": benches[b], "system": s, "problems": len(df), "samples/problem": int(df.n_samples.iloc[0]),
               "samples": n, "correct": c, "accuracy": c / n, "Wilson low": lo, "Wilson high": hi,
               "bootstrap low": blo, "bootstrap high": bhi}
        summary = df.attrs.get("summary")
        if summary:
            row.update({"published accuracy": summary["avg_hit_rate"], "published Wilson low": summary["wilson_ci95"][0],
                        "published Wilson high": summary["wilson_ci95"][1]})
            row.update({"accuracy Δ": row["accuracy"] - row["published accuracy"],
                        "Wilson low Δ": lo - row["published Wilson low"], "Wilson high Δ": hi - row["published Wilson high"]})
        rows.append(row)
    return pd.DataFrame(rows)


def crossover(panel: pd.DataFrame, thinking: pd.DataFrame, ks) -> pd.DataFrame:
    """pass@k of both systems and their paired per-problem difference (panel − thinking) at each k."""
    m = panel.merge(thinking, on="id", suffixes=("_p", "_t"))
    rec = pd.DataFrame(metrics.passk_crossover_table(m.n_samples_p, m.n_correct_p, m.n_samples_t, m.n_correct_t, list(ks)))
    return rec.rename(columns={"a_pass_at_k": "panel_pass_at_k", "b_pass_at_k": "thinking_pass_at_k"})


def passk_compare(data_dir: str | Path, counts: dict) -> dict[str, pd.DataFrame]:
    """Every published pass@k table (``math50``, ``math_l5``, ``aime``) beside its recomputation from
    per-problem counts (``report.beside`` layout: ``<value> (recomputed)``, ``(published)``, ``Δ``)."""
    from ...book.report import beside

    sources = {"math50": {s: P.stratified50_counts(data_dir, s) for s in SYSTEMS},
               **{b: {s: counts[(b, s)] for s in SYSTEMS} for b in BENCHES}}
    out = {}
    for key, pub_rows in P.passk_tables(data_dir).items():
        rec = crossover(sources[key]["panel"], sources[key]["thinking"], [r["k"] for r in pub_rows])
        out[key] = beside(rec, pd.DataFrame(pub_rows), ["k", "n_paired"], list(PASSK_VALUES))
    return out


DISPERSION_SETS = {"math50": "MATH-500 stratified slice", "aime": "AIME 24+25"}
DISPERSION_VALUES = ["panel mean", "thinking mean", "delta mean", "delta sd", "t"]


def dispersion_compare(data_dir: str | Path) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The published dispersion summary (means, paired difference panel − thinking, its sd and t) beside
    its recomputation from the published per-problem values; and each set's per-problem values."""
    from ...book.report import beside

    rows, pub_rows, per_problem = [], [], {}
    for key, name in DISPERSION_SETS.items():
        df = P.dispersion(data_dir, key)
        summary, labels = df.attrs["summary"], P.DISPERSION_LABELS[key]
        p = df[df.label == labels["panel"]].set_index("uid")["mean_pairwise_dist"]
        t = df[df.label == labels["thinking"]].set_index("uid")["mean_pairwise_dist"]
        p, t = p.align(t, join="inner")
        per_problem[key] = pd.DataFrame({"panel": p, "thinking": t})
        d = metrics.paired_difference(p, t)
        pair = summary["paired"][f"{labels['panel']}_minus_{labels['thinking']}"]
        # the study's delta_std is the population sd (ddof=0); its t uses ddof=1
        rows.append({"set": name, "panel mean": p.mean(), "thinking mean": t.mean(), "delta mean": d.mean,
                     "delta sd": float(np.std(p - t)), "t": d.t, "pairs": d.n})
        pub_rows.append({"set": name, "panel mean": summary["by_variant"][labels["panel"]]["mean_pairwise_dist_mean"],
                         "thinking mean": summary["by_variant"][labels["thinking"]]["mean_pairwise_dist_mean"],
                         "delta mean": pair["mean_pairwise_dist_delta_mean"], "delta sd": pair["mean_pairwise_dist_delta_std"],
                         "t": pair["mean_pairwise_dist_t"], "pairs": pair["n_paired"]})
    table = beside(pd.DataFrame(rows), pd.DataFrame(pub_rows), ["set", "pairs"], DISPERSION_VALUES)
    return table, per_problem


TOKEN_BENCHES = {"math": "MATH-500 L5", "aime": "AIME 24+25"}


def token_consistency(tok: dict, benches: dict = TOKEN_BENCHES) -> pd.DataFrame:
    """Per benchmark and system: tokens per correct as published, and as derived from the summary's own
    aggregates (all-paired mean tokens × pairs ÷ correct samples), with the difference."""
    rows = []
    for key, name in benches.items():
        t = tok[key]
        allp = t["buckets"]["all_paired"]
        for sys, tcol, ccol in (("panel", "panel_tokens_mean", "panel_correct_count"),
                                ("thinking", "think_tokens_mean", "thinking_correct_count")):
            published_tpc = t["cost_per_correct"][f"{sys}_tokens_per_correct"]
            derived = allp[tcol] * allp["n"] / t[ccol]
            rows.append({"benchmark": name, "system": sys, "paired samples": allp["n"], "correct samples": t[ccol],
                         "mean tokens (all paired)": allp[tcol], "tokens per correct (published)": published_tpc,
                         "tokens per correct (from the summary's aggregates)": derived,
                         "tokens per correct Δ": derived - published_tpc})
    return pd.DataFrame(rows)


def band_records(data_dir: str | Path, arms=SYSTEMS, g: int = 8) -> dict[str, pd.DataFrame]:
    """Each arm's per-problem olympiad-pool counts with the band recomputed from them (never read from
    the file's ``band`` field); the study drew ``g`` samples per problem."""
    recs = {a: P.band_records(data_dir, a) for a in arms}
    for a, df in recs.items():
        if not (df.n_samples == g).all():
            raise ValueError(f"{a}: expected G = {g} samples per problem")
        df["band (recomputed)"] = metrics.variance_band(df.n_correct.to_numpy(), g)
    return recs


def band_counts(recs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Problems per recomputed band and arm beside the published summary's counts."""
    from ...book.report import beside

    rec_rows, pub_rows = [], []
    for a, df in recs.items():
        counts = df["band (recomputed)"].value_counts()
        pub = df.attrs["summary"]["bands"]
        for b in metrics.BANDS:
            rec_rows.append({"arm": a, "band": b, "problems": int(counts.get(b, 0))})
            pub_rows.append({"arm": a, "band": b, "problems": int(pub.get(b, 0))})
    return beside(pd.DataFrame(rec_rows), pd.DataFrame(pub_rows), ["arm", "band"], ["problems"])


def heldout_overall(data_dir: str | Path) -> tuple[pd.DataFrame, pd.Series]:
    """The RL follow-up's held-out trajectory with the overall mean recomputed from the per-source values
    (weighted by the held-out set's source counts), its difference from the published mean and a 95%
    Wilson interval; and the source counts."""
    traj = P.heldout_trajectory(data_dir)
    sizes = P.heldout_sources(data_dir)
    traj["heldout_mean (recomputed)"] = (traj[list(sizes.index)] * sizes).sum(axis=1) / sizes.sum()
    traj["heldout_mean Δ"] = traj["heldout_mean (recomputed)"] - traj["heldout_mean"]
    n = int(sizes.sum())
    ci = np.array([metrics.wilson_interval(round(m * n), n) for m in traj["heldout_mean (recomputed)"]])
    traj["Wilson low"], traj["Wilson high"] = ci[:, 0], ci[:, 1]
    return traj, sizes


EMBED_VARIANTS = ("head", "windowed", "head, labels removed", "windowed, labels removed")


def embed_variants(model, traces: dict[str, list[str]], head_chars: int) -> dict:
    """Each system's traces embedded four ways (``EMBED_VARIANTS``): the study's recipe (the first
    ``head_chars`` characters, then the embedder's truncation), a windowed embedding of the whole trace,
    and both with persona labels ("Expert 1:") removed. Returns {(variant, system): embedding}."""
    from ... import embed

    out = {}
    for system, xs in traces.items():
        bare = [embed.strip_persona_labels(x) for x in xs]
        out[("head", system)] = embed.embed_head(model, xs, head_chars)
        out[("windowed", system)] = embed.embed_windowed(model, xs)
        out[("head, labels removed", system)] = embed.embed_head(model, bare, head_chars)
        out[("windowed, labels removed", system)] = embed.embed_windowed(model, bare)
    return out
