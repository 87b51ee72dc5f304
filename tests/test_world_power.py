"""Part IV's power analysis (issue 21 item 4): seeds and held-out problems for 80 % power, the minimum
detectable effect, against closed forms and scipy's noncentral t; the between-seed spread of the recorded
runs. (The redesigned pipeline it serves — matched arms, the pilot, two-draw bands — waits on the branch
issue-21-world-v2 for its GPU recording.)"""
from __future__ import annotations

import math

import pandas as pd
import pytest

from polyvox.studies.world import analysis as A
from polyvox.studies.world import layout, power


def test_power_reproduces_the_two_proportion_sample_size():
    # σ_b = 0, one seed, one sample per problem, normal test: the classical n per group,
    # (1.959964 + 0.841621)² × 2 × 0.25 / 0.05² = 1569.8 → 1570
    c = power.arm_difference(0.5, 0.0, samples=1)
    assert power.problems_needed(c, 1, test="z") == 1570
    assert math.ceil((1.959964 + 0.841621) ** 2 * 0.5 / 0.0025) == 1570
    assert power.two_proportion_n(0.5, 0.55) == 1562  # unpooled p1q1 + p2q2 = 0.4975
    assert power.power(c, 1, 1570, test="z") >= 0.8 > power.power(c, 1, 1569, test="z")


def test_power_is_the_t_test_across_seeds():
    from scipy.stats import nct, t

    c = power.climb_gain(0.5, 0.05, samples=4)
    se = math.sqrt((0.05 ** 2 + 2 * 0.25 / (100 * 4)) / 6)
    crit = t.ppf(0.975, 5)
    want = nct.sf(crit, 5, 0.1 / se) + nct.cdf(-crit, 5, 0.1 / se)
    assert power.power(c, 6, 100) == pytest.approx(want, rel=1e-9)
    assert power.power(c, 6, 100, test="z") > power.power(c, 6, 100)  # the t-test pays for few seeds


def test_designs_keep_the_floor_of_five_seeds_and_need_seeds_when_seeds_vary():
    quiet = power.design(power.arm_difference(0.5, 0.0, 4))
    assert quiet.seeds == 5 and quiet.power >= 0.8
    assert power.power(power.arm_difference(0.5, 0.0, 4), 5, quiet.problems - 1) < 0.8
    noisy = power.design(power.arm_difference(0.5, 0.05, 4))
    assert noisy.seeds > 5
    # σ_b alone: 2 σ_b² / S must fall below (δ / (t + t))², whatever the number of problems
    assert power.design(power.arm_difference(0.5, 0.3, 4), max_seeds=50).seeds is None


def test_the_minimum_detectable_effect_is_the_effect_the_design_detects():
    c = power.climb_gain(0.6, 0.02, 4)
    d = power.design(c)
    assert power.mde(c, d.seeds, d.problems) <= c.effect
    assert power.mde(c, d.seeds, d.problems) > power.mde(c, d.seeds * 2, d.problems)
    assert power.power(c, 5, 200, effect=power.mde(c, 5, 200)) == pytest.approx(0.8, abs=1e-6)


@pytest.mark.slow  # reads every evaluation of the recorded run (4 s)
def test_between_seed_spread_of_the_recorded_runs(root):
    """The panel-only recording's spread as recorded; a matched recording's (at the largest cap every seed was
    evaluated at) from its own records: each seed's panel accuracy, each climb's gain, the seeds of one commit."""
    world = root / "data/runs/world"
    if layout.of(world) == layout.PANEL_ONLY:
        r = power.recorded_spread(world)
        assert r["seeds"] == [0, 1, 2] and r["seeds_at_one_commit"] == [1, 2]
        acc = r["panel_accuracy"]
        assert [round(acc["values"][k], 3) for k in (0, 1, 2)] == [0.897, 0.648, 0.878]
        assert acc["between_sd_all"] == pytest.approx(0.1385, abs=1e-3)
        assert r["panel_climb_gain"]["between_sd_all"] == 0.0  # spread below the binomial: method of moments floors at 0
    else:
        seeds = A.seeds(world)
        cap = A.common_caps(world, seeds)[-1]
        r = power.recorded_spread(world, cap)
        commits = {k: A.manifest(layout.rl_folders(world, k)["panel"]).get("git_commit") for k in seeds}
        same = max(([k for k in seeds if commits[k] == c] for c in commits.values()), key=len)
        assert r["seeds"] == seeds and r["seeds_at_one_commit"] == same
        acc, evals = r["panel_accuracy"], {k: A.load_eval(world, k, cap)["tiny-panel"] for k in seeds}
        assert acc["values"] == pytest.approx({k: e.correct.mean() for k, e in evals.items()})
        assert acc["samples"] == min(len(e) for e in evals.values())
        p = acc["p"]
        assert p == pytest.approx(sum(acc["values"].values()) / len(seeds))
        within = p * (1 - p) / acc["samples"]
        assert acc["between_sd_all"] == pytest.approx(power.between_sd(acc["values"].values(), within))
        for arm in ("panel", "think"):
            traj = {k: A.read_log(world / f"seed-{k}/hillclimb-{arm}", "heldout_trajectory.jsonl")[0] for k in seeds}
            gain = r[f"{arm}_climb_gain"]
            assert gain["values"] == pytest.approx({k: A.endpoint_gain(t, A.climb_endpoint_evals(world, seeds))
                                                    for k, t in traj.items()})
            assert gain["between_sd_all"] >= 0
    assert power.between_sd([0.1, 0.3]) == pytest.approx(math.sqrt(0.02))


def test_t_power_is_the_model_at_the_runs_own_size():
    """power.t_power from the per-seed sd equals power.power where σ_b is above 0: the model's per-seed variance is
    σ_b² + sampling, which the method of moments sets to the values' variance."""
    values = [0.175, -0.1825, -0.1675, -0.26, 0.2575]
    sd = float(pd.Series(values).std(ddof=1))
    within = 2 * 0.54 * 0.46 / 400
    c = power.climb_gain(0.54, power.between_sd(values, within), samples=4)
    assert power.t_power(sd, 5, 0.10) == pytest.approx(power.power(c, 5, 100), rel=1e-9)
    assert power.t_power(sd, 5, 0.10) < power.t_power(sd / 3, 5, 0.10) < 1
    assert power.t_power(0.0, 5, 0.1) == 1.0 and math.isnan(power.t_power(0.1, 1, 0.1))


def test_an_averaged_endpoint_samples_less_noise():
    one, three = power.climb_gain(0.6, 0.05, 4), power.climb_gain(0.6, 0.05, 4, late=3)
    assert one.within == 2 and three.within == pytest.approx(1 + 1 / 3)
    assert three.se(5, 100) < one.se(5, 100) and power.power(three, 5, 100) > power.power(one, 5, 100)
