"""Part II's statistics (polyvox.studies.personas.verdicts) and issue 22's records (…personas.issue22):
Holm against a hand-checked example, the design against a closed form and a simulation, the pooled interval
within [0, 1] and resampling users, the answer only where the numbers give one, and the records of both forms."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from polyvox.studies.personas import issue22 as I
from polyvox.studies.personas import verdicts as V

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "personas-h200"


# ---------------------------------------------------------------- Holm and the MDE

@pytest.mark.parametrize("p, adjusted, rejected", [
    # hand-checked: sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → running max 0.06
    ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02], [True, False, False, True]),
    ([0.2, 0.001], [0.2, 0.002], [False, True]),
    ([0.6, 0.7, 0.02], [1.0, 1.0, 0.06], [False, False, False]),  # capped at 1; 0.02·3 > 0.05
])
def test_holm_family_against_hand_checked_examples(p, adjusted, rejected):
    fam = V.family(pd.DataFrame({"p": p, "se": [0.05] * len(p)}))
    assert fam["p (Holm)"].tolist() == pytest.approx(adjusted)
    assert fam["rejected"].tolist() == rejected and fam.attrs["m"] == len(p)


def test_rows_without_prompts_stay_outside_the_family_and_mde_uses_alpha_over_m():
    fam = V.family(pd.DataFrame({"p": [0.01, None, 0.02], "se": [0.04, None, 0.0]}))
    assert fam.attrs["m"] == 2 and math.isnan(fam["p (Holm)"].iloc[1])
    assert fam["p (Holm)"].iloc[0] == pytest.approx(0.02) and fam["p (Holm)"].iloc[2] == pytest.approx(0.02)
    # (z_{1 − 0.05/4} + z_{0.8}) · 0.04 = (2.2414 + 0.8416) · 0.04
    assert fam["MDE"].iloc[0] == pytest.approx((2.241403 + 0.841621) * 0.04, abs=1e-5)
    assert math.isnan(fam["MDE"].iloc[2])  # no variation: nothing said about what could be detected
    assert V.mde(10.0) == 0.5  # a win rate cannot depart from 50 % by more than 50 points


# ---------------------------------------------------------------- pooled over seeds and users

def frames_of(table):
    """Outcome frames from {seed: [(user, outcome), …]}."""
    return [pd.DataFrame(rows, columns=["user", "outcome"]) for rows in table.values()]


def test_pooled_interval_stays_in_0_1_and_resamples_users():
    # every prompt a win for user a, a loss for user b: a user's 4 prompts move together
    frames = frames_of({0: [("a", "W")] * 4 + [("b", "L")] * 4 + [("c", "W")] * 4,
                        1: [("a", "W")] * 4 + [("b", "L")] * 4 + [("c", "T")] * 4})
    r = V.pooled(frames, n_boot=4000)
    assert r["n"] == 24 and r["users"] == 3 and r["seeds"] == 2 and r["decisive"] == 20
    assert 0.0 <= r["ci_low"] <= r["win_rate"] <= r["ci_high"] <= 1.0
    assert r["win_rate"] == pytest.approx((8 + 4 + 2) / 24)
    # a replicate of user b alone (probability 1/27 > 2.5 %) is all losses, of user a alone all wins: a
    # bootstrap over single prompts would never come near either end
    assert r["ci_low"] == 0.0 and r["ci_high"] == 1.0
    ties = V.pooled(frames_of({0: [("a", "T")] * 4, 1: [("b", "T")] * 4}), n_boot=500)
    assert ties["win_rate"] == 0.5 and ties["p"] == 1.0 and ties["se"] == 0.0
    empty = V.pooled(frames_of({0: [], 1: []}))
    assert empty["n"] == 0 and empty["p"] is None


def test_pooled_test_rejects_a_clear_difference_and_not_noise():
    rng = np.random.default_rng(1)
    users = [f"u{i}" for i in range(40)]
    clear = frames_of({s: [(u, "W" if rng.random() < 0.8 else "L") for u in users for _ in range(4)] for s in range(3)})
    noise = frames_of({s: [(u, "W" if rng.random() < 0.5 else "L") for u in users for _ in range(4)] for s in range(3)})
    assert V.pooled(clear, 1000)["p"] < 1e-6
    assert V.pooled(noise, 1000)["p"] > 0.01


# ---------------------------------------------------------------- the design

def test_design_matches_the_one_sample_closed_form():
    # no seed or user component, one prompt per user, score variance p(1 − p) = 0.25: the classical
    # n = (z_{0.975} + z_{0.8})² · 0.25 / 0.1² = 196.2 → 197 prompts at one seed
    comp = V.Components(seed=0.0, user=0.0, residual=0.25, per_user=1, pilot_seeds=1, pilot_users=1)
    d = V.design(comp, effect=0.10, alpha=0.05, min_seeds=1, max_seeds=1)
    assert d["seeds"] == 1 and d["prompts"] == math.ceil((1.959964 + 0.841621) ** 2 * 0.25 / 0.01) == 197
    assert d["power"] >= 0.8 > V.power(comp, 1, 196)


def test_seed_variance_needs_seeds_not_users():
    # σ_seed = 0.1: with 3 seeds the seed term alone leaves SE 0.058 > 0.1 / 2.8; more users cannot help
    comp = V.Components(seed=0.01, user=0.0, residual=0.05, per_user=4, pilot_seeds=3, pilot_users=24)
    assert V.power(comp, 3, 10 ** 6) < 0.8
    d = V.design(comp)
    assert d["seeds"] > 3 and V.power(comp, d["seeds"], d["users"]) >= 0.8
    assert V.power(comp, d["seeds"], d["users"] - 1) < 0.8 if d["users"] > 1 else True
    # the seed term alone at s seeds: 0.1 / √s ≤ 0.1 / 2.8 needs s ≥ 7.84 → 8 seeds at least
    assert d["seeds"] >= 8


def test_components_and_se_against_a_simulation():
    """Simulate the crossed model (seed, user and residual normal effects), check the method-of-moments
    components on average and the formula's variance of the pooled mean against the simulated one."""
    rng = np.random.default_rng(0)
    s, u, sd = 4, 60, {"seed": 0.05, "user": 0.12, "residual": 0.1}
    means, est = [], []
    for _ in range(2000):
        z = (0.5 + rng.normal(0, sd["seed"], (s, 1)) + rng.normal(0, sd["user"], (1, u))
             + rng.normal(0, sd["residual"], (s, u)))
        means.append(z.mean())
        est.append(V.components(z * 4, np.full((s, u), 4.0)))
    want = V.Components(sd["seed"] ** 2, sd["user"] ** 2, sd["residual"] ** 2, 4, s, u)
    assert np.var(means) == pytest.approx(want.se(s, u) ** 2, rel=0.1)
    for k in ("seed", "user", "residual"):
        assert np.mean([getattr(c, k) for c in est]) == pytest.approx(getattr(want, k), rel=0.15)


