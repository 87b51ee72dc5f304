"""Part III's grading rule, table-driven (Math-Verify's test style: one row per answer string): a
collaboration's answer is graded by its task's grader (integer: the last integer of the body; qa:
SQuAD-normalised EM and token F1), except that no answer and a malformed answer — one carrying a protocol
tag (projections.malformed) — are (False, 0.0) before any grader sees them, and so is an integer task's
unevaluated expression ("5 ÷ 1", projections.unevaluated), which the last-integer rule would read as 1. The rule lives in
tasks.grade_answer, so the chapter's scores, the RL reward and a direct call agree; the recorded run's
cl-base recomputes to 4 of 240 = 1.7 %."""
import json
from pathlib import Path

import pytest

from polyvox import runs, tasks
from polyvox.records import Problem
from polyvox.studies.collab import analysis as A
from polyvox.studies.collab.judge import pyramid_reward
from polyvox.studies.collab.projections import malformed, project, unevaluated
from polyvox.studies.collab.tasks import grade_answer

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "data/runs/collab-h200"
RECORDED = "1 ÷ 11 ÷ 11 ÷ 11 ÷ 111.</think> <answer>1"  # cl-base w1-06888cdb4d's last tentative answer

# task, answer, gold, correct, f1, whether the task's grader alone (fed the answer as a bare body) credits it
CASES = [
    # world (integer grader): the last integer of the body
    ("world", "18", "18", True, 1.0, True),
    ("world", " 18 ", "18", True, 1.0, True),
    ("world", "18.", "18", True, 1.0, True),
    ("world", "We get 18", "18", True, 1.0, True),
    ("world", "1,000", "1000", True, 1.0, True),
    ("world", "-3", "-3", True, 1.0, True),
    ("world", "10", "18", False, 0.0, False),
    ("world", None, "18", False, 0.0, False),
    ("world", "", "18", False, 0.0, False),
    ("world", "3 < 4 so 18", "18", True, 1.0, True),  # a bare '<' is no tag
    ("world", "<b>18</b>", "18", True, 1.0, True),  # markup that is not the protocol's is graded
    # world, malformed: the grader alone would credit every one of these
    ("world", RECORDED, "1", False, 0.0, True),
    ("world", "<answer>18</answer>", "18", False, 0.0, True),
    ("world", "18</answer>", "18", False, 0.0, True),
    ("world", "18 <answer>", "18", False, 0.0, True),
    ("world", "18 <action>stop</action>", "18", False, 0.0, True),
    ("world", "< answer >18", "18", False, 0.0, True),
    ("world", "18 </THINK>", "18", False, 0.0, True),
    # world, unevaluated expressions: the grader alone reads the last integer (the operand) and may credit it
    ("world", "5 ÷ 1", "1", False, 0.0, True),  # the shipped collab-h200-ordered-v3 cl-base's answer
    ("world", "5÷1", "1", False, 0.0, True),
    ("world", "7 - 2", "2", False, 0.0, True),
    ("world", "7 − 2", "5", False, 0.0, False),
    ("world", "(2+3) * 4.", "4", False, 0.0, True),
    ("world", "6 / 3", "3", False, 0.0, True),
    ("world", "2 + 3 = 5", "5", True, 1.0, True),  # the value after '=' is an answer
    ("world", "x = -3", "-3", True, 1.0, True),  # a sign is not an operator
    # qa (SQuAD-normalised exact match, token F1)
    ("qa", "North Vale", "North Vale", True, 1.0, True),
    ("qa", "north vale", "North Vale", True, 1.0, True),
    ("qa", "The North Vale.", "North Vale", True, 1.0, True),
    ("qa", "North", "North Vale", False, 2 / 3, False),
    ("qa", "Vale North", "North Vale", False, 1.0, False),  # every token, wrong order: F1 1, no match
    ("qa", "South Reach", "North Vale", False, 0.0, False),
    ("qa", None, "North Vale", False, 0.0, False),
    ("qa", "", "North Vale", False, 0.0, False),
    # qa, malformed: no F1 either (the grader alone gives partial F1 or a match)
    ("qa", "North Vale</answer>", "North Vale", False, 0.0, True),
    ("qa", "<answer>North Vale", "North Vale", False, 0.0, False),
    ("qa", "North Vale </think> <answer>North Vale", "North Vale", False, 0.0, False),
    ("qa", "Dunmere <action>stop</action>", "Dunmere", False, 0.0, False),
    ("qa", "Route 5 - 2", "Route 5 - 2", True, 1.0, True),  # the expression rule is the integer tasks' only
]


