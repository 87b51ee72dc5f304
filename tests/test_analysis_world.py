"""Part IV's analysis (polyvox.studies.world.analysis) and the book's across-seed interval
(polyvox.metrics.seed_bootstrap): tested once here, used by the replication chapter and the findings summary."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from polyvox import metrics
from polyvox.studies.world import analysis as W

WORLD = Path(__file__).resolve().parents[1] / "data" / "runs" / "world"


def _jsonl(path: Path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# ---------------------------------------------------------------- across-seed interval

def test_seed_bootstrap_stays_inside_the_range_where_a_t_interval_does_not():
    # three seeds' per-problem accuracy differences, far apart: the t-interval leaves [-1, 1]
    groups = [np.full(50, 0.9), np.full(50, -0.2), np.r_[np.ones(40), np.zeros(10)]]
    m, lo, hi = metrics.seed_bootstrap(groups)
    assert m == pytest.approx(np.mean([0.9, -0.2, 0.8]))
    assert -0.2 <= lo <= m <= hi <= 0.9
    _, tlo, thi = metrics.t_interval([0.9, -0.2, 0.8])
    assert thi > 1  # what the book printed before: an accuracy gain above +100 points


def test_seed_bootstrap_over_seeds_alone_spans_at_most_the_seeds_range():
    m, lo, hi = metrics.seed_bootstrap([0.86, 0.44, 0.744])
    assert (m, lo, hi) == pytest.approx((np.mean([0.86, 0.44, 0.744]), 0.44, 0.86))
    assert metrics.seed_bootstrap([[0.3, 0.3], [0.3]]) == pytest.approx((0.3, 0.3, 0.3))


def test_seed_bootstrap_combines_two_evaluations_of_a_seed_and_stays_in_bounds():
    n = 40
    starts, ends = [0.0, 1.0, 0.5], [1.0, 0.0, 0.5]
    groups = [(metrics.outcomes_of(s, n), metrics.outcomes_of(e, n)) for s, e in zip(starts, ends)]
    m, lo, hi = metrics.seed_bootstrap(groups, combine=lambda s, e: e - s)
    assert m == pytest.approx(0.0) and -1 <= lo < 0 < hi <= 1
    assert W.gain_across_seeds(starts, ends, n) == pytest.approx((m, lo, hi))


def test_seed_bootstrap_is_reproducible_and_checks_its_input():
    g = [np.arange(10) / 10, np.arange(5) / 5]
    assert metrics.seed_bootstrap(g) == metrics.seed_bootstrap(g)
    with pytest.raises(ValueError):
        metrics.seed_bootstrap([])
    with pytest.raises(ValueError):
        metrics.seed_bootstrap([[0.1], []])
    with pytest.raises(ValueError):
        metrics.seed_bootstrap([([0.1], [0.2]), [0.3]])
    with pytest.raises(ValueError):
        metrics.outcomes_of(1.5, 10)
    assert metrics.outcomes_of(0.25, 8).tolist() == [1, 1, 0, 0, 0, 0, 0, 0]


# ---------------------------------------------------------------- logs and rules

def test_read_log_reads_the_last_attempt_of_an_appended_log_with_step_0_from_the_first(tmp_path):
    _jsonl(tmp_path / "heldout_trajectory.jsonl",
           [{"step": 0, "heldout_mean": 0.1}, {"step": 5, "heldout_mean": 0.4}, {"step": 10, "heldout_mean": 0.3},
            {"step": 5, "heldout_mean": 0.5}, {"step": 10, "heldout_mean": 0.6}])
    df, n = W.read_log(tmp_path, "heldout_trajectory.jsonl")
    assert n == 2 and df.step.tolist() == [0, 5, 10] and df.heldout_mean.tolist() == [0.1, 0.5, 0.6]


def test_read_log_reads_the_layout_grpo_writes_now(tmp_path):
    # an interrupted attempt is kept beside, renamed; the log holds the new attempt from step 0
    _jsonl(tmp_path / "train_log.attempt-1.jsonl", [{"step": 1, "format_valid": 0.1}, {"step": 2, "format_valid": 0.2}])
    _jsonl(tmp_path / "train_log.jsonl", [{"stage": "a", "note": "cycled"}, {"step": 1, "format_valid": 0.3},
                                          {"step": 2, "format_valid": 0.4}, {"step": 3, "format_valid": 0.5}])
    df, n = W.read_log(tmp_path, "train_log.jsonl")
    assert n == 2 and df.step.tolist() == [1, 2, 3] and df.format_valid.tolist() == [0.3, 0.4, 0.5]
    (tmp_path / "empty").mkdir()
    _jsonl(tmp_path / "empty" / "train_log.jsonl", [{"note": "only a note"}])
    with pytest.raises(ValueError, match="no records"):
        W.read_log(tmp_path / "empty", "train_log.jsonl")


def test_read_log_on_the_recorded_restarted_seed():
    df, n = W.read_log(WORLD / "seed-0" / "panel-rl", "heldout_trajectory.jsonl")
    assert n == 2 and df.step.tolist() == list(range(0, 55, 5)) and df.heldout_mean.iloc[0] == pytest.approx(0.092)
    assert W.read_log(WORLD / "seed-1" / "panel-rl", "heldout_trajectory.jsonl")[1] == 1


def test_collapse_rule():
    log = pd.DataFrame({"step": range(1, 9), "format_valid": [0.5, 0.2, 0.0, 0.3, 0.0, 0.0, 0.0, 0.0]})
    assert W.collapse_step(log) == 5
    assert W.collapse_step(log.iloc[:6]) is None  # only two bad steps at the end
    assert W.collapse_step(log, tail=5) is None
    assert W.collapse_step(pd.DataFrame({"step": [1, 2, 3], "format_valid": [0.0] * 3})) == 1


def test_sign_verdict_and_points():
    assert W.sign_verdict(0.01, 0.2, "up", "down", "neither") == "up"
    assert W.sign_verdict(-0.2, -0.01, "up", "down", "neither") == "down"
    assert W.sign_verdict(0.0, 0.2, "up", "down", "neither") == "neither"
    assert W.points(0.053, 0.028, 0.079) == "+5.3 points (95% interval +2.8 to +7.9)"


def test_level_verdicts_on_a_constructed_pair():
    rows = lambda correct: pd.DataFrame({"problem_id": [f"p{i}" for i in range(40)],  # noqa: E731
                                         "level": ["1"] * 20 + ["2"] * 20, "correct": correct})
    panel = rows([True] * 20 + [False] * 20)
    think = rows([True] * 20 + [True] * 20)
    v = W.level_verdicts({"tiny-panel": panel, "tiny-think": think})
    assert v.loc["1", "verdict"] == "no detectable difference" and v.loc["1", "think − panel"] == 0
    assert v.loc["2", "verdict"] == "tiny-think higher" and v.loc["all", "verdict"] == "tiny-think higher"


# ---------------------------------------------------------------- the recorded comparisons

def test_think_minus_panel_across_the_recorded_seeds_is_bounded():
    seeds = W.seeds(WORLD)
    per_seed, (m, lo, hi) = W.think_minus_panel(WORLD, seeds, W.caps(WORLD, seeds[0])[-1])
    assert len(per_seed) == len(seeds) == 3
    assert m == pytest.approx(per_seed["think − panel"].mean())
    assert -1 <= lo <= m <= hi <= 1 and per_seed["think − panel"].min() - 0.05 <= lo


def test_hillclimb_on_the_recorded_seeds():
    seeds = W.seeds(WORLD)
    climb = W.hillclimb(WORLD, seeds)
    assert climb["collapsed"] == {("think", 1): 12}
    assert len(climb["gains"]) == 2 * len(seeds) and len(climb["kept"]) == 2 * len(seeds) - 1
    for a in W.ARMS:
        m, lo, hi = climb["gain"][a]
        assert -1 <= lo <= m <= hi <= 1
    dead, n = W.dead_levels(climb)
    assert dead == ["olympiad"] and n == 4
