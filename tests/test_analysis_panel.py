"""Part I's analysis (polyvox.studies.panel.analysis), tested once: the chapters and the findings summary use it."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from polyvox import metrics
from polyvox.studies.panel import analysis as A, published as P

DATA = Path(__file__).resolve().parents[1] / "data"


def test_length_buckets_name_the_generic_buckets_as_the_study_does():
    a = pd.DataFrame({"problem_id": ["p", "p", "q", "q"], "sample_index": [0, 1, 0, 1],
                      "completion_tokens": [100, 200, 50, 400], "correct": [True, False, True, True]})
    b = pd.DataFrame({"problem_id": ["p", "p", "q", "q"], "sample_index": [0, 1, 0, 1],
                      "completion_tokens": [700, 1600, 100, 400], "correct": [True, True, False, True]})
    generic = metrics.paired_length_buckets(a, b)
    named = A.length_buckets(a, b)
    assert set(named) == {*A.LENGTH_BUCKETS, "wilcoxon_both_correct"}
    assert named["panel_only"]["n"] == generic["a_only"]["n"] == 1
    assert named["thinking_only"]["n"] == generic["b_only"]["n"] == 1
    assert named["both_correct"]["think_tokens_median"] == generic["both_correct"]["b_tokens_median"]
    assert named["all_paired"]["thinking_longer_frac"] == generic["all_paired"]["b_longer_frac"]
    assert "panel_only" not in metrics.PAIR_BUCKETS  # core metrics holds no study labels


def _counts():
    return {(b, s): P.eval_counts(DATA, b, s) for b in A.BENCHES for s in A.SYSTEMS}


def test_accuracy_table_reproduces_the_published_accuracy_and_wilson_bounds():
    acc = A.accuracy_table(_counts(), n_boot=200)
    assert len(acc) == 4
    assert np.abs(acc[["accuracy Δ", "Wilson low Δ", "Wilson high Δ"]].to_numpy()).max() < 0.5e-4
    assert ((acc["bootstrap low"] <= acc.accuracy) & (acc.accuracy <= acc["bootstrap high"])).all()


def test_accuracy_table_without_a_published_summary_has_no_published_columns():
    df = pd.DataFrame({"id": ["a", "b"], "n_samples": [4, 4], "n_correct": [1, 3]})
    acc = A.accuracy_table({("aime", "panel"): df}, n_boot=50)
    assert acc.accuracy.iloc[0] == 0.5 and not [c for c in acc.columns if "published" in c or "Δ" in c]


def test_passk_tables_dispersion_tokens_bands_and_heldout_reproduce():
    compared = A.passk_compare(DATA, _counts())
    assert set(compared) == {"math50", "math_l5", "aime"}
    assert max(np.abs(t[[f"{v} Δ" for v in A.PASSK_VALUES]].to_numpy()).max() for t in compared.values()) < 1e-9
    disp, per_problem = A.dispersion_compare(DATA)
    assert np.abs(disp[[c for c in disp.columns if c.endswith(" Δ")]].to_numpy()).max() < 0.5e-4
    assert set(per_problem) == set(A.DISPERSION_SETS)
    tpc = A.token_consistency(P.token_efficiency(DATA))
    assert np.abs(tpc["tokens per correct Δ"]).max() < 0.5e-4
    bands = A.band_counts(A.band_records(DATA))
    assert (bands["problems Δ"] == 0).all()
    traj, sizes = A.heldout_overall(DATA)
    assert np.abs(traj["heldout_mean Δ"]).max() < 0.5e-4 and int(sizes.sum()) == 100
