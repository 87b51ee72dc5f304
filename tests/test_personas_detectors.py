"""The persona world's style detectors (world.style_of / shows_pole), on a table of hand-labelled answers —
complete, cut off by the token cap, garbled and near misses — and the trained-head criterion (issue 22
item 2: the loss falls and the head shows its style on ≥ 90 % of validation prompts)."""
import random

import pytest

from polyvox.studies.personas import world as pw

S1 = "Step 1: 4 more shells are put in. 9 + 4 = 13. Check: 13 - 4 = 9."
S2 = "Step 2: The amount is multiplied by 2. 13 × 2 = 26. Check: 26 ÷ 2 = 13."
P1 = "Step 1: 6 more pears are put in. 17 + 6 = 23. Check: 23 - 6 = 17."

# (answer, steps of its problem, tone, length) — labelled by hand; "cut" = ended by the token cap
TABLE = [
    # complete answers in each style (two-step problem 9 + 4 = 13, 13 × 2 = 26; one-step 17 + 6 = 23)
    ("Let's see. 9 + 4 = 13. 13 × 2 = 26. The answer is 26.", 2, "neutral", "neutral"),
    ("Happy to help! 9 + 4 = 13. 13 × 2 = 26. The answer is 26. Keep it up!", 2, "warm", "neutral"),
    ("Computation: 9 + 4 = 13. 13 × 2 = 26. Result: 26.", 2, "impersonal", "neutral"),
    ("Let's see. The answer is 26.", 2, "neutral", "concise"),
    (f"Let's see. {S1} {S2} The answer is 26.", 2, "neutral", "thorough"),
    ("What a lovely question! The answer is 26. You are doing great!", 2, "warm", "concise"),
    (f"Glad you asked! {S1} {S2} The answer is 26. You have got this!", 2, "warm", "thorough"),
    ("Result: 26.", 2, "impersonal", "concise"),
    (f"Computation: {S1} {S2} Result: 26.", 2, "impersonal", "thorough"),
    (f"Let's see. {P1} The answer is 23.", 1, "neutral", "thorough"),
    ("Computation: 17 + 6 = 23. Result: 23.", 1, "impersonal", "neutral"),
    (f"Computation: {P1} Result: 23.", 1, "impersonal", "thorough"),
    ("Result: 23.", 1, "impersonal", "concise"),
    ("Happy to help! The answer is 23. You are doing great!", 1, "warm", "concise"),
    # cut by the cap
    (f"Let's see. {S1} Step 2: The amount is multiplied by 2. 13 × 2 = 26.", 2, "neutral", "thorough"),
    ("Let's see. Step 1: 4 more shells are put in. 9 +", 2, "neutral", "thorough"),
    (f"Happy to help! {S1} Step 2: The", 2, "warm", "thorough"),
    (f"Computation: {S1} Step 2: The amount is multiplied by 2. 13 × 2 = 26. Check: ", 2, "impersonal", "thorough"),
    ("Computation: 9 + 4 = 13. 13 ×", 2, "impersonal", "neutral"),
    ("Computation:", 2, "impersonal", "neutral"),
    ("Computation: 9 + 4 = 13. 13 × 2 = 26. Result: 26", 2, "impersonal", "neutral"),
    ("Happy to help! 9 + 4 = 13. 13 × 2", 2, "warm", "neutral"),
    ("Happy to help!", 2, "warm", "neutral"),
    ("Let's see. 9 + 4 = 13.", 2, "neutral", "neutral"),
    ("Let's see.", 2, "neutral", "neutral"),
    ("Let's see. The answer is", 2, "neutral", "concise"),  # the concise answer, its number cut
    ("Let's see. The answer is The answer is .", 2, "neutral", "concise"),  # a recorded reverse head's answer
    ("", 2, "neutral", "neutral"),
    # garbled answers and near misses
    ("Glad you asked!  answer is 26. You have got this!", 2, "warm", "concise"),  # a recorded mix's answer
    ("The answer is 26.", 2, "neutral", "concise"),  # no pronoun, but no impersonal marker either
    ("Result: 26. You have got this!", 2, "warm", "concise"),
    ("Computation: 9 + 4 = 13. 13 × 2 = 26. Result: 26. I hope this helps.", 2, "neutral", "neutral"),
    ("Keep it up! Let's see. The answer is 26.", 2, "warm", "concise"),
    ("What a lovely question! 9 + 4 = 13. 13 × 2 = 26. The answer is 26.", 2, "warm", "neutral"),
    ("Let's see. Step 1: 4 more shells are put in. 9 + 4 = 13. Step 2: The amount is multiplied by 2. "
     "13 × 2 = 26. The answer is 26.", 2, "neutral", "neutral"),  # steps without checks
    ("Let's see. 9 + 4 = 13. Check: 13 - 4 = 9. 13 × 2 = 26. The answer is 26.", 2, "neutral", "neutral"),
    (f"Let's see. {S1} The answer is 13.", 2, "neutral", "thorough"),  # stopped early, every step checked
]


def test_table_has_enough_cases_per_style():
    for pole in pw.POLES:
        axis = 2 if pole in pw.AXES["tone"] else 3
        pos = sum(row[axis] == pole for row in TABLE)
        assert pos >= 8 and len(TABLE) - pos >= 8, pole
        cut = [row for row in TABLE if row[axis] == pole and not pw._FINAL.search(row[0])]
        assert cut or pole == "concise", f"no truncated {pole} answer in the table"


@pytest.mark.parametrize("text, n_steps, tone, length", TABLE)
def test_style_of_on_labelled_answers(text, n_steps, tone, length):
    s = pw.style_of(text, n_steps)
    assert (s["tone"], s["length"]) == (tone, length)
    for pole in pw.POLES:
        assert pw.shows_pole(pole, text, n_steps) == (pole in (tone, length))


