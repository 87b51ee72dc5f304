"""Which answer the math grader reads, and how it compares it (issue 13's table).

Each row: (completion, gold, options, expected verdict, reason). ``options`` is
None (the defaults) or a :class:`GradeOptions`.
"""
import pickle

import pytest

from polyvox.grading import Grade, GradeOptions, final_statements, grade, grade_many

# Filler with no numbers, digits or boxes: a long distance between a statement and the end.
FILLER = " We re-read the problem statement and check that every condition is used." * 30
# Filler full of plain math that a reader must not take for the answer.
MATHY = " Checking a step: $3+4=7$ and $2 \\cdot 5 = 10$." * 50
ROUND2, ROUND4 = GradeOptions(float_rounding=2), GradeOptions(float_rounding=4)
SETREL = GradeOptions(allow_set_relation_comp=True)
EXPR = GradeOptions(gold_as="expr")

ROWS = [
    # --- self-correction: the last statement wins, whichever form it takes
    (r"First $\boxed{200}$. No: $\boxed{255}$. Recounting, the final answer is $10,455$.", "10455", None, True,
     "issue 13 fault 1: a final-answer phrase after two boxes is the answer"),
    (r"First $\boxed{200}$. No: $\boxed{255}$. Recounting, the final answer is $10,455$.", "255", None, False,
     "the box the phrase corrected is abandoned"),
    (r"The final answer is $12$. Wait, I mis-added a carry: $\boxed{13}$.", "13", None, True,
     "a box after a final-answer phrase corrects it"),
    (r"The final answer is $12$. Wait, I mis-added a carry: $\boxed{13}$.", "12", None, False,
     "the phrase a later box corrected is abandoned"),
    (r"So $\boxed{3}$. Hmm, that breaks the second condition; it must be $\boxed{4}$.", "4", None, True,
     "earlier box wrong, later box right"),
    (r"So $\boxed{4}$. Checking again, I now get $\boxed{3}$.", "4", None, False,
     "the reverse: earlier box right, later box wrong is graded wrong"),
    ("The final answer is 7. Actually, I dropped a term, so the final answer is 8.", "8", None, True,
     "two phrases: the later one"),
    ("The final answer is 8. Actually, I dropped a term, so the final answer is 7.", "8", None, False,
     "two phrases, the earlier one right: graded wrong"),
    (r"Final answer: $\frac{1}{2}$", r"\frac12", None, True,
     "'final answer:' is a statement too"),
    (r"Thus $\boxed{6}$. The final answer is the boxed value above.", "6", None, True,
     "a phrase with no math after it is skipped: the box before it counts"),
    (r"We found $\boxed{2}$. Then the final answers are $2$ and $3$.", "2,3", None, True,
     "'final answers are' after a box: both answers, as one set"),
    (r"The **final answer** is $42$.", "42", None, True,
     "markdown emphasis inside the phrase"),
    (r"The final answer is $\boxed{5}$.", "5", None, True,
     "a phrase and its box are one statement"),
    # --- several boxes in one statement form one answer
    (r"The roots are $\boxed{-2}$ and $\boxed{1}$.", "1,-2", None, True,
     "issue 13 fault 2: boxes joined by 'and' are the set {-2, 1}"),
    (r"The roots are $\boxed{-2}$ and $\boxed{1}$.", "-2", None, False,
     "a set is not one of its elements"),
    (r"$\boxed{1}$, $\boxed{2}$, $\boxed{3}$, $\boxed{4}$, $\boxed{5}$, $\boxed{6}$, $\boxed{7}$", "1,2,3,4,5,6,7", None, True,
     "seven boxes in one statement (math-verify joins at most six)"),
    (r"\boxed{\{1, 2\}} and \boxed{3}", r"\{1,2,3\}", None, True,
     "a box holding a set adds its elements to the statement's set"),
    (r"\boxed{3} \boxed{3}", "3", None, True,
     "an identical repeated box is one value, not a set"),
    (r"I first guessed $\boxed{2}$, but the check fails, so it is $\boxed{3}$.", "2,3", None, False,
     "boxes separated by words are separate statements: the last one, 3, is the answer"),
    (r"$\boxed{5}$, and finally \boxed{6", "5", None, True,
     "an unclosed box (a truncated answer) is no statement"),
    # --- long completions: no tail window
    (r"So the final answer is $14{,}916$." + FILLER, "14916", None, True,
     "issue 13 fault 3: the phrase sits ~2,200 characters from the end"),
    (r"Hence $\boxed{7}$." + MATHY, "7", None, True,
     "a box ~2,400 characters from the end beats later plain math"),
    (r"So the final answer is $9$." + MATHY, "9", None, True,
     "a phrase ~2,400 characters from the end beats later plain math"),
    (r"The answer: $42$." + FILLER, "42", None, True,
     "no statement: math-verify's own anchored search over the whole completion"),
    # --- rounding (float_rounding)
    (r"\boxed{0.3333}", "1/3", None, False,
     "issue 13 fault 4: by default floats are compared to 6 places"),
    (r"\boxed{0.3333}", "1/3", ROUND4, True,
     "float_rounding=4 accepts 4 places"),
    (r"\boxed{0.333333}", "1/3", None, True,
     "6 places by default"),
    (r"\boxed{0.34}", "1/3", ROUND2, False,
     "rounding both to 2 places: 0.34 is not 0.33"),
    (r"\boxed{\begin{pmatrix} 0.33 \\ 0.2 \end{pmatrix}}", r"\begin{pmatrix} 1/3 \\ 1/5 \end{pmatrix}", None, False,
     "a rounded matrix is wrong by default"),
    (r"\boxed{\begin{pmatrix} 0.33 \\ 0.2 \end{pmatrix}}", r"\begin{pmatrix} 1/3 \\ 1/5 \end{pmatrix}", ROUND2, True,
     "float_rounding applies element-wise to matrices"),
    (r"\boxed{(0.6, 2.6667]}", r"(3/5, 8/3]", ROUND4, True,
     "float_rounding applies to interval ends"),
    (r"\boxed{(0.6, 2.6667]}", r"(3/5, 8/3]", None, False,
     "a rounded interval is wrong by default"),
    # --- sets and intervals
    (r"\boxed{(-\infty, 2) \cup (3, \infty)}", r"(-\infty,2)\cup(3,\infty)", None, True,
     "a union of intervals"),
    (r"\boxed{[0,1]}", "[0,1)", None, False,
     "a closed end is not an open one"),
    (r"\boxed{\{3, 1, 2\}}", r"\{1,2,3\}", None, True,
     "sets are unordered"),
    (r"\boxed{(1, 2]}", "(1,2)", None, False,
     "a half-open interval is not an open one"),
    # --- set relations (allow_set_relation_comp)
    (r"\boxed{-2 \le x \le 7}", r"x \in [-2, 7]", None, False,
     "issue 13 fault 5: a relation is not a set by default"),
    (r"\boxed{-2 \le x \le 7}", r"x \in [-2, 7]", SETREL, True,
     "allow_set_relation_comp reads the relation as the interval"),
    (r"\boxed{-2 < x \le 7}", r"x \in [-2, 7]", SETREL, False,
     "the relation's interval must match the ends too"),
    ("so the final answer is $-2 ≤ x ≤ 7$", "x ∈ [-2, 7]", SETREL, True,
     "fault 5 as the issue wrote it, in Unicode"),
    # --- decimal commas and thousands separators
    (r"\boxed{1,22}", "1,22", EXPR, True,
     "gold_as='expr' reads 1,22 as the decimal 1.22; the answer is read the same way"),
    ("The final answer is 1,22", "1,22", EXPR, True,
     "a decimal comma after a final-answer phrase"),
    (r"\boxed{1.22}", "1,22", EXPR, True,
     "a decimal point equals the gold's decimal comma"),
    (r"\boxed{1.22}", "1,22", None, False,
     "a LaTeX gold 1,22 is the set {1, 22}"),
    (r"\boxed{1,22}", "1.22", None, False,
     "in LaTeX a comma separates elements"),
    (r"\boxed{14{,}916}", "14916", None, True,
     "a LaTeX thousands separator"),
    # --- identical strings, and the <answer> fallback
    ("\\boxed{" + "9" * 10000 + "}", "9" * 10000, None, True,
     "an identical 10,000-digit answer is equal by string, before any parsing"),
    ("\\boxed{" + "9" * 10000 + "}", "9" * 9999 + "8", None, False,
     "a different 10,000-digit answer is not"),
    (r"The ticket costs $\boxed{36}$ dollars.", r"\$36", None, True,
     "an escaped \\$ in a LaTeX gold is a currency sign: the gold is still wrapped in $...$"),
    (r"The ticket costs $\boxed{37}$ dollars.", r"\$36", None, False,
     "and a different amount is wrong, not ungradable"),
    (r"\boxed{3} <answer>4</answer>", "4", None, True,
     "the panel study's fallback: the <answer> body is tried when the box does not verify"),
]


