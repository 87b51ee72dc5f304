"""Metrics on per-problem counts: pass@k, intervals, bands, paired comparisons.

pass@k is the unbiased estimator of Chen et al. (2021, "Evaluating Large
Language Models Trained on Code"): with n samples of which c are correct,

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i),

computed in the product form, which never forms a large binomial coefficient.
It is vectorised over numpy arrays: the product runs over at most max(c)
factors, each one a whole-array operation. Large inputs with one k are first
reduced to their distinct (n, c) pairs (a bincount over n*(max_n+1)+c, no
sort), so 10^6 pairs cost a few array passes whatever max(c) is.

Everything else here works on *prompts* as the unit: a bootstrap resamples
problems (the samples of one problem are not independent), and paired
statistics compare two systems problem by problem, as the published crossover
tables do (mean difference, its standard error with ddof=1, and t = mean/se).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

BANDS = ("all_zero", "variance_band", "all_one")


def pass_at_k(n, c, k):
    """Unbiased pass@k for n samples with c correct (scalars or arrays).

    Raises ValueError when any n < k, when c is outside [0, n], or k < 1.
    Returns a float for scalar input, else a float array of the broadcast shape.
    """
    n_arr, c_arr, k_arr = np.broadcast_arrays(
        np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64), np.asarray(k, dtype=np.int64)
    )
    if np.any(k_arr < 1):
        raise ValueError("pass_at_k: k must be >= 1")
    if np.any(n_arr < k_arr):
        bad = np.argwhere(n_arr < k_arr)[0]
        raise ValueError(
            f"pass_at_k: n < k (n={int(n_arr[tuple(bad)])}, k={int(k_arr[tuple(bad)])}); "
            "the estimator needs at least k samples"
        )
    if np.any((c_arr < 0) | (c_arr > n_arr)):
        raise ValueError("pass_at_k: c must satisfy 0 <= c <= n")
    # Many (n, c) pairs repeat (n is a handful of sample counts): with one k and a
    # small n range, compute each distinct pair once and gather, an O(N) path.
    max_n = int(n_arr.max()) if n_arr.size else 0
    if n_arr.size > 4096 and np.all(k_arr == k_arr.flat[0]) and (max_n + 1) ** 2 <= 4_000_000:
        key = (n_arr * (max_n + 1) + c_arr).ravel()
        distinct = np.flatnonzero(np.bincount(key, minlength=(max_n + 1) ** 2))
        table = np.zeros((max_n + 1) ** 2)
        table[distinct] = _pass_at_k_product(distinct // (max_n + 1), distinct % (max_n + 1), int(k_arr.flat[0]))
        result = table[key].reshape(n_arr.shape)
    else:
        result = _pass_at_k_product(n_arr, c_arr, k_arr)
    return float(result) if result.ndim == 0 else result


def _pass_at_k_product(n, c, k):
    """1 - prod_{j=0}^{c-1} (1 - k/(n-c+1+j)) elementwise; 1 where n - c < k (every k-subset hits)."""
    k_f = np.asarray(k, dtype=np.float64)
    all_wrong = np.ones(np.broadcast(n, c, k).shape, dtype=np.float64)
    first = (n - c + 1).astype(np.float64)
    for j in range(int(c.max()) if c.size else 0):
        # the running product over the c correct samples, only where j < c
        all_wrong = np.where(c > j, all_wrong * (1.0 - k_f / (first + j)), all_wrong)
    return np.where(n - c < k, 1.0, 1.0 - all_wrong)


def pass_at_k_curve(n: Sequence[int], c: Sequence[int], ks: Sequence[int]) -> np.ndarray:
    """Mean pass@k over problems for each k in ks (problems with n < k raise)."""
    n_a, c_a = np.asarray(n), np.asarray(c)
    return np.array([float(np.mean(pass_at_k(n_a, c_a, k))) for k in ks])


def wilson_interval(successes, n, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (successes out of n), by SciPy's
    ``binomtest(...).proportion_ci(method="wilson")`` at the confidence level of ``z``."""
    from scipy.stats import binomtest, norm

    if n <= 0:
        raise ValueError("wilson_interval: n must be positive")
    if not 0 <= successes <= n:
        raise ValueError("wilson_interval: need 0 <= successes <= n")
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=float(2 * norm.cdf(z) - 1), method="wilson")
    return (float(ci.low), float(ci.high))


