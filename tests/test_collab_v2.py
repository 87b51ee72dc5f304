"""Part III after issue 23 (CPU side): budgets that rise with size and the size-ordering check, the
validation split, both cost views, the malformed-answer grading fix, the audit recount, Holm and
McNemar power. Cases are tables; the recorded run (data/runs/collab-h200) is checked where the issue
states its numbers."""
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from polyvox import runs
from polyvox.backends.base import Completion
from polyvox.formats import Prompt
from polyvox.studies.collab import analysis as A
from polyvox.studies.collab import audit_count, cost, models, pipeline, projections
from polyvox.studies.collab.tasks import grade_answer

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "data/runs/collab-h200"


@pytest.fixture(scope="module")
def recorded():
    """The recorded run's systems, weights, role wiring and per-question scores."""
    runs = A.load(RUN / "eval")
    weights = A.cost_weights(ROOT / "data/models/collab-h200")
    systems = {k: v for k, v in {**runs, **A.derived_systems(runs)}.items() if not k.startswith("sample-")}
    roles = A.role_models(True, RUN / "pd")
    return {"runs": runs, "weights": weights, "systems": systems, "roles": roles,
            "sc": A.scores(systems, weights, models=roles)}


# ---------------------------------------------------------------- 1. budgets and the size ordering

def _models(steps, hidden=(64, 96, 128, 160), layers=(3, 4, 4, 5), batch=None):
    sizes = {m: {"hidden": h, "layers": n, "intermediate": 3 * h, "steps": s}
             for m, h, n, s in zip(models.MODELS, hidden, layers, steps)}
    for m, b in zip(models.MODELS, batch or ()):
        if b is not None:
            sizes[m]["batch"] = b
    return {"vocab": 700, "seq_len": 192, "batch": 16, "lr": 3e-3, "sizes": sizes}


@pytest.mark.parametrize("section, says", [
    (_models((500, 500, 500, 500)), []),  # equal budgets
    (_models((1000, 1500, 2000, 3000)), []),  # rising budgets
    (_models((500, 400, 300, 250)), ["mid trains 400 steps, fewer than small's 500",
                                     "big trains 300 steps, fewer than mid's 400",
                                     "large trains 250 steps, fewer than big's 300"]),  # the recorded run's
    (_models((500, 500, 500, 499)), ["large trains 499 steps, fewer than big's 500"]),
    (_models((500, 500, 500, 500), batch=(16, 16, 16, 8)), ["large trains 768,000 tokens, fewer than big's 1,536,000"]),
    (_models((500, 500, 500, 500), hidden=(64, 96, 128, 96), layers=(3, 4, 4, 4)), ["large (≈"]),
])
def test_budget_problems(section, says):
    got = models.budget_problems(section)
    assert len(got) == len(says) and all(g.startswith(s) for g, s in zip(got, says)), got


@pytest.mark.parametrize("scale, breach", [("smoke", None), ("cpu", None), ("h200-ordered", None), ("full", None),
                                           ("h200", "large trains 250 steps, fewer than big's 300")])
def test_every_shipped_scale_is_checked_for_budgets(scale, breach):
    s = pipeline.load_scale(scale)
    line = models.check_budgets(s, strict=False)
    if breach is None:
        assert line is None and models.check_budgets(s) is None
        return
    assert breach in line and line.startswith("scale h200: training budgets do not rise with size") and "\n" not in line
    with pytest.raises(ValueError, match="fewer than small's 500"):
        models.check_budgets(s)


def _acc(*pairs):
    return dict(zip(models.MODELS, pairs))


@pytest.mark.parametrize("results, ok, says", [
    (_acc((10, 100), (20, 100), (30, 100), (50, 100)), True, "95 % Wilson intervals disjoint"),
    ({f"solo-{m}": v for m, v in _acc((10, 100), (20, 100), (30, 100), (50, 100)).items()}, True, "small 10.0 %"),
    (_acc({"correct": 10, "n": 100}, {"correct": 20, "n": 100}, {"correct": 30, "n": 100}, {"correct": 50, "n": 100}),
     True, "large 50.0 %"),
    (_acc((40, 100), (42, 100), (44, 100), (46, 100)), False, "intervals overlap"),  # rises, not separated
    (_acc((10, 100), (30, 100), (30, 100), (50, 100)), False, "big 30.0 % ≤ mid 30.0 %"),  # a tie is no rise
    (_acc((122, 240), (106, 240), (102, 240), (92, 240)), False, "large 38.3 % against small 50.8 %"),  # recorded
    ({"small": (1, 2), "mid": (1, 2)}, False, "no solo results for big, large"),
])
def test_ordering_check(results, ok, says):
    got, line = A.ordering_check(results)
    assert got is ok and says in line and "\n" not in line, line


