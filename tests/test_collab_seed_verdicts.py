"""Part III's verdicts across the seeds of a seeded run (issue 23, item 4): the exact sign-flip test of the
per-question mean differences, the crossed bootstrap interval, the MDE, Holm across the family, per-seed sign
agreement and which systems are identical in every seed (verdicts.seed_family), checked by hand on tiny tables;
the unseeded path unchanged on the shipped run; and (slow tier) one two-seed smoke run read by the family, the
findings row and the chapter itself through ``polyvox run collab/miniature -p collab_run=…``."""
import os
import subprocess
import time
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest
from test_collab_seeds import seeded_scale

from polyvox.studies.collab import analysis as A
from polyvox.studies.collab import pipeline
from polyvox.studies.collab import verdicts as V

# the seeded smoke run (conftest.collab_seeded_run) is built once: both modules in one xdist group
pytestmark = pytest.mark.xdist_group("collab-seeded")

ROOT = Path(__file__).resolve().parents[1]
RUN, MODELS = ROOT / "data/runs/collab-h200", ROOT / "data/models/collab-h200"

# ------------------------------------------------------------------ the statistics, by hand

# 6 questions × 2 seeds. Per question, mean over the seeds: A 1, 1, 1, ½, 0, ½; B 0, ½, 1, 0, 0, ½;
# differences d = 1, ½, 0, ½, 0, 0 (mean 2/6 = ⅓; mean square (1 + ¼ + ¼) / 6 = ¼)
TA = [[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 1]]
TB = [[0, 0, 1, 0, 0, 1], [0, 1, 1, 0, 0, 0]]


def _pair(n, a_only, b_only):
    """Two systems on n questions: ``a_only`` right only for A, ``b_only`` only for B, the rest wrong for both."""
    a, b = [1] * a_only + [0] * b_only, [0] * a_only + [1] * b_only
    return a + [0] * (n - len(a)), b + [0] * (n - len(b))


def test_the_sign_flip_test_by_hand_on_six_questions_and_two_seeds():
    d = np.mean(TA, 0) - np.mean(TB, 0)
    assert list(d) == [1, 0.5, 0, 0.5, 0, 0]
    # three non-zero differences, in halves 2, 1, 1: 8 equally likely sign patterns, sums ±2 ± 1 ± 1 =
    # 4, 2, 2, 0, 0, −2, −2, −4; the observed sum is 4, and |sum| ≥ 4 in 2 of 8
    assert A.signflip_test(d, 2) == pytest.approx(2 / 8)
    assert A.signflip_test(-d, 2) == pytest.approx(2 / 8)  # two-sided
    assert A.signflip_test([0.5, -0.5, 0, 0], 2) == 1.0  # sums ±1 ± 1: |sum| ≥ 0 always
    assert A.signflip_test([0, 0, 0], 3) == 1.0
    with pytest.raises(ValueError, match="multiples of 1/2"):
        A.signflip_test([1 / 3], 2)


@pytest.mark.parametrize("a_only, b_only", [(5, 1), (10, 3), (0, 4), (7, 7), (30, 12), (57, 0)])
def test_with_one_seed_the_sign_flip_test_is_the_exact_mcnemar_test(a_only, b_only):
    d = [1] * a_only + [-1] * b_only + [0] * 9
    assert A.signflip_test(d, 1) == pytest.approx(binomtest(a_only, a_only + b_only, 0.5).pvalue, rel=1e-9)
    a, b = _pair(len(d), a_only, b_only)
    assert A.signflip_test(d, 1) == pytest.approx(A.exact_mcnemar(a, b)["p"], rel=1e-9)


