"""A table of (task, completion, gold, expected) cases, in the style of Math-Verify's tests."""
import pytest

from polyvox.grading import answer_body, grade, grade_many, last_boxed

CASES = [
    # --- math: math-verify on the completion, falling back to <answer>
    ("math", r"so the answer is $\boxed{\frac{3}{56}}$.", r"\frac{3}{56}", True),
    ("math", r"\boxed{3/56}", r"\frac{3}{56}", True),
    ("math", r"\boxed{0.5}", r"\frac12", True),
    ("math", r"\boxed{\dfrac{1}{2}}", r"\frac{1}{2}", True),
    ("math", r"\boxed{2\sqrt{2}}", r"\sqrt{8}", True),
    ("math", r"\boxed{x^2+2x+1}", r"(x+1)^2", True),
    ("math", r"\boxed{(1, 2)}", r"(1,2)", True),
    ("math", r"\boxed{\pi}", r"\pi", True),
    ("math", r"\boxed{90^\circ}", r"90", True),
    ("math", r"\boxed{10\%}", r"10", True),
    ("math", r"\boxed{5}", r"6", False),
    ("math", r"\boxed{-5}", r"5", False),
    ("math", r"\boxed{\frac{3}{57}}", r"\frac{3}{56}", False),
    ("math", "<mutipersonaDebate>E1: p minus q</mutipersonaDebate> <answer>p - q</answer>", "p - q", True),
    ("math", "<mutipersonaDebate>E1: it is 4</mutipersonaDebate> <answer>4</answer>", "4", True),
    # the study's rule reads the whole completion first: a correct number in the debate counts
    ("math", "<mutipersonaDebate>E1: it is 4</mutipersonaDebate> <answer>5</answer>", "4", True),
    ("math", "<mutipersonaDebate>E1: it is 7</mutipersonaDebate> <answer>5</answer>", "4", False),
    ("math", "<answer>\\frac{\\sqrt{3}}{2}</answer>", "\\frac{\\sqrt3}{2}", True),
    ("math", "I am not sure.", "7", False),
    ("math", "", "7", False),
    # the last \boxed{} is the answer (math-verify alone would take the first)
    ("math", r"First \boxed{3}, then corrected: \boxed{4}", "4", True),
    ("math", r"First \boxed{4}, then corrected: \boxed{3}", "4", False),
    ("math", r"\boxed{\{1,2,3\}}", r"\{1,2,3\}", True),
    ("math", r"\boxed{[0, 1)}", r"[0,1)", True),
    ("math", r"The value is $\boxed{12}$ dollars", "12", True),
    ("math", r"\boxed{1.000}", "1", True),
    ("math", r"\boxed{\frac{6}{4}}", r"\frac{3}{2}", True),
    # --- aime: last integer in <answer>, else the last \boxed{}
    ("aime", "<answer>204</answer>", "204", True),
    ("aime", "<answer>The answer is 204.</answer>", "204", True),
    ("aime", "<answer>033</answer>", "33", True),
    ("aime", "<answer>3 and then 204</answer>", "204", True),
    ("aime", r"so \boxed{113}", "113", True),
    ("aime", r"\boxed{112} no wait \boxed{113}", "113", True),
    ("aime", r"<answer>112</answer> but \boxed{113}", "113", False),
    ("aime", r"<answer>no idea</answer> \boxed{113}", "113", True),
    ("aime", "The answer is 113", "113", False),
    ("aime", "<answer>204.0</answer>", "204", True),
    ("aime", "<answer>205</answer>", "204", False),
    ("aime", "", "204", False),
    # --- gsm8k: final number after the marker, in <answer> or \boxed{}
    ("gsm8k", "She sells 9 eggs for $2 each: 9*2=18.\n#### 18", "18", True),
    ("gsm8k", "#### 1,250", "1250", True),
    ("gsm8k", "The answer is $1,250.", "1250", True),
    ("gsm8k", "The answer is 18.", "18", True),
    ("gsm8k", "<answer>18</answer>", "18", True),
    ("gsm8k", r"\boxed{18}", "18", True),
    ("gsm8k", "<answer>$18.00</answer>", "18", True),
    ("gsm8k", "I think 17 then 18", "18", True),
    ("gsm8k", "#### 17", "18", False),
    ("gsm8k", "<answer>18 eggs, 3 left</answer>", "18", False),
    ("gsm8k", "no number here", "18", False),
    ("gsm8k", "The answer is -5.", "-5", True),
    ("gsm8k", "#### 0.5", "0.5", True),
    # --- gsmhard: floats with a relative tolerance
    ("gsmhard", "#### -9867630", "-9867630.0", True),
    ("gsmhard", "<answer>3.3333333</answer>", "3.3333333333333335", True),
    ("gsmhard", "<answer>3.34</answer>", "3.3333333333333335", False),
    ("gsmhard", r"\boxed{1.5e6}", "1500000.0", True),
    ("gsmhard", "The answer is 12,345,678.", "12345678", True),
    ("gsmhard", "#### 100", "101", False),
    # --- qa: normalised exact match, max over aliases
    ("qa", "<answer>The Eiffel Tower</answer>", ["Eiffel Tower", "tour Eiffel"], True),
    ("qa", "<answer>eiffel tower.</answer>", "Eiffel Tower", True),
    ("qa", "<answer>Paris, France</answer>", ["Paris"], False),
    ("qa", "<answer>tour eiffel</answer>", ["Eiffel Tower", "Tour Eiffel"], True),
    ("qa", "Some reasoning\nBarack Obama", "Barack Obama", True),
    ("qa", "<answer>Obama</answer>", "Barack Obama", False),
]


