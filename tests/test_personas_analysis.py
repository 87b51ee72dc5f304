"""polyvox.studies.personas.analysis on the shipped recorded run (no training, no judge calls)."""
from pathlib import Path

import pandas as pd
import pytest

from polyvox.studies.personas import analysis as A
from polyvox.studies.personas import world as pw

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "personas-h200"
ARMS, SEEDS = ("forward", "reverse"), (0, 1, 2)


def test_verdict_categories():
    assert A.verdict([0.3, 0.35], [0.2, 0.3], [0.4, 0.45], 0.05)[0] == "forward"
    assert A.verdict([0.7, 0.65], [0.6, 0.55], [0.8, 0.75], 0.05)[0] == "reverse"
    assert A.verdict([0.5, 0.52], [0.4, 0.45], [0.6, 0.6], 0.05)[0] == "none"
    assert A.verdict([0.3, 0.6], [0.2, 0.5], [0.4, 0.7], 0.05)[0] == "mixed"
    assert A.verdict([None], [None], [None], 0.05)[0] == "empty"


def test_verdict_all_ties_seed_is_uninformative_not_no_difference():
    # seed 2 is all ties (50%, CI [50, 50]): left out and named, never a "no difference"
    cat, text = A.verdict([0.45, 0.48, 0.5], [0.38, 0.42, 0.5], [0.52, 0.55, 0.5], 0.05, decisive=[18, 16, 0],
                          seeds=[0, 1, 2])
    assert cat == "none" and "seed 2 uninformative (all ties)" in text and "2 of 3 seeds counted" in text
    cat, text = A.verdict([0.5, 0.5], [0.5, 0.5], [0.5, 0.5], 0.05, decisive=[0, 0])
    assert cat == "uninformative" and "no difference" not in text
    assert A.verdict([0.3, 0.5], [0.2, 0.5], [0.4, 0.5], 0.05, decisive=[20, 0])[0] == "forward"
    # without counts the old behaviour holds
    assert A.verdict([0.5, 0.5], [0.5, 0.5], [0.5, 0.5], 0.05)[0] == "none"


def test_convergence_rule_and_comparable_types():
    h = pd.DataFrame([
        {"arm": "forward", "seed": 0, "head": p, "validation": 1.2, "loss, first steps": 1.0, "loss, last steps": 0.01}
        for p in ("warm", "impersonal", "concise", "thorough")] + [
        {"arm": "reverse", "seed": 0, "head": "warm", "validation": 0.7, "loss, first steps": 1.0, "loss, last steps": 0.9},
        {"arm": "reverse", "seed": 0, "head": "impersonal", "validation": 1.1, "loss, first steps": 1.0, "loss, last steps": 0.1},
        {"arm": "reverse", "seed": 0, "head": "concise", "validation": 1.2, "loss, first steps": 1.0, "loss, last steps": 0.1},
        {"arm": "reverse", "seed": 0, "head": "thorough", "validation": 1.2, "loss, first steps": 1.0, "loss, last steps": 0.1}])
    c = A.convergence(h, loss_drop=0.5)
    assert not c.set_index(["arm", "head"]).loc[("reverse", "warm"), "trained"]
    assert c["trained"].sum() == 7
    # the rule reads the loss only: a much worse validation score does not untrain a head …
    h2 = h.copy()
    h2.loc[(h2["arm"] == "reverse") & (h2["head"] == "concise"), "validation"] = 0.1
    c2 = A.convergence(h2, loss_drop=0.5).set_index(["arm", "head"])
    assert c2.loc[("reverse", "concise"), "trained"]
    assert c2.loc[("reverse", "concise"), "validation gap to best arm"] == pytest.approx(1.1)  # … it is reported
    assert A.comparable_types(c, 0) == ["impersonal", "concise", "thorough", "impersonal+concise", "impersonal+thorough"]
    assert A.comparable_types(c, 0, strict=True) == ["impersonal", "concise", "thorough"]
    # a tuned mix that missed its target in either arm leaves its type out; single poles do not depend on mixes
    assert A.comparable_types(c, 0, reached={"impersonal+thorough"}) == ["impersonal", "concise", "thorough",
                                                                        "impersonal+thorough"]
    assert A.comparable_types(c, 0, reached=set()) == ["impersonal", "concise", "thorough"]
    fwd = c[c["arm"] == "forward"]
    assert A.comparable_types(fwd, 0, arms=("forward",), strict=True, reached={"warm+concise"}) == [
        *pw.POLES, "warm+concise"]