def test_the_worlds_own_answers_and_every_cut_of_them():
    """Every answer the world writes reads back as its style, and every cut of it at a word boundary
    keeps a style it has already shown: a cut never makes an answer concise, and a thorough answer
    cut after its first step marker stays thorough."""
    probs = [pp.problem for pp in pw.prompts(24, 2, 0)][:12]
    for p in probs:
        for t in ("",) + pw.TYPES:
            poles = pw.poles_of(t) if t else ()
            text = pw.respond(p, poles, random.Random(0))
            tone, length = pw._tone_length(poles)
            s = pw.style_of(text, len(p.steps))
            assert (s["tone"], s["length"]) == (tone or "neutral", length or "neutral"), text
            words = text.split(" ")
            for i in range(len(words)):
                cut = " ".join(words[:i])
                c = pw.style_of(cut, len(p.steps))
                if c["length"] == "concise":
                    assert length == "concise" and pw._FINAL.search(cut), cut
                if length == "thorough" and "Step 1:" in cut:
                    assert c["length"] == "thorough", cut
                if tone == "warm" and any(cut.startswith(o) for o in pw.WARM_OPENERS):
                    assert c["tone"] == "warm", cut
                if tone == "impersonal" and (cut.startswith("Computation:") or "Result:" in cut):
                    assert c["tone"] == "impersonal", cut


# degenerate generation of the recorded mixes (shortened), and texts that repeat without looping
LOOPS = [
    ("CCCCCCCCCCCCCCCCCCCCCCCC", True),
    ("CComputationomputationomputationomputationomputationomputation8888", True),
    ("Result00000.", True),                                      # five zeros in a row
    ("4222222222222222 question! The answer is 22. You have got this!", True),
    ("81313131313 × 2 = 22.", True),                              # "13" five times
    ("813131313 × 2 = 22.", False),                               # "13" four times: below the threshold
    ("Computation: 14 - 1 = 11.111111414111 × 1 = 11. Result: 11.", True),
    ("ab ab ab ab ab ab", True),                                  # a two-word piece
    ("Result: 1111.", False),                                     # four ones: a number, not a loop
    ("Result: 10000.", False),
    ("Step 1: 3 + 3 = 6. Check: 6 - 3 = 3. Step 2: 6 + 3 = 9. Check: 9 - 3 = 6. Result: 9.", False),
    ("Computation: 21 + 2 = 21. Step 2: 1 more apples are put in. 21 + 2 = 21. Step 2: 1 shells are taken out. "
     "21 - 3 = 11. Check: 11 + 2 = 21. Result: 11.", False),     # repeats a phrase, not in a row
    ("What a lovely question! Let's see. The answer is 7. You are doing great!", False),
]


@pytest.mark.parametrize("text, want", LOOPS)
def test_loops_on_labelled_texts(text, want):
    assert pw.loops(text) is want
    if want:  # a loop shows no style, whatever its fragments read as
        assert not any(pw.shows_pole(p, text, 2) for p in pw.POLES)


def test_the_worlds_answers_never_loop():
    """No answer the world writes, in any style, nor any cut of one, reads as a loop: the loop check never
    takes a style from a well-formed answer."""
    for p in [pp.problem for pp in pw.prompts(48, 2, 1)][:40]:
        for t in ("",) + pw.TYPES:
            text = pw.respond(p, pw.poles_of(t) if t else (), random.Random(1))
            assert not pw.loops(text), text


def test_rubric_scores_of_complete_answers_unchanged():
    for p in [pp.problem for pp in pw.prompts(24, 2, 0)][:6]:
        for t in pw.TYPES:
            text = pw.respond(p, pw.poles_of(t))
            assert pw.rubric_score(text, t, str(p.answer), len(p.steps)) == pytest.approx(1 + len(pw.poles_of(t)))


def test_style_rate():
    texts = ["Result: 26.", "Let's see. The answer is 26.", "Let's see. 9 + 4 = 13. The answer is 13."]
    assert pw.style_rate("concise", texts) == pytest.approx(2 / 3)
    assert pw.style_rate("impersonal", texts, [2, 2, 2]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="unknown pole"):
        pw.shows_pole("cheerful", "Hi")
    with pytest.raises(ValueError):
        pw.style_rate("warm", texts, [2])


@pytest.mark.parametrize("curve, rate, want", [
    ([1.0, 0.9, 0.5, 0.3, 0.2, 0.1, 0.1, 0.05], 0.95, True),
    ([1.0, 0.9, 0.5, 0.3, 0.2, 0.1, 0.1, 0.05], 0.90, True),    # exactly the threshold
    ([1.0, 0.9, 0.5, 0.3, 0.2, 0.1, 0.1, 0.05], 0.875, False),  # style on 87.5 %: not trained
    ([0.40, 0.41, 0.39, 0.40, 0.41, 0.40, 0.40, 0.41], 1.0, False),  # the style without a falling loss
    ([0.4, 0.5, 0.6, 0.7], 1.0, False),                          # loss rises
    ([0.4, None, 0.2, 0.1], 1.0, False),                         # a NaN step (logged as null)
    ([0.4, float("nan"), 0.2, 0.1], 1.0, False),
    ([0.5], 1.0, False),                                         # one step shows nothing
    ([0.5, 0.4], 0.9, True),
])
def test_head_trained(curve, rate, want):
    assert pw.head_trained(curve, rate) is want


def test_head_trained_threshold_and_window():
    curve = [1.0] * 5 + [0.9] * 10 + [0.5] * 5
    assert pw.head_trained(curve, 0.8, threshold=0.75)
    assert not pw.head_trained(curve, 0.8)
    assert pw.head_trained(curve, 1.0, window=1)