def test_components_need_two_seeds_and_a_complete_table():
    assert V.components(np.ones((1, 5)), np.ones((1, 5))) is None
    assert V.components(np.ones((2, 5)), np.array([[1.0] * 5, [1.0] * 4 + [2.0]])) is None
    assert "no power analysis" in V.design_line("x", None, 4)


# ---------------------------------------------------------------- the answer

ROW = {"n": 96, "seeds": 3, "win_rate": 0.62, "p (Holm)": 0.004, "rejected": True, "MDE": 0.08, "decisive": 50}


@pytest.mark.parametrize("change, category, words", [
    ({}, "reverse", "reverse KL better"),
    ({"win_rate": 0.38}, "forward", "forward KL better"),
    ({"win_rate": 0.52, "p (Holm)": 0.6, "rejected": False}, "none", "no difference of 10 points"),
    ({"win_rate": 0.52, "p (Holm)": 0.6, "rejected": False, "MDE": 0.14}, "unanswered", "MDE is 14.0 points"),
    ({"win_rate": 0.5, "p (Holm)": 1.0, "rejected": False, "MDE": float("nan")}, "unanswered", "all ties"),
    ({"seeds": 1}, "unanswered", "1 seed per arm"),
    ({"n": 0}, "unanswered", "no prompt is left"),
    # ties leave the win rate 50 % ± d/2: 15 decisive of 96 give 7.8 points of room, less than the 10 asked
    ({"win_rate": 0.52, "p (Holm)": 0.6, "rejected": False, "decisive": 15}, "unanswered",
     "84% of prompts are ties, so the win rate can move at most 7.8 points from 50%; among the decisive prompts "
     "reverse wins 62.8%"),
    # 30 of 96 give 15.6 points of room: a null may answer, and the sentence says how much room there was
    ({"win_rate": 0.52, "p (Holm)": 0.6, "rejected": False, "decisive": 30}, "none",
     "at most 15.6 points from 50%; among the decisive prompts reverse wins 56.4%"),
])
def test_answer_only_where_the_numbers_give_one(change, category, words):
    cat, text = V.answer({**ROW, **change})
    assert cat == category and words in text


