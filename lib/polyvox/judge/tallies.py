"""Tallies of a comparison: per-prompt outcomes, win rates with (cluster) bootstrap CIs, the
length-controlled win rate, and the text table ``polyvox judge tally`` prints."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..statuses import Choice, Outcome
from .judges import Judge
from .records import _calls, call_key, check_out, load_cache, pairs, parse_side


def outcomes(a_spec: str, b_spec: str, out: str | Path, judge: Judge) -> "pd.DataFrame":  # noqa: F821
    """One row per prompt: outcome W/L/T from A's side (U: an order unparseable; M: not judged yet),
    both orders' choices, word counts and the row's labels."""
    import pandas as pd

    out = check_out(out)
    ident, cache = judge.identity(), load_cache(out, repair=False)
    rows = []
    for p in pairs(a_spec, b_spec):
        labels = {k: v for k, v in p.row.items() if k not in ("responses", "prompt") and isinstance(v, (str, int, float))}
        base = {**labels, "prompt_id": p.prompt_id, "words_a": len(p.a.split()), "words_b": len(p.b.split())}
        if p.a == p.b:
            rows.append({**base, "outcome": Outcome.TIE, "ab": "identical", "ba": "identical"})
            continue
        ab, ba = (cache.get(call_key(ident, c)) for c in _calls(p))
        if ab is None or ba is None:
            rows.append({**base, "outcome": Outcome.MISSING, "ab": None, "ba": None})
            continue
        x, y = ab["choice"], ba["choice"]
        if Choice.UNPARSEABLE in (x, y):
            outcome = Outcome.UNPARSEABLE
        elif x == Choice.A and y == Choice.B:  # A preferred in both orders
            outcome = Outcome.WIN
        elif x == Choice.B and y == Choice.A:
            outcome = Outcome.LOSS
        else:
            outcome = Outcome.TIE
        rows.append({**base, "outcome": outcome, "ab": x, "ba": y})
    return pd.DataFrame(rows)


SCORE = {Outcome.WIN: 1.0, Outcome.TIE: 0.5, Outcome.LOSS: 0.0}


def cluster_bootstrap_ci(values, groups, n_boot: int = 2000, alpha: float = 0.05,
                         seed: int = 0) -> tuple[float, float, float]:
    """Percentile bootstrap of a mean that resamples whole clusters: (mean, low, high).

    ``values`` holds one number per item (a prompt's score), ``groups`` its cluster (the user who
    wrote it). Each replicate draws as many clusters as there are, with replacement, keeps every
    item of each drawn cluster and takes the mean over those items (clusters of unequal size weigh
    by their size). Clusters are numbered in order of first appearance, so with one item per
    cluster the draws — and the interval — are those of :func:`polyvox.metrics.bootstrap_ci` with
    the same seed.
    """
    x = np.asarray(values, dtype=np.float64)
    g = np.asarray(groups)
    if len(x) == 0:
        raise ValueError("cluster_bootstrap_ci: no items")
    if len(g) != len(x):
        raise ValueError(f"cluster_bootstrap_ci: {len(x)} values but {len(g)} group labels")
    _, first, inverse = np.unique(g, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # cluster ids in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    cid = rank[inverse.reshape(-1)]
    k = len(order)
    sums = np.bincount(cid, weights=x, minlength=k)
    sizes = np.bincount(cid, minlength=k).astype(np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, k, size=(n_boot, k))
    stats = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    lo, hi = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return float(x.mean()), float(lo), float(hi)


def summarize(df, n_boot: int = 2000, seed: int = 0, groups: str | None = None) -> dict:
    """Counts and win rate (W + T/2)/n with a 95% bootstrap CI: over prompts, or, with ``groups``
    (a column of ``df``, e.g. ``"user"``), over clusters of prompts (:func:`cluster_bootstrap_ci`)."""
    from ..metrics import bootstrap_ci

    counts = {k: int((df["outcome"] == k).sum()) for k in ("W", "T", "L", "U", "M")}
    scored = df[df["outcome"].isin(list(SCORE))]
    n = len(scored)
    row = {"n": n, **{k: counts[k] for k in "WTL"}, "unparseable": counts["U"], "missing": counts["M"]}
    if groups is not None:
        if groups not in df.columns:
            raise ValueError(f"no label {groups!r} to resample by; labels: "
                             f"{', '.join(c for c in df.columns if c not in ('outcome', 'ab', 'ba'))}")
        row["clusters"] = int(scored[groups].nunique())
    if n == 0:
        return {**row, "win_rate": None, "ci_low": None, "ci_high": None}
    scores = scored["outcome"].map(SCORE).to_numpy()
    if groups is None:
        wr, lo, hi = bootstrap_ci(scores, n_boot=n_boot, seed=seed)
    else:
        wr, lo, hi = cluster_bootstrap_ci(scores, scored[groups].to_numpy(), n_boot=n_boot, seed=seed)
    return {**row, "win_rate": wr, "ci_low": lo, "ci_high": hi}


def _label_kind(v) -> str | None:
    if v is None or (isinstance(v, float) and v != v):
        return None  # missing (pandas fills a row without the label with NaN)
    return "string" if isinstance(v, str) else "number"


def _check_label(df, label: str, a_spec: str, clusters: bool) -> None:
    """A label tallies are broken down or clustered by holds values of one kind: strings or numbers (a
    mix cannot be ordered, and 7 and "7" would be two groups); clusters also need it in every row."""
    kinds = {_label_kind(v) for v in df[label]}
    where = parse_side(a_spec)[0]
    if {"string", "number"} <= kinds:
        raise ValueError(f"{where}: label {label!r} holds both strings and numbers; give it values of one kind "
                         "(all strings, say) to break tallies down by it")
    if clusters and None in kinds:
        raise ValueError(f"{where}: label {label!r} is missing from some rows; every prompt needs the label "
                         "its tallies are clustered by")


def tally(a_spec: str, b_spec: str, out: str | Path, judge: Judge, by: tuple[str, ...] = (),
          n_boot: int = 2000, groups: str | None = None) -> dict:
    """Overall and per-label win rates of A over B, with the length-controlled view. ``groups``: a
    row label whose values cluster prompts (e.g. ``"user"``); the win rates' CIs then resample whole
    clusters (the length-controlled CI still resamples prompts)."""
    df = outcomes(a_spec, b_spec, out, judge)
    for label in ((groups,) if groups is not None else ()) + tuple(by):
        if label in df.columns:
            _check_label(df, label, a_spec, clusters=label == groups)
    result = {"a": a_spec, "b": b_spec, "overall": summarize(df, n_boot, groups=groups),
              "length_controlled": length_controlled(df, n_boot=min(n_boot, 500)),
              "by": {}}
    for label in by:
        if label not in df.columns:
            raise ValueError(f"no label {label!r} in the systems rows; labels: "
                             f"{', '.join(c for c in df.columns if c not in ('outcome', 'ab', 'ba'))}")
        result["by"][label] = {str(v): summarize(g, n_boot, groups=groups) for v, g in df.groupby(label, sort=True)}
    return result


def _logistic_intercept(x: np.ndarray, y: np.ndarray, iters: int = 50, ridge: float = 1e-6) -> tuple[float, float]:
    """Fit y ~ σ(b0 + b1 x) (fractional y allowed) by Newton's method; returns (b0, b1)."""
    X = np.column_stack([np.ones_like(x), x])
    beta = np.zeros(2)
    for _ in range(iters):
        p = 1 / (1 + np.exp(-X @ beta))
        w = np.clip(p * (1 - p), 1e-9, None)
        grad = X.T @ (y - p) - ridge * beta
        hess = (X * w[:, None]).T @ X + ridge * np.eye(2)
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.abs(step).max() < 1e-10:
            break
    return float(beta[0]), float(beta[1])