@pytest.mark.parametrize("task,completion,gold,expected", CASES)
def test_grade_table(task, completion, gold, expected):
    assert grade(task, completion, gold).correct is expected


def test_table_is_big_enough():
    assert len(CASES) >= 60


def test_grade_many_matches_grade_and_keeps_order():
    rows = [c for c in CASES if c[0] == "math"]
    got = grade_many("math", [r[1] for r in rows], [r[2] for r in rows], workers=2, chunk=4)
    assert [g.correct for g in got] == [r[3] for r in rows]


def test_qa_f1_and_extractors():
    g = grade("qa", "<answer>Barack Obama Jr</answer>", "Barack Obama")
    assert g.f1 == pytest.approx(0.8)
    assert last_boxed(r"a \boxed{\frac{1}{2}} b \boxed{x^{2}}") == "x^{2}"
    assert answer_body("<answer>a</answer> <answer> b </answer>") == "b"


def test_unknown_grader_lists_valid_ones():
    with pytest.raises(ValueError, match="graders: aime, gsm8k, gsmhard, integer, math, qa"):
        grade("chess", "x", "y")


@pytest.mark.slow
def test_pathological_item_gets_a_verdict_and_does_not_stop_the_batch():
    import time

    t0 = time.perf_counter()
    got = grade_many("math", [r"\boxed{9^{9^{9^{9}}}}", r"\boxed{2}"], ["1", "2"], workers=1, chunk=1, item_timeout_s=3)
    assert [g.correct for g in got] == [False, True]
    assert time.perf_counter() - t0 < 60  # math-verify's own 5 s limit, in a worker process


@pytest.mark.parametrize("answer,gold,correct", [
    ("<answer>1/7</answer>", "7", True),       # the last integer: a fraction's denominator
    ("<answer>7? no: 7.5</answer>", "7", True),  # 7.5 is not an integer: passed over
    ("<answer>0x7</answer>", "7", True),       # hex is not read as one number
    ("<answer>7.0</answer>", "7", True),
    ("<answer>7.5</answer>", "7", False),
])
def test_the_integer_rule_is_the_studys_last_integer(answer, gold, correct):
    # the panel study grades AIME by the last integer written; answers.py's docstring states the consequences
    from polyvox import grading

    assert grading.grade("integer", answer, gold).correct is correct