def test_a_run_without_recorded_trained_flags_is_not_answered():
    cat, text = V.answer(ROW, recorded=False)
    assert cat == "unanswered" and "no trained flags" in text
    line = V.answer_line({"a": ("unanswered", "x"), "b": ("none", "y")})
    assert line.startswith("**The miniature answers the study's question only in part**")
    assert V.answer_line({"a": ("unanswered", "x")}).startswith("**The miniature does not answer")


def test_a_second_judge_s_answer_is_reported_beside_the_first_s():
    first = {"router_head": V.answer(ROW), "oracle_head": V.answer({**ROW, "win_rate": 0.52, "p (Holm)": 0.6,
                                                                     "rejected": False, "decisive": 15})}
    second = {"router_head": V.answer({**ROW, "win_rate": 0.52, "p (Holm)": 0.6, "rejected": False, "decisive": 15}),
              "oracle_head": V.answer({**ROW, "win_rate": 0.52, "p (Holm)": 0.6, "rejected": False, "decisive": 12})}
    line = V.second_judge_line(second, "judge model", first)
    assert line.startswith("Section 7b's rule applied to the judge model's verdicts")
    assert "router_head: not answered" in line and "(category unanswered; the rubric gives reverse)" in line
    assert "oracle_head: not answered" in line and "at most 6.2 points" in line
    assert "(the rubric's category too; when both are unanswered for their ties the agreement follows from the tie shares" in line


def _fam(view_rows, m=14):
    rows = [{"comparison": f"reverse vs forward, router_head, {v}", "kind": "forward vs reverse", "system": "router_head",
             "view": v, "n": 96, "seeds": 3, "users": 24, "decisive": 40, "win_rate": 0.5, "ci_low": 0.45,
             "ci_high": 0.55, "se": 0.03, "p": 0.5, "p (Holm)": 1.0, "rejected": False, "MDE": 0.09, **change}
            for v, change in view_rows.items()]
    fam = pd.DataFrame(rows)
    fam.attrs.update(m=m, alpha=0.05, power=0.8)
    return fam


@pytest.mark.parametrize("change, category, words, absent", [
    ({"win_rate": 0.406, "p": 0.011, "p (Holm)": 0.053}, "none", "minimum detectable effect 9.0 points", "better"),
    ({"win_rate": 0.319, "p": 0.002, "p (Holm)": 0.014, "rejected": True}, "forward", "**forward KL better**", "detectable"),
    ({"win_rate": 0.62, "p": 0.001, "p (Holm)": 0.01, "rejected": True}, "reverse", "**reverse KL better**", "detectable"),
    ({"decisive": 0, "se": 0.0, "p": 1.0, "MDE": float("nan")}, "uninformative", "do not vary", "no difference"),
    ({"n": 0, "win_rate": None}, "empty", "no prompt left", "better"),
])
def test_a_view_s_verdict_word_comes_from_holm_not_from_the_seeds(change, category, words, absent):
    """Every seed below 50 % with p = 0.011 before correction is no verdict once Holm's adjusted p is 0.053 (the
    recorded run's router_head raw view): the word is the family's, and a null carries its MDE."""
    cat, text = V.view_verdict(_fam({"raw": change}), "router_head", "raw")
    assert cat == category and words in text and absent not in text
    assert cat in V.VIEW_NAMES
    if cat not in ("empty",):
        assert "Holm-adjusted p" in text and "family of 14" in text