@pytest.mark.parametrize("task, answer, gold, correct, f1, raw", CASES)
def test_grade_answer(task, answer, gold, correct, f1, raw):
    assert grade_answer(answer, gold, {"task": task}) == (correct, pytest.approx(f1))
    t = tasks.get("collab_qa" if task == "qa" else "collab_world")
    [alone] = runs.grade_completions(t.grader, [answer], [gold], t.grade_options, bare=True)
    assert alone.correct is raw  # where the rule departs from the grader alone, it is the malformed answer
    assert (correct != raw) <= (malformed(answer) or (task == "world" and unevaluated(answer)))


def _record(answer, gold="1", task="world"):
    return {"id": "q1", "gold": gold, "metadata": {"task": task, "level": 1}, "status": "t_max", "final": None,
            "n_turns": 1, "turns": [{"agent": "big", "answer": answer, "prompt_tokens": 3, "completion_tokens": 4}]}


@pytest.mark.parametrize("task, answer, gold, correct, f1, raw", [c for c in CASES if c[1] is not None])
def test_the_chapter_s_score_agrees_with_the_grader(task, answer, gold, correct, f1, raw):
    row = A.score([_record(answer, gold, task)], {"big": 1.0}, "final_or_last").iloc[0]
    assert (bool(row.correct), row.f1) == (correct, pytest.approx(f1)) and bool(row.malformed) is malformed(answer)


def test_the_rl_reward_agrees_on_the_recorded_broken_turn():
    problem = Problem("w1-06888cdb4d", "x", "1", {"task": "world", "steps": ["2 ÷ 2 = 1"]})
    broken = "<think>We start with 11.  <answer>     1 ÷ 11 ÷ 11 ÷ 11 ÷ 111.</think> <answer>1</answer>"
    _, correct, _ = pyramid_reward(broken, problem)
    assert correct is False
    _, correct, _ = pyramid_reward("<think>2 ÷ 2 = 1</think> <answer>1</answer>", problem)
    assert correct is True


def test_the_recorded_cl_base_recomputes_to_1_7_percent():
    recs = [json.loads(line) for line in (RUN / "eval/cl-base/trajectories.jsonl").read_text().splitlines()]
    answers = [(project(r, A.MAIN_PROJECTION)[0], r) for r in recs]
    correct = [r["id"] for a, r in answers if grade_answer(a, r["gold"], r["metadata"])[0]]
    assert len(recs) == 240 and len(correct) == 4 and f"{100 * len(correct) / len(recs):.1f}" == "1.7"
    credited = [r["id"] for a, r in answers if malformed(a) and runs.grade_completions(
        "integer", [a], [r["gold"]], bare=True)[0].correct]
    assert credited == ["w1-06888cdb4d"]  # the one answer the grader alone credited (5 of 240: 2.1 %)


def test_the_shipped_cl_base_loses_only_its_unevaluated_answers():
    """collab-h200-ordered-v3: the expression rule moves cl-base's 5 ÷ 1 answers (3 per seed) and no other
    system's final answer."""
    import gzip

    moved = {}
    for path in sorted((ROOT / "data/runs/collab-h200-ordered-v3/seed-0/eval").glob("*/trajectories.jsonl.gz")):
        recs = [json.loads(line) for line in gzip.open(path, "rt")]
        n = 0
        for r in recs:
            a = project(r, A.MAIN_PROJECTION)[0] if r.get("turns") else r.get("final")
            t = tasks.get("collab_qa" if r["metadata"]["task"] == "qa" else "collab_world")
            alone = runs.grade_completions(t.grader, [a], [r["gold"]], t.grade_options, bare=True)[0].correct
            n += alone and not malformed(a) and not grade_answer(a, r["gold"], r["metadata"])[0]
        if n:
            moved[path.parent.name] = n
    assert moved == {"cl-base": 3}