def test_the_ordering_check_fails_on_the_recorded_run_and_refuses_the_pool_comparison(recorded):
    sc = recorded["sc"]
    ok, reason = A.ordering_check({k: sc[k] for k in A.SOLO})
    assert not ok and "large 38.3 % against small 50.8 %" in reason and "mid 44.2 % ≤ small 50.8 %" in reason
    refused = A.pool_vs_single(sc, (ok, reason))
    assert refused == {"A": "cl", "B": "solo-large", "refused": reason}  # no test, no p
    asked = A.pool_vs_single(sc, (True, "stand-in"))
    assert asked["refused"] is None and (asked["a_only"], asked["b_only"]) == (12, 45)


def test_the_validation_split_is_sized_and_disjoint_from_test():
    for name in ("smoke", "h200"):
        s = pipeline.load_scale(name)
        test, train = pipeline.problems(s, "test"), pipeline.problems(s, "train")
        val = models.validation_problems(s, test, train)
        e = s["eval"]
        assert len(val) == len({p.id for p in val}) == len(s["data"]["world_levels"]) * e["world_per_level"] + e["qa_n"]
        assert models.overlap(val, test) == 0 and not {p.id for p in val} & {p.id for p in test}
        assert [p.id for p in models.validation_problems(s, test, train)] == [p.id for p in val]  # seeded
    # an underlying problem is its chain (QA) or its calculation (world), not its wording
    qa = [p for p in val if p.metadata["task"] == "qa"]
    assert models.underlying(qa[0]) == ("qa", None, tuple(qa[0].metadata["steps"]))
    # QA splits by chain (tasks.qa_splits): validation and test questions share no chain with training
    assert models.overlap([p for p in test if p.metadata["task"] == "qa"], train) == 0
    assert models.overlap(qa, train) == 0 and {p.metadata["split"] for p in qa} == {"validation"}
    # a "test set" holding the validation split's chains leaves none
    with pytest.raises(ValueError, match="only 0 QA questions off the test set's chains"):
        models.validation_problems(s, qa)


class Scripted:
    """A solo backend answering the gold of a question for the first ``right`` questions it is asked about."""

    name = "scripted"

    def __init__(self, golds, right):
        self.golds, self.right, self.seen = golds, right, []

    def prompt(self, fmt, text):
        return Prompt(text, (), False)

    def identity(self):
        return {"backend": "scripted", "model": f"right-{self.right}"}

    def generate(self, reqs, params):
        out = []
        for r in reqs:
            text = r.prompt.text if hasattr(r.prompt, "text") else str(r.prompt)
            q = next(t for t in self.golds if t in text)
            self.seen.append(q)
            ans = self.golds[q] if len(self.seen) <= self.right else "nothing"
            out.append(Completion(f"<think>x</think> <answer>{ans}</answer>", 5, 5, "stop", 0.0))
        return out


@pytest.mark.parametrize("right, ok", [((0, 3, 6, 9), True), ((9, 6, 3, 0), False), ((0, 3, 6, 6), False)])
def test_validation_check_records_and_stops(tmp_path, right, ok):
    s = pipeline.load_scale("smoke")
    val = models.validation_problems(s, pipeline.problems(s, "test"))
    golds = {p.text: p.gold for p in val}
    backends = {m: Scripted(golds, r) for m, r in zip(models.MODELS, right)}
    if ok:
        rec = models.validation_check(tmp_path, s, val, backends.get)
        assert rec["ordering_ok"] and [rec["solo"][m]["correct"] for m in models.MODELS] == list(right)
    else:
        with pytest.raises(ValueError, match="^models stage: solo accuracy") as err:
            models.validation_check(tmp_path, s, val, backends.get)
        assert "\n" not in str(err.value)
    rec = json.loads((tmp_path / "validation.json").read_text())
    assert rec["ordering_ok"] is ok and rec["questions"] == len(val) == 9
    backends = {m: Scripted(golds, r) for m, r in zip(models.MODELS, right)}
    assert models.validation_check(tmp_path / "no-stop", s, val, backends.get, stop=False)["ordering_ok"] is ok


# ---------------------------------------------------------------- 2. cost: two views

def _traj(turns, id="q0"):
    return {"id": id, "turns": [{"agent": a, "prompt_tokens": p, "completion_tokens": c} for a, p, c in turns]}


W = {"small": 1.0, "mid": 3.0, "big": 6.0, "large": 10.0}  # normaliser 20