def test_the_family_line_gives_the_nulls_mde_only():
    fam = V.family(pd.DataFrame({"comparison": ["a", "b", "c"], "p": [1e-6, 0.5, 0.6], "se": [0.10, 0.02, 0.03]}))
    line = V.family_line(fam)
    # the rejected row's MDE (0.10 · z_sum ≈ 33 points) is no null's; the nulls' run from 0.02 · z_sum to 0.03 · z_sum
    lo, hi = (100 * V.mde(se, 3) for se in (0.02, 0.03))
    assert f"from {lo:.1f} to {hi:.1f} points" in line


# ---------------------------------------------------------------- issue 22's records

def test_refusals_name_every_head_not_trained_in_both_arms():
    heads = pd.DataFrame([{"arm": a, "seed": 0, "head": p, "trained": not (a == "reverse" and p == "warm")}
                          for a in ("forward", "reverse") for p in ("warm", "concise")])
    ref = I.refusals(heads)
    assert ref.to_dict("records") == [{"seed": 0, "head": "warm", "not trained in": "reverse"}]
    assert "refused** for 1 of 2" in I.refusal_line(ref, heads) and "(by the loss rule)" in I.refusal_line(
        ref, heads, "by the loss rule")
    assert "no comparison is refused" in I.refusal_line(I.refusals(heads.assign(trained=True)), heads)


def test_new_form_records_are_read(tmp_path):
    run = tmp_path
    (run / "cap").mkdir()
    (run / "cap" / "cap.json").write_text(json.dumps({
        "cap": 128, "ceiling": 256, "longest": "thorough", "p99": 106, "cap_hit_rate": 0.0016,
        "ceiling_hit_rate": 0.0008,
        "types": {"thorough": {"n": 320, "p99": 106, "max": 256, "mean": 80.0, "cap_hit_rate": 0.006}}}))
    (run / "sweep" / "chosen").mkdir(parents=True)
    base = {"steps": 60, "jsd_beta": None, "student_sample_fraction": 0.0}
    rows = [{"arm": a, "point": i, "lr": 1e-3, "temperature": t, **base, "pole": p, "chosen": i == 1,
             "first_token_grad_norm_median": g, "style_rate": 0.95 if t == 2.0 or a == "forward" else 0.0,
             "trained": t == 2.0 or a == "forward"}
            for a, g0 in (("forward", 1.4), ("reverse", 0.001)) for i, t in enumerate((1.0, 2.0))
            for p, g in (("warm", g0), ("concise", g0))]
    (run / "sweep" / "chosen" / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "sweep" / "chosen" / "chosen.json").write_text(json.dumps({a: {
        "lr": 1e-3, "temperature": 2.0, **base, "point": 1, "seed": 5, "trained": 2, "style_rate": 0.95,
        "validation_score": 1.5} for a in ("forward", "reverse")}))
    c, types = I.cap_table(run)
    assert "99th percentile **106 tokens**" in I.cap_line(c) and "above" in I.cap_line(c)
    assert types["cap-hit rate"].iloc[0] == 0.006
    sw = I.sweep_table(run)
    assert len(sw) == 4 and sw.set_index(["arm", "point"]).loc[("reverse", 0), "heads trained"] == "0 of 2"
    assert sw["chosen"].tolist() == [False, True, False, True]
    assert "reverse: lr 0.001, 60 steps, loss temperature 2" in I.picks_line(I.picks(run))


