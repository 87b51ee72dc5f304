"""Pairwise comparisons from the persona world, labelled by the world's ground truth: the judge model's data.

**What the world knows.** The persona world (:mod:`.world`) is built by program, so three things are known
exactly, not read back from any text: each user's preference type (hidden in the prompt behind cue sentences,
known to the world), each problem's gold integer, and the style an answer was *generated* in —
:func:`.world.respond` writes an answer in the poles it is asked for (tone: warm / neutral / impersonal;
length: concise / neutral / thorough). The world's measure of how well an answer suits a user is the
rubric's sum, 1 for the right final integer plus one per preferred pole (:func:`.world.rubric_score`).

**Ground truth used here.** A candidate answer is generated in one of the 9 tone × length styles, right or
wrong (wrong: the final integer is replaced by a near miss, gold ± 1, 2 or 10, kept positive; the worked
lines keep the true values, so a wrong answer's last calculation and its final clause disagree except in
the concise styles, where nothing but arithmetic shows the error). Its *utility* for a user is the rubric's
sum computed from the generation labels: ``[correct] + Σ over the user's poles of [generated with that
pole]``. Of two candidates the user prefers the one of higher utility; equal utilities are a tie (the world
has no finer preference: an answer in both of a warm+thorough user's poles is no better for being long).
Departures from the rubric (:func:`.judging.rubric_judge`, which the calibration compares against):
the rubric reads style back from the text with partial credit — a neutral tone earns an impersonal user
¼, warm counts ½ for the opener and ½ for the closer, thorough the share of calculations checked — where
the ground truth counts a pole 1 when the answer was generated with it and 0 otherwise. On these complete,
generated texts the readings agree except for the ¼ a neutral tone earns an impersonal user, so rubric
and ground truth differ on a minority of pairs (measured in the calibration record).

**Pairs.** For each prompt of a split (:func:`.world.prompts`, same ``n_users`` and ``seed`` as the
chapter's world, so the users are the chapter's users), ``pairs_per_prompt`` pairs of distinct candidates
(style and correctness drawn at random, correct with probability ``p_correct``; the two never have the same
style and correctness, so their texts differ and no pair is a free tie), seeded per prompt. Training pairs
come from the TRAINING users only; held-out pairs from the validation or test users. The world splits users
by index (:func:`.world.users`) and gives training users problems from the world's train split and the
others problems from its test split (disjoint by arithmetic expression), so held-out pairs share no user,
no prompt and no problem with training pairs: :func:`check_disjoint` asserts it.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass

from ...judge import JUDGE_TEMPLATE, Call
from . import world as pw

TONES = (None, "warm", "impersonal")
LENGTHS = (None, "concise", "thorough")
STYLES = tuple(tuple(x for x in (t, n) if x) for t in TONES for n in LENGTHS)  # 9 styles, () is neutral
VERDICTS = ("A", "B", "tie")
REPLY = {"A": "[[A]]", "B": "[[B]]", "tie": "[[tie]]"}  # what the judge model is trained to answer


@dataclass(frozen=True)
class Candidate:
    poles: tuple[str, ...]  # the poles the answer was generated in (empty: neutral)
    correct: bool
    text: str


@dataclass(frozen=True)
class JudgePair:
    """Two candidates for one user's prompt; ``truth`` says which the user prefers with ``first`` shown as A."""

    pair_id: str
    user: str
    split: str
    prompt_id: str
    prompt: str
    preference: str
    gold: str
    n_steps: int
    expression: str  # the problem's arithmetic (the world's split key)
    first: Candidate
    second: Candidate
    truth: str  # "A" (first), "B" (second) or "tie"

    def row(self) -> dict:
        """The systems-row fields the judges read (the rubric reads preference, gold and n_steps)."""
        return {"prompt_id": self.pair_id, "prompt": self.prompt, "preference": self.preference, "gold": self.gold,
                "n_steps": self.n_steps, "user": self.user}

    def call(self, swapped: bool = False) -> Call:
        """The judge call with ``first`` shown as A (``swapped``: ``second`` shown as A)."""
        a, b = (self.second, self.first) if swapped else (self.first, self.second)
        return Call(self.pair_id, self.prompt, self.preference, a.text, b.text, self.row())

    def judge_prompt(self, swapped: bool = False) -> str:
        """The user message :class:`polyvox.judge.LLMJudge` sends for this call (its default template)."""
        c = self.call(swapped)
        return JUDGE_TEMPLATE.format(preference=c.preference, prompt=c.prompt, first=c.first, second=c.second)

    def truth_shown(self, swapped: bool = False) -> str:
        """The ground-truth verdict in the order shown."""
        return swap(self.truth) if swapped else self.truth


