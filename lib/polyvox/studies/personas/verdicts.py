"""Part II's statistics (issue 22 item 5): pooled tests over seeds that resample users, Holm across the chapter's
family, each null's minimum detectable effect, a power analysis from a recorded pilot, and the answer to the
study's question only when the numbers give one.

The unit. A comparison's outcome per prompt scores 1 (A wins in both orders), ½ (tie) or 0; its win rate
is the mean. Seeds vary the heads; every seed answers the same test users' prompts (one test set), so seeds
and users are *crossed*, and a user's prompts are not independent (the same user's cues).

- :func:`pooled`: the win rate pooled over seeds (every prompt of every seed counted once), its 95 %
  interval with the shape of the pigeonhole bootstrap for crossed designs (Owen 2007, *The pigeonhole
  bootstrap*, Ann. Appl. Stat. 1(2): seeds and users each drawn with replacement, independently; a replicate
  is the ratio of the drawn cells' scores to their prompts, so it lies in [0, 1]) and the width of a t
  interval on a standard error calibrated for few seeds (:func:`calibrated_se`: the pigeonhole's Wald test
  rejected a true 50 % in 9.7 % of simulated runs of h200-v2's design with a seed σ of 5 points; calibrated,
  4.7 %), and that t test's two-sided p for 50 % (p = 1 when nothing varies);
- :func:`family`: Holm's step-down correction (:func:`polyvox.studies.world.inference.holm`) over the
  rows the chapter states a verdict for, and each row's minimum detectable effect at Holm's strictest level
  α/m with 80 % power: (z_{1−α/(2m)} + z_{0.8}) · se, at most 50 points;
- :func:`components`, :func:`design`: the pilot's variance components (two-way random-effects ANOVA on the
  seed × user table of cell means, method of moments, floored at 0): Var(pooled rate) = σ_seed²/S +
  σ_user²/U + σ_res²/(S·U) for S seeds and U test users of ``per_user`` prompts each; power of the two-sided
  z test for a difference ``effect`` from 50 %; the fewest seeds (at least :data:`MIN_SEEDS`) for which some
  number of users reaches the power, then the fewest users (a design-effect calculation: users, not
  prompts, are the unit that shrinks σ_user²);
- :func:`side_by_side`: the family computed with each of two judges (the rubric and, where a run has it, the
  judge model's recorded verdicts, :func:`.issue22.model_judge`), each row's Holm verdict beside the other's;
- :func:`answer`: the study's question (forward vs reverse) is answered for a system only when its
  primary view has prompts, at least :data:`MIN_SEEDS` seeds, and either Holm rejects 50 % (the side is
  the answer) or the null's MDE is at most :data:`EFFECT` (no difference of that size); otherwise it is
  not answered, and the sentence says why.
"""
from __future__ import annotations

import math
from pathlib import Path
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ... import jsonl
from ...judge.tallies import SCORE
from ...metrics import widen_interval
from ..world.inference import holm, z_sum

ALPHA, POWER, EFFECT, MIN_SEEDS = 0.05, 0.8, 0.10, 3  # issue 22: 10 points at 80 % power, at least 3 seeds per arm
N_BOOT = 2000  # bootstrap replicates (the chapter's default; findings uses the same, so the same numbers)
MAIN = (("router_head vs router_persona", "router heads vs persona prompting (same pick)"),  # each arm's main
        ("router_head vs base", "router heads vs base"),  # comparisons (chapter section 6), in the family
        ("oracle_head vs oracle_persona", "true-label heads vs persona prompting"),
        ("oracle_head vs base", "true-label heads vs base"))


# ---------------------------------------------------------------- pooled over seeds, resampling users

def cells(frames) -> tuple[np.ndarray, np.ndarray, list]:
    """Per seed (one outcomes frame each, with ``user`` and ``outcome``) and user: the sum of scores and the
    number of scored prompts (S × U arrays), and the users in column order."""
    scored = [f[f["outcome"].isin(list(SCORE))] for f in frames]
    users = sorted({u for f in scored for u in f["user"]}, key=str)
    col = {u: j for j, u in enumerate(users)}
    sums, counts = np.zeros((len(frames), len(users))), np.zeros((len(frames), len(users)))
    for i, f in enumerate(scored):
        for u, o in zip(f["user"], f["outcome"]):
            sums[i, col[u]] += SCORE[o]
            counts[i, col[u]] += 1
    return sums, counts, users


def pigeonhole(sums: np.ndarray, counts: np.ndarray, n_boot: int, seed: int = 0) -> np.ndarray:
    """Replicates of Σ scores / Σ prompts with seeds (rows) and users (columns) drawn with replacement,
    independently; a replicate whose drawn cells hold no prompt is dropped."""
    rng = np.random.default_rng(seed)
    s, u = sums.shape
    w = np.stack([np.bincount(r, minlength=s) for r in rng.integers(0, s, (n_boot, s))]).astype(float)
    v = np.stack([np.bincount(r, minlength=u) for r in rng.integers(0, u, (n_boot, u))]).astype(float)
    num, den = np.einsum("bs,su,bu->b", w, sums, v), np.einsum("bs,su,bu->b", w, counts, v)
    return num[den > 0] / den[den > 0]