@pytest.mark.parametrize("completion,gold,options,expected,reason", ROWS, ids=[r[4][:60] for r in ROWS])
def test_selection_table(completion, gold, options, expected, reason):
    assert grade("math", completion, gold, options=options).correct is expected, reason


def test_table_is_big_enough_and_every_row_has_a_reason():
    assert len(ROWS) >= 40
    assert all(r[4] for r in ROWS)


def test_options_reach_the_workers_of_grade_many():
    rows = [r for r in ROWS if r[2] is ROUND4]
    got = grade_many("math", [r[0] for r in rows], [r[1] for r in rows], workers=2, chunk=1, options=ROUND4)
    assert [g.correct for g in got] == [r[3] for r in rows] == [True, True]
    default = grade_many("math", [r[0] for r in rows], [r[1] for r in rows], workers=2, chunk=1)
    assert [g.correct for g in default] == [False, False]


def test_grade_options_are_plain_values():
    opts = GradeOptions(float_rounding=3, allow_set_relation_comp=True, gold_as="expr")
    assert opts.as_dict() == {"float_rounding": 3, "allow_set_relation_comp": True, "gold_as": "expr"}
    assert pickle.loads(pickle.dumps(opts)) == opts
    with pytest.raises(ValueError, match="gold_as"):
        GradeOptions(gold_as="sympy")
    with pytest.raises(ValueError, match="float_rounding"):
        GradeOptions(float_rounding=-1)