def bootstrap_ci(
    per_prompt: Sequence,
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Percentile bootstrap over prompts: (point estimate, low, high).

    per_prompt holds one entry per prompt (a number, or a row of numbers such as
    a prompt's per-sample scores); resampling draws whole prompts with
    replacement, so within-prompt correlation is kept.
    """
    data = np.asarray(per_prompt, dtype=np.float64)
    if len(data) == 0:
        raise ValueError("bootstrap_ci: no prompts")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(data), size=(n_boot, len(data)))
    stats = np.array([statistic(data[row]) for row in idx])
    lo, hi = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return float(statistic(data)), float(lo), float(hi)


def variance_band(n_correct, n: int):
    """Classify problems by their G = n samples: all_zero, variance_band or all_one.

    Works on a scalar (returns a str) or an array (returns an array of str).
    """
    c = np.asarray(n_correct)
    if np.any((c < 0) | (c > n)):
        raise ValueError(f"variance_band: n_correct must lie in [0, {n}]")
    out = np.where(c == 0, "all_zero", np.where(c == n, "all_one", "variance_band"))
    return str(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class PairedDifference:
    n: int
    mean: float
    se: float
    t: float


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """Per-problem differences a - b: mean, standard error (ddof=1) and t = mean / se.

    This is the statistic of the published pass@k crossover tables (delta_mean,
    delta_se, t). The t is descriptive: per-problem pass@k values are not
    Gaussian and the problems were not drawn at random from a population.
    """
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) < 2:
        raise ValueError("paired_difference: need at least two pairs")
    se = float(np.std(d, ddof=1) / math.sqrt(len(d)))
    mean = float(np.mean(d))
    return PairedDifference(len(d), mean, se, mean / se if se > 0 else float("nan"))


def t_interval(x: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t interval of the mean: the across-seed interval of the book.

    With n values, the half-width is t_{(1+level)/2, n-1} · sd(ddof=1) / sqrt(n). Seeds are few
    (three here), so the interval is wide by construction; fewer than two values give nan bounds.
    """
    from scipy import stats

    v = np.asarray(x, dtype=np.float64)
    if len(v) == 0:
        raise ValueError("t_interval: no values")
    m = float(v.mean())
    if len(v) < 2:
        return m, float("nan"), float("nan")
    h = float(stats.t.ppf((1 + level) / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return m, m - h, m + h


def widen_interval(point: float, lo: float, hi: float, half_width: float,
                   bounds: tuple[float, float] | None = None) -> tuple[float, float]:
    """A bootstrap interval (``lo``, ``hi``) around ``point`` rescaled so that its mean half-width is ``half_width``
    (each side scaled by the same factor, so the bootstrap's asymmetry is kept), then cut to ``bounds``.

    The book's few-seed calibration (Parts II–IV): a percentile bootstrap over k seeds is about as wide as a z
    interval on a plug-in standard error, too narrow when the seeds' own spread dominates; each study computes the
    half-width a t interval with the right degrees of freedom would have and passes it here. An interval of zero
    width is returned as it is (nothing to scale)."""
    if hi > lo:
        factor = half_width / ((hi - lo) / 2)
        lo, hi = point - factor * (point - lo), point + factor * (hi - point)
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return float(lo), float(hi)


def seed_bootstrap(groups, combine: Callable | None = None, n_boot: int = 4000, level: float = 0.95,
                   seed: int = 0) -> tuple[float, float, float]:
    """Across-seed mean and a percentile bootstrap interval over seeds × problems: the book's across-seed interval.

    ``groups`` holds one entry per seed: an array of per-problem (or per-sample) values, resampled within
    the seed, or a tuple of such arrays, each resampled on its own, whose resampled means ``combine``
    turns into the seed's value (e.g. ``lambda start, end: end - start`` for a gain between two
    evaluations of one seed). Each replicate draws seeds with replacement and, inside every drawn seed,
    its values with replacement, and averages the drawn seeds' values. Every replicate is an average of
    values the quantity can take, so the interval lies within the quantity's range by construction: an
    accuracy difference's interval never leaves [−1, 1] (a t-interval over three seeds can). With few
    seeds the interval is coarse rather than exact. Returns (mean over seeds of the seed's value on its
    own data, low, high).
    """
    parts = [tuple(np.atleast_1d(np.asarray(a, dtype=np.float64)) for a in (g if isinstance(g, tuple) else (g,)))
             for g in groups]
    if not parts or any(len(a) == 0 for p in parts for a in p):
        raise ValueError("seed_bootstrap: need at least one seed, each with at least one value")
    if len({len(p) for p in parts}) != 1:
        raise ValueError("seed_bootstrap: every seed needs the same number of arrays")
    fn = combine if combine is not None else (lambda *means: means[0])
    k = len(parts)
    rng = np.random.default_rng(seed)
    inner = np.empty((k, n_boot, k))  # (seed, replicate, slot): a seed drawn twice is resampled twice
    for s, arrays in enumerate(parts):
        for j in range(k):
            means = [a[rng.integers(0, len(a), size=(n_boot, len(a)))].mean(axis=1) if len(a) > 1
                     else np.full(n_boot, a[0]) for a in arrays]
            inner[s, :, j] = fn(*means)
    pick = rng.integers(0, k, size=(n_boot, k))
    stats = inner[pick, np.arange(n_boot)[:, None], np.arange(k)[None, :]].mean(axis=1)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    point = float(np.mean([fn(*[np.float64(a.mean()) for a in arrays]) for arrays in parts]))
    return point, float(lo), float(hi)


def outcomes_of(rate: float, n: int) -> np.ndarray:
    """``n`` 0/1 outcomes with ``round(rate · n)`` ones: a logged accuracy as the samples behind it, for
    :func:`seed_bootstrap` where only a rate and its sample count were recorded."""
    c = int(round(rate * n))
    if not 0 <= c <= n:
        raise ValueError(f"outcomes_of: rate {rate} is not a share of {n} samples")
    return np.r_[np.ones(c), np.zeros(n - c)]


def passk_crossover_table(n_a, c_a, n_b, c_b, ks: Sequence[int]) -> list[dict]:
    """Rows of (k, pass@k for a and b, paired difference) as in the published tables."""
    rows = []
    for k in ks:
        pa = pass_at_k(np.asarray(n_a), np.asarray(c_a), k)
        pb = pass_at_k(np.asarray(n_b), np.asarray(c_b), k)
        d = paired_difference(pa, pb)
        rows.append(
            {"k": k, "n_paired": d.n, "a_pass_at_k": float(np.mean(pa)), "b_pass_at_k": float(np.mean(pb)),
             "delta_mean": d.mean, "delta_se": d.se, "t": d.t}
        )
    return rows


# ---------------------------------------------------------------- lengths on runs

PAIR_BUCKETS = ("both_correct", "a_only", "b_only", "neither", "all_paired")


def tokens_per_correct(completion_tokens: Sequence[int], correct: Sequence[bool]) -> float:
    """Total completion tokens over all samples ÷ number of correct samples (inf when none)."""
    c = int(np.sum(correct))
    return float(np.sum(completion_tokens)) / c if c else float("inf")


def cap_hit_rate(finish_reasons: Sequence[str]) -> float:
    """Share of samples stopped by the token cap (finish reason 'length')."""
    fr = np.asarray(finish_reasons)
    return float(np.mean(fr == "length")) if len(fr) else float("nan")


def paired_length_buckets(a, b) -> dict:
    """Completion lengths of two systems on paired samples, by which of the two was correct.

    a, b: DataFrames with problem_id, sample_index, completion_tokens, correct. Pairs are (a's sample
    i, b's sample i) on the same problem, i below both systems' sample counts there. Buckets
    (``PAIR_BUCKETS``): both_correct, a_only, b_only, neither, all_paired; each with n, the median
    tokens of a and b, the median and geometric mean of the ratio b ÷ a within a pair, and the share of
    pairs where b is longer; plus a Wilcoxon signed-rank test of b − a on both-correct pairs. A study
    names the buckets its own way (the panel study's: ``polyvox.studies.panel.analysis``).
    """
    from scipy.stats import wilcoxon

    m = a.merge(b, on=["problem_id", "sample_index"], suffixes=("_a", "_b"))
    out = {}
    masks = {"both_correct": m.correct_a & m.correct_b, "a_only": m.correct_a & ~m.correct_b,
             "b_only": ~m.correct_a & m.correct_b, "neither": ~m.correct_a & ~m.correct_b,
             "all_paired": np.ones(len(m), dtype=bool)}
    for name, mask in masks.items():
        sub = m[np.asarray(mask)]
        ta, tb = sub.completion_tokens_a.to_numpy(float), sub.completion_tokens_b.to_numpy(float)
        ratio = tb / np.maximum(ta, 1)
        some = len(sub) > 0
        out[name] = {"n": int(len(sub)), "a_tokens_median": float(np.median(ta)) if some else float("nan"),
                     "b_tokens_median": float(np.median(tb)) if some else float("nan"),
                     "ratio_median": float(np.median(ratio)) if some else float("nan"),
                     "ratio_geomean": float(np.exp(np.mean(np.log(ratio)))) if some else float("nan"),
                     "b_longer_frac": float(np.mean(tb > ta)) if some else float("nan")}
    both = m[np.asarray(masks["both_correct"])]
    diff = both.completion_tokens_b.to_numpy(float) - both.completion_tokens_a.to_numpy(float)
    if np.count_nonzero(diff) >= 1:
        w = wilcoxon(both.completion_tokens_b, both.completion_tokens_a)
        out["wilcoxon_both_correct"] = {"statistic": float(w.statistic), "pvalue": float(w.pvalue),
                                        "n_nonzero": int(np.count_nonzero(diff))}
    else:
        out["wilcoxon_both_correct"] = {"statistic": float("nan"), "pvalue": float("nan"), "n_nonzero": 0}
    return out
