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
                      ("{pole: [1.0], opposite: [0.0], margin: 1.5}", "margin")):
        p = tmp_path / "bad.yaml"
        p.write_text(text.replace("mixes: {pole: [1.0], opposite: [0.0, 0.5], margin: 0.1}", f"mixes: {bad}"))
        with pytest.raises(ValueError, match=word):
            pipeline.load_scale(p)