@pytest.mark.skipif(not (RUN / "gen").exists(), reason="recorded run not shipped")
def test_truncation_matches_the_systems_files():
    tr = A.truncation(RUN, ARMS, SEEDS)  # raises if any answer is not its unit's text
    assert len(tr) == len(ARMS) * len(SEEDS) * 96 * len(A.SYSTEMS)
    assert not tr[tr["system"] == "base"]["truncated"].any()
    units = A.unit_cap_hits(RUN).set_index("unit")["cap hits"]
    head = tr[(tr["system"] == "head_thorough") & (tr["arm"] == "forward") & (tr["seed"] == 0)]
    assert units["forward-s0-thorough"] == head["truncated"].sum() > 0


@pytest.mark.skipif(not (RUN / "judge").exists(), reason="recorded run not shipped")
def test_user_bootstrap_widens_the_recorded_head_to_head():
    from polyvox.studies.personas import pipeline

    o = A.outcomes(RUN, "systems/reverse-s0.jsonl:oracle_head", "systems/forward-s0.jsonl:oracle_head",
                   pipeline.rubric_judge())
    assert o.groupby("user").size().eq(4).all()  # 4 prompts per test user
    p, u = A.summarize(o, 2000), A.summarize(o, 2000, groups="user")
    assert p["win_rate"] == u["win_rate"] and u["clusters"] == len(o) // 4
    assert u["ci_high"] - u["ci_low"] > p["ci_high"] - p["ci_low"]
    c = A.with_correctness(RUN, "systems/forward-s0.jsonl:oracle_head", "systems/forward-s0.jsonl:base",
                           pipeline.rubric_judge())
    assert c["correct_a"].dtype == bool and 0 < c["correct_b"].mean() < 1


@pytest.mark.skipif(not (RUN / "heads").exists(), reason="recorded run not shipped")
def test_head_training_reads_every_head():
    h = A.head_training(RUN, ARMS, SEEDS)
    assert len(h) == 24 and h["validation"].between(0, 2).all()


@pytest.mark.skipif(not (RUN / "gen").exists(), reason="recorded run not shipped")
def test_correctness_by_the_task_grader_is_the_rubric_point_on_every_recorded_answer():
    """A.correct grades through runs.grade_completions with the personas task's grader; on every answer of
    every generation unit it agrees with the rubric's correctness point (world.final_integer)."""
    from polyvox import runs, tasks
    from polyvox.studies.personas import world as pw

    gold = {p.id: p.gold for p in tasks.load("personas", None, split="test", n_users=128, per_user=4, seed=0)}
    texts, golds = [], []
    for folder in sorted(p for p in (RUN / "gen").iterdir() if (p / runs.ROLLOUTS).exists()):
        for s in runs.load(folder).samples:
            texts.append(s.completion)
            golds.append(gold[s.problem_id])
    assert len(texts) > 5000
    assert A.correct(texts, golds) == [pw.final_integer(t) == g for t, g in zip(texts, golds)]


def test_calls_used_counts_only_what_the_comparisons_read(tmp_path):
    """A cache that also holds calls on answers no comparison reads (an earlier generation's) is not counted as the
    page's: the chapter prints the calls its comparisons read beside the cache's size."""
    import json as _json

    from polyvox import judge as J

    def rubric(text, row):
        return -len(text)

    judge_ = J.RubricJudge(rubric, "toy")
    (tmp_path / "systems").mkdir()
    rows = [{"prompt_id": f"p{i}", "prompt": f"q{i}", "preference": "concise", "gold": "1",
             "responses": {"x": "a" * (i + 1), "y": "b" * 3}} for i in range(4)]  # p2: x and y differ, equal length
    rows[1]["responses"]["y"] = rows[1]["responses"]["x"]  # identical texts: no call
    (tmp_path / "systems" / "s.jsonl").write_text("".join(_json.dumps(r) + "\n" for r in rows))
    old = [dict(r, responses={"x": "old " + r["responses"]["x"], "y": r["responses"]["y"]}) for r in rows]
    (tmp_path / "systems" / "old.jsonl").write_text("".join(_json.dumps(r) + "\n" for r in old))
    J.run(f"{tmp_path}/systems/old.jsonl:x", f"{tmp_path}/systems/old.jsonl:y", tmp_path / "judge", judge_)
    J.run(f"{tmp_path}/systems/s.jsonl:x", f"{tmp_path}/systems/s.jsonl:y", tmp_path / "judge", judge_)
    tallies = [{"a": "systems/s.jsonl:x", "b": "systems/s.jsonl:y"}, {"a": "systems/s.jsonl:y", "b": "systems/s.jsonl:x"}]
    assert A.calls_used(tmp_path, tallies, judge_) == (6, 14)  # 3 pairs x 2 orders read; old: 4 pairs x 2 cached too