def length_controlled(df, n_boot: int = 500, seed: int = 0) -> dict:
    """Win rate at zero length difference (logistic regression of the score on standardised length difference)."""
    scored = df[df["outcome"].isin(list(SCORE))]
    if len(scored) < 3:
        return {"win_rate": None, "ci_low": None, "ci_high": None, "slope": None}
    y = scored["outcome"].map(SCORE).to_numpy(dtype=float)
    d = (scored["words_a"] - scored["words_b"]).to_numpy(dtype=float)
    sd = d.std()
    x = d / sd if sd > 0 else np.zeros_like(d)
    sig = lambda b: 1 / (1 + np.exp(-b))  # noqa: E731
    # Extreme fits (perfect separation) are clipped by the ridge; the intercept stays finite.
    b0, b1 = _logistic_intercept(x, y, ridge=1e-3)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        i = rng.integers(0, len(y), len(y))
        boots.append(sig(_logistic_intercept(x[i], y[i], iters=30, ridge=1e-3)[0]))
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return {"win_rate": float(sig(b0)), "ci_low": float(lo), "ci_high": float(hi), "slope": float(b1),
            "length_sd_words": float(sd)}


def as_table(result: dict) -> str:
    """A text table of a tally (what ``polyvox judge tally`` prints)."""
    def fmt(s):
        if s["win_rate"] is None:
            return f"n={s['n']:>4}  —"
        return (f"n={s['n']:>4}  W {s['W']:>4}  T {s['T']:>4}  L {s['L']:>4}  "
                f"win {100 * s['win_rate']:5.1f}% [{100 * s['ci_low']:.0f},{100 * s['ci_high']:.0f}]"
                + (f"  unparseable {s['unparseable']}" if s["unparseable"] else "")
                + (f"  missing {s['missing']}" if s["missing"] else ""))

    lines = [f"{result['a']}  vs  {result['b']}", f"  overall            {fmt(result['overall'])}"]
    lc = result["length_controlled"]
    if lc["win_rate"] is not None:
        lines.append(f"  length-controlled  win {100 * lc['win_rate']:5.1f}% [{100 * lc['ci_low']:.0f},"
                     f"{100 * lc['ci_high']:.0f}]  (slope {lc['slope']:+.2f} per sd of length difference)")
    for label, groups in result["by"].items():
        lines.append(f"  by {label}:")
        for v, s in groups.items():
            lines.append(f"    {v:<22} {fmt(s)}")
    return "\n".join(lines)
