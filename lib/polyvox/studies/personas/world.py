"""The persona world: the miniature world's problems with an observable, program-scorable style.

Two style axes, as in seed 002: tone (warm ↔ impersonal) and length (concise ↔ thorough).
The eight preference types are the four single poles and the four cross-axis pairs.

Answers are built by program, so their style is exact:

- neutral (no card): ``"Let's see. 9 + 4 = 13. 13 × 2 = 26. The answer is 26."``
- concise: the calculation lines are dropped (``"The answer is 26."``);
- thorough: every step written and checked (``"Step 1: … 9 + 4 = 13. Check: 13 - 4 = 9."``);
- warm: a friendly opener and a closing encouragement;
- impersonal: no opener, no pronouns: ``"Computation: … Result: 26."``.

:func:`style_of` reads the style back from any text (:func:`shows_pole`, :func:`style_rate`: whether
texts show a pole, a looping text none (:func:`loops`); :func:`head_trained`: issue 22's trained-head criterion) and :func:`rubric_score` scores a text
for a preference and a gold answer (the rubric judge of :mod:`polyvox.judge` calls it):
1 for the right final integer plus, per preferred pole, a match in [0, 1] (warm: opener
and closer, ½ each; impersonal: 1 when impersonal, ¼ when neutral, 0 when warm; concise:
1 without calculation lines; thorough: the share of steps written out and checked).

Users carry their preference implicitly: each user has one preference type and speaks it
through cue sentences drawn from several paraphrases per pole (some subtle, e.g. "Busy
day." for concise), before or after the problem. Users are split train/validation/test by the
user's index within a preference type (j mod 7 = 0: test, 1: validation, else train), so
every type is in every split and no test user's prompts or problems are seen in training (the cue
paraphrases come from one shared pool, so the router meets known phrasings); problems come
from the world's own train/test split (:func:`polyvox.studies.world.problems.generate`).

The task ``personas`` (registered when this module is imported) serves a split's prompts
to the one run path: ``tasks.load("personas", split="test", n_users=128, per_user=4, seed=0)``.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from ...records import Problem
from ...tasks import register_task
from ..world import problems as world

POLES = ("warm", "impersonal", "concise", "thorough")
AXES = {"tone": ("warm", "impersonal"), "length": ("concise", "thorough")}
TYPES = ("warm", "impersonal", "concise", "thorough",
         "warm+concise", "warm+thorough", "impersonal+concise", "impersonal+thorough")
LEVELS = (1, 2)

# persona cards: the system prompt for persona prompting and for the teacher
CARDS = {
    "warm": "Persona: warm. Greet the user kindly and end with a word of encouragement.",
    "impersonal": "Persona: impersonal. No greeting, no pronouns, no encouragement; state the computation.",
    "concise": "Persona: concise. Reply in one line with only the final answer.",
    "thorough": "Persona: thorough. Write every step and check each one.",
}

# cue sentences users write; the last ones of each pole are the subtle ones
CUES = {
    "warm": ["Math makes me nervous, please be gentle.", "My kid asked me this and I feel a bit lost.",
             "Hope you are having a lovely day!", "Thank you so much, you are kind.", "Feeling shy about this one."],
    "impersonal": ["No small talk, please.", "Skip the pleasantries.", "Strictly business.",
                   "Output for a report.", "Formal reply."],
    "concise": ["Just the number.", "Short answer only.", "In a hurry.", "Quick one.", "Busy day."],
    "thorough": ["Walk me through every step.", "Show all the working and check it.",
                 "I want to understand each step.", "Explain fully.", "Leave nothing out."],
}

WARM_OPENERS = ["Happy to help!", "What a lovely question!", "Glad you asked!"]
WARM_CLOSERS = ["You are doing great!", "Keep it up!", "You have got this!"]


def poles_of(ptype: str) -> tuple[str, ...]:
    return tuple(ptype.split("+"))


def type_of(poles) -> str:
    """The preference type of a set of poles ('' for none), tone first."""
    order = {p: i for i, p in enumerate(POLES)}
    return "+".join(sorted(poles, key=order.__getitem__))


def card_for(poles) -> str | None:
    """The system prompt for a pick: one card, both cards (tone first), or None."""
    poles = poles_of(poles) if isinstance(poles, str) else tuple(poles)
    if not poles or poles == ("",):
        return None
    return " ".join(CARDS[p] for p in poles_of(type_of(poles)))


# ---------------------------------------------------------------- answers in a style

def _tone_length(poles) -> tuple[str | None, str | None]:
    tone = next((p for p in poles if p in AXES["tone"]), None)
    length = next((p for p in poles if p in AXES["length"]), None)
    return tone, length


def respond(p: world.WorldProblem, poles=(), rng: random.Random | None = None) -> str:
    """The answer to a world problem in the style of ``poles`` (empty: neutral)."""
    rng = rng or random.Random(p.id)
    tone, length = _tone_length(poles)
    if length == "concise":
        body = []
    elif length == "thorough":
        body = [f"Step {i}: {s.text(p.item)} {s.calc()}. Check: {s.inverse()}." for i, s in enumerate(p.steps, 1)]
    else:
        body = [f"{s.calc()}." for s in p.steps]
    if tone == "impersonal":
        head = ["Computation:"] if body else []
        return " ".join(head + body + [f"Result: {p.answer}."])
    lines = body + [f"The answer is {p.answer}."]
    if tone == "warm":
        return " ".join([rng.choice(WARM_OPENERS)] + lines + [rng.choice(WARM_CLOSERS)])
    return " ".join(["Let's see."] + lines)


# ---------------------------------------------------------------- reading style back

_CALC = re.compile(r"\d+\s*[-+×÷*/]\s*\d+\s*=\s*\d+")
_CHECK = re.compile(r"Check:\s*\d+\s*[-+×÷*/]\s*\d+\s*=\s*\d+")
_STEP = re.compile(r"\bStep \d+:")
_FINAL = re.compile(r"answer is|Result:")  # the final-answer clause (its number may be cut or garbled)
_PERSONAL = re.compile(r"\b(I|you|your|we|Let's|me|my)\b", re.I)


def final_integer(text: str) -> str | None:
    nums = re.findall(r"-?\d+", text)
    return nums[-1] if nums else None


def style_of(text: str, n_steps: int | None = None) -> dict:
    """The observable style of a text: tone, length, opener/closer, checks, words.

    Tone: ``warm`` with any opener or closer phrase; ``impersonal`` with none, no personal word and
    the impersonal markers (``Result:``, or a start ``Computation:``); else ``neutral``. Length:
    ``concise`` with a final-answer clause (``… answer is`` / ``Result:``) and no calculation, step
    or check; ``thorough`` with a step or a check where every finished calculation is checked (one
    unchecked last calculation allowed when the answer has no final clause: cut off by the token
    cap); else ``neutral``. A text cut before its final answer and its first calculation is not
    concise (tested on labelled examples in tests/test_personas_detectors.py)."""
    opener = any(text.strip().startswith(o) for o in WARM_OPENERS)
    closer = any(text.rstrip().endswith(c) for c in WARM_CLOSERS)
    warm_any = any(o in text for o in WARM_OPENERS + WARM_CLOSERS)
    calcs, checks = len(_CALC.findall(text)), len(_CHECK.findall(text))
    calcs -= checks
    steps, final = len(_STEP.findall(text)), bool(_FINAL.search(text))
    impersonal = (not warm_any and not _PERSONAL.search(text)
                  and ("Result:" in text or text.strip().startswith("Computation:")))
    tone = "warm" if warm_any else "impersonal" if impersonal else "neutral"
    unchecked = calcs - checks
    if calcs == 0 and checks == 0 and steps == 0 and final:
        length = "concise"
    elif (checks > 0 or steps > 0) and unchecked <= (0 if final else 1) \
            and (n_steps is None or not final or checks >= min(calcs, n_steps)):
        length = "thorough"
    else:
        length = "neutral"
    return {"tone": tone, "length": length, "opener": opener, "closer": closer, "calcs": calcs,
            "checks": checks, "words": len(text.split())}


# a loop: one piece of 1-16 characters written five or more times in a row ("CCCCC", "omputationomputation…",
# "2222222…", "1313131313"). Neither the world's answers (every style, every cut: tests/test_personas_detectors.py)
# nor persona prompting's or a single head's 1,792 test answers of the recorded run have one; the mixes that loop
# to the cap do (2026-12-03: reverse impersonal+concise, up to 645 of 1,792 answers)
_LOOP = re.compile(r"(.{1,16}?)\1{4,}", re.S)


def loops(text: str) -> bool:
    """Whether a text holds a loop (:data:`_LOOP`): degenerate generation, which shows no style."""
    return _LOOP.search(text) is not None


def shows_pole(pole: str, text: str, n_steps: int | None = None) -> bool:
    """Whether a text shows a pole's style (the trained-head check): warm and impersonal read the
    tone, concise and thorough the length, of :func:`style_of`; a text that loops (:func:`loops`) shows
    none (a looping mix's short fragments would otherwise read as concise and impersonal)."""
    if pole not in POLES:
        raise ValueError(f"unknown pole {pole!r}; poles: {', '.join(POLES)}")
    if loops(text):
        return False
    s = style_of(text, n_steps)
    return s["tone" if pole in AXES["tone"] else "length"] == pole


def style_rate(pole: str, texts, n_steps=None) -> float:
    """Share of ``texts`` that show ``pole`` (``n_steps``: one per text, or None)."""
    texts = list(texts)
    if not texts:
        raise ValueError("style_rate: no texts")
    ns = [None] * len(texts) if n_steps is None else list(n_steps)
    return sum(shows_pole(pole, t, n) for t, n in zip(texts, ns, strict=True)) / len(texts)


def loss_falls(loss_curve, window: int = 5) -> bool:
    """Whether a loss curve falls: the mean of its last ``window`` logged losses below the mean of its
    first ``window`` (at most a quarter of the curve each, at least one step). A curve with a missing
    or non-finite loss, or shorter than two steps, has not been shown to fall."""
    import math

    xs = [None if x is None else float(x) for x in loss_curve]
    if len(xs) < 2 or any(x is None or not math.isfinite(x) for x in xs):
        return False
    w = max(1, min(int(window), len(xs) // 4))
    return bool(sum(xs[-w:]) / w < sum(xs[:w]) / w)


def head_trained(loss_curve, style_rate: float, threshold: float = 0.9, *, window: int = 5) -> bool:
    """Issue 22's criterion: a head counts as trained when its loss falls (:func:`loss_falls`) and it
    shows its style on at least ``threshold`` of the validation prompts (``style_rate``, e.g.
    :func:`style_rate` of its greedy validation answers)."""
    return bool(loss_falls(loss_curve, window) and style_rate >= threshold)


def pole_match(pole: str, text: str, n_steps: int) -> float:
    s = style_of(text, n_steps)
    if pole == "warm":
        return 0.5 * s["opener"] + 0.5 * s["closer"]
    if pole == "impersonal":
        return {"impersonal": 1.0, "neutral": 0.25, "warm": 0.0}[s["tone"]]
    if pole == "concise":
        return 1.0 if s["length"] == "concise" else 0.0
    if pole == "thorough":
        return min(s["checks"], n_steps) / max(1, n_steps)
    raise ValueError(f"unknown pole {pole!r}; poles: {', '.join(POLES)}")


def rubric_score(text: str, preference: str, gold: str, n_steps: int) -> float:
    """1 for the right final integer + Σ over the preferred poles of their match in [0, 1]."""
    correct = float(final_integer(text) == str(gold))
    return correct + sum(pole_match(p, text, n_steps) for p in poles_of(preference))


# ---------------------------------------------------------------- users and prompts

@dataclass
class User:
    id: str
    preference: str
    cues: dict  # pole -> list of cue sentences this user writes
    position: str  # "before" | "after" the problem
    split: str


def _split(j: int) -> str:
    """Split of the j-th user of a preference type: every type has users in every split."""
    return "test" if j % 7 == 0 else "validation" if j % 7 == 1 else "train"


def users(n_users: int, seed: int = 0) -> list[User]:
    """n_users users, preference types in rotation, each with two cue paraphrases per pole."""
    rng = random.Random(seed)
    out = []
    for i in range(n_users):
        uid = f"u{i:04d}"
        pref = TYPES[i % len(TYPES)]
        cues = {p: rng.sample(CUES[p], 2) for p in poles_of(pref)}
        out.append(User(uid, pref, cues, rng.choice(["before", "after"]), _split(i // len(TYPES))))
    return out


@dataclass
class PersonaPrompt:
    id: str
    user: str
    split: str
    preference: str
    problem: world.WorldProblem
    text: str


def _with_cues(text: str, cues: list[str], position: str) -> str:
    return " ".join(cues + [text]) if position == "before" else " ".join([text] + cues)


def prompts(n_users: int = 128, per_user: int = 4, seed: int = 0, split: str | None = None) -> list[PersonaPrompt]:
    """per_user prompts for each user (of the split, if one is named), problems of the matching world split."""
    rng = random.Random(seed + 7)
    us = users(n_users, seed)
    need = {s: sum(per_user for u in us if (u.split == "train") == (s == "train")) for s in ("train", "test")}
    pools = {s: world.generate(need[s] // len(LEVELS) + 1, seed=seed + (1 if s == "train" else 2),
                               levels=LEVELS, split=s) for s in ("train", "test") if need[s]}
    for pool in pools.values():
        rng.shuffle(pool)
    out = []
    for u in us:
        pool = pools["train" if u.split == "train" else "test"]
        for j in range(per_user):
            p = pool.pop()
            cues = [rng.choice(u.cues[pole]) for pole in poles_of(u.preference)]
            rng.shuffle(cues)
            text = _with_cues(p.text, cues, u.position)
            pid = f"{u.id}-{j}"
            if split is None or u.split == split:
                out.append(PersonaPrompt(pid, u.id, u.split, u.preference, p, text))
    return out


def to_problem(pp: PersonaPrompt) -> Problem:
    return Problem(pp.id, pp.text, str(pp.problem.answer),
                   {"preference": pp.preference, "user": pp.user, "split": pp.split,
                    "n_steps": len(pp.problem.steps), "level": pp.problem.level})


@register_task("personas", grader="integer")
def personas_task(data_dir=None, split: str | None = "test", n_users: int = 128, per_user: int = 4,
                  seed: int = 0) -> list[Problem]:
    """The persona world's user prompts of a split (``data_dir`` unused)."""
    return [to_problem(pp) for pp in prompts(n_users, per_user, seed, split)]


# ---------------------------------------------------------------- the chat model's training conversations

def chat_examples(n: int, seed: int = 0) -> list[list[dict]]:
    """Conversations for tiny-chat: a card (one or two poles) → that style, whatever the cues say;
    no card → the neutral style, whatever the cues say (the base ignores implicit preferences)."""
    rng = random.Random(seed)
    pool = world.generate(n // len(LEVELS) + 1, seed=seed + 101, levels=LEVELS, split="train")
    out = []
    for i in range(n):
        p = pool[i % len(pool)]
        cue_type = rng.choice(TYPES + ("",))
        cues = [rng.choice(CUES[c]) for c in poles_of(cue_type)] if cue_type else []
        text = _with_cues(p.text, cues, rng.choice(["before", "after"]))
        if rng.random() < 0.4:
            msgs = [{"role": "user", "content": text}, {"role": "assistant", "content": respond(p, (), rng)}]
        else:
            pick = poles_of(rng.choice(TYPES))
            msgs = [{"role": "system", "content": card_for(pick)}, {"role": "user", "content": text},
                    {"role": "assistant", "content": respond(p, pick, rng)}]
        out.append(msgs)
    return out
