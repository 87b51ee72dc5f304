"""Part III's two tasks as polyvox Problems with their gold steps: world arithmetic and multi-hop QA.

- ``collab_world``: the miniature world's problems (:mod:`polyvox.studies.world.problems`),
  levels 1–3 by default; gold = the integer answer (grader ``integer``); metadata holds
  the gold step calculations (``"12 + 5 = 17"``) for the step judge and the traces.
- ``collab_qa``: a generated multi-hop QA set, MuSiQue in miniature. A seeded knowledge base
  of people (mentor of), people's birth towns, towns' regions and regions' countries; a
  question asks for the end of a 2–4-hop chain from a person ("In which region was the
  mentor of Ada Quill born?"). The question text carries its context, as MuSiQue's
  paragraphs do: the chain's facts and ``distractors`` facts about other entities,
  shuffled. Gold = the answer entity (regions have two-word names, so token F1 differs
  from exact match); grader ``qa`` (SQuAD-normalised EM and token F1).
  Splits (``train``, ``validation``, ``test``) are by the underlying problem, the fact chain, not by the
  wording: each person of the knowledge base is assigned to one split (:func:`qa_splits`: the people
  ranked by a hash of the knowledge-base seed and the name, the first 20 % ``test``, the next 20 %
  ``validation``, the rest ``train``), and a question belongs to the split of the person its chain
  starts from. So no chain — nor a shorter chain from the same person, which is its prefix — is in two
  splits, whatever the sampling seed of each split's draw. (Facts can still recur: two people may
  share a mentor, and every chain ends in one of 12 towns, 6 regions, 3 countries.)
  *Changed* (issue 23): the split was a hash of the question's text (20 % test), so one chain
  reached train and test in different wordings (the 144 chains all appeared in both); a question's
  metadata now names its ``person``. Runs recorded before (``data/runs/collab-h200``) keep their own
  questions — their trajectory records hold each question's text, gold and metadata, and nothing
  reading them regenerates the questions —; the new split applies to new runs.
- World problems keep the world's own split (a hash of the text, :mod:`polyvox.studies.world.problems`).
Both register in :mod:`polyvox.tasks` on import.
"""
from __future__ import annotations

import hashlib
import random

from ... import tasks
from ...records import Problem
from ...tasks import register_task
from ..world import problems as world
from .projections import malformed

FIRST = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lia", "Max", "Nia",
         "Oto", "Pia"]
LAST = ["Quill", "Rook", "Sage", "Thorn", "Umber", "Vance", "Wren", "Yarrow"]
TOWNS = ["Corvo", "Dunmere", "Elsby", "Farrow", "Glenn", "Harlow", "Ismere", "Jarrow", "Kettle", "Lindale",
         "Morrow", "Norby"]
REGIONS = ["North Vale", "South Reach", "East March", "West Fold", "High Moor", "Low Fen"]
COUNTRIES = ["Aldra", "Belmor", "Cassia"]


def world_problem(p) -> Problem:
    steps = [s.calc() for s in p.steps]
    return Problem(p.id, p.text, str(p.answer), {"task": "world", "level": p.level, "steps": steps,
                                                 "start": f"We start with {p.start}."})


@register_task("collab_world", grader="integer", levels=True)
def collab_world(data_dir=None, levels=(1, 2, 3), per_level: int = 20, seed: int = 0, split: str | None = None):
    levels = [int(x) for x in (levels if isinstance(levels, (list, tuple)) else [levels])]
    return [world_problem(p) for p in world.generate(per_level, seed=seed, levels=levels, split=split)]


def knowledge_base(seed: int = 0) -> dict:
    rng = random.Random(seed)
    people = [f"{f} {l}" for f in FIRST for l in LAST]
    rng.shuffle(people)
    people = people[:48]
    return {"mentor": {p: rng.choice([q for q in people if q != p]) for p in people},
            "born": {p: rng.choice(TOWNS) for p in people},
            "region": {t: rng.choice(REGIONS) for t in TOWNS},
            "country": {r: rng.choice(COUNTRIES) for r in REGIONS}}


QUESTIONS = {2: "In which town was the mentor of {p} born?",
             3: "In which region was the mentor of {p} born?",
             4: "In which country was the mentor of {p} born?"}


def qa_chain(kb: dict, person: str, hops: int) -> tuple[list[str], str]:
    """The chain's facts (as sentences, in order) and its answer."""
    m = kb["mentor"][person]
    town = kb["born"][m]
    facts = [f"The mentor of {person} is {m}.", f"{m} was born in {town}."]
    answer = town
    if hops >= 3:
        answer = kb["region"][town]
        facts.append(f"{town} lies in {answer}.")
    if hops >= 4:
        region, answer = answer, kb["country"][answer]
        facts.append(f"{region} belongs to {answer}.")
    return facts, answer