@pytest.mark.parametrize("turns, roles, study, full", [
    ([("small", 10, 5)], None, 5 * 1 / 20, 15 * 1 / 20),
    ([("small", 10, 5), ("mid", 30, 7)], None, (5 + 21) / 20, (15 + 3 * 37) / 20),  # the prompt grows per hand-off
    ([("small", 10, 5), ("small", 12, 5), ("mid", 40, 2)], None, (10 + 6) / 20, (32 + 3 * 42) / 20),  # a retry pays
    ([("small", 10, 5), ("mid", 30, 7)], {"small": "mid", "mid": "mid"}, 3 * 12 / 20, 3 * 52 / 20),  # homo: all mid
    ([("large", 50, 4)], None, 40 / 20, 540 / 20),
])
def test_cost_views_on_hand_built_trajectories(turns, roles, study, full):
    t = _traj(turns)
    assert cost.question_cost(t, W, roles)["weighted_tokens"] == pytest.approx(study)
    assert cost.question_cost(t, W, roles, "full")["weighted_tokens"] == pytest.approx(full)
    v = cost.views([t, t], W, roles)
    assert v["study"] == pytest.approx(study) and v["full"] == pytest.approx(full)
    assert v["full / study"] == pytest.approx(full / study) and v["calls"] == len(turns)
    with pytest.raises(ValueError, match="unknown cost view 'prompt'"):
        cost.question_cost(t, W, roles, "prompt")


def test_the_pareto_chart_takes_the_view():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # b is cheapest by output tokens, a by every token processed (b's prompts are long)
    table = pd.DataFrame({"system": ["a", "b"], "accuracy": [0.5, 0.5], "lo": [0.4, 0.4], "hi": [0.6, 0.6],
                          "weighted_tokens": [10.0, 5.0], "full_weighted_tokens": [20.0, 40.0]})
    fig, axes = plt.subplots(1, 2)
    _, front_study = cost.pareto_chart(table, "study", axes[0])
    _, front_full = cost.pareto_chart(table, "full", axes[1])
    assert front_study == ["b"] and front_full == ["a"] and "prompt" in axes[1].get_xlabel()
    plt.close(fig)
    with pytest.raises(ValueError, match="unknown cost view"):
        cost.cost_column("tokens")


def test_both_cost_views_of_the_recorded_run(recorded):
    v = {k: cost.views(recs, recorded["weights"], recorded["roles"].get(k)) for k, recs in recorded["systems"].items()}
    assert v["cl"]["study"] == pytest.approx(11.095, abs=1e-3) and v["cl"]["full"] == pytest.approx(37.811, abs=1e-3)
    assert v["solo-large"]["study"] == pytest.approx(16.655, abs=1e-3)
    assert v["solo-large"]["full"] == pytest.approx(45.561, abs=1e-3)
    # prompts grow with every hand-off: the study's formula understates a pool more than a single model
    assert v["cl"]["full / study"] > 3.3 > 2.8 > v["solo-large"]["full / study"]
    table = cost.views_table(recorded["systems"], recorded["weights"], recorded["roles"]).set_index("system")
    assert list(table.index[:2]) == ["solo-small", "solo-mid"] and table.loc["cl", "full"] == pytest.approx(v["cl"]["full"])
    summ = A.summary(recorded["systems"], recorded["weights"], models=recorded["roles"])
    row = summ[summ.task == "all"].set_index("system")
    assert row.loc["cl", "full_weighted_tokens"] == pytest.approx(v["cl"]["full"])


# ---------------------------------------------------------------- 3. words follow numbers: grading, the audit

@pytest.mark.parametrize("answer, bad", [
    ("1 ÷ 11 ÷ 11 ÷ 11 ÷ 111.</think> <answer>1", True),  # the recorded cl-base answer
    ("<answer>Dunmere", True), ("2 <action>stop</action>", True), ("x </ANSWER>", True),
    ("1", False), ("North Vale", False), ("3 < 4", False), (None, False), ("", False),
])
def test_malformed(answer, bad):
    assert projections.malformed(answer) is bad


def test_a_malformed_answer_is_no_answer():
    bad = "1 ÷ 11 ÷ 11 ÷ 11 ÷ 111.</think> <answer>1"
    assert runs.grade_completions("integer", [bad], ["1"], bare=True)[0].correct  # the grader alone credits it
    assert grade_answer(bad, "1", {"task": "world"}) == (False, 0.0)  # the collaboration's rule does not
    rec = {"id": "w1", "gold": "1", "metadata": {"task": "world", "level": 1}, "status": "t_max", "final": None,
           "n_turns": 1, "turns": [{"agent": "big", "answer": bad, "prompt_tokens": 3, "completion_tokens": 4}]}
    df = A.score([rec], {"big": 1.0}, "final_or_last")
    assert not df.correct.iloc[0] and df.malformed.iloc[0] and df.f1.iloc[0] == 0.0
    clean = {**rec, "turns": [{**rec["turns"][0], "answer": "1"}]}
    assert A.score([clean], {"big": 1.0}, "final_or_last").correct.iloc[0]


