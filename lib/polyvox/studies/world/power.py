"""How many seeds and held-out problems Part IV needs (issue 21, item 4), and what a design can detect.

Model (a two-level variance decomposition, closed form). One seed's estimate of a quantity (an arm's
held-out accuracy, or a hill-climb's gain = accuracy after − accuracy before) is

    x̂_s = x + u_s + e_s,   u_s ~ (0, σ_b²)  (between seeds: the RL run itself),
                            e_s ~ (0, w · p(1 − p) / (n · m))  (within a seed: binomial sampling)

with n held-out problems, m samples per problem, p the accuracy the samples are drawn at, and w = 1
for an accuracy, 2 for a gain (before and after are both sampled). The binomial term takes every
problem at the mean accuracy p: since mean_i p_i(1 − p_i) ≤ p(1 − p), it is an upper bound, and it
ignores the positive correlation of the before and after samples of a gain (same problems, same
sampling seeds), so it is conservative. Inference is conditional on the held-out problems (one fixed
set, shared by both arms and every seed): the problem-to-problem variance is not a term.

Comparisons. A hill-climb gain δ (one arm, S seeds): the mean of S per-seed gains, a one-sample
two-sided t-test with S − 1 degrees of freedom, SE² = (σ_b² + 2 p(1 − p)/(n m)) / S. The think − panel
difference as the chapter tests it (:func:`paired_difference`): each seed's mean per-problem difference
think − panel on the shared problems, a one-sample t-test over the S seeds' differences (S − 1 degrees of
freedom), SE² = (σ_b² + v/n) / S with σ_b the spread of the per-seed differences and v the variance of one
problem's difference (measured; 2 p(1 − p)/m when not given). :func:`arm_difference` is the unpaired
alternative (two independent groups of S seeds, 2S − 2 degrees of freedom, SE² = 2 (σ_b² + p(1 − p)/(n m)) / S). Power is computed exactly for that t-test from the
noncentral t distribution (scipy.stats.nct): power = P(|T| > t_{1−α/2}) with noncentrality δ / SE.
``test="z"`` uses the normal instead (the classical closed form: with σ_b = 0 and S = 1 the two-sample
case is the two-proportion z-test's n = (z_{1−α/2} + z_{1−β})² · 2p(1 − p) / δ² per group).

The design (:func:`design`) is the fewest seeds S ≥ :data:`MIN_SEEDS` for which some n ≤ ``max_problems``
reaches the power, then the fewest problems at that S. σ_b² does not shrink with n: when
σ_b ≥ δ / (t_{1−α/2} + t_{1−β}) · √(S / groups) no number of problems helps, only seeds.

σ_b comes from recorded runs (:func:`recorded_spread`: a method-of-moments estimate — the sample
variance of the seeds' values less the mean binomial variance, floored at 0) or from the pilot once RL
seeds exist; the pilot's per-level accuracies give p.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

ALPHA = 0.05
POWER = 0.80
MIN_SEEDS = 5  # the floor of the issue: at least 5 seeds per arm
CLIMB_GAIN = 0.10  # the hill-climb gain to detect (the study reported +15 points)
ARM_DIFFERENCE = 0.05  # the think − panel difference to detect


@dataclass(frozen=True)
class Comparison:
    """One comparison: ``effect`` to detect; ``groups`` 1 (a gain within an arm) or 2 (two arms);
    ``p`` the accuracy the samples are drawn at; ``between_sd`` σ_b of one seed's value; ``samples`` m
    samples per problem; ``within`` w (1 an accuracy, 2 a gain: before and after both sampled); ``unit_var``, when given, the
    measured variance of one problem's value (a per-problem paired difference), replacing w·p(1 − p)/m."""
    name: str
    effect: float
    groups: int
    p: float
    between_sd: float
    samples: int
    within: float = 1
    unit_var: float | None = None

    def se(self, seeds: int, problems: int) -> float:
        sampling = (self.unit_var / problems if self.unit_var is not None else
                    self.within * self.p * (1 - self.p) / (problems * self.samples))
        per_seed = self.between_sd ** 2 + sampling
        return math.sqrt(self.groups * per_seed / seeds)

    def df(self, seeds: int) -> int:
        return self.groups * (seeds - 1) if self.groups == 2 else seeds - 1


def climb_gain(p: float, between_sd: float, samples: int, effect: float = CLIMB_GAIN, late: int = 1) -> Comparison:
    """A hill-climb gain: the last held-out evaluation − step 0 (``late`` 1: w = 2), or the mean of the last
    ``late`` evaluations − step 0 (w = 1 + 1/late: the mean of ``late`` points samples less noise; the evaluations
    are treated as independent samplings)."""
    return Comparison("hill-climb gain", effect, 1, p, between_sd, samples, within=1 + 1 / late)