def _one_way(sums: np.ndarray, counts: np.ndarray, n_boot: int, seed: int, axis: int) -> float:
    """Variance of Σ scores / Σ prompts when only seeds (``axis`` 0) or only users (``axis`` 1) are drawn with
    replacement, the other held fixed."""
    rng = np.random.default_rng(seed)
    k = sums.shape[axis]
    w = np.stack([np.bincount(r, minlength=k) for r in rng.integers(0, k, (n_boot, k))]).astype(float)
    if axis == 0:
        num, den = w @ sums.sum(axis=1), w @ counts.sum(axis=1)
    else:
        num, den = w @ sums.sum(axis=0), w @ counts.sum(axis=0)
    keep = den > 0
    return float(np.var(num[keep] / den[keep], ddof=1)) if keep.sum() > 1 else 0.0


def calibrated_se(sums: np.ndarray, counts: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float]:
    """(standard error, degrees of freedom) of the pooled win rate for few seeds.

    The pigeonhole bootstrap's variance takes the seed component at its plug-in size ((S − 1)/S of it) and its
    normal reference ignores how few seeds estimate it. Simulated (a true 50 %, seed and user σ of 5 points,
    4 prompts per user, ties 20 %, 300 runs; tests/test_personas_power.py): with 5 seeds × 448 users its Wald
    test rejected 9.7 % and its interval covered 0.90; with 3 seeds × 100 users 7.7 % and 0.93; calibrated as
    below, 4.7 % / 0.95 and 5.3 % / 0.95 (with no seed effect both are conservative). Here the variance is
    the users-only bootstrap's (users and residual) plus the seeds-only bootstrap's made unbiased (× S / (S − 1);
    it holds the seed component and, again, the residual: mildly conservative, as Owen's pigeonhole is), with
    Satterthwaite's degrees of freedom, the seed part's S − 1 and the user part's U − 1:
    df = V² / (V_s² / (S − 1) + V_u² / (U − 1)). One seed: the users-only variance, U − 1 degrees of freedom."""
    s, u = sums.shape
    v_u = _one_way(sums, counts, n_boot, seed + 1, axis=1) if u > 1 else 0.0
    v_s = _one_way(sums, counts, n_boot, seed + 2, axis=0) * s / (s - 1) if s > 1 else 0.0
    v = v_u + v_s
    if v <= 0:
        return 0.0, math.inf
    den = (v_s ** 2 / (s - 1) if s > 1 else 0.0) + (v_u ** 2 / (u - 1) if u > 1 else 0.0)
    return math.sqrt(v), (v * v / den if den > 0 else math.inf)


def pooled(frames, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95) -> dict:
    """Win rate pooled over seeds, its interval, standard error and p for 50 %.

    The interval has the pigeonhole bootstrap's shape (seeds and users drawn independently; within [0, 1]) and
    the width of a t interval on :func:`calibrated_se` with its degrees of freedom (each side scaled about the
    point, cut to [0, 1]); p is that t test's, two-sided (1 when nothing varies). ``se`` and ``df`` are the
    calibrated ones (the minimum detectable effect uses them)."""
    sums, counts, users = cells(frames)
    n = int(counts.sum())
    out = {"n": n, "seeds": len(frames), "users": len(users),
           "decisive": int(sum(f["outcome"].isin(["W", "L"]).sum() for f in frames))}
    if n == 0:
        return {**out, "win_rate": None, "ci_low": None, "ci_high": None, "se": None, "p": None, "df": None}
    wr = float(sums.sum() / n)
    reps = pigeonhole(sums, counts, n_boot, seed)
    lo, hi = (float(x) for x in np.quantile(reps, [(1 - level) / 2, (1 + level) / 2]))
    se, df = calibrated_se(sums, counts, n_boot, seed)
    if se <= 1e-12:
        return {**out, "win_rate": wr, "ci_low": lo, "ci_high": hi, "se": 0.0, "p": 1.0, "df": df}
    q = float(stats.norm.ppf((1 + level) / 2) if math.isinf(df) else stats.t.ppf((1 + level) / 2, df))
    lo, hi = widen_interval(wr, lo, hi, q * se, (0.0, 1.0))
    p = float(2 * (stats.norm.sf(abs(wr - 0.5) / se) if math.isinf(df) else stats.t.sf(abs(wr - 0.5) / se, df)))
    return {**out, "win_rate": wr, "ci_low": lo, "ci_high": hi, "se": se, "p": p, "df": df}