def test_cl_base_is_1_7_percent_and_nothing_else_moves(recorded):
    sc = recorded["sc"]
    assert int(sc["cl-base"].correct.sum()) == 4 and round(100 * sc["cl-base"].correct.mean(), 1) == 1.7
    assert sc["cl-base"].malformed.sum() == 48  # malformed projected answers; one was credited before
    credited = [i for i, r in sc["cl-base"].iterrows() if r.malformed
                and runs.grade_completions("integer", [r.answer], [next(x["gold"] for x in recorded["runs"]["cl-base"]
                                                                       if x["id"] == i)], bare=True)[0].correct]
    assert credited == ["w1-06888cdb4d"]
    assert {k: int(v.correct.sum()) for k, v in sc.items() if k != "cl-base"} == {
        "cl": 59, "cl-pd": 57, "homo": 83, "solo-big": 102, "solo-large": 92, "solo-mid": 106, "solo-small": 122,
        "vote": 114, "cascade": 112}
    assert not any(v.malformed.any() for k, v in sc.items() if k != "cl-base")


def _log(counts, header, dup=False):
    lines = ["MATH CL main-table evaluation summary", f"problems: {header['problems']}",
             f"correct: {header['correct']}", f"EM: {header['em_percent']:.2f}%", f"F1: {header['f1_percent']:.2f}%", ""]
    i = 0
    for src, c in counts.items():
        for k in range(c["rows"]):
            lines.append(json.dumps({"problem_id": f"p{0 if dup else i:05d}", "answer_source": src,
                                     "em": int(k < c["correct"])}))
            i += 1
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("mutate, rc, says", [
    (None, 0, "agrees with"),
    (lambda c: c["raw_final_answer"].update(correct=7), 1, "raw_final_answer.correct: shipped 8, counted 7"),
    (lambda c: c["first_tentative_overlong"].update(rows=488), 1, "first_tentative_overlong.rows: shipped 489"),
])
def test_the_recount_script_on_a_log_of_the_study_s_shape(tmp_path, mutate, rc, says):
    audit = json.loads((ROOT / "data/collab/study_audit.json").read_text())
    assert audit["answer_source_counts"]["first_tentative_overlong"] == {"rows": 489, "correct": 384, "wrong": 105}
    assert "hand-checked tally" in audit["provenance"]["read"]  # the shipped counts are this project's tally
    counts = copy.deepcopy(audit["answer_source_counts"])
    if mutate:
        mutate(counts)
    log = tmp_path / "evaluation.log"
    log.write_text(_log(counts, audit["header"]))
    p = subprocess.run([sys.executable, str(ROOT / "scripts/recount_collab_audit.py"), str(log), "--audit",
                        str(ROOT / "data/collab/study_audit.json")], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == rc and says in p.stdout + p.stderr, p.stdout + p.stderr
    assert audit_count.log_url(audit["provenance"]) == audit_count.LOG_URL in p.stdout


def test_the_recount_never_downloads(tmp_path, capsys):
    assert audit_count.main([str(tmp_path / "missing.log")]) == 2
    assert audit_count.LOG_URL in capsys.readouterr().err
    assert not list((ROOT / "data/collab").glob("*.log"))  # the unlicensed log is never shipped


# ---------------------------------------------------------------- 4. Holm and power

@pytest.mark.parametrize("p, adjusted, rejected", [
    ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02], [True, False, False, True]),
    ([0.01, 0.02, 0.03], [0.03, 0.04, 0.04], [True, True, True]),  # step-down: monotone
    ([0.5], [0.5], [False]),
    ([0.3, 0.6], [0.6, 0.6], [False, False]),
    ([0.001] * 3, [0.003] * 3, [True] * 3),  # ties
])
def test_holm(p, adjusted, rejected):
    adj, rej = A.holm(p)
    assert adj == pytest.approx(adjusted) and list(rej) == rejected


def test_the_recorded_family_under_holm(recorded):
    sc, systems = recorded["sc"], [k for k in recorded["systems"] if k != "cl"]
    pairs = [("cl", b) for b in sorted(systems)] + [("solo-large", m) for m in ("solo-small", "solo-mid", "solo-big")]
    fam = A.family(pd.DataFrame([A.paired(sc, a, b) for a, b in pairs])).set_index(["A", "B"])
    assert len(fam) == 12
    mid = fam.loc[("solo-large", "solo-mid")]
    assert mid.p == pytest.approx(0.0288, abs=1e-4) and mid.verdict == "lower"
    assert mid["p (Holm)"] > 0.05 and mid["verdict (Holm)"].startswith("not distinguishable")  # fails Holm
    held = [k for k, r in fam.iterrows() if not r["verdict (Holm)"].startswith("not")]
    assert len(held) == 9 and ("cl", "solo-large") in held
    assert (fam["MDE (points)"] > 0).all() and fam.loc[("cl", "cl-pd"), "MDE (points)"] < 4  # 8 discordant of 240


