"""Grader inputs (issue 8, item 8): Unicode math, integer golds, thousands separators, quiet logs."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from polyvox.grading import grade, integer_string, normalize_unicode_math

# (completion, gold, expected, reason): math-verify reads none of these Unicode forms by itself.
UNICODE_MATH = [
    (r"\boxed{½}", r"\frac12", True, "vulgar fraction"),
    (r"\boxed{2½}", "5/2", True, "mixed number: 2\\frac{1}{2} is 5/2"),
    (r"\boxed{⅓}", r"\frac12", False, "a different vulgar fraction"),
    (r"\boxed{2√3}", r"2\sqrt{3}", True, "square root of a number"),
    (r"\boxed{2√2}", r"2\sqrt{3}", False, "a different root"),
    (r"\boxed{√(x+1)}", r"\sqrt{x+1}", True, "square root of a bracket"),
    (r"\boxed{∛8}", "2", True, "cube root"),
    (r"\boxed{x²+1}", "x^2+1", True, "superscript two"),
    (r"\boxed{x³}", "x^2", False, "superscript three is not two"),
    (r"\boxed{x⁻¹}", "1/x", True, "superscript minus one"),
    ("\\boxed{１２}", "12", True, "full-width digits"),
    ("\\boxed{1\u200b2}", "12", True, "a zero-width space inside a number"),
    ("\\boxed{3\u00a0\\pi}", r"3\pi", True, "a non-breaking space"),
    (r"\boxed{3π}", r"3\pi", True, "the letter pi"),
    (r"\boxed{[1, ∞)}", r"[1,\infty)", True, "infinity in an interval"),
    (r"\boxed{−5}", "-5", True, "U+2212 minus sign"),
    (r"\boxed{3 × 4}", "12", True, "multiplication sign"),
    (r"\boxed{\frac{1}{2}}", "½", True, "a Unicode gold is normalised too"),
]


@pytest.mark.parametrize("completion,gold,expected,reason", UNICODE_MATH, ids=[r[3] for r in UNICODE_MATH])
def test_unicode_math_table(completion, gold, expected, reason):
    assert grade("math", completion, gold).correct is expected, reason


def test_unicode_table_is_big_enough():
    assert len(UNICODE_MATH) >= 12


def test_unicode_normalisation_text():
    assert normalize_unicode_math("x²·y ≤ ½") == r"x^{2}\cdot y \le  \frac{1}{2}"
    assert normalize_unicode_math(r"plain \frac{1}{2}") == r"plain \frac{1}{2}"  # ASCII passes untouched


# (grader, completion, gold, expected, reason)
NUMBERS = [
    ("aime", "<answer>12</answer>", "12.0", True, "an integer gold written 12.0"),
    ("aime", "<answer>12</answer>", "12.000", True, "any number of zero decimals"),
    ("aime", "<answer>１２</answer>", "12", True, "full-width digits in the answer"),
    ("aime", "<answer>12345678901234567891</answer>", "12345678901234567890", False,
     "integers compare exactly, not through a float"),
    ("aime", "<answer>12345678901234567891</answer>", "12345678901234567891", True,
     "a 20-digit integer equals itself (a float round trip changed it)"),
    ("aime", "<answer>" + "7" * 5000 + "</answer>", "7" * 5000, True, "an identical 5,000-digit integer"),
    ("aime", "<answer>" + "7" * 5000 + "</answer>", "7" * 4999 + "8", False, "a different 5,000-digit integer"),
    ("aime", "<answer>1,000</answer>", "1000", True, "a thousands separator"),
    ("gsm8k", "#### 1,234", "1234", True, "a thousands separator"),
    ("gsm8k", "#### 1,2,3", "123", False, "a list is not one number"),
    ("gsm8k", "#### 1,23", "123", False, "a comma before fewer than three digits separates numbers"),
    ("gsm8k", "<answer>12,345,678</answer>", "12345678", True, "several thousands groups"),
    ("gsm8k", "The answer is 1,234.5", "1234.5", True, "thousands and decimals"),
    ("gsm8k", "#### １２", "12", True, "full-width digits"),
    ("gsm8k", "#### −5", "-5", True, "U+2212 minus sign"),
    ("gsm8k", "#### " + "9" * 400, "9" * 400, True, "an identical 400-digit number (a float overflows)"),
]


@pytest.mark.parametrize("task,completion,gold,expected,reason", NUMBERS, ids=[r[4] for r in NUMBERS])
def test_number_table(task, completion, gold, expected, reason):
    assert grade(task, completion, gold).correct is expected, reason


def test_integer_gold_that_is_no_integer_is_ungradable():
    g = grade("aime", "<answer>12</answer>", "12.5")
    assert (g.correct, g.status) == (False, "ungradable")
    assert [integer_string(s) for s in ("033", "-0", "+7", "1,234.0", "1,23", "x")] == ["33", "0", "7", "1234", None, None]


@pytest.mark.slow  # moved out of the fast tier (over 1.5 s on 2 cores)
def test_math_verify_logs_stay_off_stderr_and_time_outs_are_reported():
    """In a fresh process (pytest's own log capture would hide what a CLI user sees on stderr)."""
    script = textwrap.dedent(r"""
        from polyvox import grading
        grading.MV_TIMEOUT_S = 1  # math-verify gives up after 1 s: a time-out within the test budget
        unclosed = grading.grade("math", "\\boxed{" * 50000, "1")
        deep = grading.grade("math", "\\boxed{" + "\\frac{1}{" * 3000 + "2" + "}" * 3000 + "}", "1")
        print(unclosed.status, deep.status)
    """)
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(root / "lib"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["no_answer", "timeout"]
    assert out.stderr == ""