def mde(se, m: int = 1, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest departure from 50 % the two-sided test at α/m detects with ``power``: z_sum · se, at most
    0.5; nan without variation (se 0 or missing)."""
    if se is None or not se > 1e-12:
        return float("nan")
    return float(min(0.5, z_sum(alpha / m, power) * se))


def family(rows: pd.DataFrame, alpha: float = ALPHA, power: float = POWER) -> pd.DataFrame:
    """Holm over the rows with a p value (``p``; rows without one — no prompts — stay outside the family and
    are marked so): ``p (Holm)``, ``rejected`` at ``alpha`` and each row's MDE at α/m (m: the family's size)."""
    out = rows.copy()
    tested = out["p"].notna()
    m = int(tested.sum())
    out["p (Holm)"] = np.nan
    if m:
        out.loc[tested, "p (Holm)"] = holm(out.loc[tested, "p"].astype(float).to_numpy())
    out["rejected"] = out["p (Holm)"] < alpha
    out["MDE"] = [mde(se, max(m, 1), alpha, power) for se in out["se"]]
    out.attrs.update(m=m, alpha=alpha, power=power)
    return out


def family_line(fam: pd.DataFrame) -> str:
    m, a = fam.attrs["m"], fam.attrs["alpha"]
    rej = fam[fam["rejected"]]
    mdes = fam.loc[~fam["rejected"], "MDE"].dropna()  # the nulls only
    return (f"Family: the **{m}** comparisons whose verdict the chapter states (a comparison left without prompts "
            f"stays outside it). Holm at α = {a:g} (strictest step α/m = {a / max(m, 1):.4f}) rejects 50 % for "
            f"**{len(rej)}** of them" + (f" ({', '.join(rej['comparison'])})" if len(rej) else "")
            + (f"; the nulls' minimum detectable effects at α/m with {fam.attrs['power']:.0%} power run from "
               f"{100 * mdes.min():.1f} to {100 * mdes.max():.1f} points." if len(mdes) else "."))


# ---------------------------------------------------------------- the pilot and the design

@dataclass(frozen=True)
class Components:
    """Variance components of one seed-user cell's mean score (``per_user`` prompts), from a pilot."""
    seed: float
    user: float
    residual: float
    per_user: int
    pilot_seeds: int
    pilot_users: int

    def se(self, seeds: int, users: int) -> float:
        return math.sqrt(self.seed / seeds + self.user / users + self.residual / (seeds * users))


def components(sums: np.ndarray, counts: np.ndarray) -> Components | None:
    """Method-of-moments components from a complete S × U pilot table (every cell the same number of prompts);
    None with fewer than 2 seeds or 2 users (the seed or user component is then not estimable)."""
    s, u = sums.shape
    if s < 2 or u < 2 or counts.min() <= 0 or counts.min() != counts.max():
        return None
    z = sums / counts
    g, r, c = z.mean(), z.mean(axis=1), z.mean(axis=0)
    ms_seed = u * ((r - g) ** 2).sum() / (s - 1)
    ms_user = s * ((c - g) ** 2).sum() / (u - 1)
    ms_res = ((z - r[:, None] - c[None, :] + g) ** 2).sum() / ((s - 1) * (u - 1))
    return Components(max(0.0, (ms_seed - ms_res) / u), max(0.0, (ms_user - ms_res) / s), float(ms_res),
                      int(counts[0, 0]), s, u)


def power(comp: Components, seeds: int, users: int, effect: float = EFFECT, alpha: float = ALPHA) -> float:
    """Power of the two-sided z test at ``alpha`` when the win rate departs from 50 % by ``effect``."""
    se = comp.se(seeds, users)
    if se == 0:
        return 1.0
    z = stats.norm.ppf(1 - alpha / 2)
    return float(stats.norm.cdf(effect / se - z) + stats.norm.cdf(-effect / se - z))


def design(comp: Components, effect: float = EFFECT, alpha: float = ALPHA, target: float = POWER,
           min_seeds: int = MIN_SEEDS, max_seeds: int = 200, max_users: int = 1_000_000) -> dict:
    """The fewest seeds ≥ ``min_seeds`` for which some number of users ≤ ``max_users`` reaches ``target`` power,
    then the fewest users; ``seeds`` None when no design searched does."""
    for s in range(min_seeds, max_seeds + 1):
        if power(comp, s, max_users, effect, alpha) < target:
            continue
        lo, hi = 1, max_users
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if power(comp, s, mid, effect, alpha) >= target else (mid + 1, hi)
        return {"seeds": s, "users": lo, "prompts": lo * comp.per_user, "power": power(comp, s, lo, effect, alpha)}
    return {"seeds": None, "users": None, "prompts": None, "power": None}


def design_line(name: str, comp: Components | None, m: int, effect: float = EFFECT) -> str:
    """The pilot's components and the design at α = 0.05 and at Holm's strictest level α/m, in words."""
    if comp is None:
        return (f"{name}: no power analysis — the pilot needs at least 2 seeds and 2 test users with every seed "
                "answering every prompt, to estimate the seed and user components.")
    if comp.se(1, 1) == 0:
        return f"{name}: no power analysis — the pilot's outcomes do not vary (every prompt of every seed the same)."
    at = []
    for a in (ALPHA, ALPHA / max(m, 1)):
        d = design(comp, effect, a)
        at.append(f"at α = {a:.4g}: " + (f"**{d['seeds']} seeds per arm and {d['prompts']} test prompts** "
                                          f"({d['users']} users × {comp.per_user})" if d["seeds"] else
                                          "no design up to 200 seeds"))
    now = power(comp, comp.pilot_seeds, comp.pilot_users, effect, ALPHA / max(m, 1))
    return (f"{name}: pilot {comp.pilot_seeds} seeds × {comp.pilot_users} users × {comp.per_user} prompts; "
            f"standard deviations of a seed-user cell's mean score — seed {math.sqrt(comp.seed):.3f}, user "
            f"{math.sqrt(comp.user):.3f}, residual {math.sqrt(comp.residual):.3f}. To detect {100 * effect:.0f} points "
            f"from 50 % with {POWER:.0%} power: " + "; ".join(at)
            + f". The pilot's own design has {now:.0%} power at α/m.")


