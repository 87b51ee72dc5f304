"""Part III's typed verdicts (polyvox.studies.collab.verdicts): the chapter's McNemar family under Holm, minimum
detectable effects, the power analysis, both cost views and the findings row. Synthetic cases are tables; the
recorded run (data/runs/collab-h200) is checked where the chapter prints its numbers."""
import json
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest

from polyvox.studies.collab import analysis as A
from polyvox.studies.collab import cost
from polyvox.studies.collab import verdicts as V

ROOT = Path(__file__).resolve().parents[1]
RUN, MODELS = ROOT / "data/runs/collab-h200", ROOT / "data/models/collab-h200"


@pytest.fixture(scope="module")
def rec():
    return V.recorded(RUN, MODELS)


@pytest.fixture(scope="module")
def fam(rec):
    return V.chapter_family(rec)


def _frame(correct, cost_=1.0, full=None):
    correct = np.asarray(correct, bool)
    return pd.DataFrame({"correct": correct, "weighted_tokens": float(cost_),
                         "full_weighted_tokens": float(full if full is not None else 3 * cost_)},
                        index=[f"q{i:04d}" for i in range(len(correct))])


def _pair(n, a_only, b_only, both=0):
    """Two systems on n questions: ``a_only`` right only for A, ``b_only`` only for B, ``both`` for both."""
    a = [1] * a_only + [0] * b_only + [1] * both
    b = [0] * a_only + [1] * b_only + [1] * both
    return a + [0] * (n - len(a)), b + [0] * (n - len(b))


# ------------------------------------------------------------------ Holm and the verdict words


