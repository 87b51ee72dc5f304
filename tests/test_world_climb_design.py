"""The climbs' design from a climb pilot (studies.world.climb_design): the shipped pilot recomputed to the design it
recorded, the shipped climbs' spread, made-up candidates (a calm one, a shaky one, a wild one) for the rule, the CLI."""
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


# seeds whose held-out accuracy swings between evaluations far beyond sampling (as the climbs at the matched RL's
# learning rate did before the climb pilot): a 10-point gain needs many seeds
SHAKY = {arm: {k: [(0, 0.55), (10, 0.75 - 0.3 * (k % 2)), (20, 0.5 + 0.25 * (k % 3)), (30, 0.4 + 0.12 * k)]
               for k in range(5)} for arm in ("panel", "think")}
CALM = {arm: {k: [(0, 0.55), (10, 0.58 + 0.01 * k), (20, 0.6), (30, 0.62 + 0.005 * k)] for k in range(4)}
        for arm in ("panel", "think")}


def test_the_shipped_pilot_recomputes_to_the_design_it_recorded(tmp_path):
    r = C.recomputed(WORLD / "climb-pilot")
    assert r["agree"] and r["decision"]["lr"] == 1e-4 and r["decision"]["seeds_per_arm"] == 5
    assert r["endpoint_evals"] == 3 and sorted(r["table"]["learning rate"].unique()) == [1e-4, 2.5e-4]
    assert (r["table"]["climb seeds"] == 3).all() and len(r["table"]) == 4
    # the larger learning rate's panel arm oscillates more, and at σ's upper limit needs more seeds than the chosen one
    t = r["table"].set_index(["learning rate", "arm"])
    assert t.loc[(2.5e-4, "panel"), "oscillation"] > t.loc[(1e-4, "panel"), "oscillation"]
    assert t.loc[(2.5e-4, "panel"), "seeds needed, σ upper 80 %"] > t.loc[(1e-4, "panel"), "seeds needed, σ upper 80 %"]
    # a design that chose otherwise is caught
    other = tmp_path / "pilot"
    shutil.copytree(WORLD / "climb-pilot", other)
    d = json.loads((other / "design.json").read_text())
    (other / "design.json").write_text(json.dumps({**d, "lr": 2.5e-4}))
    assert C.recomputed(other)["agree"] is False
    (other / "design.json").unlink()
    assert C.recomputed(other) is None


def test_the_shipped_climbs_spread_and_endpoint_gains():
    s = C.summarize(WORLD, endpoint_evals=3)
    assert set(s["arms"]) == {"panel", "think"}
    for arm, a in s["arms"].items():
        assert a["lr"] == 1e-4 and a["seeds"] == [0, 1, 2, 3, 4] and (a["problems"], a["samples"]) == (100, 4)
        assert a["seeds_needed"] == power.MIN_SEEDS  # the pilot's count held on the run's own spread
        assert a["seeds_needed_upper80"] >= a["seeds_needed"]
    # the chapter's endpoint gains (mean of the last 3 evaluations minus step 0), per seed
    assert [g * 100 for g in s["arms"]["panel"]["gains"]] == pytest.approx([28.667, 30.25, 27.75, 34.5, 37.0], abs=1e-3)
    assert s["arms"]["panel"]["oscillation"] > 2 * s["arms"]["panel"]["noise"]  # the rise from step 0 included


def test_a_shaky_candidate_needs_many_seeds(tmp_path):
    s = C.summarize(_candidate(tmp_path, "shaky", 5e-4, SHAKY), endpoint_evals=1)
    for arm, a in s["arms"].items():
        assert a["oscillation"] > 3 * a["noise"], arm
        assert a["seeds_needed"] is None or a["seeds_needed"] > 20
        assert a["seeds_needed_upper80"] is None or a["seeds_needed_upper80"] >= (a["seeds_needed"] or 0)


def test_the_rule_takes_the_candidate_whose_worse_arm_needs_fewest_seeds(tmp_path):
    calm_dir = _candidate(tmp_path, "calm", 1e-4, CALM)
    shaky = C.summarize(_candidate(tmp_path, "shaky", 5e-4, SHAKY), endpoint_evals=3)
    calmed = C.summarize(calm_dir, endpoint_evals=3)
    assert all(a["seeds_needed"] == power.MIN_SEEDS for a in calmed["arms"].values())  # tiny spread: the floor
    d = C.choose([shaky, calmed])
    assert d["chosen"] == str(calm_dir) and d["lr"] == 1e-4 and d["seeds_per_arm"] == power.MIN_SEEDS
    # a tie goes to the larger learning rate
    twin = _candidate(tmp_path, "twin", 2e-4, CALM)
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
    calm_dir = _candidate(tmp_path, "calm", 1e-4, CALM)
    shaky_dir = _candidate(tmp_path, "shaky", 5e-4, SHAKY)
    out = tmp_path / "design.json"
    assert C.main([str(shaky_dir), str(calm_dir), "--endpoint-evals", "3", "--max-seeds", "8", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["climb"] == {"lr": 1e-4, "eval_every": 10, "prompts": 8, "seeds": list(range(power.MIN_SEEDS)),
                          "endpoint_evals": 3}
    assert d["capped"] is False and len(d["candidates"]) == 2 and d["rule"] == C.RULE
    printed = capsys.readouterr().out
    assert "chosen: lr 0.0001, 5 seeds per arm needed" in printed and printed.strip().splitlines()[-1].startswith("climb: {")
    # capped by the device budget: the section holds max_seeds seeds and the design says so
    assert C.main([str(shaky_dir), "--endpoint-evals", "1", "--max-seeds", "6", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["capped"] is True and d["climb"]["seeds"] == list(range(6)) and d["climb"]["lr"] == 5e-4
    assert not math.isnan(d["candidates"][0]["arms"]["panel"]["oscillation"])
    # nothing to read: one line, exit 2
    assert C.main([str(tmp_path / "empty"), "--endpoint-evals", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("climb_design: ") and "no complete hill-climb" in err and "\n" not in err