# ---------------------------------------------------------------- the answer

def answer(row: dict | pd.Series, effect: float = EFFECT, min_seeds: int = MIN_SEEDS,
           recorded: bool = True) -> tuple[str, str]:
    """(category, sentence) for one system's primary forward-vs-reverse row of :func:`family` (reverse's side):
    ``reverse`` / ``forward`` (Holm rejects 50 %), ``none`` (not rejected and MDE ≤ ``effect``), else
    ``unanswered`` with the reason. ``recorded``: whether "trained" comes from the run's records (issue 22's
    rule: the loss falls *and* the head shows its style on ≥ 90 % of validation prompts); a run without them
    (its heads read by a loss-only rule, which never checks that a head shows its style) is not answered.
    The MDE is computed from the observed variance, ties included; the sentence names the non-tie prompts. A row
    whose ties leave the win rate less room than ``effect`` (a share d of decisive prompts bounds it to 50 % ± d/2)
    is not answered by a null: the sentence gives the room and reverse's share among the decisive prompts."""
    n, seeds = int(row["n"]), int(row["seeds"])
    if not recorded:
        return "unanswered", ("not answered: this run records no trained flags by issue 22's rule (loss falls and "
                              "style on ≥ 90 % of validation prompts); a loss-only rule does not show that a head "
                              "shows its style")
    if n == 0:
        return "unanswered", ("not answered: no prompt is left once types whose heads did not train (or whose mix missed "
                              "its target) in either arm are refused")
    if seeds < min_seeds:
        return "unanswered", (f"not answered: {seeds} seed{'s' if seeds != 1 else ''} per arm "
                              f"(at least {min_seeds} needed)")
    wr, p = float(row["win_rate"]), float(row["p (Holm)"])
    dec = f"{int(row['decisive'])} of {n} prompts not ties" if "decisive" in row else f"{n} prompts"
    if "decisive" in row and int(row["decisive"]) < n and not row["rejected"]:
        # a tie scores ½ to each side: with a share d of decisive prompts the win rate lies within 50 % ± d/2, so a
        # null against an effect that the ties leave no room for says nothing about the heads
        d = int(row["decisive"]) / n
        among = 0.5 + (wr - 0.5) / d if d else float("nan")
        room = (f"{100 * (1 - d):.0f}% of prompts are ties, so the win rate can move at most {50 * d:.1f} points "
                f"from 50%; among the decisive prompts reverse wins {100 * among:.1f}%")
        if d / 2 < effect:
            return "unanswered", (f"not answered: reverse wins {100 * wr:.1f}% (Holm p = {p:.3g}; {dec}) but {room}: "
                                  f"no test of these win rates can show a {100 * effect:.0f}-point difference")
        dec += f"; {room}"
    if row["rejected"]:
        side = "reverse" if wr > 0.5 else "forward"
        return side, f"**{side} KL better**: reverse wins {100 * wr:.1f}% (Holm p = {p:.3g}; {dec}, {seeds} seeds)"
    mde_ = row["MDE"]
    if mde_ == mde_ and mde_ <= effect:
        return "none", (f"**no difference of {100 * effect:.0f} points or more**: reverse wins {100 * wr:.1f}%, "
                        f"Holm p = {p:.3g} ({dec}), and the test could detect {100 * mde_:.1f} points")
    why = "the replicates do not vary (all ties)" if mde_ != mde_ else f"its MDE is {100 * mde_:.1f} points"
    return "unanswered", (f"not answered: reverse wins {100 * wr:.1f}% (Holm p = {p:.3g}; {dec}) but a null here "
                          f"says little — {why}, above the {100 * effect:.0f} points the question needs")


# ---------------------------------------------------------------- the chapter's family, from the records

VIEWS = ("raw", "trained", "uncut")  # the forward-vs-reverse views whose verdict the chapter states
PRIMARY = "trained"  # the view that answers: heads trained in both arms (the others are refused there)