def _exact_power(n, p10, p01, alpha=0.05):
    """Power of the exact (conditional binomial) McNemar test, summed over the number of discordant pairs."""
    from scipy.stats import binom, binomtest

    psi, power = p10 + p01, 0.0
    for d in range(1, n + 1):
        w = binom.pmf(d, n, psi)
        if w < 1e-12:
            continue
        reject = [k for k in range(d + 1) if binomtest(k, d, 0.5).pvalue < alpha]
        power += w * binom.pmf(reject, d, p10 / psi).sum()
    return power


@pytest.mark.parametrize("diff, psi, alpha, power, n", [
    (0.05, 0.2375, 0.05, 0.8, 744),  # the recorded pilot: cl against solo-large, 57 / 240 discordant
    (0.05, 0.30, 0.05, 0.8, 940),
    (0.10, 0.30, 0.05, 0.8, 234),
    (0.05, 0.2375, 0.05 / 12, 0.8, 1303),  # Holm's worst case over the chapter's 12 tests
    (0.05, 0.2375, 0.05, 0.9, 995),
])
def test_mcnemar_n_is_connor_1987(diff, psi, alpha, power, n):
    from scipy.stats import norm

    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(power)
    assert A.mcnemar_n(diff, psi, alpha, power) == n == int(np.ceil(
        (za * np.sqrt(psi) + zb * np.sqrt(psi - diff ** 2)) ** 2 / diff ** 2))
    assert A.mcnemar_mde(n, psi, alpha, power) <= diff < A.mcnemar_mde(n - 1, psi, alpha, power) + 1e-9


@pytest.mark.slow  # exact McNemar power summed over every discordant count (3 s)
def test_the_formula_s_n_gives_about_80_percent_exact_power():
    n = A.mcnemar_n(0.10, 0.30)
    assert 0.76 < _exact_power(n, 0.20, 0.10) < 0.84


@pytest.mark.parametrize("args", [(0.0, 0.3), (0.4, 0.3), (0.05, 1.2)])
def test_mcnemar_n_refuses_impossible_effects(args):
    with pytest.raises(ValueError, match="need 0 < |diff| ≤ discordance ≤ 1"):
        A.mcnemar_n(*args)


def test_mde_of_a_null_without_discordance_is_nan():
    assert np.isnan(A.mcnemar_mde(240, 0.0)) and np.isnan(A.mcnemar_mde(0, 0.2))
    assert np.isnan(A.mcnemar_mde(3, 0.01))  # too few pairs to detect any effect up to ψ


@pytest.mark.slow  # over 3 s (the fast tier's budget: make test-fast under 60 s)
def test_the_ordered_scale_s_test_set_is_powered_by_the_pilot(recorded):
    t = A.paired(recorded["sc"], "cl", "solo-large")
    need = A.mcnemar_n(0.05, (t["a_only"] + t["b_only"]) / t["n"])
    s = pipeline.load_scale("h200-ordered")
    start = time.time()
    test = pipeline.problems(s, "test")
    assert time.time() - start < 60
    # split by the underlying problem, each once (tests/test_collab_split.py): the questions are the units
    n_test = len({models.underlying(p) for p in test})
    need_holm = A.mcnemar_n(0.05, (t["a_only"] + t["b_only"]) / t["n"], 0.05 / 13)
    assert need == 744 and need_holm == 1321 and n_test == len(test) == pipeline.n_test(s) == 1357 >= need_holm


def test_load_reads_trajectories_stored_gzipped(tmp_path):
    """A shipped run keeps large trajectories as trajectories.jsonl.gz (polyvox.ship): load reads them as the
    plain files, and a system folder with neither is not a system (it read none before, and the chapter failed
    on data/runs/collab-h200-ordered-v2 with a bare StopIteration)."""
    import gzip
    import shutil

    src = RUN / "eval" / "solo-small" / "trajectories.jsonl"
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    for d in (plain / "solo-small", packed / "solo-small", packed / "empty"):
        d.mkdir(parents=True)
    shutil.copy(src, plain / "solo-small" / "trajectories.jsonl")
    (packed / "solo-small" / "trajectories.jsonl.gz").write_bytes(gzip.compress(src.read_bytes()))
    assert A.load(packed) == A.load(plain) and list(A.load(packed)) == ["solo-small"]
    assert len(A.load(packed)["solo-small"]) > 100


def _turn(agent, answer, action, violation=None):
    return {"agent": agent, "answer": answer, "action": action, "violation": violation}


@pytest.mark.parametrize("turns, counts", [
    ([_turn("small", "3", "handoff"), _turn("mid", "3", "stop")], {"equal": 1, "equal_stop": 1}),
    ([_turn("small", "3", "handoff"), _turn("mid", "4", "stop")], {"differ": 1, "differ_stop": 1}),
    ([_turn("small", "3", "handoff"), _turn("mid", "4", "handoff"), _turn("big", "4", "stop")],
     {"differ": 1, "differ_handoff": 1}),
    # a violating turn is no draft: the draft checked is the last valid one
    ([_turn("small", "3", "handoff"), _turn("small", "5", None, "no action"), _turn("mid", "3", "stop")],
     {"equal": 1, "equal_stop": 1}),
    ([_turn("small", "3", "stop")], {}),
])
def test_checker_actions_count_what_mid_did_with_small_s_draft(turns, counts):
    got = A.checker_actions([{"turns": turns}])
    want = {k: 0 for k in ("questions", "equal", "differ", "differ_stop", "differ_handoff", "equal_stop")}
    want.update(counts)
    want["questions"] = int(bool(counts))
    assert got == want
    line = A.checker_line(got)
    assert ("never checked" in line) == (not counts)