def arm_difference(p: float, between_sd: float, samples: int, effect: float = ARM_DIFFERENCE) -> Comparison:
    """think − panel as two independent groups of seeds (unpaired; not the chapter's test: :func:`paired_difference`)."""
    return Comparison("think − panel", effect, 2, p, between_sd, samples, within=1)


def paired_difference(p: float, between_sd: float, samples: int, unit_var: float | None = None,
                      effect: float = ARM_DIFFERENCE) -> Comparison:
    """think − panel as the chapter tests it: one paired difference per seed (both systems on the same problems),
    a one-sample t-test over the seeds; ``between_sd`` the spread of the per-seed differences beyond sampling,
    ``unit_var`` the variance of one problem's difference (None: two independent samplings, 2 p(1 − p)/m)."""
    return Comparison("think − panel", effect, 1, p, between_sd, samples, within=2, unit_var=unit_var)


def power(c: Comparison, seeds: int, problems: int, alpha: float = ALPHA, test: str = "t",
          effect: float | None = None) -> float:
    """The probability that the two-sided test at ``alpha`` rejects when the true effect is ``effect``
    (default the comparison's)."""
    from scipy.stats import nct, norm, t

    delta = c.effect if effect is None else effect
    se = c.se(seeds, problems)
    if se == 0:  # no variance at all (p at 0 or 1 and no spread between seeds): any effect is certain to show
        return 1.0 if delta else float(alpha)
    ncp = delta / se
    if test == "z":
        z = norm.ppf(1 - alpha / 2)
        return float(norm.cdf(ncp - z) + norm.cdf(-ncp - z))
    if test != "t":
        raise ValueError(f"test: 't' or 'z', got {test!r}")
    df = c.df(seeds)
    if df < 1:
        return float("nan")
    crit = t.ppf(1 - alpha / 2, df)
    value = float(nct.sf(crit, df, ncp) + nct.cdf(-crit, df, ncp))
    if not math.isfinite(value):  # scipy's noncentral t gives nan far in the tail (ncp ≳ 8, power > 0.99):
        value = float(norm.cdf(ncp - crit) + norm.cdf(-ncp - crit))  # the normal with the t's critical value
    return value


def t_power(sd: float, seeds: int, effect: float, alpha: float = ALPHA) -> float:
    """The power of the two-sided one-sample t-test over ``seeds`` seeds' values whose standard deviation (between
    seeds and sampling together) is ``sd``, when the true mean is ``effect``: the test the chapter's across-seed
    verdicts are calibrated to. Where :func:`power`'s σ_b is above 0 the two agree at the run's own size."""
    from scipy.stats import nct, norm, t

    if seeds < 2 or not sd == sd:
        return float("nan")
    if sd == 0:
        return 1.0 if effect else float(alpha)
    df, ncp = seeds - 1, effect / (sd / math.sqrt(seeds))
    crit = t.ppf(1 - alpha / 2, df)
    value = float(nct.sf(crit, df, ncp) + nct.cdf(-crit, df, ncp))
    return value if math.isfinite(value) else float(norm.cdf(ncp - crit) + norm.cdf(-ncp - crit))


def problems_needed(c: Comparison, seeds: int, target: float = POWER, alpha: float = ALPHA, test: str = "t",
                    max_problems: int = 100_000) -> int | None:
    """The fewest held-out problems with which ``seeds`` seeds reach ``target`` power (None: none do)."""
    if power(c, seeds, max_problems, alpha, test) < target:
        return None
    lo, hi = 1, max_problems  # power rises with n: the first n that reaches the target
    while lo < hi:
        mid = (lo + hi) // 2
        if power(c, seeds, mid, alpha, test) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class Design:
    comparison: str
    effect: float
    seeds: int | None  # per arm; None: more than max_seeds would be needed
    problems: int | None  # held-out problems (all levels together)
    samples: int
    power: float | None
    between_sd: float
    p: float

    def line(self) -> str:
        if self.seeds is None:
            return (f"{self.comparison}: {self.effect * 100:.0f} points cannot be detected with 80 % power by any "
                    f"design searched (σ_b = {self.between_sd * 100:.1f} points between seeds)")
        return (f"{self.comparison}: {self.effect * 100:.0f} points at 80 % power needs {self.seeds} seeds per arm and "
                f"{self.problems} held-out problems × {self.samples} samples (power {self.power:.3f}; "
                f"σ_b = {self.between_sd * 100:.1f} points, p = {self.p:.2f})")