def family_frames(run, heads: pd.DataFrame, trunc: pd.DataFrame, seeds, arms, judge_, main=MAIN,
                  systems=("router_head", "oracle_head")) -> list[tuple[dict, list[pd.DataFrame]]]:
    """The chapter's family before pooling: per comparison it states a verdict for, its row labels and one
    outcome frame per seed (:func:`.analysis.outcomes`, ``ab``/``ba`` the two orders' choices) — reverse against
    forward per system in each of :data:`VIEWS` (:func:`.analysis.view_frames`), then each arm's ``main``
    comparisons (``(comparison, label)``). :func:`chapter_family` pools them; :func:`judge_behaviour` reads how
    the judge decided them."""
    from . import analysis as A

    out = []
    for system in systems:
        if "reverse" not in arms or "forward" not in arms:
            break
        missing = [f"{a}-s{sd}.jsonl" for a in ("reverse", "forward") for sd in seeds
                   if not jsonl.exists(Path(run) / "systems" / f"{a}-s{sd}.jsonl")]  # plain or shipped .gz
        if missing:  # never a family silently without its forward-vs-reverse rows
            raise ValueError(f"{Path(run) / 'systems'}: no {', '.join(missing)} (nor .gz): the forward-vs-reverse "
                             "comparison needs both arms' systems")
        for view in VIEWS:
            out.append(({"comparison": f"reverse vs forward, {system}, {view}", "kind": "forward vs reverse",
                         "system": system, "view": view},
                        A.view_frames(run, heads, trunc, system, seeds, arms, judge_, view)))
    for comp, label in main:
        a, b = comp.split(" vs ")
        for arm in arms:
            out.append(({"comparison": f"{arm}: {label}", "kind": "within an arm", "system": a, "view": "raw"},
                        [A.outcomes(run, f"systems/{arm}-s{sd}.jsonl:{a}", f"systems/{arm}-s{sd}.jsonl:{b}", judge_)
                         for sd in seeds]))
    return out


def chapter_family(run, heads: pd.DataFrame, trunc: pd.DataFrame, seeds, arms, judge_, main=MAIN, n_boot: int = N_BOOT,
                   systems=("router_head", "oracle_head"), fframes=None) -> pd.DataFrame:
    """The chapter's family, one row per comparison it states a verdict for (:func:`family_frames`, or ``fframes``
    when the caller has them already), every row pooled over seeds (:func:`pooled`), then :func:`family`.
    ``attrs['pilot']``: per system, the raw view's seed × user table."""
    rows, pilot = [], {}
    if fframes is None:
        fframes = family_frames(run, heads, trunc, seeds, arms, judge_, main, systems)
    for meta, frames in fframes:
        if meta["kind"] == "forward vs reverse" and meta["view"] == "raw":
            pilot[meta["system"]] = cells(frames)[:2]
        rows.append({**meta, **pooled(frames, n_boot)})
    fam = family(pd.DataFrame(rows))
    fam.attrs["pilot"] = pilot
    return fam


def behaviour(frames) -> dict:
    """How a judge decided one comparison's prompts (seeds pooled), from both orders' choices (``ab``: A shown
    first, ``ba``: B shown first; a choice names a position): ``identical`` answers (a free tie, no call),
    ``tie in both orders``, ``same position in both orders`` (the first-shown, or the second-shown, answer picked
    whichever it was: folded to a tie), ``tie in one order only``, ``decisive`` (W or L), ``unparseable``; the
    ``flip rate`` (pairs whose two verdicts are not mirror images — A/B, B/A or tie/tie — among the judged pairs
    with both orders parseable) and the ``first-shown share`` of the decisive calls (calls that pick A or B)."""
    f = pd.concat(frames, ignore_index=True) if len(frames) else pd.DataFrame(columns=["ab", "ba", "outcome"])
    ident = f["ab"] == "identical"
    bad = f["outcome"] == "U"
    judged = f[~ident & ~bad & f["ab"].notna()]
    ab, ba = judged["ab"].astype(str), judged["ba"].astype(str)
    mirror = ((ab == "A") & (ba == "B")) | ((ab == "B") & (ba == "A")) | ((ab == "tie") & (ba == "tie"))
    same_pos = ((ab == "A") & (ba == "A")) | ((ab == "B") & (ba == "B"))
    one_tie = (ab == "tie") ^ (ba == "tie")
    calls = pd.concat([ab, ba])
    decisive_calls = int(calls.isin(["A", "B"]).sum())
    n_j = len(judged)
    return {"prompts": len(f), "identical": int(ident.sum()), "tie in both orders": int(((ab == "tie") & (ba == "tie")).sum()),
            "same position in both orders": int(same_pos.sum()), "tie in one order only": int(one_tie.sum()),
            "decisive": int(f["outcome"].isin(["W", "L"]).sum()), "unparseable": int(bad.sum()),
            "judged pairs": n_j, "flips": int((~mirror).sum()), "flip rate": (float((~mirror).mean()) if n_j else None),
            "first-shown picks": int((calls == "A").sum()), "decisive calls": decisive_calls,
            "first-shown share": (float((calls == "A").sum()) / decisive_calls if decisive_calls else None)}


