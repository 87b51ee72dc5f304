"""Part II's chapter helpers in polyvox.studies.personas.analysis (the chapter defines no function)."""
from pathlib import Path

import pandas as pd

from polyvox.studies.personas import analysis as A

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "personas-h200"


def test_tally_index_splits_heads_from_the_comparison():
    t = A.tally_index([{"name": "forward-s0: router_head vs base", "x": 1}, {"name": "s1: reverse a vs forward a"}])
    assert t[("forward-s0", "router_head vs base")]["x"] == 1 and ("s1", "reverse a vs forward a") in t


def test_ranges_and_failed_heads_text():
    assert A.value_range([0.5, 0.504]) == "0.50" and A.value_range([0.1, 0.25]) == "0.10–0.25"
    assert A.pct_range(pd.Series([0.401, 0.404])) == "40%" and A.pct_range([0.4, 0.55]) == "40%–55%"
    heads = pd.DataFrame({"head": ["warm", "warm", "concise"], "seed": [2, 0, 1]})
    assert A.failed_heads_text(heads) == "`concise` in seed(s) 1; `warm` in seed(s) 0, 2"


def test_cut_prompts_and_left_out_rate():
    trunc = pd.DataFrame({"arm": ["forward"] * 3, "seed": [0] * 3, "system": ["router_head"] * 3,
                          "prompt_id": ["a", "b", "c"], "truncated": [True, False, True]})
    assert A.cut_prompts(trunc, "forward", 0, "router_head") == {"a", "c"}
    assert A.cut_prompts(trunc, "reverse", 0, "router_head") == set()
    h2h = pd.DataFrame({"system": ["s", "s"], "seed": [0, 1], "n": [10, 10], "_wr": [0.4, 0.2]})
    trained = pd.DataFrame({"seed": [0, 1], "n": [4, 0], "_wr": [0.5, None]})
    rate, n = A.left_out_rate(h2h, trained, "s")
    # seed 0: (0.4·10 − 0.5·4) / 6 = 1/3; seed 1: (0.2·10 − 0.5·0) / 10 = 0.2
    assert n == 16 and abs(rate - (1 / 3 + 0.2) / 2) < 1e-12


def test_row_verdict_reads_the_hidden_columns():
    df = pd.DataFrame({"seed": [0, 1], "_wr": [0.3, 0.35], "_lo": [0.2, 0.25], "_hi": [0.4, 0.45], "_dec": [10, 12]})
    cat, sentence = A.row_verdict(df, 0.05)
    assert cat == "forward" and "22 non-tie prompts counted" in sentence


def test_head_to_head_and_restricted_views_on_the_recorded_run():
    import json

    from polyvox.studies.personas import pipeline

    s = pipeline.load_scale(RUN / "scale.yaml")
    arms, seeds = s["arms"]["losses"], s["arms"]["seeds"][:1]
    tallies = A.tally_index(json.loads((RUN / "judge" / "tallies.json").read_text()))
    judge_ = pipeline.rubric_judge()
    h2h = A.head_to_head(RUN, tallies, seeds, judge_, 100, systems=("oracle_head",))
    assert len(h2h) == 1 and h2h["W"].iloc[0] + h2h["T"].iloc[0] + h2h["L"].iloc[0] == h2h["n"].iloc[0]
    heads = A.convergence(A.head_training(RUN, arms, seeds), loss_drop=0.5)
    trunc = A.truncation(RUN, arms, seeds)
    views = {v: A.restricted_view(RUN, heads, trunc, "oracle_head", seeds, arms, judge_, 100, view=v)
             for v in ("trained", "uncut", "cut")}
    assert views["uncut"]["n"].iloc[0] + views["cut"]["n"].iloc[0] == h2h["n"].iloc[0]
    assert views["trained"]["n"].iloc[0] <= h2h["n"].iloc[0]


def test_view_keep_and_rates_text():
    o = pd.DataFrame({"prompt_id": ["a", "b", "c"], "preference": ["warm", "concise", "warm+concise"],
                      "router_pick": ["none", "warm", "concise"]})
    heads = pd.DataFrame([{"arm": a, "seed": 0, "head": p, "trained": not (a == "reverse" and p == "thorough")}
                          for a in ("forward", "reverse") for p in ("warm", "impersonal", "concise", "thorough")])
    trunc = pd.DataFrame({"arm": ["reverse"], "seed": [0], "system": ["oracle_head"], "prompt_id": ["b"],
                          "truncated": [True]})
    arms = ("forward", "reverse")
    keep = lambda view, system="oracle_head": A.view_keep(o, heads, trunc, system, 0, arms, view).tolist()  # noqa: E731
    assert keep("raw") == [True, True, True]
    assert keep("trained") == [True, True, False]  # a mix needs all four heads; reverse thorough did not train
    assert keep("trained", "router_head") == [False, True, True]  # by the router's pick; 'none' is left out
    assert keep("uncut") == [True, False, True] and keep("cut") == [False, True, False]
    # an empty view's rate is None: written as a dash, never formatted as a number (the chapter's old TypeError)
    assert A.rates_text([None, 41.96, float("nan")]) == "—/42/—"