def test_rl_change_and_line_from_windows_at_both_ends():
    rows = []
    for seed in (0, 1):
        for step in range(1, 101):
            rows.append({"seed": seed, "agent": "small", "step": step, "reward": 0.2 + 0.004 * step, "valid": 0.9,
                         "accuracy": 0.5})
            # mid: flat with a high last step, which a first-vs-last-step reading would call a rise
            rows.append({"seed": seed, "agent": "mid", "step": step, "reward": 0.9 if step == 100 else 0.5,
                         "valid": 0.9, "accuracy": 0.5})
    ch = A.rl_change(pd.DataFrame(rows)).set_index("agent")
    assert ch.loc["small", "seeds rising"] == 2 and ch.loc["small", "change"] == pytest.approx(0.004 * 90)
    assert ch.loc["mid", "change"] == pytest.approx(0.04) and ch.loc["mid", "seeds rising"] == 2
    trained, line = A.rl_line(ch.reset_index())
    assert trained and line.startswith("**RL trained**")
    flat = pd.DataFrame([{**r, "reward": 0.5} for r in rows])
    trained, line = A.rl_line(A.rl_change(flat))
    assert not trained and "the reward did not rise in every seed for `small`, `mid`" in line
    short = pd.DataFrame([r for r in rows if r["step"] <= 40])
    trained, line = A.rl_line(A.rl_change(short))
    assert not trained and "ran fewer than 100 steps" in line


def test_rl_curves_read_the_shipped_runs():
    """v2 (lr 1e-4, 100 steps) did not train by the chapter's rule; v3 (the RL pilot's recipe, 150 steps) did."""
    for name, steps, trains in (("collab-h200-ordered-v2", 100, False), ("collab-h200-ordered-v3", 150, True)):
        curves = A.rl_curves(ROOT / "data/runs" / name)
        assert set(curves["seed"]) == {0, 1, 2} and set(curves["agent"]) == {"small", "mid", "big"}
        assert curves.groupby(["seed", "agent"]).size().eq(steps).all()
        assert A.rl_line(A.rl_change(curves))[0] is trains, name


class _Said:
    """A verdict as rl_scope_line reads it: its word and its sentence."""

    def __init__(self, word):
        self.word = word

    def sentence(self):
        return f"<{self.word} sentence>"


@pytest.mark.parametrize("word, says", [
    ("lower", "on the pool's test questions RL **lowered** accuracy"),
    ("higher", "on the pool's test questions RL raised accuracy"),
    ("not distinguishable", "no change from RL is detected"),
    ("refused", "is not tested (refused)"),
])
def test_rl_scope_line_says_where_the_reward_is_measured_and_what_carried(word, says):
    rl = {"steps": 150, "group": 8, "prompts": 4, "problems": 64, "lr": 1e-3, "max_tokens": 80}
    line = A.rl_scope_line(rl, _Said(word))
    assert "64 per agent" in line and "drawn about 9.4 times over 150 steps of 4 prompts × 8 completions" in line
    assert says in line and ("<" in line) == (word != "refused")


@pytest.mark.parametrize("text, ok", [
    ("5e-4:8:8:200", {"lr": 5e-4, "group": 8, "prompts": 8, "steps": 200}),
    ("1e-4:4:4:100", {"lr": 1e-4, "group": 4, "prompts": 4, "steps": 100}),
    ("5e-4:8:8", None), ("x:8:8:200", None), ("5e-4:1:8:200", None), ("0:8:8:200", None), ("5e-4:8:0:200", None),
])
def test_rl_pilot_candidates_parse_or_fail_in_one_line(text, ok):
    from polyvox.studies.collab import rl_pilot

    if ok is None:
        with pytest.raises(ValueError, match=f"candidate '{text}'"):
            rl_pilot.parse_candidate(text)
    else:
        assert rl_pilot.parse_candidate(text) == ok
        assert rl_pilot.name_of(ok) == f"lr{ok['lr']:g}-g{ok['group']}-p{ok['prompts']}-s{ok['steps']}"