def judge_behaviour(fframes: list[tuple[dict, list[pd.DataFrame]]]) -> pd.DataFrame:
    """:func:`behaviour` per comparison of :func:`family_frames`, with ``flip bound met``: the flip rate's 95%
    Wilson upper bound is at most :data:`.issue22.FLIP_MAX` (the calibration rule's bound, applied to the
    comparison's own pairs; no judged pair: met, nothing to flip)."""
    from ...metrics import wilson_interval
    from .issue22 import FLIP_MAX

    rows = []
    for meta, frames in fframes:
        b = behaviour(frames)
        hi = wilson_interval(b["flips"], b["judged pairs"])[1] if b["judged pairs"] else None
        rows.append({"comparison": meta["comparison"], **b, "flip bound met": hi is None or hi <= FLIP_MAX})
    return pd.DataFrame(rows)


def behaviour_line(beh: pd.DataFrame, name: str, calibrated_flip: float | None) -> str:
    """:func:`judge_behaviour` in words: the flip-rate range on the comparisons against the calibration's, the
    comparisons past the bound (the calibration rule's, :data:`.issue22.FLIP_MAX`)."""
    from .issue22 import FLIP_MAX

    fr = beh["flip rate"].dropna()
    past = beh.loc[~beh["flip bound met"], "comparison"].tolist()
    cal = f" (on its calibration pairs: {100 * calibrated_flip:.1f}%)" if calibrated_flip is not None else ""
    first = beh["first-shown share"].dropna()
    return (f"On this page's own pairs the {name}'s verdict changes when A and B swap on **{100 * fr.min():.1f}–"
            f"{100 * fr.max():.1f}%** of the judged pairs{cal}, and its decisive calls pick the answer shown first "
            f"{100 * first.min():.0f}–{100 * first.max():.0f}% of the time. Its flip rate is past the "
            f"{100 * FLIP_MAX:.0f}% bound of section 7c's rule (its Wilson upper bound above it) on **{len(past)} of {len(beh)}** comparisons"
            + (f" ({'; '.join(past)}): there its verdicts are position-bound, and a tie there is as often a position "
               "verdict folded to a tie as a judgement that the answers are equal" if past else "")
            + ". The bound on the comparisons' own pairs was added after their verdicts were read (review 24): a flip "
              "rate is symmetric in A and B, so it does not select on which side wins.")


VIEW_NAMES = {"reverse": "reverse better (Holm)", "forward": "forward better (Holm)",
              "none": "not distinguishable (Holm)", "uninformative": "uninformative (all ties)",
              "empty": "empty (no prompt left)"}


def view_verdict(fam: pd.DataFrame, system: str, view: str) -> tuple[str, str]:
    """(category of :data:`VIEW_NAMES`, sentence) for reverse against forward in one view, from its row of the
    family: the word from the Holm-adjusted p (never from per-seed intervals or a tolerance), a null with its
    minimum detectable effect at α/m, a view whose outcomes do not vary *uninformative*, never "no difference"."""
    r = fam[(fam["kind"] == "forward vs reverse") & (fam["system"] == system) & (fam["view"] == view)]
    if not len(r) or not int(r["n"].iloc[0]) or r["win_rate"].iloc[0] is None:
        return "empty", "no prompt left to compare"
    r = r.iloc[0]
    wr, dec = float(r["win_rate"]), int(r["decisive"])
    base = (f"reverse wins {100 * wr:.1f}% pooled over {int(r['seeds'])} seeds ({int(r['n'])} prompts, {dec} not "
            f"ties; 95% CI [{100 * r['ci_low']:.0f}, {100 * r['ci_high']:.0f}] over seeds × users), "
            f"p = {float(r['p']):.3g}, Holm-adjusted p = {float(r['p (Holm)']):.3g} (family of {fam.attrs['m']})")
    if r["rejected"]:
        side = "reverse" if wr > 0.5 else "forward"
        return side, f"**{side} KL better** — {base}"
    if dec == 0 or r["MDE"] != r["MDE"]:
        return "uninformative", f"uninformative (the outcomes do not vary) — {base}"
    return "none", (f"not distinguishable — {base}; minimum detectable effect {100 * r['MDE']:.1f} points at α/m "
                    f"with {fam.attrs['power']:.0%} power")


def family_table(fam: pd.DataFrame) -> pd.DataFrame:
    """The family for display: win rate, pooled interval, p, Holm p, rejected, MDE (points)."""
    t = fam[["comparison", "n", "seeds", "users"]].copy()
    t["win rate %"] = [None if w is None else round(100 * w, 1) for w in fam["win_rate"]]
    t["95% CI (seeds × users)"] = ["" if pd.isna(w) else f"[{100 * lo:.0f}, {100 * hi:.0f}]"
                                   for w, lo, hi in zip(fam["win_rate"], fam["ci_low"], fam["ci_high"])]
    t["p"], t["p (Holm)"], t["rejected"] = fam["p"], fam["p (Holm)"], fam["rejected"]
    t["MDE (points)"] = (100 * fam["MDE"]).round(1)
    return t


def holm_word(r) -> str:
    """A family row's verdict in words, from its Holm-adjusted p: A's win rate above or below 50 %, not
    rejected, uninformative (outcomes that do not vary) or no prompts."""
    if not int(r["n"]) or pd.isna(r["win_rate"]):
        return "no prompts"
    if r["rejected"]:
        return "above 50%" if float(r["win_rate"]) > 0.5 else "below 50%"
    if not int(r["decisive"]) or pd.isna(r["MDE"]):
        return "uninformative"
    return "not rejected"