@pytest.mark.skipif(not (RUN / "heads").exists(), reason="recorded run not shipped")
def test_the_shipped_run_is_of_the_old_form():
    has = I.form(RUN, ("forward", "reverse"), (0, 1, 2))
    assert has == {"cap": False, "sweep": False, "trained": False, "gradients": False}
    line = I.missing_line(RUN, has)
    assert "those records do not exist for this run" in line and "4 of issue 22's 4" in line
    assert RUN.name not in line and "/" not in line  # no folder of ours on the intro page


def test_a_pilot_without_variation_gives_no_design():
    comp = V.Components(0.0, 0.0, 0.0, 4, 3, 24)
    assert "do not vary" in V.design_line("x", comp, 4)


def test_calibrated_se_by_hand():
    """Two seeds whose every user scores 0.8 in seed 0 and 0.4 in seed 1: users-only resampling changes nothing
    (every user alike), seeds-only resampling gives (0.8 − 0.4)² / 8 = 0.02, made unbiased × 2 = 0.04: se 0.2,
    with the seed part's 1 degree of freedom; one seed: the users' part alone, U − 1 degrees of freedom."""
    counts = np.full((2, 50), 4.0)
    sums = np.vstack([np.full(50, 3.2), np.full(50, 1.6)])
    se, df = V.calibrated_se(sums, counts, n_boot=40_000)
    assert se == pytest.approx(0.2, rel=0.02) and df == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    one = rng.integers(0, 5, size=(1, 40)).astype(float)
    se1, df1 = V.calibrated_se(one, np.full((1, 40), 4.0), n_boot=20_000)
    z = one[0] / 4
    assert df1 == 39 and se1 == pytest.approx(z.std(ddof=0) / np.sqrt(40), rel=0.03)
    assert V.calibrated_se(np.full((3, 5), 2.0), np.full((3, 5), 4.0), n_boot=200) == (0.0, math.inf)


@pytest.mark.slow  # 300 simulated runs of 5 seeds × 448 users × 4 prompts (about 7 s)
def test_the_pooled_test_holds_its_level_with_a_seed_effect():
    """h200-v2's design (5 seeds, 448 test users × 4 prompts), a true win rate of 50 %, each seed shifted by
    N(0, 5 points) and each user by N(0, 5 points), 300 runs: the calibrated t test rejects 4.7 % and its interval
    covers 95 %; the pigeonhole bootstrap's Wald test it replaces rejected 9.7 % and covered 90 % on the same
    draws. Bounds for 300 runs' noise (a binomial sd of about 1.2 points at 5 %)."""
    rng = np.random.default_rng(3)
    hits = rejections = 0
    for r in range(300):
        p = np.clip(0.5 + rng.normal(0, 0.05, 5)[:, None] + rng.normal(0, 0.05, 448)[None, :], 0, 1)
        frames = []
        for s in range(5):
            ties = rng.random((448, 4)) < 0.2
            wins = rng.random((448, 4)) < p[s][:, None]
            out = np.where(ties, "T", np.where(wins, "W", "L"))
            frames.append(pd.DataFrame({"user": np.repeat(np.arange(448), 4), "outcome": out.ravel()}))
        res = V.pooled(frames, n_boot=600, seed=r)
        hits += res["ci_low"] <= 0.5 <= res["ci_high"]
        rejections += res["p"] < 0.05
    assert hits >= 276 and rejections <= 22


# ---------------------------------------------------------------- how a judge decided (review 24)

@pytest.mark.parametrize("ab, ba, outcome, kind, flip", [
    ("identical", "identical", "T", "identical", None),
    ("A", "B", "W", "decisive", False),
    ("B", "A", "L", "decisive", False),
    ("tie", "tie", "T", "tie in both orders", False),
    ("A", "A", "T", "same position in both orders", True),
    ("B", "B", "T", "same position in both orders", True),
    ("A", "tie", "T", "tie in one order only", True),
    ("tie", "B", "T", "tie in one order only", True),
    ("A", "unparseable", "U", "unparseable", None),
])
def test_behaviour_sorts_each_prompt_by_how_both_orders_decided_it(ab, ba, outcome, kind, flip):
    b = V.behaviour([pd.DataFrame([{"ab": ab, "ba": ba, "outcome": outcome}])])
    kinds = ("identical", "tie in both orders", "same position in both orders", "tie in one order only", "decisive",
             "unparseable")
    assert {k: b[k] for k in kinds} == {k: int(k == kind) for k in kinds}
    assert b["judged pairs"] == int(flip is not None) and b["flips"] == int(bool(flip))
    first = [ab, ba].count("A")
    assert b["first-shown picks"] == (first if kind not in ("identical", "unparseable") else 0)