def design(c: Comparison, target: float = POWER, alpha: float = ALPHA, min_seeds: int = MIN_SEEDS,
           max_seeds: int = 200, max_problems: int = 100_000, test: str = "t") -> Design:
    """The fewest seeds (≥ ``min_seeds``) for which some number of problems reaches ``target`` power,
    and the fewest problems at that number of seeds."""
    for s in range(max(min_seeds, 2), max_seeds + 1):
        n = problems_needed(c, s, target, alpha, test, max_problems)
        if n is not None:
            return Design(c.name, c.effect, s, n, c.samples, round(power(c, s, n, alpha, test), 4), c.between_sd, c.p)
    return Design(c.name, c.effect, None, None, c.samples, None, c.between_sd, c.p)


def mde(c: Comparison, seeds: int, problems: int, target: float = POWER, alpha: float = ALPHA,
        test: str = "t") -> float:
    """The minimum detectable effect: the effect that the design detects with ``target`` power."""
    lo, hi = 0.0, 1.0
    if power(c, seeds, problems, alpha, test, effect=hi) < target:
        return float("inf")
    for _ in range(60):
        mid = (lo + hi) / 2
        if power(c, seeds, problems, alpha, test, effect=mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def two_proportion_n(p1: float, p2: float, alpha: float = ALPHA, target: float = POWER) -> int:
    """The classical sample size per group of a two-sided two-proportion z-test (unpooled variances):
    n = (z_{1−α/2} + z_{1−β})² (p1 q1 + p2 q2) / (p1 − p2)², rounded up. For checking :func:`power`."""
    from scipy.stats import norm

    z = norm.ppf(1 - alpha / 2) + norm.ppf(target)
    return math.ceil(z * z * (p1 * (1 - p1) + p2 * (1 - p2)) / (p1 - p2) ** 2)


def between_sd(values, within_var: float = 0.0) -> float:
    """σ_b by the method of moments: √max(0, sample variance of the seeds' values − the mean within-seed
    variance of one value). Needs two values or more."""
    x = [float(v) for v in values]
    if len(x) < 2:
        raise ValueError("between_sd: need the values of two seeds or more")
    mean = sum(x) / len(x)
    var = sum((v - mean) ** 2 for v in x) / (len(x) - 1)
    return math.sqrt(max(0.0, var - within_var))


def _jsonl(path: Path) -> list[dict]:
    """A JSONL record's rows, read plain or stored gzipped (a shipped recording's large records)."""
    from ...jsonl import iter_jsonl

    return [row for _, row in iter_jsonl(path)]


def recorded_spread(root: str | Path, cap: int = 1024) -> dict:
    """Between-seed spread in a recorded world run (either design, :mod:`.layout`): σ_b of the panel arm's
    evaluation accuracy at ``cap`` (its RL seeds; the panel-only design's think arm had none) and of each
    hill-climb's gain (held-out accuracy at the run's declared endpoint, the mean of its last k evaluations, − at
    step 0), over every seed and over the seeds
    recorded at one commit (the largest such set); with p and the number of held-out problems × samples each used."""
    from . import layout

    root = Path(root)
    seeds = sorted(int(d.name.split("-")[1]) for d in root.glob("seed-*") if d.name.split("-")[1].isdigit())
    commit = {k: json.loads((layout.rl_folders(root, k)["panel"] / "manifest.json").read_text()).get("git_commit")
              for k in seeds}
    groups: dict = {}
    for k in seeds:
        groups.setdefault(commit[k], []).append(k)
    same = max(groups.values(), key=len)  # the largest set of seeds recorded at one commit
    out: dict = {"seeds": seeds, "seeds_at_one_commit": same}
    acc, n_samples = {}, {}
    for k in seeds:
        rows = _jsonl(layout.eval_folder(root, k, cap, "tiny-panel") / "graded.jsonl")
        acc[k], n_samples[k] = sum(bool(r["correct"]) for r in rows) / len(rows), len(rows)
    p = sum(acc.values()) / len(acc)
    w = p * (1 - p) / min(n_samples.values())
    out["panel_accuracy"] = {"values": acc, "p": p, "samples": min(n_samples.values()),
                             "between_sd_all": between_sd(acc.values(), w),
                             "between_sd_same_commit": between_sd([acc[k] for k in same], w) if len(same) > 1 else None}
    from .analysis import climb_endpoint_evals

    ends = climb_endpoint_evals(root, seeds)  # the run's declared endpoint: the mean of the last k evaluations
    for arm in ("panel", "think"):
        gains, ps = {}, []
        for k in seeds:
            traj = _jsonl(root / f"seed-{k}/hillclimb-{arm}/heldout_trajectory.jsonl")
            later = [r["heldout_mean"] for r in traj[1:]][-ends:]
            gains[k] = sum(later) / len(later) - traj[0]["heldout_mean"]
            ps.append(traj[0]["heldout_mean"])
        cfg = json.loads((root / f"seed-{seeds[0]}/hillclimb-{arm}/manifest.json").read_text())["config"]
        m = cfg["heldout_problems"] * cfg["heldout_samples"]
        pg = sum(ps) / len(ps)
        w = 2 * pg * (1 - pg) / m
        out[f"{arm}_climb_gain"] = {"values": gains, "p": pg, "samples": m,
                                    "between_sd_all": between_sd(gains.values(), w),
                                    "between_sd_same_commit": between_sd([gains[k] for k in same], w)
                                    if len(same) > 1 else None}
    return out


def plan(p_climb: float, p_eval: float, sd_climb: float, sd_arms: float, samples: int,
         min_seeds: int = MIN_SEEDS, test: str = "t") -> dict:
    """Both comparisons' designs (as dicts) and their one-line summaries, for the chapter and the scale."""
    designs = [design(climb_gain(p_climb, sd_climb, samples), min_seeds=min_seeds, test=test),
               design(arm_difference(p_eval, sd_arms, samples), min_seeds=min_seeds, test=test)]
    return {"designs": [asdict(d) for d in designs], "lines": [d.line() for d in designs]}


def report(pilot_summary: dict | None, recorded: str | Path | None, samples: int, p: float = 0.5,
           between: dict | None = None) -> list[str]:
    """The lines the chapter and the GPU session print: each comparison's design under each σ_b scenario.

    p defaults to 0.5 (the binomial variance's maximum: the trained arms' accuracies are not known before
    RL; the pilot samples the untrained start). The σ_b scenarios: ``between`` ({label: σ_b}), else the
    recorded runs' (:func:`recorded_spread`: every seed, and the seeds of one commit)."""
    lines = []
    if pilot_summary is not None:
        lines.append(f"pilot: cap {pilot_summary['cap']}, derived cap {pilot_summary['derived_cap']} "
                     f"(99th percentile of both arms' lengths, rounded up)")
    if between is None:
        r = recorded_spread(recorded)
        between = {}
        for key, label in (("panel_accuracy", "arm accuracy"), ("panel_climb_gain", "panel climb gain"),
                           ("think_climb_gain", "think climb gain")):
            between[f"{label}, seeds {r['seeds']}"] = r[key]["between_sd_all"]
            if r[key]["between_sd_same_commit"] is not None:
                between[f"{label}, seeds {r['seeds_at_one_commit']} (one commit)"] = r[key]["between_sd_same_commit"]
    for label, sd in between.items():
        comparison = arm_difference if label.startswith("arm") else climb_gain
        lines.append(f"[σ_b from {label}] " + design(comparison(p, sd, samples)).line())
    return lines


if __name__ == "__main__":  # python -m polyvox.studies.world.power <run folder> [samples per problem]
    import sys

    run = Path(sys.argv[1])
    summary = json.loads((run / "pilot" / "summary.json").read_text()) if (run / "pilot").is_dir() else None
    for line in report(summary, Path("data/runs/world"), int(sys.argv[2]) if len(sys.argv) > 2 else 4):
        print(line)


# ---------------------------------------------------------------- two proportions (closed form)

def _norm():
    from scipy import stats

    return stats.norm


def power_two_proportions(p1: float, p2: float, n1: int, n2: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided pooled z-test of two proportions (n1, n2 independent samples) when the
    true rates are p1 and p2 (the far tail left out, as the closed-form sample-size formula does)."""
    pbar = (n1 * p1 + n2 * p2) / (n1 + n2)
    se0 = math.sqrt(pbar * (1 - pbar) * (1 / n1 + 1 / n2))
    se1 = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    if se1 == 0:
        return 1.0 if abs(p2 - p1) > 0 else 0.0
    return float(_norm().cdf((abs(p2 - p1) - _norm().ppf(1 - alpha / 2) * se0) / se1))


def mde_two_proportions(p: float, n1: int, n2: int | None = None, alpha: float = ALPHA, power: float = POWER,
                        direction: int = 1) -> float:
    """The smallest change d of a rate p (to p + d upwards, p − d downwards) that the two-sided pooled
    z-test on n1 and n2 samples detects with ``power``; nan if even the largest possible change does not."""
    from scipy.optimize import brentq

    n2 = n1 if n2 is None else n2
    room = 1 - p if direction > 0 else p
    f = lambda d: power_two_proportions(p, p + direction * d, n1, n2, alpha) - power  # noqa: E731
    if room <= 0 or f(room) < 0:
        return float("nan")
    return float(brentq(f, 1e-12, room, xtol=1e-12))