def test_the_crossed_bootstrap_by_hand():
    """A right on question 1 in seed 0 only, B never: drawing the seeds (4 equally likely pairs) and the 2 questions
    (4 pairs) gives a mean difference of 1 with probability 1/16, ½ with 1/4, ¼ with 1/4 and 0 with 7/16."""
    a, b = [[1, 0], [0, 0]], [[0, 0], [0, 0]]
    draws = A.bootstrap_draws(a, b, draws=40_000, seed=1)
    freq = {v: float(np.mean(draws == v)) for v in (0, 0.25, 0.5, 1)}
    assert sum(freq.values()) == pytest.approx(1.0)
    for v, p in {0: 7 / 16, 0.25: 1 / 4, 0.5: 1 / 4, 1: 1 / 16}.items():
        assert freq[v] == pytest.approx(p, abs=0.01), (v, freq)
    assert draws.mean() == pytest.approx(0.25, abs=0.01)  # the point estimate, ¼
    # 2.5 % and 97.5 % points: P(0) > 2.5 %, P(1) > 2.5 %
    assert A.bootstrap_interval(a, b, draws=40_000, small_k=False) == (0.0, 1.0)
    # calibrated to 2 seeds' t interval (seed means ½ and 0: s = 0.354, t_1 = 12.71, half-width 3.18): all of [−1, 1]
    assert A.bootstrap_interval(a, b, draws=40_000) == (-1.0, 1.0)
    # every cell the same difference: a one-point interval, at ±1 for the extremes
    assert A.bootstrap_interval(np.ones((3, 5)), np.zeros((3, 5))) == (1.0, 1.0)
    assert A.bootstrap_interval(np.zeros((3, 5)), np.ones((3, 5))) == (-1.0, -1.0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.integers(0, 2, (3, 12)), rng.integers(0, 2, (3, 12))
        lo, hi = A.bootstrap_interval(x, y, draws=2000)
        assert -1 <= lo <= hi <= 1
    lo, hi = A.bootstrap_interval(TA, TB, draws=20_000)
    assert -1 <= lo < 1 / 3 < hi <= 1


def test_the_mde_and_n_reduce_to_connor_with_one_seed():
    # binary differences: ψ = mean d² is the discordant share, and the formulas are Connor's
    assert A.paired_n(0.05, 0.2375) == A.mcnemar_n(0.05, 0.2375) == 744
    assert A.paired_mde(240, 0.2375, 0.05 / 13) == pytest.approx(A.mcnemar_mde(240, 0.2375, 0.05 / 13))
    mde = A.paired_mde(240, 0.25, 0.05 / 8)
    assert A.paired_n(mde, 0.25, 0.05 / 8) in (240, 241)  # the MDE is where n questions are just enough
    # too few questions for any difference: even every question at √ψ = 0.1 falls short with 3 (√3 · 0.1 < 1.96 · 0.1)
    assert np.isnan(A.paired_mde(3, 0.01)) and A.paired_mde(6, 0.01) <= 0.1
    assert np.isnan(A.paired_mde(100, 0.0))
    with pytest.raises(ValueError):
        A.paired_n(0.2, 0.01)  # |δ| > √ψ cannot occur


# ------------------------------------------------------------------ the family across seeds, on made-up records


def _frame(correct, answers=None, cost=1.0):
    correct = np.asarray(correct, bool)
    return pd.DataFrame({"correct": correct, "weighted_tokens": float(cost), "full_weighted_tokens": 2.0 * cost,
                         "answer": answers if answers is not None else np.where(correct, "right", "wrong")},
                        index=[f"q{i:03d}" for i in range(len(correct))])


def _seeds(cl_by_seed, n=40, ordered=True):
    """Records of len(cl_by_seed) seeds: the solo models the same in every seed (greedy on shared models), ``cl``
    per seed from ``cl_by_seed`` (each a 0/1 list of length n)."""
    solo = {"solo-small": np.r_[np.ones(8), np.zeros(n - 8)], "solo-mid": np.r_[np.ones(10), np.zeros(n - 10)],
            "solo-big": np.r_[np.ones(12), np.zeros(n - 12)], "solo-large": np.r_[np.ones(14), np.zeros(n - 14)]}
    ordering = (ordered, "solo accuracy rises with size: …" if ordered else "solo accuracy does not rise with size: …")
    recs = {}
    for k, cl in enumerate(cl_by_seed):
        sc = {**{s: _frame(c, cost=w) for (s, c), w in zip(solo.items(), (1, 2, 4, 8))}, "cl": _frame(cl, cost=3)}
        recs[k] = V.Recorded(Path("."), {}, dict.fromkeys(sc), {}, {}, True, sc, {}, ordering,
                             "on the validation split", k)
    return recs


def test_the_family_across_seeds_shapes_holm_intervals_and_constancy():
    n = 40
    rng = np.random.default_rng(3)
    cl = [np.r_[np.ones(20), rng.integers(0, 2, n - 20)] for _ in range(3)]  # varies between seeds
    recs = _seeds(cl, n)
    fam = V.seed_family(recs, draws=2000)
    pairs = V.chapter_pairs(recs[0].systems, [])
    assert [(v.a, v.b) for v in fam.verdicts] == pairs and fam.m == len(pairs) == 7 and not fam.refused
    assert fam.seeds == (0, 1, 2) and list(fam.per_seed) == [0, 1, 2]
    assert all(f.m == 7 for f in fam.per_seed.values())  # each seed's own McNemar family
    # Holm over the family of sign-flip p's
    adj, _ = A.holm([v.p for v in fam.verdicts])
    assert [v.p_holm for v in fam.verdicts] == pytest.approx(list(adj))
    for v in fam.verdicts:
        assert -1 <= v.lo <= v.hi <= 1 and v.n == n and len(v.per_seed) == 3
        assert v.word in ("higher", "lower", "not distinguishable")
        assert (v.word == "not distinguishable") == (v.p_holm >= 0.05)
        assert v.word == "not distinguishable" or np.isnan(v.mde)
    # the solo models' outcomes are identical in every seed (computed from the frames), cl's are not
    assert {s: c for s, (c, _) in fam.identical.items()} == {"solo-small": True, "solo-mid": True, "solo-big": True,
                                                             "solo-large": True, "cl": False}
    v = fam.get("solo-large", "solo-small")
    assert v.same_a and v.same_b and "have the same outcome on every question in all 3 seeds" in v.sentence()
    assert v.diff == pytest.approx(6 / n) and (v.a_only, v.b_only) == (6, 0)
    assert "every seed agrees in sign" in v.sentence() and "significant alone" in v.sentence()
    c = fam.get("cl", "solo-large")
    assert not c.same_a and c.same_b and "`solo-large` has the same outcome" in c.sentence()
    assert c.acc_a == pytest.approx(np.mean(cl)) and c.diff == pytest.approx(np.mean(cl) - 14 / n)
    assert fam.get("solo-large", "cl").diff == pytest.approx(-c.diff)  # flipped
    assert fam.get("solo-large", "cl").lo == pytest.approx(-c.hi)
    t, st = fam.table(), fam.systems()
    assert len(t) == 7 and set(t["seeds"]) == {3}
    assert list(st.system) == list(recs[0].sc) and st.set_index("system").loc["cl", "range (points)"] > 0
    assert len(fam.seed_tables()) == 3 * 7
    assert "Outcomes that vary between seeds: `cl`" in fam.identical_line()


def test_sign_agreement_and_significance_per_seed_are_counted():
    n = 40
    ahead = np.r_[np.ones(30), np.zeros(n - 30)]  # cl well above solo-large (14 right) in seed 0 and 1
    behind = np.r_[np.ones(10), np.zeros(n - 10)]  # below it in seed 2
    fam = V.seed_family(_seeds([ahead, ahead, behind], n), draws=500)
    v = fam.get("cl", "solo-large")
    assert "the seeds disagree in sign (2 ahead, 1 behind, 0 level, of 3)" in v.agreement()
    alone = sum(s.word in ("higher", "lower") for s in v.per_seed)
    assert f"significant alone (each seed's Holm-corrected McNemar family) in {alone} of 3" in v.agreement()
    fam = V.seed_family(_seeds([ahead] * 3, n), draws=500)
    assert fam.get("cl", "solo-large").agreement().startswith("every seed agrees in sign (`cl` ahead in all 3)")
    assert fam.get("cl", "solo-large").same_a  # three identical seeds: computed, so cl is constant here too


def test_one_seed_gives_the_mcnemar_family_and_a_failed_ordering_refuses():
    rng = np.random.default_rng(5)
    recs = _seeds([rng.integers(0, 2, 40)], 40)
    one, mc = V.seed_family(recs, draws=500), V.chapter_family(recs[0])
    for s, m in zip(one.verdicts, mc.verdicts):
        assert (s.a, s.b, s.a_only, s.b_only, s.word) == (m.a, m.b, m.a_only, m.b_only, m.word)
        assert s.p == pytest.approx(m.p) and s.p_holm == pytest.approx(m.p_holm)
    fam = V.seed_family(_seeds([rng.integers(0, 2, 40)] * 2, 40, ordered=False), draws=500)
    assert [(v.a, v.b) for v in fam.refused] == [("cl", "solo-large")] and fam.m == 6
    assert "**refused** (the size ordering fails on the validation split)" in fam.get("cl", "solo-large").sentence()
    claim, detail = V.finding(next(iter(recs.values())), fam, V.power(fam, scales=()))
    assert detail.startswith("**refused**") and "exact sign-flip tests" in detail and "2 seeds of PD, RL" in detail


# ------------------------------------------------------------------ the unseeded path: the shipped run, unchanged


@pytest.mark.slow  # about 4 s: the shipped run's 240 questions, read twice
def test_an_unseeded_run_reads_as_before():
    rec, recs, fam = V.verdicts_of(RUN, MODELS)
    assert list(recs) == [None] and rec.seed is None and isinstance(fam, V.Family)
    assert rec.stage("eval") == RUN / "eval" and rec.stage("models") == RUN / "models"
    pd.testing.assert_frame_equal(fam.table(), V.chapter_family(V.recorded(RUN, MODELS)).table())
    assert V.finding_of(RUN, MODELS) == V.finding(rec, fam, V.power(fam), recs)
    assert V.seeds_line(recs).startswith("One run, unseeded")
    with pytest.raises(ValueError, match="no seed 0"):
        V.recorded(RUN, MODELS, seed=0)


def test_the_chapter_reads_a_run_folder_by_its_parameter():
    nb = nbformat.read(ROOT / "notebooks/collab/miniature.ipynb", as_version=4)
    params = next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assert "collab_run = None" in params and "collab_models = None" in params
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for call in ("V.recorded_seeds(", "V.seed_family(", "V.chapter_family(", "V.seeds_line(", "fam.seed_tables()",
                 "fam.systems()", "fam.identical_line()"):
        assert call in code, call


# ------------------------------------------------------------------ a real seeded run (slow tier)


@pytest.fixture
def smoke_seeds(collab_seeded_run):
    """smoke with seeds [0, 1] and 5 test questions, run once per test process (conftest.collab_seeded_run, shared
    with test_collab_seeds): its folder."""
    return collab_seeded_run[0]


@pytest.mark.slow
def test_the_family_across_the_seeds_of_a_smoke_run(smoke_seeds):
    rec, recs, fam = V.verdicts_of(smoke_seeds, smoke_seeds / "models")
    assert list(recs) == [0, 1] and rec.seed == 0 and isinstance(fam, V.SeedFamily)
    assert rec.stage("eval") == smoke_seeds / "seed-0/eval"
    assert set(fam.per_seed) == {0, 1} and fam.m == len(fam.verdicts) == fam.per_seed[0].m
    adj, _ = A.holm([v.p for v in fam.verdicts])
    assert [v.p_holm for v in fam.verdicts] == pytest.approx(list(adj))
    for v in fam.verdicts + fam.refused:
        assert v.n == 5 and -1 <= v.lo <= v.hi <= 1 and len(v.per_seed) == 2
    # constancy is computed from each seed's records: the greedy solo models share the models in every seed
    for s, (same, _) in fam.identical.items():
        frames = [{**r.sc, **r.projected}[s] for r in recs.values()]
        assert same == all(f.correct.equals(frames[0].correct) for f in frames)
    assert all(fam.identical[s][0] for s in A.SOLO)
    claim, detail = V.finding_of(smoke_seeds, smoke_seeds / "models")
    assert "2 seeds of PD, RL and evaluation (0, 1)" in detail and "sign-flip" in detail
    assert V.seeds_line(recs).startswith("**2 seeds** of PD, RL and evaluation")


@pytest.mark.slow
def test_the_findings_row_reads_a_seeded_run(smoke_seeds, monkeypatch):
    from polyvox.book import findings as F

    monkeypatch.setattr(F, "COLLAB_RUN", str(smoke_seeds))  # data / an absolute path is that path
    monkeypatch.setattr(F, "COLLAB_MODELS", None)
    rows = [f for f in F._collab(ROOT) if f.chapter == "book/collab/miniature"]
    assert len(rows) == 1 and "2 seeds of PD, RL and evaluation" in rows[0].detail


@pytest.mark.slow
def test_the_chapter_runs_on_a_seeded_run_through_polyvox_run(smoke_seeds, tmp_path):
    out = tmp_path / "chapter"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    t0 = time.time()
    proc = subprocess.run([str(ROOT / ".venv/bin/polyvox"), "run", "collab/miniature", "-p",
                           f"collab_run={smoke_seeds}", "--out", str(out)], cwd=ROOT,
                          env={**env, "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert time.time() - t0 < 120
    nb = nbformat.read(out / "miniature.ipynb", as_version=4)
    shown = "\n".join(o.get("data", {}).get("text/markdown", "") for c in nb.cells if c.cell_type == "code"
                      for o in c.outputs)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert "**2 seeds** of PD, RL and evaluation in the records" in shown
    assert "**Verdicts across the seeds.**" in shown and "exact sign-flip" in shown
    assert "**Each seed alone.**" in shown and "Identical outcome on every question in all 2 seeds" in shown
    assert "taken across the **2 seeds**" in shown


@pytest.mark.slow  # 2 × 100 simulated runs of 3 seeds × 400 questions (about 7 s)
@pytest.mark.parametrize("sigma", [0.0, 0.04])
def test_the_crossed_interval_covers_near_its_level_with_three_seeds(sigma):
    """3 seeds, each shifting each system's accuracy by N(0, σ): the calibrated interval covers the true difference 0
    near 95 % (300 runs of 1,357 questions: 0.95 at σ 0 and 0.957 at σ 4 points; the plain percentile interval
    0.997 and 0.857). The floor leaves room for 100 runs' noise."""
    rng = np.random.default_rng(11)
    hits = plain = 0
    for r in range(100):
        p = rng.uniform(0.2, 0.8, size=400)
        a, b = (np.stack([rng.random(400) < np.clip(p + rng.normal(0, sigma), 0, 1) for _ in range(3)]).astype(float)
                for _ in range(2))
        lo, hi = A.bootstrap_interval(a, b, draws=1000, seed=r)
        hits += lo <= 0 <= hi
        lo, hi = A.bootstrap_interval(a, b, draws=1000, seed=r, small_k=False)
        plain += lo <= 0 <= hi
    assert hits >= 88
    if sigma > 0:
        assert plain < hits  # the runs' own variation: the plain interval covers less
