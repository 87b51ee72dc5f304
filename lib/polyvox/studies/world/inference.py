"""Part IV's inference across RL seeds: intervals that stay within what a quantity allows, tests that use
every problem of every seed, the effect each null could have detected, and one Holm correction over the
chapter's family of tests. Generic: nothing here reads a run folder (``analysis`` builds the chapter's
comparisons from the records with these functions).

- :class:`Units`, :func:`level_units`: one evaluation of one seed, a value per problem or per held-out
  sample, optionally stratified (by level: a held-out set has a fixed number of problems per level);
- :func:`seeds_problems`: the across-seed interval, a two-stage bootstrap (seeds with replacement, then
  units within each drawn seed, within strata), percentile or BCa, seeded, ``n_boot`` from the caller.
  Every replicate is a mean of values the quantity can take, so the interval lies within the range the
  data allow (an accuracy in [0, 1], a difference or a gain in [−1, 1]); ``bounds`` is checked, not
  needed;
- :func:`mde`, :func:`mde_two_proportions`, :func:`power_two_proportions`: the minimum detectable effect
  at 80 % power, α = 0.05, from the bootstrap's standard error, and the closed-form two-proportion one;
- :func:`sign_flip_test` (paired, per problem), :func:`permutation_test` (two evaluations, labels
  permuted within seed and stratum), :func:`sign_test` (signs of the seeds), :func:`holm`;
- :class:`Comparison`, :func:`holm_family`: one comparison across seeds with its per-seed and pooled
  tests, its verdict and its sentence, computed from the numbers (never typed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy import stats

from ...metrics import widen_interval

ALPHA = 0.05
POWER = 0.8
from .power import mde_two_proportions, power_two_proportions  # noqa: E402,F401 - closed forms, beside the design
LEVEL = 0.95
N_BOOT = 4000
N_PERM = 10000


# ---------------------------------------------------------------- units of one seed

@dataclass(frozen=True, eq=False)
class Units:
    """One evaluation of one seed: one value per unit (a problem's accuracy or difference, or a held-out
    sample's 0/1 outcome) and, optionally, each unit's stratum (its level), within which the bootstrap
    resamples and the permutation test permutes."""
    values: np.ndarray
    strata: np.ndarray | None = None

    def __post_init__(self):
        v = np.atleast_1d(np.asarray(self.values, dtype=np.float64))
        if v.ndim != 1 or len(v) == 0:
            raise ValueError("Units: need a non-empty 1-D array of values")
        object.__setattr__(self, "values", v)
        if self.strata is not None:
            s = np.asarray(self.strata).astype(str)
            if s.shape != v.shape:
                raise ValueError("Units: one stratum per value")
            object.__setattr__(self, "strata", s)

    def groups(self) -> list[np.ndarray]:
        """The values of each stratum (all values when there are no strata)."""
        if self.strata is None:
            return [self.values]
        return [self.values[self.strata == s] for s in sorted(set(self.strata))]

    def mean(self) -> float:
        return float(self.values.mean())


def as_units(x) -> Units:
    return x if isinstance(x, Units) else Units(x)


def level_units(rates: dict, per_level: int) -> Units:
    """The 0/1 outcomes behind held-out rates logged per level, ``per_level`` samples in each level
    (where the trainer logged rates, not outcomes), stratified by level."""
    values, strata = [], []
    for lv, r in rates.items():
        c = r * per_level
        if abs(c - round(c)) > 1e-6 or not 0 <= round(c) <= per_level:
            raise ValueError(f"level_units: rate {r} of level {lv} is not a share of {per_level} samples")
        values += [1.0] * round(c) + [0.0] * (per_level - round(c))
        strata += [str(lv)] * per_level
    return Units(np.array(values), np.array(strata))


# ---------------------------------------------------------------- the across-seed interval

@dataclass(frozen=True)
class Interval:
    """An estimate across seeds with its interval; unpacks as ``(mean, low, high)``."""
    mean: float
    low: float
    high: float
    se: float  # standard deviation of the bootstrap replicates
    seeds: int
    per_seed: tuple = ()
    method: str = "percentile"
    se_eff: float | None = None  # the standard error the interval's width stands for, after the small-k correction

    def __iter__(self):
        return iter((self.mean, self.low, self.high))

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return (self.mean, self.low, self.high)[i]

    def excludes_zero(self) -> int:
        """+1 if the interval lies above 0, −1 if below, 0 if it holds 0."""
        return 1 if self.low > 0 else -1 if self.high < 0 else 0


def _parts(groups) -> list[tuple[Units, ...]]:
    parts = [tuple(as_units(a) for a in (g if isinstance(g, tuple) else (g,))) for g in groups]
    if not parts:
        raise ValueError("need at least one seed")
    if len({len(p) for p in parts}) != 1:
        raise ValueError("every seed needs the same number of evaluations")
    return parts


def _resampled_means(u: Units, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """``n_boot`` means of ``u`` resampled with replacement within each stratum (weights fixed)."""
    total = np.zeros(n_boot)
    for v in u.groups():
        total += v[rng.integers(0, len(v), size=(n_boot, len(v)))].sum(axis=1) if len(v) > 1 else v[0]
    return total / len(u.values)


def seeds_problems(groups, combine: Callable | None = None, n_boot: int = N_BOOT, level: float = LEVEL,
                   seed: int = 0, method: str = "percentile", bounds: tuple[float, float] | None = None,
                   small_k: bool = True) -> Interval:
    """Mean over seeds and a bootstrap interval over seeds, then units within each drawn seed.

    ``groups`` holds one entry per seed: its units (an array or :class:`Units`), or a tuple of
    evaluations each resampled on its own, whose resampled means ``combine`` turns into the seed's value
    (``lambda start, end: end - start`` for a gain). A replicate draws seeds with replacement and, inside
    every drawn seed, its units with replacement (within strata); a seed drawn twice is resampled twice.
    ``method`` "percentile" or "bca" (bias-corrected and accelerated; acceleration from the jackknife
    over seeds); both are quantiles of the replicates, so within the range the data allow. With the
    same inputs and no strata, "percentile" gives :func:`polyvox.metrics.seed_bootstrap`'s interval.
    ``bounds``: the quantity's possible range: the replicates' interval is checked against it (a bug if it is
    left), the widened one below is cut to it.

    Small numbers of seeds. A percentile bootstrap over k seeds acts like a z interval on a plug-in standard
    error, too narrow when the spread between seeds dominates (simulated, 5 seeds, 600 problems × 8 samples,
    a between-seed σ of 3 points: 82 % coverage of a nominal 95 %). So its width is calibrated to the t
    interval on the seeds' values: half-width t_{k−1} √(s² / k), with s² the seeds' sample variance
    (between-seed spread and sampling together; W, one seed's sampling variance from the inner resamples, when
    the seeds' values are all equal). Each side of the percentile interval is scaled about the point so that its mean
    half-width is that (the bootstrap's asymmetry is kept), then cut to ``bounds``. Simulated coverage
    (5 seeds, 600 problems × 8 samples, 200 runs each; the t interval's own): 0.965, 0.93 and 0.915 for a
    between-seed σ of 0, 1 and 3 points (a Satterthwaite mix of t and z covered only 0.88 at 1 point;
    flooring s² at W, 1.00 at 0).
    ``Interval.se_eff`` = (t_{k−1} / z) √(s² / k), the standard error the minimum detectable effect uses (:func:`mde`).
    ``small_k=False`` gives the plain percentile interval.
    """
    parts = _parts(groups)
    fn = combine if combine is not None else (lambda *means: means[0])
    k = len(parts)
    rng = np.random.default_rng(seed)
    inner = np.empty((k, n_boot, k))  # (seed, replicate, slot)
    for s, arrays in enumerate(parts):
        for j in range(k):
            inner[s, :, j] = fn(*[_resampled_means(u, rng, n_boot) for u in arrays])
    pick = rng.integers(0, k, size=(n_boot, k))
    reps = inner[pick, np.arange(n_boot)[:, None], np.arange(k)[None, :]].mean(axis=1)
    per_seed = tuple(float(fn(*[np.float64(u.mean()) for u in arrays])) for arrays in parts)
    point = float(np.mean(per_seed))
    q = np.array([(1 - level) / 2, (1 + level) / 2])
    if method == "bca":
        below = np.mean(reps < point) + 0.5 * np.mean(reps == point)
        z0 = stats.norm.ppf(np.clip(below, 1 / (n_boot + 1), n_boot / (n_boot + 1)))
        jack = np.array([np.mean(np.delete(per_seed, i)) for i in range(k)]) if k > 2 else np.zeros(1)
        d = jack.mean() - jack
        a = float((d ** 3).sum() / (6 * (d ** 2).sum() ** 1.5)) if (d ** 2).sum() > 0 else 0.0
        z = stats.norm.ppf(q)
        q = stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))
    elif method != "percentile":
        raise ValueError(f"seeds_problems: method {method!r} (percentile or bca)")
    lo, hi = (float(x) for x in np.quantile(reps, q))
    if bounds is not None and not bounds[0] - 1e-12 <= lo <= hi <= bounds[1] + 1e-12:
        raise AssertionError(f"bootstrap interval {lo}, {hi} outside {bounds}")  # replicates out of range: a bug
    total = float(reps.var(ddof=1)) if n_boot > 1 else 0.0
    se_eff = None  # no correction: mde() falls back to the plug-in bootstrap's standard error
    if small_k and k > 1 and total > 0:
        within = float(np.mean(inner[:, :, 0].var(axis=1, ddof=1)))  # one seed's value: its sampling variance
        spread = float(np.var(per_seed, ddof=1))  # the seeds' values: between-seed variance + within
        var_mean = (spread if spread > 0 else within) / k  # seeds all equal: their sampling variance alone
        z = float(stats.norm.ppf((1 + level) / 2))
        t_q = float(stats.t.ppf((1 + level) / 2, k - 1))
        se_eff = t_q / z * math.sqrt(var_mean)
        lo, hi = widen_interval(point, lo, hi, t_q * math.sqrt(var_mean), bounds)
    elif bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return Interval(point, lo, hi, float(reps.std(ddof=1)), k, per_seed, method, se_eff)


# ---------------------------------------------------------------- minimum detectable effect

def z_sum(alpha: float = ALPHA, power: float = POWER) -> float:
    """z_{1−α/2} + z_{power}: 1.96 + 0.84 = 2.80 at the defaults."""
    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))


def mde(iv: Interval, alpha: float = ALPHA, power: float = POWER, limit: float = 1.0) -> float:
    """The smallest true difference a two-sided test at ``alpha`` detects with ``power``, from the
    across-seed interval's standard error: (z_{1−α/2} + z_{power}) · se_eff, the small-k corrected one
    (:func:`seeds_problems`); for an interval without it, (z_{1−α/2} + z_{power}) · se · √(k / (k − 1)) with k seeds
    (the plug-in bootstrap's variance of a mean over k seeds is (k − 1)/k of the unbiased one). At most
    ``limit`` (a difference of rates cannot exceed 1); nan when the data hold no variation at all (every
    replicate equal: the standard error says nothing about what could have been detected)."""
    if iv.se == 0:
        return float("nan")
    if iv.se_eff is not None and iv.seeds > 1:  # the small-k corrected standard error (seeds_problems)
        return float(min(z_sum(alpha, power) * iv.se_eff, limit))
    k = iv.seeds
    return float(min(z_sum(alpha, power) * iv.se * (math.sqrt(k / (k - 1)) if k > 1 else 1.0), limit))


# ---------------------------------------------------------------- tests

def _two_sided(t: float, null: np.ndarray) -> float:
    return float((1 + np.sum(np.abs(null) >= abs(t) - 1e-12)) / (1 + len(null)))


def t_test_over_seeds(values) -> float:
    """Two-sided one-sample t-test of the seeds' values against 0 (k − 1 degrees of freedom): the test that
    matches the across-seed interval's small-k calibration (:func:`seeds_problems`). 1.0 with fewer than 2
    seeds or when every value is 0; 0.0 when the values agree exactly on a nonzero value."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2 or not np.any(x):
        return 1.0
    sd = float(x.std(ddof=1))
    if sd == 0:
        return 0.0
    return float(2 * stats.t.sf(abs(x.mean()) / (sd / math.sqrt(len(x))), len(x) - 1))


def bootstrap_z_test(group: tuple, combine: Callable, n_boot: int = N_BOOT, seed: int = 0) -> float:
    """One seed's test of a combined value (e.g. a difference of two gains) against 0: 2 Φ(−|x| / se), se the
    sd of the value over ``n_boot`` resamples of each evaluation's units within their strata."""
    rng = np.random.default_rng(seed)
    arrays = tuple(as_units(a) for a in group)
    x = float(combine(*[np.float64(u.mean()) for u in arrays]))
    se = float(np.std(combine(*[_resampled_means(u, rng, n_boot) for u in arrays]), ddof=1))
    if se == 0:
        return 1.0 if x == 0 else 0.0
    return float(2 * stats.norm.sf(abs(x) / se))


def sign_flip_test(groups, n_perm: int = N_PERM, seed: int = 0) -> float:
    """Pooled paired test: per-unit paired differences of every seed (think − panel per problem);
    statistic the mean over seeds of each seed's mean difference; under the null (the two systems
    exchangeable on every problem) each difference's sign is flipped at random. Two-sided Monte Carlo p."""
    ds = [as_units(g).values for g in groups]
    if not ds:
        raise ValueError("sign_flip_test: no seeds")
    rng = np.random.default_rng(seed)
    t = np.mean([d.mean() for d in ds])
    null = np.zeros(n_perm)
    for d in ds:
        signs = rng.integers(0, 2, size=(n_perm, len(d)), dtype=np.int8) * 2 - 1
        null += signs @ d / len(d)
    return _two_sided(t, null / len(ds))


def permutation_test(groups, n_perm: int = N_PERM, seed: int = 0) -> float:
    """Pooled test of two evaluations per seed (``(a, b)``: step 0 and the last step): statistic the
    mean over seeds of mean(b) − mean(a); under the null the a/b labels are permuted within each seed
    and stratum (a stratified permutation test; unpaired units, conservative where a and b share
    problems and sampling seeds). Two-sided Monte Carlo p."""
    parts = _parts(groups)
    if any(len(p) != 2 for p in parts):
        raise ValueError("permutation_test: every seed needs two evaluations (a, b)")
    rng = np.random.default_rng(seed)
    t, null = 0.0, np.zeros(n_perm)
    for a, b in parts:
        t += b.mean() - a.mean()
        sa, sb = (dict(zip(sorted(set(u.strata)), u.groups())) if u.strata is not None else {"": u.values}
                  for u in (a, b))
        if set(sa) != set(sb):
            raise ValueError("permutation_test: both evaluations need the same strata")
        sum_b = np.zeros(n_perm)
        total = 0.0
        for s in sa:
            v = np.r_[sa[s], sb[s]]
            keys = rng.random((n_perm, len(v))).argsort(axis=1)[:, : len(sb[s])]
            sum_b += v[keys].sum(axis=1)
            total += v.sum()
        null += sum_b / len(b.values) - (total - sum_b) / len(a.values)
    return _two_sided(t / len(parts), null / len(parts))


def sign_test(values) -> tuple[float, float, int]:
    """Two-sided exact sign test of the seeds' estimates against 0 (ties dropped): (p, the smallest p
    that many seeds can give: 2 · 0.5^k, k the seeds that are not ties)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[v != 0]
    if len(v) == 0:
        return 1.0, 1.0, 0
    return (float(stats.binomtest(int((v > 0).sum()), len(v), 0.5).pvalue), float(min(1.0, 2 * 0.5 ** len(v))),
            len(v))


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error at α for every test of the family)."""
    p = np.asarray(pvalues, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    m = len(p)
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


# ---------------------------------------------------------------- a comparison and its words

def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


@dataclass
class Comparison:
    """One comparison across seeds: the across-seed interval, each seed's estimate and test, the pooled
    test, the sign test over seeds and the minimum detectable effect; the Holm-adjusted p values (per
    seed and pooled) are set by :func:`holm_family`. The sign test is reported unadjusted and outside
    the family: with k seeds its p cannot go below 2 · 0.5^k (0.25 for 3), so it never decides."""
    name: str
    interval: Interval
    seeds: list
    p_seed: list
    p_pooled: float
    pooled_test: str  # how the pooled test is named in prose
    n_perm: int = N_PERM  # Monte Carlo draws of the tests (their p cannot go below 1 / (n_perm + 1))
    monte_carlo: bool = True  # False: the tests are closed-form (t and z), with no floor on p
    p_sign: float = field(init=False)
    p_sign_min: float = field(init=False)
    sign_seeds: int = field(init=False)
    mde: float = field(init=False)
    p_seed_holm: list = field(init=False)
    p_pooled_holm: float = field(init=False)
    in_family: bool = field(init=False, default=False)  # set by holm_family; outside it the p values are unadjusted

    def __post_init__(self):
        self.p_sign, self.p_sign_min, self.sign_seeds = sign_test(self.per_seed)
        self.mde = mde(self.interval)
        self.p_seed_holm, self.p_pooled_holm = list(self.p_seed), self.p_pooled

    @property
    def per_seed(self) -> tuple:
        return self.interval.per_seed

    def pvalues(self) -> list[float]:
        """The p values this comparison adds to the family: each seed's test and the pooled test."""
        return [*self.p_seed, self.p_pooled]

    def set_adjusted(self, adj) -> None:
        k = len(self.p_seed)
        self.p_seed_holm, self.p_pooled_holm = [float(x) for x in adj[:k]], float(adj[k])
        self.in_family = True

    def direction(self) -> int:
        return int(np.sign(self.interval.mean))

    def every_seed(self) -> bool:
        """Every seed's estimate has the mean's sign and each seed's own test is significant (Holm)."""
        d = self.direction()
        return (len(self.seeds) > 1 and d != 0 and all(np.sign(x) == d for x in self.per_seed)
                and all(p < ALPHA for p in self.p_seed_holm))

    def kind(self) -> str:
        """"across seeds" (the interval excludes 0 and the pooled test is significant), "every seed"
        (each seed significant, same sign, the across-seed interval holding 0), "pooled only" (the
        pooled test alone), "interval only" (the across-seed interval excludes 0 but the pooled test is
        not significant after Holm: undecided, and not a null — the estimate may exceed the minimum
        detectable effect), or "none"."""
        across = self.interval.excludes_zero() == self.direction() != 0
        pooled = self.p_pooled_holm < ALPHA
        if across and pooled:
            return "across seeds"
        if self.every_seed():
            return "every seed"
        if pooled:
            return "pooled only"
        return "interval only" if across else "none"

    def mde_text(self, what: str = "difference") -> str:
        """``minimum detectable effect 15.1 points at 80% power, α = 0.05`` — what the design could detect, never
        a bound on the effect: a true effect smaller than it is missed often, and the interval may reach past it."""
        if self.mde != self.mde:
            return "minimum detectable effect not estimable: the outcomes do not vary"
        return f"minimum detectable effect {100 * self.mde:.1f} points at {POWER:.0%} power, α = {ALPHA}"

    def reach_text(self, what: str = "difference") -> str:
        """Where the across-seed interval reaches past the minimum detectable effect, the clause that says {what}s
        that large are compatible with these seeds (empty otherwise): an MDE is not an upper bound on the effect.
        The end of the interval farther from 0 is named with its sign; a "change" is named a loss or a gain."""
        low, high = self.interval.low, self.interval.high
        reach = low if abs(low) >= abs(high) else high
        if self.mde != self.mde or abs(reach) <= self.mde:
            return ""
        noun = ("losses" if reach < 0 else "gains") if what == "change" else f"{what}s"
        return (f"; the 95% interval reaches {100 * reach:+.1f} points, past the minimum detectable effect: {noun} up "
                f"to {100 * abs(reach):.1f} points are compatible with these seeds")

    def verdict(self, up: str, down: str, neither: str, what: str = "difference") -> str:
        """The verdict the numbers allow, in words (:meth:`kind`). A null says the {what} is not detectable across
        seeds and gives the design's minimum detectable effect — never "no {what} larger than" it, which is not
        what a minimum detectable effect is (and, where the interval reaches past it, says so); a "pooled only"
        direction says that across seeds the {what} is not established; an interval that excludes 0 without a
        significant pooled test is undecided."""
        word = up if self.direction() > 0 else down
        after = " after Holm's correction" if self.in_family else ""
        n_sig, k = sum(p < ALPHA for p in self.p_seed_holm), len(self.seeds)
        same_sign = all(np.sign(x) == self.direction() for x in self.per_seed)
        return {"across seeds": word if n_sig == k or k < 2 else
                f"{word}, every seed with the same sign, {n_sig} of {k} significant alone{after}" if same_sign else
                f"{word}, carried by {n_sig} of {k} seeds (the other{'s' if k - n_sig > 1 else ''} not significant alone)",
                "every seed": f"{word} in every seed, each significant (the across-seed interval holds 0)",
                "pooled only": f"{word} on the pooled test only — a test of these seeds' samples, conditional on the "
                               f"seeds; across seeds the {what} is not established: the 95% interval holds 0 "
                               f"({self.mde_text(what)}){self.reach_text(what)}",
                "interval only": f"undecided — {word} by the across-seed interval alone ({100 * self.interval.mean:+.1f} "
                                 f"points, 95% interval {100 * self.interval.low:+.1f} to {100 * self.interval.high:+.1f}), "
                                 f"but the pooled test is not significant{after} "
                                 f"({p_text(self.p_pooled_holm)}), so neither a {what} nor its absence is stated",
                "none": (f"{neither} — {self.mde_text(what)}" if self.mde != self.mde else
                         f"{neither} — not detectable across seeds ({self.mde_text(what)}){self.reach_text(what)}")
                }[self.kind()]

    def seeds_sentence(self) -> str:
        """Each seed's estimate and test, the pooled test and the sign test, Holm-adjusted."""
        signs = {int(np.sign(x)) for x in self.per_seed}
        n_sig = sum(p < ALPHA for p in self.p_seed_holm)
        k = len(self.seeds)
        ties = sum(x == 0 for x in self.per_seed)
        lead = ("" if k < 2 else
                ("every seed at 0, " if signs == {0} else
                 "every seed has the same sign, " if len(signs) == 1 else
                 f"the seeds differ in sign{f' ({ties} at 0)' if ties else ''}, " if len(signs - {0}) > 1 else
                 f"no seed has the other sign ({ties} at 0), ")
                + ("each significant" if n_sig == k else f"{n_sig} of {k} significant") + "; ")
        floor = 1 / (self.n_perm + 1) + 1e-15 if self.monte_carlo else 0.0
        # at the Monte Carlo floor the adjusted p is a bound: printed with enough digits never to round below it
        p = lambda raw, adj: (f"p ≤ {math.ceil(adj * 1e4) / 1e4:.4f}" if adj < 0.01 else f"p ≤ {adj:.3f}") \
            if raw <= floor and adj >= 0.001 else p_text(adj)  # noqa: E731
        return (lead + "per seed " + ", ".join(f"{100 * x:+.1f} ({p(r, a)})" for x, r, a in
                                               zip(self.per_seed, self.p_seed, self.p_seed_holm))
                + f"; {self.pooled_test} {p(self.p_pooled, self.p_pooled_holm)} ("
                + ("Holm-adjusted over the chapter's family of tests" if self.in_family else
                   "unadjusted: a descriptive comparison, outside the chapter's family of tests")
                + (f"; {self.n_perm:,} random permutations, so no p below {floor:.5f}"
                   f"{' before adjustment' if self.in_family else ''})" if self.monte_carlo else ")")
                + (f"; sign test over the {self.sign_seeds} seeds that are not ties {p_text(self.p_sign)}, the "
                   f"smallest p {self.sign_seeds} seeds can give being {self.p_sign_min:.3f}" if self.sign_seeds > 1 else ""))


def holm_family(comparisons: dict[str, Comparison]) -> dict[str, Comparison]:
    """Holm over every p value of the comparisons (per seed, pooled and sign tests); sets each
    comparison's adjusted values and returns the dict."""
    ps = [p for c in comparisons.values() for p in c.pvalues()]
    adj = holm(ps)
    i = 0
    for c in comparisons.values():
        n = len(c.pvalues())
        c.set_adjusted(adj[i:i + n])
        i += n
    return comparisons


def family_table(comparisons: dict[str, Comparison], labels: dict[str, str] | None = None,
                 adjusted: bool = True) -> "pd.DataFrame":
    """One row per comparison of the family: estimate and interval, minimum detectable effect, how many
    seeds share the estimate's sign and how many are significant alone, the pooled and the sign test,
    and the kind of verdict (:meth:`Comparison.kind`). ``adjusted=False``: comparisons outside the Holm family
    (descriptive), their p values unadjusted and the columns named so; ``labels`` (name → words) replaces a row's
    verdict (a descriptive row is not a verdict of the family)."""
    import pandas as pd

    tag = "Holm" if adjusted else "unadjusted"
    labels = labels or {}
    return pd.DataFrame([{
        "comparison": name, "seeds": len(c.seeds), "estimate": c.interval.mean, "low": c.interval.low,
        "high": c.interval.high, "MDE (80% power)": c.mde,
        "seeds with its sign": sum(np.sign(x) == c.direction() != 0 for x in c.per_seed),
        f"seeds significant ({tag})": sum(p < ALPHA for p in c.p_seed_holm),
        f"pooled p ({tag})": c.p_pooled_holm, "sign-test p": c.p_sign, "verdict": labels.get(name, c.kind())}
        for name, c in comparisons.items()])


def sd_interval(s: float, k: int, level: float = LEVEL) -> tuple[float, float]:
    """The chi-square interval of a standard deviation ``s`` estimated from ``k`` values (k − 1 degrees of freedom,
    normal values): (s √((k − 1)/χ²_{(1+level)/2}), s √((k − 1)/χ²_{(1−level)/2})). With 5 values the upper limit
    is 2.87 s: a spread measured on few seeds is itself uncertain, and so is every power and minimum detectable
    effect computed from it."""
    if k < 2 or not s == s:
        return float("nan"), float("nan")
    df = k - 1
    return (float(s * math.sqrt(df / stats.chi2.ppf((1 + level) / 2, df))),
            float(s * math.sqrt(df / stats.chi2.ppf((1 - level) / 2, df))))


def all_equal_expected(k, n: int, g: int, strata=None) -> np.ndarray:
    """Per unit (a problem answered right ``k`` times in ``n`` samples), the posterior expectation of
    p^g + (1 − p)^g — the chance that a fresh group of ``g`` samples is all right or all wrong, so that GRPO gets
    no gradient from it — under a beta prior fitted by maximum marginal likelihood to the units of each stratum
    (beta-binomial, empirical Bayes). A posterior given the counts is valid for units selected on those counts
    (a band chosen on these draws); plugging in k / n is not: it pulls the selected units towards the middle."""
    from scipy import optimize, special

    k = np.asarray(k, dtype=float)
    strata = np.zeros(len(k)) if strata is None else np.asarray(strata).astype(str)
    out = np.empty(len(k))
    for s in np.unique(strata):
        m = strata == s
        ks = k[m]

        def nll(log_ab):
            a, b = np.exp(log_ab)
            return -float(np.sum(special.betaln(ks + a, n - ks + b) - special.betaln(a, b)))

        a, b = np.exp(optimize.minimize(nll, [0.0, 0.0], method="Nelder-Mead").x)
        ak, bk = a + ks, b + n - ks
        base = special.betaln(ak, bk)
        out[m] = np.exp(special.betaln(ak + g, bk) - base) + np.exp(special.betaln(ak, bk + g) - base)
    return out