def swap(verdict: str) -> str:
    """The same verdict seen with A and B exchanged."""
    return {"A": "B", "B": "A"}.get(verdict, verdict)


_FINAL_CLAUSE = re.compile(r"(The answer is |Result: )(\d+)\.")


def wrong_answer(answer: int, rng: random.Random) -> int:
    """A near miss: gold ± 1, 2 or 10, positive and not gold."""
    choices = [answer + d for d in (-10, -2, -1, 1, 2, 10) if answer + d > 0]
    return rng.choice(choices)


def candidate(p, poles: tuple[str, ...], correct: bool, rng: random.Random) -> Candidate:
    """An answer to world problem ``p`` in ``poles`` (:func:`.world.respond`); wrong: its final integer replaced."""
    text = pw.respond(p, poles, rng)
    if not correct:
        bad = wrong_answer(p.answer, rng)
        text, n = _FINAL_CLAUSE.subn(lambda m: f"{m.group(1)}{bad}.", text)
        if n != 1:
            raise RuntimeError(f"candidate: expected one final clause in {text!r}")
    return Candidate(tuple(poles), correct, text)


def utility(c: Candidate, preference: str) -> int:
    """Ground-truth utility for a user of ``preference``: right answer + number of preferred poles generated."""
    return int(c.correct) + sum(pole in c.poles for pole in pw.poles_of(preference))


def truth(a: Candidate, b: Candidate, preference: str) -> str:
    ua, ub = utility(a, preference), utility(b, preference)
    return "A" if ua > ub else "B" if ub > ua else "tie"


def make_pairs(split: str, n_users: int, per_user: int, pairs_per_prompt: int, seed: int = 0,
               p_correct: float = 0.7) -> list[JudgePair]:
    """``pairs_per_prompt`` labelled pairs for each prompt of the users of ``split`` (see the module docstring)."""
    if split not in ("train", "validation", "test"):
        raise ValueError(f"split must be train, validation or test, got {split!r}")
    if pairs_per_prompt < 1 or per_user < 1:
        raise ValueError("make_pairs: per_user and pairs_per_prompt must be at least 1")
    out = []
    for pp in pw.prompts(n_users, per_user, seed, split=split):
        rng = random.Random(f"judge-pairs/{seed}/{pp.id}")
        seen: set = set()
        for k in range(pairs_per_prompt):
            while True:  # two candidates of different (style, correctness), a pair not drawn yet for this prompt
                x = (rng.choice(STYLES), rng.random() < p_correct)
                y = (rng.choice(STYLES), rng.random() < p_correct)
                if x != y and (x, y) not in seen:
                    break
            seen.add((x, y))
            a, b = candidate(pp.problem, *x, rng), candidate(pp.problem, *y, rng)
            out.append(JudgePair(f"{pp.id}/{k}", pp.user, pp.split, pp.id, pp.text, pp.preference,
                                 str(pp.problem.answer), len(pp.problem.steps), pp.problem.expression, a, b,
                                 truth(a, b, pp.preference)))
    return out


def check_disjoint(train: list[JudgePair], held: list[JudgePair]) -> None:
    """Raise unless held-out pairs share no user, prompt (id or text) and problem with training pairs."""
    for what, key in (("user", lambda p: p.user), ("prompt id", lambda p: p.prompt_id),
                      ("prompt text", lambda p: p.prompt), ("problem", lambda p: p.expression)):
        shared = {key(p) for p in train} & {key(p) for p in held}
        if shared:
            raise ValueError(f"held-out pairs share {len(shared)} {what}(s) with training pairs, e.g. "
                             f"{sorted(shared)[0]!r}")
    if any(p.split == "train" for p in held) or any(p.split != "train" for p in train):
        raise ValueError("training pairs must come from training users and held-out pairs from the others")


def examples(pairs: list[JudgePair], both_orders: bool = True) -> list[tuple[str, str]]:
    """(judge prompt, reply) training examples: each pair as shown, and (``both_orders``) swapped too."""
    out = []
    for p in pairs:
        for swapped in ((False, True) if both_orders else (False,)):
            out.append((p.judge_prompt(swapped), REPLY[p.truth_shown(swapped)]))
    return out


def digest(pairs: list[JudgePair]) -> str:
    """sha256 over the pairs' JSON (every field, in order): what the data a judge saw were."""
    h = hashlib.sha256()
    for p in pairs:
        h.update(json.dumps(asdict(p), sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def label_counts(pairs: list[JudgePair]) -> dict[str, int]:
    return {v: sum(p.truth == v for p in pairs) for v in VERDICTS}
