"""pass@k against direct math.comb, its edge cases, and the other metrics."""
import math

import numpy as np
import pytest

from polyvox import metrics


def direct(n, c, k):
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 40])
def test_pass_at_k_matches_math_comb(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert metrics.pass_at_k(n, c, k) == pytest.approx(direct(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_vectorised_equals_scalar():
    rng = np.random.default_rng(0)
    n = rng.integers(4, 40, size=500)
    c = rng.integers(0, 41, size=500) % (n + 1)
    got = metrics.pass_at_k(n, c, 4)
    want = [direct(int(a), int(b), 4) for a, b in zip(n, c)]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_pass_at_k_distinct_pair_path_equals_direct_path():
    rng = np.random.default_rng(1)
    n = rng.integers(8, 30, size=20_000)
    c = rng.integers(0, 30, size=20_000) % (n + 1)
    fast = metrics.pass_at_k(n, c, 8)  # > 4096 pairs, one k: the distinct-pair path
    slow = np.concatenate([metrics.pass_at_k(n[i:i + 4000], c[i:i + 4000], 8) for i in range(0, 20_000, 4000)])
    np.testing.assert_array_equal(fast, slow)


@pytest.mark.parametrize("n,c,k,expected", [
    (8, 0, 1, 0.0), (8, 0, 8, 0.0), (8, 8, 1, 1.0), (8, 8, 8, 1.0), (8, 1, 1, 1 / 8), (8, 1, 8, 1.0),
    (16, 12, 1, 0.75), (4, 2, 2, 1 - 1 / 6), (1, 1, 1, 1.0), (1, 0, 1, 0.0), (10, 3, 8, 1.0),
])
def test_pass_at_k_edge_cases(n, c, k, expected):
    assert metrics.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_large_n_is_stable():
    # C(1000, 500) overflows floats; the product form does not
    assert metrics.pass_at_k(1000, 1, 500) == pytest.approx(0.5)
    assert 0 < metrics.pass_at_k(1000, 3, 10) < 1


@pytest.mark.parametrize("n,c,k", [(3, 1, 4), (0, 0, 1), (8, 9, 1), (8, -1, 1), (8, 2, 0)])
def test_pass_at_k_rejects_bad_input(n, c, k):
    with pytest.raises(ValueError):
        metrics.pass_at_k(n, c, k)


def test_wilson_matches_published_interval():
    lo, hi = metrics.wilson_interval(626, 1072)
    assert (lo, hi) == pytest.approx((0.5542000862605206, 0.6131107892438289), abs=1e-12)
    assert metrics.wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        metrics.wilson_interval(3, 0)


@pytest.mark.parametrize("k,n", [(0, 10), (10, 10), (3, 7), (1, 1), (500, 1000), (626, 1072), (1, 10000)])
def test_wilson_by_scipy_pins_the_closed_form(k, n):
    # the score interval written out (z = 1.96), as polyvox computed it before SciPy did
    import math

    z, p = 1.96, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert metrics.wilson_interval(k, n) == pytest.approx((centre - half, centre + half), abs=1e-12)


def test_bootstrap_resamples_prompts_and_is_seeded():
    per_prompt = np.array([[1, 1, 1, 1], [0, 0, 0, 0]] * 10)
    a = metrics.bootstrap_ci(per_prompt, statistic=np.mean, seed=3)
    b = metrics.bootstrap_ci(per_prompt, statistic=np.mean, seed=3)
    assert a == b and a[0] == 0.5
    assert a[1] < 0.5 < a[2]


def test_variance_band():
    assert metrics.variance_band(0, 8) == "all_zero"
    assert metrics.variance_band(8, 8) == "all_one"
    assert metrics.variance_band(3, 8) == "variance_band"
    assert list(metrics.variance_band(np.array([0, 1, 7, 8]), 8)) == ["all_zero", "variance_band", "variance_band", "all_one"]
    with pytest.raises(ValueError):
        metrics.variance_band(9, 8)


def test_paired_difference():
    d = metrics.paired_difference([1.0, 0.5, 0.0], [0.5, 0.5, 0.5])
    assert d.mean == pytest.approx(0.0)
    assert d.se == pytest.approx(np.std([0.5, 0, -0.5], ddof=1) / math.sqrt(3))


def test_length_metrics_on_samples():
    import pandas as pd

    a = pd.DataFrame({"problem_id": ["p", "p", "q", "q"], "sample_index": [0, 1, 0, 1],
                      "completion_tokens": [100, 200, 50, 400], "correct": [True, False, True, True]})
    b = pd.DataFrame({"problem_id": ["p", "p", "q", "q"], "sample_index": [0, 1, 0, 1],
                      "completion_tokens": [700, 1600, 100, 400], "correct": [True, True, False, True]})
    assert metrics.tokens_per_correct(a.completion_tokens, a.correct) == pytest.approx(750 / 3)
    assert metrics.tokens_per_correct([5], [False]) == float("inf")
    assert metrics.cap_hit_rate(["stop", "length", "length", "stop"]) == 0.5
    out = metrics.paired_length_buckets(a, b)
    assert out["both_correct"]["n"] == 2 and out["both_correct"]["ratio_median"] == pytest.approx((7 + 1) / 2)
    assert out["a_only"]["n"] == 1 and out["b_only"]["n"] == 1 and out["neither"]["n"] == 0
    assert out["all_paired"]["n"] == 4
    assert out["both_correct"]["ratio_geomean"] == pytest.approx(math.sqrt(7 * 1))


@pytest.mark.parametrize("x,mean,lo,hi", [
    # t_{0.975, 2} = 4.302653; sd(ddof=1) of (1, 2, 3) = 1; half-width 4.302653 / sqrt(3)
    ([1.0, 2.0, 3.0], 2.0, 2.0 - 4.302653 / 3 ** 0.5, 2.0 + 4.302653 / 3 ** 0.5),
    # t_{0.975, 1} = 12.706205; sd of (0, 1) = 0.7071068; half-width 12.706205 · 0.7071068 / sqrt(2) = 6.3531
    ([0.0, 1.0], 0.5, 0.5 - 6.3531024, 0.5 + 6.3531024),
    ([0.2, 0.2, 0.2], 0.2, 0.2, 0.2),  # no spread: a zero-width interval
])
def test_t_interval_table(x, mean, lo, hi):
    from polyvox.metrics import t_interval

    m, a, b = t_interval(x)
    assert m == pytest.approx(mean) and a == pytest.approx(lo, abs=1e-5) and b == pytest.approx(hi, abs=1e-5)


def test_t_interval_needs_two_values_for_bounds():
    import math

    from polyvox.metrics import t_interval

    m, lo, hi = t_interval([0.4])
    assert m == 0.4 and math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError, match="no values"):
        t_interval([])


@pytest.mark.parametrize("point, lo, hi, half, bounds, want", [
    (0.5, 0.4, 0.6, 0.2, None, (0.3, 0.7)),            # symmetric: half-width 0.1 → 0.2
    (0.5, 0.45, 0.65, 0.2, None, (0.4, 0.8)),          # asymmetric (0.05 below, 0.15 above): both sides × 2
    (0.9, 0.85, 0.95, 0.2, (0.0, 1.0), (0.7, 1.0)),    # widened past the range: cut to it
    (0.5, 0.4, 0.6, 0.05, None, (0.45, 0.55)),         # a narrower target narrows
    (0.3, 0.3, 0.3, 0.2, (0.0, 1.0), (0.3, 0.3)),      # zero width: nothing to scale
])
def test_widen_interval_scales_about_the_point_and_cuts_to_the_range(point, lo, hi, half, bounds, want):
    assert metrics.widen_interval(point, lo, hi, half, bounds) == pytest.approx(want)