def test_judge_behaviour_flags_comparisons_past_the_flip_bound():
    calm = [pd.DataFrame([{"ab": "A", "ba": "B", "outcome": "W"}] * 90 + [{"ab": "A", "ba": "A", "outcome": "T"}] * 10)]
    wild = [pd.DataFrame([{"ab": "A", "ba": "B", "outcome": "W"}] * 50 + [{"ab": "A", "ba": "A", "outcome": "T"}] * 50)]
    beh = V.judge_behaviour([({"comparison": "calm"}, calm), ({"comparison": "wild"}, wild)])
    assert beh.set_index("comparison")["flip bound met"].to_dict() == {"calm": True, "wild": False}
    assert beh.set_index("comparison")["flip rate"].to_dict() == {"calm": 0.1, "wild": 0.5}
    line = V.behaviour_line(beh, "judge model", 0.049)
    assert "**10.0–50.0%**" in line and "(on its calibration pairs: 4.9%)" in line and "**1 of 2** comparisons (wild)" in line
    assert "bound of section 7c's rule (its Wilson upper bound above it)" in line
    # first-shown share: calm 90 (A of A/B) + 20 (A/A) of 200 decisive calls
    assert beh.set_index("comparison")["first-shown share"]["calm"] == pytest.approx(110 / 200)


def test_disagreement_lines_say_where_two_judges_part():
    def frame(outcomes, picks, longer):
        return pd.DataFrame({"outcome": outcomes, "router_pick": picks, "preference": picks,
                             "words_a": [9 if x else 3 for x in longer], "words_b": [5] * len(outcomes)})
    rubric = [({"comparison": "fwd: heads vs persona", "system": "router_head"},
               [frame(["T", "T", "T", "L"], ["ic", "ic", "wc", "ic"], [1, 1, 0, 1])]),
              ({"comparison": "fwd: heads vs base", "system": "router_head"},
               [frame(["W", "L", "L", "W"], ["ic"] * 4, [1] * 4)])]
    model = [({"comparison": "fwd: heads vs persona", "system": "router_head"},
              [frame(["L", "L", "L", "L"], ["ic", "ic", "wc", "ic"], [1, 1, 0, 1])]),
             ({"comparison": "fwd: heads vs base", "system": "router_head"},
              [frame(["W", "W", "W", "W"], ["ic"] * 4, [1] * 4)])]
    sbs = pd.DataFrame({"comparison": ["fwd: heads vs persona", "fwd: heads vs base"], "same verdict": [False, True]})
    part, base = V.disagreement_lines(rubric, model, ["rubric", "judge model"], sbs)
    assert ("fwd: heads vs persona: of the judge model's 4 losses for A, 3 are ties for the rubric; on those the router "
            "picked ic for 67%, and A's answer is the longer one on 67%") in part
    assert "fwd: heads vs base 0 vs 2 prompts" in base


def test_identical_line_reads_the_raw_forward_vs_reverse_rows():
    beh = pd.DataFrame([{"comparison": "reverse vs forward, router_head, raw", "prompts": 200, "identical": 88},
                        {"comparison": "reverse vs forward, router_head, trained", "prompts": 100, "identical": 90},
                        {"comparison": "forward: heads vs base", "prompts": 200, "identical": 0}])
    line = V.identical_line(beh)
    assert "router_head 44% (88 of 200)" in line and "90" not in line
    assert V.identical_line(beh.iloc[1:]) == ""