def test_rl_pilot_refuses_a_run_without_pd_in_one_line(tmp_path, capsys):
    from polyvox.studies.collab import rl_pilot

    assert rl_pilot.main(["--run", str(tmp_path), "--out", str(tmp_path / "o"), "--candidates", "1e-4:4:4:2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"polyvox: rl_pilot: {tmp_path}: no seed-0/pd/ (the PD models the pilot starts from)"


@pytest.mark.slow  # draws the scale's test set (~12 s)
def test_the_powered_scale_holds_the_questions_its_pilot_asks_for():
    """configs/collab/h200-ordered-v2.yaml: h200-ordered with the RL pilot's recipe and a test set at least as large
    as the chapter's power computation asks of the recorded run as a pilot (5 points at alpha/m, 80 % power)."""
    from polyvox.studies.collab import verdicts as V

    s, base = pipeline.load_scale("h200-ordered-v2"), pipeline.load_scale("h200-ordered")
    assert {k: v for k, v in s.items() if k not in ("name", "rl", "eval")} == \
        {k: v for k, v in base.items() if k not in ("name", "rl", "eval")}
    assert s["rl"] == {**base["rl"], "lr": 1.0e-3, "group": 8, "steps": 150}
    run = ROOT / "data/runs/collab-h200-ordered-v2"
    fam = V.seed_family(V.recorded_seeds(run, run / "models"))
    need = V.power(fam)
    n = pipeline.n_test(s)
    assert need.n_holm == 2476 and need.n_alpha == 1395 and n == 2497 >= need.n_holm
    assert V.POWER_PILOTS["h200-ordered-v2"] == "data/runs/collab-h200-ordered-v2"
    # the powered run itself: its own psi is larger, so it falls short at alpha/m and says so
    run3 = ROOT / "data/runs/collab-h200-ordered-v3"
    pw3 = V.power(V.seed_family(V.recorded_seeds(run3, run3 / "models")))
    assert pw3.n_alpha <= pw3.pilot.n == 2497 < pw3.n_holm and 0.05 < pw3.mde_holm < 0.06
    line = V.plan_line("h200-ordered-v2", pw3)
    assert f"detects {100 * pw3.mde_holm:.1f} points there, not 5" in line and "met at α" in line
    assert f"α/m needs {pw3.n_holm} questions and the run has 2497" in line
    assert V.plan_line("h200-ordered", pw3) == "The `h200-ordered` scale's test size was not planned from a pilot."


def test_speaker_shares_and_ender_accuracy_on_hand_built_records():
    recs = [{"id": "q1", "gold": "5", "metadata": {"task": "world"},
             "turns": [_turn("small", "4", "handoff"), _turn("mid", "5", "stop")]},
            {"id": "q2", "gold": "7", "metadata": {"task": "world"},
             "turns": [_turn("small", "7", "handoff"), _turn("mid", "6", "stop")]},
            {"id": "q3", "gold": "2", "metadata": {"task": "world"}, "turns": [_turn("small", "2", "stop")]}]
    solo = [{"id": q, "gold": g, "final": f, "metadata": {"task": "world"}}
            for q, g, f in (("q1", "5", "3"), ("q2", "7", "7"), ("q3", "2", "2"))]
    assert A.speaker_shares(recs) == {"small": (3, 5), "mid": (2, 5), "big": (0, 5)}
    # q1 and q2 end with mid's stop: mid right on q1, base mid right on q2; q3 ends with small
    assert A.ender_accuracy(recs, solo) == {"questions": 2, "pool_right": 1, "solo_right": 1}


@pytest.mark.slow  # reads the shipped run's three seeds (~15 s)
def test_a_holm_word_whose_seed_interval_includes_zero_is_qualified():
    """cl against homo on the shipped run: Holm-adjusted p < 0.001 over questions, but the crossed interval over seeds
    and questions is about [-8.2, +17.7]: the word holds for these trained pools only; cl against solo-large's
    interval lies below 0."""
    from polyvox.studies.collab import verdicts as V

    run = ROOT / "data/runs/collab-h200-ordered-v3"
    fam = V.seed_family(V.recorded_seeds(run, run / "models"))
    homo, large = fam.get("cl", "homo"), fam.get("cl", "solo-large")
    assert homo.word == "higher" and homo.lo < 0 < homo.hi
    assert "on these seeds' trained pools only" in homo.sentence()
    assert large.word == "lower" and large.hi < 0 and "trained pools only" not in large.sentence()
    # RL trained on its reward (test_rl_curves_read_the_shipped_runs) and lowered test accuracy in every seed
    rl = fam.get("cl", "cl-pd")
    assert rl.word == "lower" and rl.hi < 0 and "RL **lowered** accuracy" in A.rl_scope_line(
        pipeline.load_scale("h200-ordered-v2")["rl"], rl)


def _curve(seed, agent, rewards, valid):
    return [{"seed": seed, "agent": agent, "step": i + 1, "reward": r, "valid": v, "accuracy": r, "all_equal": 0.0}
            for i, (r, v) in enumerate(zip(rewards, valid))]


def test_rl_noise_and_validity_read_windows_and_rolling_shares():
    steep = [0.2 + 0.01 * (i % 2) for i in range(10)] + [0.5] * 80 + [0.8 + 0.01 * (i % 2) for i in range(10)]
    wobbly = [0.5 + 0.3 * (i % 2) for i in range(100)]  # same windows at both ends: no rise, large noise
    valid = [0.95] * 40 + [0.2] * 10 + [0.95] * 40 + [0.7] * 10
    curves = pd.DataFrame(_curve(0, "small", steep, valid) + _curve(0, "mid", wobbly, [1.0] * 100))
    noise = A.rl_noise(curves).set_index("agent")
    assert noise.loc["small", "z"] > 2 and noise.loc["small", "change"] == pytest.approx(0.6)
    assert noise.loc["mid", "change"] == pytest.approx(0.0) and abs(noise.loc["mid", "z"]) < 2
    trained, line = A.rl_line(A.rl_change(curves), noise=A.rl_noise(curves))
    assert "by more than two standard errors of the window means in 1)" in line
    assert "by more than two standard errors of the window means in 0)" in line
    assert "`mid`'s rise is within two standard errors in every seed" in line and "`small`'s rise" not in line
    val = A.rl_validity(curves).set_index("agent")
    assert val.loc["small", "valid, last steps"] == pytest.approx(0.7)
    assert val.loc["small", "valid, first steps"] == pytest.approx(0.95)
    assert val.loc["small", "lowest rolling share"] == pytest.approx(0.2) and val.loc["small", "at step"] == 50
    said = A.rl_validity_line(A.rl_validity(curves), 1.0)
    assert "does not score whether a turn is a valid protocol action" in said and "temperature 1; PD's check" in said
    assert "`small` 0.95 → 0.70 (lowest rolling 10-step share 0.20, step 50)" in said
    assert "Falling by more than 5 points: `small` in 1 of 1 seeds." in said
    assert "No agent's share falls" in A.rl_validity_line(A.rl_validity(curves[curves.agent == "mid"]), 1.0)
    short = pd.DataFrame(_curve(0, "small", [0.5, 0.6, 0.7], [1.0, 0.5, 1.0]))  # fewer steps than a window (smoke)
    assert A.rl_validity(short).iloc[0].to_dict() == {
        "agent": "small", "seed": 0, "valid, first steps": pytest.approx(2.5 / 3), "valid, last steps": pytest.approx(2.5 / 3),
        "lowest rolling share": pytest.approx(2.5 / 3), "at step": 3}


def _t(agent, action, violation=None, forced=None):
    return {"agent": agent, "answer": "1", "action": action, "violation": violation, "forced_handoff": forced}


def test_protocol_by_seed_and_reach_line_on_hand_built_records():
    voluntary = {"turns": [_t("small", "handoff"), _t("mid", "handoff"), _t("big", "stop")]}
    forced = {"turns": [_t("small", "handoff"), _t("mid", None, "no action"), _t("mid", None, "no action", "big"),
                        _t("big", "stop")]}
    ends_small = {"turns": [_t("small", "stop")]}
    runs = {0: {"cl": [forced, ends_small], "cl-pd": [voluntary]}, 1: {"cl": [ends_small], "cl-pd": [voluntary]}}
    t = A.protocol_by_seed(runs).set_index(["system", "seed"])
    assert t.loc[("cl", 0), "mid→big forced"] == 1 and t.loc[("cl", 0), "mid→big voluntary"] == 0
    assert t.loc[("cl", 0), "last turn big"] == 1 and t.loc[("cl", 0), "last turn small"] == 1
    assert t.loc[("cl", 0), "violations"] == 2 and t.loc[("cl", 0), "small share"] == pytest.approx(2 / 5)
    assert t.loc[("cl-pd", 1), "mid→big voluntary"] == 1 and t.loc[("cl", 1), "turns"] == 1
    by = A.protocol_by_seed(runs)
    assert "reached only when the scheduler forces a hand-off" in A.reach_line(by, "cl")
    assert "voluntary/forced per seed: 0/1, 0/0" in A.reach_line(by, "cl")
    assert "reached by `mid`'s choice 2 times" in A.reach_line(by, "cl-pd")
    assert "never reached" in A.reach_line(A.protocol_by_seed({0: {"cl": [ends_small]}}), "cl")


def test_rl_scope_line_names_the_states_mix():
    rl = {"steps": 150, "group": 8, "prompts": 4, "problems": 64}
    line = A.rl_scope_line(rl, _Said("lower"), {"small": [28, 30, 28], "mid": [34, 35, 24], "big": 24}, 30 / 2497)
    assert "a checker's turn after one is kept" in line and "always right" not in line
    assert "28–30 of `small`'s, 24–35 of `mid`'s, 24 of `big`'s 64 states (over the seeds' draws)" in line
    assert "against 1.2 % of the test questions" in line and "does not reward the hand-off" in line
