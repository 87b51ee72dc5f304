"""The climbs' design from a climb pilot (studies.world.climb_design): the shipped run's climbs as one candidate
(lr 5e-4, the recipe that oscillated), a calmer made-up candidate beside it, the rule, the CLI."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from polyvox.studies.world import climb_design as C
from polyvox.studies.world import power

WORLD = Path(__file__).resolve().parents[1] / "data" / "runs" / "world"


def _candidate(tmp: Path, name: str, lr: float, trajectories: dict) -> Path:
    """A pilot folder whose climbs hold the given trajectories (arm -> seed -> [(step, accuracy)])."""
    folder = tmp / name
    for arm, by_seed in trajectories.items():
        for seed, points in by_seed.items():
            d = folder / f"seed-{seed}" / f"hillclimb-{arm}"
            d.mkdir(parents=True)
            config = {"learning_rate": lr, "eval_every": 10, "heldout_problems": 100, "heldout_samples": 4,
                      "prompts_per_step": 8}
            (d / "manifest.json").write_text(json.dumps({"status": "complete", "config": config}))
            (d / "heldout_trajectory.jsonl").write_text(
                "".join(json.dumps({"step": s, "heldout_mean": a}) + "\n" for s, a in points))
    return folder


def test_endpoint_gain_averages_the_last_evaluations():
    t = [(0, 0.5), (20, 0.7), (40, 0.6), (60, 0.8)]
    assert C.endpoint_gain(t, 1) == pytest.approx(0.3)
    assert C.endpoint_gain(t, 3) == pytest.approx(0.7 - 0.5)
    assert C.endpoint_gain(t, 10) == pytest.approx(0.7 - 0.5)  # fewer evaluations than k: all after step 0
    with pytest.raises(ValueError, match="start at step 0"):
        C.endpoint_gain([(10, 0.5), (20, 0.6)], 1)


def test_the_shipped_climbs_oscillate_beyond_sampling_and_need_many_seeds():
    s = C.summarize(WORLD, endpoint_evals=1)
    assert set(s["arms"]) == {"panel", "think"}
    for arm, a in s["arms"].items():
        assert a["lr"] == 5e-4 and a["seeds"] == [0, 1, 2, 3, 4] and (a["problems"], a["samples"]) == (100, 4)
        # the held-out accuracy moves between evaluations by several times what sampling explains
        assert a["oscillation"] > 3 * a["noise"], arm
        assert a["seeds_needed"] is None or a["seeds_needed"] > 20
        assert a["seeds_needed_upper80"] is None or a["seeds_needed_upper80"] >= (a["seeds_needed"] or 0)
    # the chapter's endpoint gains (last minus first evaluation), per seed
    assert [round(g * 100, 1) for g in s["arms"]["panel"]["gains"]] == [17.5, -18.2, -16.8, -26.0, 25.8]


def test_the_rule_takes_the_candidate_whose_worse_arm_needs_fewest_seeds(tmp_path):
    calm = {arm: {k: [(0, 0.55), (10, 0.58 + 0.01 * k), (20, 0.6), (30, 0.62 + 0.005 * k)] for k in range(4)}
            for arm in ("panel", "think")}
    calm_dir = _candidate(tmp_path, "calm", 1e-4, calm)
    shipped = C.summarize(WORLD, endpoint_evals=3)
    calmed = C.summarize(calm_dir, endpoint_evals=3)
    assert all(a["seeds_needed"] == power.MIN_SEEDS for a in calmed["arms"].values())  # tiny spread: the floor
    d = C.choose([shipped, calmed])
    assert d["chosen"] == str(calm_dir) and d["lr"] == 1e-4 and d["seeds_per_arm"] == power.MIN_SEEDS
    # a tie goes to the larger learning rate
    twin = _candidate(tmp_path, "twin", 2e-4, calm)
    assert C.choose([calmed, C.summarize(twin, endpoint_evals=3)])["lr"] == 2e-4
    # one arm that cannot reach the power loses to any candidate that can
    wild = {arm: {k: [(0, 0.5), (10, 0.1 if k % 2 else 0.9)] for k in range(4)} for arm in ("panel", "think")}
    wild_sum = C.summarize(_candidate(tmp_path, "wild", 9e-4, wild), endpoint_evals=1, max_seeds=30)
    assert all(a["seeds_needed"] is None for a in wild_sum["arms"].values())
    assert C.choose([wild_sum, calmed])["lr"] == 1e-4
    assert C.choose([wild_sum])["seeds_per_arm"] is None


def test_a_folder_of_two_recipes_or_one_seed_is_refused(tmp_path):
    mixed = _candidate(tmp_path, "mixed", 1e-4, {"panel": {0: [(0, 0.5), (10, 0.6)]}})
    other = _candidate(tmp_path, "other", 3e-4, {"panel": {1: [(0, 0.5), (10, 0.6)]}})
    shutil.copytree(other / "seed-1", mixed / "seed-1")
    with pytest.raises(ValueError, match="more than one recipe"):
        C.summarize(mixed, 1)
    with pytest.raises(ValueError, match="1 climb seed; the spread needs two or more"):
        C.summarize(other, 1)


def test_the_command_writes_the_design_and_the_climb_section(tmp_path, capsys):
    calm = {arm: {k: [(0, 0.55), (10, 0.58 + 0.01 * k), (20, 0.6), (30, 0.62 + 0.005 * k)] for k in range(4)}
            for arm in ("panel", "think")}
    calm_dir = _candidate(tmp_path, "calm", 1e-4, calm)
    out = tmp_path / "design.json"
    assert C.main([str(WORLD), str(calm_dir), "--endpoint-evals", "3", "--max-seeds", "8", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["climb"] == {"lr": 1e-4, "eval_every": 10, "prompts": 8, "seeds": list(range(power.MIN_SEEDS)),
                          "endpoint_evals": 3}
    assert d["capped"] is False and len(d["candidates"]) == 2 and d["rule"] == C.RULE
    printed = capsys.readouterr().out
    assert "chosen: lr 0.0001, 5 seeds per arm needed" in printed and printed.strip().splitlines()[-1].startswith("climb: {")
    # capped by the device budget: the section holds max_seeds seeds and the design says so
    assert C.main([str(WORLD), "--endpoint-evals", "1", "--max-seeds", "6", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["capped"] is True and d["climb"]["seeds"] == list(range(6)) and d["climb"]["lr"] == 5e-4
    assert not math.isnan(d["candidates"][0]["arms"]["panel"]["oscillation"])
    # nothing to read: one line, exit 2
    assert C.main([str(tmp_path / "empty"), "--endpoint-evals", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("climb_design: ") and "no complete hill-climb" in err and "\n" not in err