def side_by_side(fams: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The family (:func:`chapter_family`) computed with each judge (name → family, the same comparisons), side by
    side: per comparison and judge the prompts scored (``n``: an unparseable verdict scores none), A's win rate,
    its pooled interval, the Holm-adjusted p within that judge's family and its word (:func:`holm_word`);
    ``same verdict``: whether the judges' words agree."""
    names = list(fams)
    order = list(fams[names[0]]["comparison"])
    for name in names[1:]:
        if sorted(fams[name]["comparison"]) != sorted(order):
            raise ValueError(f"side_by_side: the {name!r} family's comparisons are not the {names[0]!r} family's")
    out = pd.DataFrame({"comparison": order})
    words = {}
    for name, fam in fams.items():
        t = family_table(fam).set_index("comparison").loc[order]
        words[name] = [holm_word(r) for _, r in fam.set_index("comparison").loc[order].reset_index().iterrows()]
        out[f"{name}: n"] = t["n"].to_numpy()
        out[f"{name}: win rate %"] = t["win rate %"].to_numpy()
        out[f"{name}: 95% CI, unadjusted"] = t["95% CI (seeds × users)"].to_numpy()
        out[f"{name}: p (Holm)"] = t["p (Holm)"].to_numpy()
        out[f"{name}: verdict"] = words[name]
    out["same verdict"] = [len({words[n][i] for n in names}) == 1 for i in range(len(order))]
    return out


def side_by_side_line(sbs: pd.DataFrame, names) -> str:
    """:func:`side_by_side` in words: on how many of the family's comparisons the judges' Holm verdicts agree,
    and where they do not."""
    a, b = list(names)[:2]
    differ = sbs[~sbs["same verdict"]]
    drop = (sbs[f"{a}: n"] - sbs[f"{b}: n"]).astype(int)
    share = float((drop / sbs[f"{a}: n"].where(sbs[f"{a}: n"] > 0)).max()) if len(sbs) else 0.0
    # a prompt scores only when both orders parse; k of n prompts left out move a win rate by at most k/(2n)
    scored = (f"the {b} scored as many prompts as the {a} in every comparison" if not drop.any() else
              f"the {b} scores {drop.min()}–{drop.max()} fewer prompts than the {a} per comparison (an order's reply "
              f"unparseable), at most {100 * share:.2f}% of a comparison's prompts, which can move a win rate by at "
              f"most {50 * share:.2f} points")
    return (f"Same comparisons, both orders: {scored}. Their verdicts (each judge's p values Holm-corrected "
            f"within its own family) agree on **{len(sbs) - len(differ)} of {len(sbs)}** comparisons"
            + ("." if not len(differ) else "; they differ on " + "; ".join(
                f"{r['comparison']} ({a}: {r[f'{a}: verdict']}, {b}: {r[f'{b}: verdict']})"
                for _, r in differ.iterrows()) + "."))


def answers(fam: pd.DataFrame, recorded: bool, effect: float = EFFECT) -> dict[str, tuple[str, str]]:
    """Per system, :func:`answer` on its :data:`PRIMARY` row (``recorded``: the run's trained flags are issue 22's)."""
    prim = fam[(fam["kind"] == "forward vs reverse") & (fam["view"] == PRIMARY)]
    return {r["system"]: answer(r, effect, recorded=recorded) for _, r in prim.iterrows()}


def kl_name(top_k: int, vocab: int) -> str:
    """What the arms' losses are, in words: top-k KL, or — k covering the vocabulary — the full divergence (the
    miniature then does not test the study's support truncation)."""
    return f"KL over the whole vocabulary (k = {top_k})" if top_k >= vocab else f"top-{top_k} KL"


def answer_line(ans: dict[str, tuple[str, str]], mixes: bool = False, kl: str = "top-k KL") -> str:
    """The study's question in one computed sentence: answered only where :func:`answer` gives a category
    (``mixes``: the run tunes its mixes, and the view also leaves out types whose mix missed its target; ``kl``:
    the losses' name, :func:`kl_name`)."""
    got = {s: c for s, (c, _) in ans.items() if c != "unanswered"}
    head = ("**The miniature answers the study's question**" if got and len(got) == len(ans) else
            "**The miniature answers the study's question only in part**" if got else
            "**The miniature does not answer the study's question**")
    texts = {t for _, t in ans.values()}
    body = (f"{' and '.join(ans)}: {texts.pop()}" if len(texts) == 1 and len(ans) > 1 else
            "; ".join(f"{s}: {t}" for s, (_, t) in ans.items()))
    where = "on types whose heads trained and whose tuned mix met its target in both arms" if mixes else \
        "on heads trained in both arms"
    return head + f" (forward vs reverse {kl}, {where}): " + body + "."


def second_judge_line(ans: dict[str, tuple[str, str]], name: str, primary: dict[str, tuple[str, str]]) -> str:
    """:func:`answer` on a second judge's family (``ans``, per system), reported beside the primary judge's
    (``primary``): each system's sentence and whether its category is the primary judge's. It never replaces the
    conclusion: which judge the chapter rests on is stated before either judge's verdicts are read."""
    parts = []
    for system, (cat, text) in ans.items():
        theirs = primary.get(system, ("none stated", ""))[0]
        same = ("the rubric's category too; when both are unanswered for their ties the agreement follows from the tie "
                "shares, not a second finding" if cat == "unanswered" else "the rubric gives the same category")
        parts.append(f"{system}: {text} ({same if theirs == cat else f'category {cat}; the rubric gives {theirs}'})")
    return (f"Section 7b's rule applied to the {name}'s verdicts (reported beside the rubric's, not instead of it): "
            + "; ".join(parts) + ".")


def identical_line(beh: pd.DataFrame) -> str:
    """How often reverse's and forward's answers are byte-identical (a tie under any judge, no call made), per
    system, from the raw forward-vs-reverse rows of :func:`judge_behaviour`."""
    raw = beh[beh["comparison"].str.startswith("reverse vs forward, ") & beh["comparison"].str.endswith(", raw")]
    parts = [f"{r['comparison'].split(', ')[1]} {100 * r['identical'] / r['prompts']:.0f}% ({r['identical']:,} of "
             f"{r['prompts']:,})" for _, r in raw.iterrows() if r["prompts"]]
    return ("Reverse's and forward's heads write **byte-identical answers** on " + ", ".join(parts) + " of the raw "
            "view's prompts: a tie under any judge, with no call made. Much of both judges' tie share is the two arms "
            "answering alike, not a judge calling different answers equal.") if parts else ""


def disagreement_lines(ff_first, ff_second, names, sbs: pd.DataFrame) -> list[str]:
    """Where two judges' verdicts part, from their :func:`family_frames` (the same comparisons and prompts, in the
    same order): for each comparison whose Holm words differ (:func:`side_by_side`), the second judge's losses
    that the first calls ties, the router pick most common among them and how often A's answer is the longer
    one there; and for the comparisons against ``base``, each judge's losses (a judge that never gives base a win
    does not credit its right answers)."""
    a, b = list(names)[:2]
    differ = set(sbs.loc[~sbs["same verdict"], "comparison"])
    lines, base_rows = [], []
    for (meta, fa), (_meta2, fb) in zip(ff_first, ff_second):
        name = meta["comparison"]
        m = pd.concat([x.reset_index(drop=True).assign(other=y["outcome"].to_numpy()) for x, y in zip(fb, fa)],
                      ignore_index=True) if fa else pd.DataFrame()
        if name in differ and len(m):
            side = "L" if m["outcome"].eq("L").sum() >= m["outcome"].eq("W").sum() else "W"
            lost = m[m["outcome"] == side]
            tied = lost[lost["other"] == "T"]
            part = (f"{name}: of the {b}'s {len(lost):,} {'losses' if side == 'L' else 'wins'} for A, {len(tied):,} are "
                    f"ties for the {a}")
            col, who = (("preference", "the true type was") if str(meta.get("system", "")).startswith("oracle")
                        else ("router_pick", "the router picked"))
            if len(tied) and col in tied:
                top = tied[col].value_counts()
                part += (f"; on those {who} {top.index[0]} for {100 * top.iloc[0] / len(tied):.0f}%, and A's "
                         f"answer is the longer one on {100 * (tied['words_a'] > tied['words_b']).mean():.0f}%")
            lines.append(part)
        if name.endswith("vs base") and len(m):
            base_rows.append(f"{name} {int(m['outcome'].eq('L').sum())} vs {int(m['other'].eq('L').sum())}")
    out = []
    if lines:
        out.append("Where the two judges' verdicts part: " + "; ".join(lines) + ".")
    if base_rows:
        out.append(f"Against base, the {b} gives base a win on (rows in order, {b} vs {a}): " + ", ".join(base_rows)
                   + f" prompts; where it gives base none, its higher win rates say that it does not credit base's "
                     "right answers, not that the heads are better by more.")
    return out


def pilot_lines(fam: pd.DataFrame) -> list[str]:
    """:func:`design_line` per system, from the raw head-to-head of the run as a pilot."""
    m = fam.attrs["m"]
    return [design_line(f"{s}, reverse vs forward", components(*t), m) for s, t in fam.attrs["pilot"].items()]


def run_heads(run, arms, seeds, has: dict, loss_drop: float) -> pd.DataFrame:
    """The chapter's head table: :func:`.analysis.head_training` with ``trained`` from the run's records where it
    has them (:func:`.issue22.with_recorded`), else by the loss rule (:func:`.analysis.convergence`)."""
    from . import analysis as A
    from . import issue22 as I

    heads = A.convergence(A.head_training(run, arms, seeds), loss_drop=loss_drop)
    return I.with_recorded(heads, I.recorded_trained(run, arms, seeds)) if has["trained"] else heads
