"""Mixing recipes tuned on validation (issue 22, item 3): the candidates' declared order, the rule, the both-styles
rate on labelled replies, and the scale section's checks."""
import pytest

from polyvox.studies.personas import mixes as M
from polyvox.studies.personas import world as pw
from polyvox.studies.personas.steps import PAIRS, RECIPES

GRID = {"pole": [0.5, 1.0, 2.5], "opposite": [0.0, 0.5], "margin": 0.1}


@pytest.mark.parametrize("pair", PAIRS)
def test_candidates_start_with_the_study_recipe_then_smallest_change_first(pair):
    c = M.candidates(pair, GRID)
    a, b = pair.split("+")
    assert tuple(c[0][p] for p in pw.POLES) == RECIPES[pair]
    assert len({tuple(w.values()) for w in c}) == len(c)  # no candidate asked twice
    assert len(c) == 1 + 3 * 3 * 2 * 2 - (tuple(c[0].values()) in {tuple(w.values()) for w in c[1:]})
    totals = [sum(abs(v) for v in w.values()) for w in c[1:]]
    assert totals == sorted(totals)
    for w in c[1:]:  # the pair's poles weighted up, their opposites down (or not at all)
        assert w[a] > 0 and w[b] > 0 and w[M.OPPOSITE[a]] <= 0 and w[M.OPPOSITE[b]] <= 0
        assert list(w) == list(pw.POLES)


@pytest.mark.parametrize("rates, target, expected", [
    ([0.2, 0.95, 0.99], 0.9, (1, True)),      # the first that reaches the target, not the best
    ([0.95], 0.9, (0, True)),                 # the study's recipe itself
    ([0.9], 0.9, (0, True)),                  # reaching means at or above
    ([0.2, 0.5, 0.4], 0.9, (1, False)),       # none reaches: the highest, recorded as not reached
    ([0.5, 0.7, 0.7], 0.9, (1, False)),       # equals: the earliest
    ([0.0], 0.0, (0, True)),
])
def test_the_rule(rates, target, expected):
    assert M.choose(rates, target) == expected


@pytest.mark.parametrize("rates, caps, expected", [
    ([0.95, 0.97], [0.03, 0.0], (1, True)),        # the first meets the rate but loops to the cap: the next
    ([0.95, 0.97], [0.01, 0.0], (0, True)),        # at the bound is within it
    ([0.95, 0.5, 0.7], [0.2, 0.0, 0.0], (2, False)),  # none meets both: the best rate within the bound
    ([0.95, 0.99], [0.2, 0.05], (1, False)),       # none within the bound: the fewest cap hits
    ([0.95, 0.99, 0.5], [0.2, 0.05, 0.05], (1, False)),  # equal cap hits: the earliest
])
def test_the_rule_with_a_cap_bound(rates, caps, expected):
    assert M.choose(rates, 0.9, caps, 0.01) == expected
    assert M.choose(rates, 0.9, caps, None) == M.choose(rates, 0.9)  # no bound: the first rule
    with pytest.raises(ValueError, match="cap shares"):
        M.choose(rates, 0.9, caps[:1], 0.01)


def test_a_looping_reply_shows_no_style_and_a_cut_one_is_counted():
    replies = ["Result: 18.", "CCCCCCCCCCCCCCCCC", "Computation: 14 + 4 = 18. Result: 18.", "Result00000."]
    r = M.both_rate("impersonal+concise", replies, [1] * 4, cut=[False, True, False, False])
    assert r == {"a": 0.5, "b": 0.25, "both": 0.25, "cap": 0.25}
    with pytest.raises(ValueError, match="cut flags"):
        M.both_rate("impersonal+concise", replies, [1] * 4, cut=[False])


def test_both_styles_rate_on_labelled_replies():
    replies = ["Result: 18.",                                            # impersonal and concise
               "Computation: 14 + 4 = 18. Result: 18.",                  # impersonal, not concise (a calculation)
               "Happy to help! The answer is 18. You have got this!",    # warm and concise
               "The answer is 18."]                                      # concise, neutral tone
    r = M.both_rate("impersonal+concise", replies, [1] * 4)
    assert r == {"a": 0.5, "b": 0.75, "both": 0.25}
    assert M.both_rate("warm+concise", replies, [1] * 4)["both"] == 0.25


def test_the_scale_section_is_checked(tmp_path, root):
    from polyvox.studies.personas import pipeline

    text = (root / "configs/personas/smoke.yaml").read_text()
    assert "mixes:" in text and pipeline.load_scale("smoke")["mixes"]["margin"] == 0.1
    for bad, word in (("{pole: [], opposite: [0.0], margin: 0.1}", "pole"),
                      ("{pole: [1.0, 1.0], opposite: [0.0], margin: 0.1}", "pole"),
                      ("{pole: [1.0], opposite: [-0.5], margin: 0.1}", "opposite"),
                      ("{pole: [1.0], opposite: [0.0], margin: 1.5}", "margin"),
                      ("{pole: [1.0], opposite: [0.0], margin: 0.1, max_cap_hits: 1.5}", "max_cap_hits")):
        p = tmp_path / "bad.yaml"
        p.write_text(text.replace("mixes: {pole: [1.0], opposite: [0.0, 0.5], margin: 0.1, max_cap_hits: 0.01}", f"mixes: {bad}"))
        with pytest.raises(ValueError, match=word):
            pipeline.load_scale(p)