def test_every_grader_accepts_options():
    opts = GradeOptions(float_rounding=2)
    assert grade("aime", "<answer>12</answer>", "12", options=opts).correct
    assert grade("gsm8k", "#### 12", "12", options=opts).correct
    assert grade("gsmhard", "#### 12", "12.0", options=opts).correct
    assert grade("qa", "<answer>Paris</answer>", "Paris", options=opts).correct


def test_statements_are_found_from_the_end():
    text = r"\boxed{1} then the final answer is $2$ and \boxed{3} and \boxed{4}, then \boxed{5"
    found = final_statements(text)
    assert [s.contents for s in found if s.is_box] == [("3", "4"), ("1",)]
    assert found[0].contents == ("3", "4")  # the unclosed \boxed{5 is no statement


def test_extracted_text_is_the_chosen_answer():
    assert grade("math", r"\boxed{2} and \boxed{3}", "2,3") == Grade(True, "2, 3")
    g = grade("math", r"\boxed{200}, so the final answer is $10,455$.", "7")
    assert (g.correct, g.extracted, g.status) == (False, "10,455", "ok")
    assert grade("math", r"\boxed{37}", r"\$36").status == "ok"  # the currency gold parses


def test_a_tasks_grade_options_are_checked_when_it_registers():
    from polyvox import tasks

    with pytest.raises(ValueError, match=r"^task 'bad_opts': grade_options: field 'gold_as' should be 'latex' or 'expr'"):
        tasks.register_task("bad_opts", grader="math", grade_options={"gold_as": "sympy"})
    with pytest.raises(ValueError, match=r"grade_options: field 'rounding': Unexpected keyword argument"):
        tasks.register_task("bad_opts", grader="math", grade_options={"rounding": 2})
    with pytest.raises(ValueError, match="float_rounding"):
        GradeOptions(float_rounding=True)  # strict: a bool is no number of places
    assert "bad_opts" not in tasks.TASKS
    assert all(t.grade_options == {} for t in tasks.TASKS.values())  # no benchmark needs options