def _distractor(kb: dict, rng: random.Random, avoid: set) -> str:
    kind = rng.choice(["mentor", "born", "region", "country"])
    key = rng.choice(sorted(kb[kind]))
    val = kb[kind][key]
    s = {"mentor": f"The mentor of {key} is {val}.", "born": f"{key} was born in {val}.",
         "region": f"{key} lies in {val}.", "country": f"{key} belongs to {val}."}[kind]
    return s if s not in avoid else ""


QA_SPLITS = (("test", 0.2), ("validation", 0.2), ("train", None))  # share of the people; train: the rest


def qa_splits(kb: dict, kb_seed: int = 0) -> dict[str, str]:
    """Person → split: the people ranked by sha256 of ``"<kb_seed>:<name>"``, cut in the shares of
    :data:`QA_SPLITS` (rounded; train takes the rest). Depends on the knowledge base only, never on a
    draw's sampling seed, so the splits of every draw agree."""
    people = sorted(kb["mentor"], key=lambda p: hashlib.sha256(f"{kb_seed}:{p}".encode()).hexdigest())
    out, start = {}, 0
    for name, share in QA_SPLITS:
        end = len(people) if share is None else start + round(share * len(people))
        out.update({p: name for p in people[start:end]})
        start = end
    return out


def make_qa(n: int, seed: int = 0, hops=(2, 3, 4), distractors: int = 3, split: str | None = None,
            kb_seed: int = 0) -> list[Problem]:
    """``n`` distinct questions (by text), chains drawn from the people of ``split`` (all people: None)."""
    kb = knowledge_base(kb_seed)
    splits = qa_splits(kb, kb_seed)
    if split is not None and split not in {name for name, _ in QA_SPLITS}:
        raise ValueError(f"collab_qa: unknown split {split!r}; splits: {', '.join(name for name, _ in QA_SPLITS)}")
    rng = random.Random(seed)
    out, seen = [], set()
    people = sorted(p for p in kb["mentor"] if split is None or splits[p] == split)
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 200 * n + 1000:
            raise RuntimeError(f"collab_qa: cannot make {n} unique {split or ''} questions")
        h = hops[len(out) % len(hops)]
        person = rng.choice(people)
        facts, answer = qa_chain(kb, person, h)
        context = list(facts)
        while len(context) < len(facts) + distractors:
            d = _distractor(kb, rng, set(context))
            if d:
                context.append(d)
        rng.shuffle(context)
        text = " ".join(context) + " " + QUESTIONS[h].format(p=person)
        if text in seen:
            continue
        seen.add(text)
        pid = f"qa{h}-" + hashlib.sha256(text.encode()).hexdigest()[:10]
        out.append(Problem(pid, text, answer, {"task": "qa", "level": h, "hops": h, "steps": facts,
                                               "split": splits[person], "person": person}))
    return out


@register_task("collab_qa", grader="qa", levels=True)
def collab_qa(data_dir=None, n: int = 30, seed: int = 0, hops=(2, 3, 4), distractors: int = 3,
              split: str | None = None):
    return make_qa(n, seed, tuple(hops), distractors, split)


def task_for(problem_or_meta) -> str:
    """The registered task a collaboration question belongs to (its metadata's ``task``)."""
    meta = getattr(problem_or_meta, "metadata", problem_or_meta)
    return "collab_qa" if meta.get("task") == "qa" else "collab_world"


def grader_for(problem_or_meta) -> str:
    """The grader of the question's registered task (``qa`` or ``integer``)."""
    return tasks.get(task_for(problem_or_meta)).grader


def grade_answer(answer: str | None, gold, meta: dict):
    """Grade one answer of a trajectory (a projected answer, a turn's tentative answer): (correct, f1) with
    its task's grader and options, through :func:`polyvox.runs.grade_completions` (``bare``: the answer is
    graded as an ``<answer>`` body; f1 is the grader's, or 1.0/0.0 with correctness where it gives none).

    No answer (None) and a malformed answer (:func:`.projections.malformed`: it carries a protocol tag, the
    remnant of a broken turn, not an answer body) are both (False, 0.0); a malformed one never reaches the
    grader (None does, as an empty body, so every answer slot is graded through runs alike). The
    rule lives here so that every path agrees — the chapter's scores (:func:`.analysis.score`), the RL
    reward (:func:`.judge.pyramid_reward`) and any reader of the records: fed as a bare body, the ``integer``
    grader would grade the last ``<answer>`` block inside ``"1 ÷ 11.</think> <answer>1"`` and credit it
    (the recorded run's ``cl-base``: 5 of 240 credited that way, 4 under this rule)."""
    from ... import runs

    if malformed(answer):
        return False, 0.0
    task = tasks.get(task_for(meta))
    [g] = runs.grade_completions(task.grader, [answer], [gold], task.grade_options, bare=True)  # None: empty
    if answer is None:
        return False, 0.0
    return bool(g.correct), g.f1 if g.f1 is not None else float(g.correct)
