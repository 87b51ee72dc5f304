"""The miniature world: seeded arithmetic word problems, solutions in three styles, training text.

A problem is a chain of operations on one quantity ("A crate holds 12 pears. 5 more
are put in. The amount is tripled. …"), built so every intermediate value is a
positive integer; its expression is evaluated with Python to check the answer.
Difficulty: level 1–5 = 1–5 operations with growing operands; the "olympiad" tier
has 6–8 operations and larger operands. Train and test splits are disjoint at the level
of the arithmetic, not only the text: a problem's split is a hash of its *expression*
(start value, operators and operands — 20% test), so two problems that differ only in
their nouns ("pears in a crate" vs "coins in a jar") always fall in the same split.
Texts are unique within a generated set.

Three solution styles, from the same worked steps:
- ``plain``: one line per step, then "The answer is N.";
- ``think``: a long careful ``<think>…</think>`` that restates, computes, re-checks
  each step by its inverse, then ``\\boxed{N}``;
- ``panel``: named experts propose, check and (sometimes) correct steps inside
  ``<mutipersonaDebate>…</mutipersonaDebate>``, then ``<answer>N</answer>``.

``pretraining_text`` mixes problems and solutions of all styles *without*
instruction framing — documents such as "Question: … Worked answer: …" or a panel
transcript — so a base model learns the skill but not the panel prompt, and RL has
a format to learn. ``think_chat`` gives chat-formatted thinking solutions for the
fine-tune that stands in for a post-trained model.

The task ``world`` (registered in :mod:`polyvox.tasks` when this module is imported)
serves these problems to the one run path: ``tasks.load("world", levels=[3, 4],
per_level=60, seed=30, split="train")``.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from ...records import Problem
from ...tasks import register_task

ITEMS = ["apples", "pears", "marbles", "coins", "stamps", "books", "shells", "beads", "cards", "seeds"]
HOLDERS = ["A crate", "A jar", "A box", "A bag", "A shelf", "A basket", "A drawer", "A chest"]
NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana"]
LEVELS = (1, 2, 3, 4, 5, "olympiad")
EXPERTS = ["Expert 1", "Expert 2", "Expert 3"]


@dataclass
class Step:
    op: str  # + - * /
    operand: int
    before: int
    after: int

    def text(self, item: str) -> str:
        return {"+": f"{self.operand} more {item} are put in.",
                "-": f"{self.operand} {item} are taken out.",
                "*": f"The amount is multiplied by {self.operand}.",
                "/": f"The {item} are shared equally into {self.operand} groups and one group is kept."}[self.op]

    def calc(self) -> str:
        sym = {"+": "+", "-": "-", "*": "×", "/": "÷"}[self.op]
        return f"{self.before} {sym} {self.operand} = {self.after}"

    def inverse(self) -> str:
        inv = {"+": "-", "-": "+", "*": "÷", "/": "×"}[self.op]
        return f"{self.after} {inv} {self.operand} = {self.before}"


@dataclass
class WorldProblem:
    id: str
    level: int | str
    start: int
    item: str
    holder: str
    steps: list[Step]
    text: str
    answer: int
    expression: str
    split: str
    metadata: dict = field(default_factory=dict)


def _ranges(level) -> tuple[int, int, int]:
    """(number of operations, max start, max operand) for a level."""
    if level == "olympiad":
        return 0, 200, 40
    return level, 10 * level + 10, 4 + 3 * level


def _make(rng: random.Random, level) -> WorldProblem:
    n_ops, max_start, max_operand = _ranges(level)
    if level == "olympiad":
        n_ops = rng.randint(6, 8)
    item, holder = rng.choice(ITEMS), rng.choice(HOLDERS)
    value = rng.randint(2, max_start)
    start, steps = value, []
    for _ in range(n_ops):
        choices = ["+", "-", "*"] + (["/"] if any(value % d == 0 for d in range(2, 6)) else [])
        op = rng.choice(choices)
        if op == "+":
            k = rng.randint(1, max_operand)
        elif op == "-":
            if value <= 1:
                op, k = "+", rng.randint(1, max_operand)
            else:
                k = rng.randint(1, min(value - 1, max_operand))
        elif op == "*":
            k = rng.randint(2, 3 if level != "olympiad" and level < 4 else 5)
        else:
            k = rng.choice([d for d in range(2, 6) if value % d == 0])
        after = {"+": value + k, "-": value - k, "*": value * k, "/": value // k}[op]
        steps.append(Step(op, k, value, after))
        value = after
    expr = str(start)
    for s in steps:
        expr = f"({expr} {'//' if s.op == '/' else s.op} {s.operand})"
    answer = eval(expr)  # noqa: S307 - our own digits and operators
    if answer != value:
        raise AssertionError(f"world: expression {expr} = {answer}, steps gave {value}")
    text = (f"{holder} holds {start} {item}. " + " ".join(s.text(item) for s in steps)
            + f" How many {item} are there now?")
    split = expression_split(expr)
    pid = f"w{level}-" + hashlib.sha256(text.encode()).hexdigest()[:10]
    return WorldProblem(pid, level, start, item, holder, steps, text, answer, expr, split)


def expression_split(expr: str) -> str:
    """'test' for 20% of expressions, by hash: every wording of one calculation shares its split."""
    return "test" if int(hashlib.sha256(expr.encode()).hexdigest(), 16) % 5 == 0 else "train"


def generate(n_per_level: int, seed: int = 0, levels=LEVELS, split: str | None = None) -> list[WorldProblem]:
    """n_per_level unique problems for each level (of the given split, if one is named)."""
    rng = random.Random(seed)
    out, seen = [], set()
    for level in levels:
        made, tries = 0, 0
        while made < n_per_level:
            tries += 1
            if tries > 200 * n_per_level + 1000:
                raise RuntimeError(f"world: cannot make {n_per_level} unique {split or ''} problems at level {level}")
            p = _make(rng, level)
            if p.text in seen or (split and p.split != split):
                continue
            seen.add(p.text)
            out.append(p)
            made += 1
    return out


# ---------------------------------------------------------------- solutions

def solution_plain(p: WorldProblem) -> str:
    return " ".join(s.calc() + "." for s in p.steps) + f" The answer is {p.answer}."


def solution_think(p: WorldProblem) -> str:
    lines = [f"We start with {p.start} {p.item}."]
    for i, s in enumerate(p.steps, 1):
        lines.append(f"Step {i}: {s.text(p.item)} So {s.calc()}. Let me check: {s.inverse()}. Good.")
    lines.append(f"So the final count is {p.answer}.")
    return "<think>\n" + "\n".join(lines) + "\n</think>\n\n" + f"The answer is \\boxed{{{p.answer}}}."


def solution_panel(p: WorldProblem, rng: random.Random | None = None) -> str:
    """Experts take turns; with probability 0.15 per step one slips and the next corrects it."""
    rng = rng or random.Random(p.id)
    turns = [f"{EXPERTS[0]}: We begin with {p.start} {p.item}."]
    for i, s in enumerate(p.steps):
        speaker, checker = EXPERTS[i % 3], EXPERTS[(i + 1) % 3]
        if rng.random() < 0.15:
            wrong = s.after + rng.choice([-2, -1, 1, 2])
            turns.append(f"{speaker}: {s.text(p.item)} That gives {wrong}.")
            turns.append(f"{checker}: I disagree: {s.calc()}, not {wrong}.")
        else:
            turns.append(f"{speaker}: {s.text(p.item)} {s.calc()}.")
            turns.append(f"{checker}: Checked: {s.inverse()}.")
    turns.append(f"{EXPERTS[(len(p.steps)) % 3]}: So we agree on {p.answer}.")
    return "<mutipersonaDebate> " + " ".join(turns) + f" </mutipersonaDebate> <answer>{p.answer}</answer>"


def pretraining_text(problems: list[WorldProblem], seed: int = 0) -> list[str]:
    """Documents mixing problems and all three solution styles, with no instruction framing."""
    rng = random.Random(seed)
    docs = []
    for p in problems:
        style = rng.random()
        if style < 0.4:
            docs.append(f"Question: {p.text}\nWorked answer: {solution_plain(p)}")
        elif style < 0.7:
            docs.append(f"Question: {p.text}\nPanel transcript: {solution_panel(p, rng)}")
        else:
            docs.append(f"Question: {p.text}\nNotes: {solution_think(p)}")
    return docs


def think_chat(p: WorldProblem) -> list[dict]:
    return [{"role": "user", "content": p.text}, {"role": "assistant", "content": solution_think(p)}]


def to_problem(p: WorldProblem) -> Problem:
    """As a polyvox Problem (graded by the ``integer`` grader)."""
    return Problem(p.id, p.text, str(p.answer), {"level": p.level, "split": p.split})


@register_task("world", grader="integer", levels=True)
def world_task(data_dir=None, levels=LEVELS, per_level: int = 10, seed: int = 0, split: str | None = None
               ) -> list[Problem]:
    """The world's problems: ``per_level`` per level, generated with ``seed`` (``data_dir`` unused)."""
    levels = [lv if lv == "olympiad" else int(lv) for lv in (levels if isinstance(levels, (list, tuple)) else [levels])]
    return [to_problem(p) for p in generate(per_level, seed=seed, levels=levels, split=split)]