def _tuning(folder, arm, seed, pairs, max_cap=None):
    """A mixes stage's tuning.json for ``pairs`` {pair: (persona rate, [candidates' both rates][, their cap hits])},
    by the rule (with ``max_cap``: the cap-hit bound, and every candidate's cap hits recorded)."""
    import json

    rec = {"arm": arm, "seed": seed, "validation_prompts": 96, "margin": 0.1, "pairs": {}}
    if max_cap is not None:
        rec["max_cap_hits"] = max_cap
    for pair, (card, rates, *caps) in pairs.items():
        caps = caps[0] if caps else None
        target = card - 0.1
        i, reached = M.choose(rates, target, caps, max_cap)
        cands = [{"weights": w, "rate_a": r, "rate_b": r, "rate_both": r}
                 for w, r in zip(M.candidates(pair, GRID), rates)]
        if caps is not None:
            for c, x in zip(cands, caps):
                c["rate_cap_hits"] = x
        rec["pairs"][pair] = {"persona_prompting": {"a": card, "b": card, "both": card}, "target": target, "chosen": i,
                              "reached": reached, "study_recipe_rate": rates[0], "weights": cands[i]["weights"],
                              "rate_both": rates[i], "candidates": cands}
        if caps is not None:
            rec["pairs"][pair]["cap_hits"] = caps[i]
    d = M.folder(folder, arm, seed)
    d.mkdir(parents=True)
    (d / "tuning.json").write_text(json.dumps(rec))


def test_the_tuning_table_and_its_sentence(tmp_path):
    _tuning(tmp_path, "forward", 0, {"warm+concise": (1.0, [0.8, 0.95]), "impersonal+concise": (0.99, [0.01, 0.5, 0.75])})
    _tuning(tmp_path, "reverse", 0, {"warm+concise": (1.0, [0.97]), "impersonal+concise": (0.99, [0.0, 0.7])})
    t = M.tuning_table(tmp_path, ["forward", "reverse"], [0])
    assert list(t["reached"]) == [True, False, True, False] and list(t["asked"]) == [2, 3, 1, 2]
    assert list(t["tuned"]) == [0.95, 0.75, 0.97, 0.7] and list(t["study recipe"]) == [0.8, 0.01, 0.97, 0.0]
    assert t.loc[0, "weights (w, i, c, t)"] == ", ".join(f"{M.candidates('warm+concise', GRID)[1][p] + 0.0:+g}"
                                                       for p in pw.POLES)
    assert "-0" not in t.loc[0, "weights (w, i, c, t)"].replace("-0.", "")  # no negative zero shown
    line = M.tuning_line(t)
    assert line.startswith("On validation, 2 of 4 tuned mixes")
    assert "impersonal+concise (forward, 1 of 1 seeds: chosen 75–75% against a target of 89%)" in line
    assert "impersonal+concise (reverse, 1 of 1 seeds: chosen 70–70%" in line
    assert "cap" not in line and t["cap hits"].isna().all()  # recorded without the bound: none claimed
    assert M.reached_pairs(tmp_path, ["forward", "reverse"], 0) == {"warm+concise"}
    assert M.reached_pairs(tmp_path / "elsewhere", ["forward"], 0) is None  # a run without mixes/


def test_the_tuning_sentence_with_the_cap_bound(tmp_path):
    # forward meets the target at its second candidate; reverse loops to the cap on every candidate that shows both
    _tuning(tmp_path, "forward", 0, {"impersonal+concise": (0.99, [0.95, 0.9], [0.3, 0.0])}, max_cap=0.01)
    _tuning(tmp_path, "reverse", 0, {"impersonal+concise": (0.99, [0.95, 0.4, 0.3], [0.3, 0.0, 0.05])}, max_cap=0.01)
    t = M.tuning_table(tmp_path, ["forward", "reverse"], [0])
    assert list(t["reached"]) == [True, False] and list(t["cap hits"]) == [0.0, 0.0] and list(t["tuned"]) == [0.9, 0.4]
    line = M.tuning_line(t)
    assert line.startswith("On validation, 1 of 2 tuned mixes") and "with cap hits within the bound" in line
    assert "impersonal+concise (reverse, 1 of 1 seeds: chosen 40–40%, cap hits 0–0% against a target of 89%)" in line
    assert line.endswith("show both styles within the cap-hit bound.")
    assert M.reached_pairs(tmp_path, ["forward", "reverse"], 0) == set()
    assert M.reached_pairs(tmp_path, ["forward"], 0) == {"impersonal+concise"}