def _holm_by_hand(p, alpha=0.05):
    """Holm (1979) as written: sort, compare p_(i) with alpha / (m - i + 1), stop at the first failure."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    rejected = [False] * len(p)
    for rank, i in enumerate(order):
        if p[i] >= alpha / (len(p) - rank):
            break
        rejected[i] = True
    return rejected


@pytest.mark.parametrize("p", [
    [0.01, 0.04, 0.03, 0.005], [0.0288, 0.1214, 1e-6, 2e-5, 0.0056, 0.7266], [0.049], [0.02, 0.02, 0.02],
    [0.012, 0.013, 0.014, 0.2], list(np.linspace(0.001, 0.05, 12)),
])
def test_holm_rejects_what_the_step_down_rule_rejects(p):
    adj, rejected = A.holm(p)
    assert list(rejected) == _holm_by_hand(p)
    assert (adj >= np.asarray(p) - 1e-15).all() and (adj <= 1).all()


def test_holm_matches_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = rng.uniform(0, 0.1, rng.integers(1, 15))
        rej, adj, _, _ = multitest.multipletests(p, alpha=0.05, method="holm")
        got_adj, got_rej = A.holm(p)
        assert got_adj == pytest.approx(adj) and list(got_rej) == list(rej)


# each row: the three pairs' (n, a_only, b_only); expected raw p below 0.05, words after Holm
@pytest.mark.parametrize("counts, words", [
    # 0/12 discordant: p = 2/4096 = 0.00049 → Holm 0.0015; 3/12: p = 2 × 576/32768 = 0.035 → 0.070 (uncorrected it
    # would say "lower"); 5/5: p = 1
    ([(100, 0, 12), (100, 3, 12), (100, 5, 5)], ["lower", "not distinguishable", "not distinguishable"]),
    ([(100, 20, 2), (100, 12, 0), (100, 0, 9)], ["higher", "higher", "lower"]),
    ([(100, 3, 4), (100, 4, 3), (100, 0, 0)], ["not distinguishable"] * 3),
])
def test_family_words_come_from_holm_adjusted_p(counts, words):
    sc, pairs = {}, []
    for i, (n, a, b) in enumerate(counts):
        x, y = _pair(n, a, b, both=10)
        sc[f"a{i}"], sc[f"b{i}"] = _frame(x, 2.0, 4.0), _frame(y, 1.0, 5.0)
        pairs.append((f"a{i}", f"b{i}"))
    fam = V.family(sc, pairs)
    raw = [A.exact_mcnemar(sc[a].correct, sc[b].correct)["p"] for a, b in pairs]
    adj, rejected = A.holm(raw)
    assert fam.m == 3 and [v.word for v in fam.verdicts] == words
    for v, p, pa, r in zip(fam.verdicts, raw, adj, rejected):
        assert v.p == pytest.approx(p) and v.p_holm == pytest.approx(pa) and (v.word != "not distinguishable") == r
        assert v.cost_ratio == pytest.approx(2.0) and v.full_cost_ratio == pytest.approx(0.8)
        if v.word == "not distinguishable":  # a null's MDE at α/m, its own n and discordance
            want = A.mcnemar_mde(v.n, v.discordance, 0.05 / 3, V.POWER)
            assert (np.isnan(v.mde) and np.isnan(want)) or v.mde == pytest.approx(want)
            assert v.mde_text() in v.sentence() and "detect" in v.mde_text()
        else:
            assert np.isnan(v.mde) and "detect" not in v.sentence()
    if counts[1] == (100, 3, 12):
        assert raw[1] == pytest.approx(2 * 576 / 32768) and fam.verdicts[1].p_holm == pytest.approx(2 * raw[1])
        assert A.verdict({"p": raw[1], "a_only": 3, "b_only": 12}) == "lower"  # uncorrected: a word Holm withdraws


def test_a_refused_comparison_is_shown_but_is_no_member():
    x, y = _pair(50, 1, 9)
    sc = {"cl": _frame(x), "solo-large": _frame(y), "solo-small": _frame(y)}
    fam = V.family(sc, [("cl", "solo-large"), ("cl", "solo-small")], {("cl", "solo-large"): "the size ordering fails"})
    assert fam.m == 1 and [(v.a, v.b) for v in fam.verdicts] == [("cl", "solo-small")]
    r = fam.get("cl", "solo-large")
    assert r.word == "refused" and np.isnan(r.p) and (r.a_only, r.b_only) == (1, 9)
    assert "**refused** (the size ordering fails)" in r.sentence() and "McNemar" not in r.sentence()
    assert "Refused, so not tested and no member: `cl` against `solo-large`" in fam.members()
    # the only member was tested at α (m = 1): its adjusted p is its p
    assert fam.verdicts[0].p_holm == pytest.approx(fam.verdicts[0].p)


@pytest.mark.parametrize("a_only, b_only, says", [
    (0, 0, "no discordant questions, so no difference is detectable"),
    (2, 1, "too few discordant questions to detect any difference: even 3.0 points (all 3 discordant"),
    (14, 12, "minimum detectable effect"),
])
def test_a_null_says_what_it_could_have_detected(a_only, b_only, says):
    x, y = _pair(100, a_only, b_only)
    v = V.family({"a": _frame(x), "b": _frame(y)}, [("a", "b")]).verdicts[0]
    assert v.word == "not distinguishable" and says in v.mde_text() and v.mde_text() in v.sentence()
    assert "80 % power at α/m = 0.05/1 = 0.0500" in v.mde_text()
    if says.startswith("minimum"):  # the stated MDE is the root of Connor's formula at α/m = α here
        assert A.mcnemar_n(v.mde + 1e-6, v.discordance) <= 100 < A.mcnemar_n(v.mde - 1e-3, v.discordance)


def test_a_verdict_read_the_other_way():
    x, y = _pair(60, 2, 14)
    fam = V.family({"a": _frame(x, 2.0, 6.0), "b": _frame(y, 1.0, 2.0)}, [("a", "b")])
    v, w = fam.get("a", "b"), fam.get("b", "a")
    assert (v.word, w.word) == ("lower", "higher") and (w.a_only, w.b_only) == (14, 2)
    assert w.diff == pytest.approx(-v.diff) and w.cost_ratio == pytest.approx(0.5) and w.full_cost_ratio == pytest.approx(1 / 3)
    assert w.p_holm == v.p_holm
    with pytest.raises(KeyError, match="not in the chapter's family"):
        fam.get("a", "c")


# ------------------------------------------------------------------ the recorded run's family


def test_the_recorded_family(rec, fam):
    assert not rec.ordering[0] and "no validation check" in rec.checked_on
    assert fam.m == 12 and [(v.a, v.b) for v in fam.refused] == [("cl", "solo-large")]
    pairs = {(v.a, v.b) for v in fam.verdicts}
    assert pairs == set(V.chapter_pairs(rec.systems, rec.projected)) - {("cl", "solo-large")}
    assert (V.PROJECTED["first"], V.PROJECTED["final"]) in pairs
    mid = fam.get("solo-large", "solo-mid")  # the example: p = 0.029 fails Holm
    assert mid.p == pytest.approx(0.0288, abs=1e-4) and mid.p_holm > 0.05 and mid.word == "not distinguishable"
    assert mid.mde == pytest.approx(A.mcnemar_mde(240, 36 / 240, 0.05 / 12), rel=1e-9) and 0.09 < mid.mde < 0.095
    assert fam.get("cl", "cl-pd").word == "not distinguishable" and np.isnan(fam.get("cl", "cl-pd").mde)  # 8 of 240
    assert fam.get("cl", "solo-small").word == "lower" and fam.get("homo", "cl").word == "higher"
    assert sum(v.word == "not distinguishable" for v in fam.verdicts) == 3


@pytest.mark.slow  # draws h200-ordered's test set (seconds)
def test_power_from_the_recorded_pilot(fam):
    pw = V.power(fam)
    assert (pw.pilot.a_only + pw.pilot.b_only, pw.pilot.n) == (57, 240)
    # α/m over the family the pool-vs-single test belongs to once tested: the 12 members and it (refused here)
    assert (pw.n_alpha, pw.n_holm, pw.m, fam.m) == (744, 1321, 13, 12)
    assert pw.planned == {"h200-ordered": 1357, "h200-ordered-v2": 2497}
    assert pw.n_alpha == A.mcnemar_n(0.05, 57 / 240) and pw.n_holm == A.mcnemar_n(0.05, 57 / 240, 0.05 / 13)
    assert 0.08 < pw.mde_alpha < 0.09 and pw.mde_holm == A.mcnemar_mde(240, 57 / 240, 0.05 / 13) > pw.mde_alpha
    s = pw.sentence()
    for text in ("**744**", "**1321**", "0.05/13", "**240**", "57 of 240", "plans 1357: enough at both levels",
                 f"and {100 * pw.mde_holm:.1f} at α/m", "plans 2497: enough at both levels", "independent"):
        assert text in s, text


def _exact_power(n, p10, p01, alpha):
    """Power of the exact two-sided McNemar test at n pairs, summed over the number of discordant pairs."""
    from scipy.stats import binom

    psi, total = p10 + p01, 0.0
    for d in range(1, n + 1):
        w = binom.pmf(d, n, psi)
        if w < 1e-10:
            continue
        k = np.arange(d + 1)
        p = np.minimum(1.0, 2 * np.minimum(binom.cdf(k, d, 0.5), binom.sf(k - 1, d, 0.5)))
        total += w * binom.pmf(k[p < alpha], d, p10 / psi).sum()
    return total


@pytest.mark.parametrize("alpha", [0.05, 0.05 / 12])
def test_the_needed_n_gives_about_80_percent_exact_power(fam, alpha):
    psi = fam.get("cl", "solo-large").discordance
    n = A.mcnemar_n(0.05, psi, alpha)
    p10, p01 = (psi + 0.05) / 2, (psi - 0.05) / 2
    assert 0.77 < _exact_power(n, p10, p01, alpha) < 0.83
    assert _exact_power(n // 2, p10, p01, alpha) < 0.6  # half the questions: clearly underpowered


@pytest.mark.parametrize("a_only, b_only, n, why", [
    (3, 2, 240, "below the 5-point difference"),  # ψ = 2 % < 5 points
    (0, 0, 240, "below the 5-point difference"),
])
def test_power_refuses_a_pilot_without_enough_discordance(a_only, b_only, n, why):
    x, y = _pair(n, a_only, b_only)
    fam = V.family({"cl": _frame(x), "solo-large": _frame(y)}, [("cl", "solo-large")])
    pw = V.power(fam, scales=())
    assert pw.n_alpha is None and pw.n_holm is None and why in pw.sentence() and "**" not in pw.sentence()


# ------------------------------------------------------------------ both cost views


def test_cost_views_have_a_frontier_each():
    allq = pd.DataFrame({"system": ["a", "b", "c"], "n": 100, "accuracy": [0.5, 0.6, 0.4], "lo": 0.3, "hi": 0.7,
                         "weighted_tokens": [1.0, 2.0, 0.5], "full_weighted_tokens": [3.0, 2.5, 4.0]})
    v = V.cost_views(allq).set_index("system")
    assert v["frontier (study)"].to_dict() == {"a": True, "b": True, "c": True}
    assert v["frontier (full)"].to_dict() == {"a": False, "b": True, "c": False}  # b: more accurate and cheaper
    assert v["full / study"].tolist() == pytest.approx([3.0, 1.25, 8.0])


def test_the_recorded_cost_views_agree_with_the_records(rec):
    summ = A.summary(rec.systems, rec.weights, models=rec.roles)
    views = V.cost_views(summ[summ.task == "all"]).set_index("system")
    direct = cost.views_table(rec.systems, rec.weights, rec.roles).set_index("system")  # another path from the turns
    for k in views.index:
        assert views.loc[k, "study"] == pytest.approx(direct.loc[k, "study"])
        assert views.loc[k, "full"] == pytest.approx(direct.loc[k, "full"])
    assert (views["full / study"] > 1).all() and views.loc["cl", "full / study"] > views.loc["solo-large", "full / study"]
    assert list(views.index[views["frontier (study)"]]) == list(views.index[views["frontier (full)"]]) == ["solo-small"]


# ------------------------------------------------------------------ the findings row


def _recorded(ordered: bool, cl_vs_large: tuple[int, int], n=400):
    """A synthetic run: solo models, cl, cl-pd; cl against solo-large with the given discordant counts."""
    large = np.zeros(n, int)
    large[:200] = 1
    cl = large.copy()
    a, b = cl_vs_large
    cl[200:200 + a] = 1  # right only for cl
    cl[:b] = 0  # right only for solo-large
    sc = {"cl": _frame(cl, 1.0, 3.0), "cl-pd": _frame(cl, 1.0, 3.0), "solo-large": _frame(large, 2.0, 4.0),
          "solo-small": _frame(np.r_[np.ones(100), np.zeros(n - 100)], 0.5, 1.0),
          "solo-mid": _frame(np.r_[np.ones(120), np.zeros(n - 120)], 0.7, 1.5),
          "solo-big": _frame(np.r_[np.ones(150), np.zeros(n - 150)], 1.0, 2.0)}
    ordering = (ordered, "solo accuracy rises with size: …" if ordered else "solo accuracy does not rise with size: …")
    return V.Recorded(Path("."), {}, dict.fromkeys(sc), {}, {}, True, sc, {}, ordering, "on the validation split")


@pytest.mark.parametrize("ordered", [True, False])
def test_power_counts_the_pool_vs_single_test_in_its_family(ordered):
    """α/m of the power analysis is over the family the pool-vs-single test belongs to: the chapter's family when
    the ordering holds (it is a member), that family and it when refused (it joins once a run can test it)."""
    fam = V.chapter_family(_recorded(ordered, (60, 5)))
    pw = V.power(fam, scales=())
    assert fam.m == (8 if ordered else 7) and pw.m == 8
    assert pw.n_holm == A.mcnemar_n(0.05, fam.get("cl", "solo-large").discordance, 0.05 / 8)


@pytest.mark.parametrize("ordered, counts, lead, forbidden", [
    (False, (60, 5), "**refused**: the size-ordering check fails", ("scores higher", "beats")),
    (True, (60, 5), "**the pool scores higher** (size ordering holds", ("refused", "beats")),
    (True, (5, 60), "**the pool scores lower** (size ordering holds", ("refused", "scores higher")),
    (True, (20, 18), "**no difference distinguishable** (size ordering holds", ("refused", "scores higher")),
])
def test_the_findings_row_follows_the_verdicts(ordered, counts, lead, forbidden):
    rec = _recorded(ordered, counts)
    fam = V.chapter_family(rec)
    claim, detail = V.finding(rec, fam, V.power(fam, scales=()))
    assert claim.startswith("Does a pool of sliced models beat one larger model") and claim.rstrip(")").count("?") == 1
    assert detail.startswith(lead), detail
    assert not [w for w in forbidden if w in detail]
    assert f"Holm across the chapter's {fam.m} exact McNemar tests" in detail and "one seed" in detail
    assert fam.m == (8 if ordered else 7)  # cl against solo-large is a member only when the ordering holds
    if lead.startswith("**no difference"):
        assert "minimum detectable effect" in detail


@pytest.mark.slow  # over 3 s (the fast tier's budget: make test-fast under 60 s)
def test_the_findings_row_is_the_chapter_s(rec, fam, monkeypatch):
    """On the first recording (collab-h200, read through the row's run setting): its refusal, unchanged."""
    from polyvox.book import findings as F

    monkeypatch.setattr(F, "COLLAB_RUN", "runs/collab-h200")
    monkeypatch.setattr(F, "COLLAB_MODELS", "models/collab-h200")
    rows = [f for f in F._collab(ROOT) if f.chapter == "book/collab/miniature"]
    assert len(rows) == 1
    claim, detail = V.finding(rec, fam, V.power(fam), {None: rec})
    assert (rows[0].claim, rows[0].detail, rows[0].status) == (claim, detail, "miniature only")
    assert "**refused**: the size-ordering check fails" in detail and "a collaborating pool beats" not in detail.lower()
    assert "744 paired test questions" in detail and "this run has 240" in detail


@pytest.mark.slow
def test_the_findings_row_reads_the_shipped_ordered_run():
    """The book's row reads data/runs/collab-h200-ordered-v3 (3 seeds, the ordered pool, the powered test set): the chapter's verdict with
    its conditions (ordering, Holm, power, seeds)."""
    from polyvox.book import findings as F

    run = ROOT / "data" / F.COLLAB_RUN
    assert F.COLLAB_RUN == "runs/collab-h200-ordered-v3" and F.COLLAB_MODELS is None
    rows = [f for f in F._collab(ROOT) if f.chapter == "book/collab/miniature"]
    assert (rows[0].claim, rows[0].detail) == V.finding_of(run, run / "models")
    assert "size ordering holds on the validation split" in rows[0].detail and "3 seeds of PD, RL" in rows[0].detail
    assert "RL against protocol distillation alone (`cl` against `cl-pd`): **lower** (-6.7 points)" in rows[0].detail
    for said in ("`solo-mid` alone is more accurate than `cl` (Holm) and no dearer in either cost view",
                 "`big` speaks only after the scheduler's forced hand-offs", "right less often than base `mid` alone in "
                 "every seed", "short of the 2854 at α/m (it detects 5.3 points there)", "1608 test questions, each run in 3 seeds"):
        assert said in rows[0].detail, said


# ------------------------------------------------------------------ the chapter calls these, and says so


def test_the_chapter_states_holm_and_power_from_the_helpers():
    nb = nbformat.read(ROOT / "notebooks/collab/miniature.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    prose = "\n".join(c.source for c in nb.cells)
    for call in ("V.recorded(", "V.chapter_family(", "V.power(", "V.cost_views(", "C.pareto_chart("):
        assert call in code, call
    for gone in ("correction for multiplicity", "without correction", "A.paired_sentence(", "A.verdict(", "A.paired("):
        assert gone not in prose, gone
    assert json.loads((ROOT / "notebooks/collab/miniature.ipynb").read_text())["nbformat"] == 4
