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
- World problems keep the world's own split (train/test by a hash of the expression,
  :mod:`polyvox.studies.world.problems`) — unless a scale says ``data.split_by: underlying`` (issue 23,
  h200-ordered): then every underlying problem (:func:`underlying`) has one of train / validation / test
  by a hash of it (:func:`underlying_split`; QA: its person's split), training draws from train and the
  held-out sets hold each underlying problem once (:func:`world_by_underlying`, :func:`make_qa_once`).
  The generator has 308 level-1 underlying problems (13,820 at level 2, 814,479 at level 3) and the
  knowledge base 144 chains, so level 1's test partition holds 67 and QA's 30.
Both register in :mod:`polyvox.tasks` on import.
"""
from __future__ import annotations

import hashlib
import json
import random

from ... import tasks
from ...records import Problem
from ...tasks import register_task
from ..world import problems as world
from .projections import malformed, unevaluated

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
def collab_world(data_dir=None, levels=(1, 2, 3), per_level: int = 20, seed: int = 0, split: str | None = None,
                 split_by: str | None = None, once: bool = False):
    """``per_level`` world problems per level. ``split``: the world's own split (a hash of the expression,
    train/test, :mod:`polyvox.studies.world.problems`) — or, with ``split_by="underlying"``, the partition
    of :func:`underlying_split` (train/validation/test) through :func:`world_by_underlying` (``once``: each
    underlying problem at most once)."""
    levels = [int(x) for x in (levels if isinstance(levels, (list, tuple)) else [levels])]
    if split_by == "underlying":
        return world_by_underlying(levels, per_level, seed, split or "train", once)
    if split_by is not None:
        raise ValueError(f"collab_world: unknown split_by {split_by!r} (underlying, or none: the world's own split)")
    return [world_problem(p) for p in world.generate(per_level, seed=seed, levels=levels, split=split)]


# --- issue 23: held-out sets disjoint by the underlying problem, each underlying problem once ---

def underlying(p) -> tuple:
    """The problem beneath a question's wording: a world problem's start and calculations; a QA question's
    chain of facts (its person and hops), whatever its distractors and order."""
    m = p.metadata
    return (m.get("task"), m.get("start"), tuple(m.get("steps", ())))


def underlying_split(p) -> str:
    """The split a question's underlying problem belongs to, for scales with ``data.split_by: underlying``.
    QA: its person's (:func:`qa_splits`: a chain and all its prefixes share one split). World: the
    underlying problem (:func:`underlying`) hashed — sha256 of its JSON, the first 64 bits as a fraction of
    2⁶⁴, cut in the shares of :data:`QA_SPLITS` (20 % test, 20 % validation, the rest train), so every
    wording of one calculation falls in one split, whatever the seed of a draw."""
    if p.metadata.get("task") == "qa":
        return p.metadata["split"]
    key = json.dumps(underlying(p), ensure_ascii=False)
    u, cut = int(hashlib.sha256(key.encode()).hexdigest()[:16], 16) / 2 ** 64, 0.0
    for name, share in QA_SPLITS:
        cut = 1.0 if share is None else cut + share
        if u < cut:
            return name
    return QA_SPLITS[-1][0]


def world_by_underlying(levels, per_level: int, seed: int, split: str, once: bool) -> list[Problem]:
    """``per_level`` world problems per level whose underlying problem is in ``split`` (:func:`underlying_split`),
    drawn from the world's generator with ``random.Random(seed)``; distinct texts, and with ``once`` distinct
    underlying problems. A level whose partition holds fewer underlying problems than ``once`` asks for
    contributes all a draw of 200 × ``per_level`` + 1000 problems finds (level 1: its whole partition, the
    generator's 308 level-1 calculations being found within a few thousand draws); without ``once`` a shortfall
    is an error, as in :func:`polyvox.studies.world.problems.generate`."""
    if split not in {name for name, _ in QA_SPLITS}:
        raise ValueError(f"collab_world: unknown split {split!r}; splits: {', '.join(n for n, _ in QA_SPLITS)}")
    rng = random.Random(seed)
    out, where = [], {}  # where: underlying problem → its split (a level-1 draw meets few, many times)
    for level in levels:
        seen: set = set()
        made = tries = 0
        while made < per_level and tries < 200 * per_level + 1000:
            tries += 1
            p = world_problem(world._make(rng, level))
            u = underlying(p)
            if (where[u] if u in where else where.setdefault(u, underlying_split(p))) != split:
                continue
            k = u if once else p.text
            if k in seen:
                continue
            seen.add(k)
            out.append(p)
            made += 1
        if made < per_level and not once:
            raise RuntimeError(f"world: cannot make {per_level} unique {split} problems at level {level}")
    return out


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
        q = _qa_question(kb, splits, rng, person, h, distractors)
        if q.text in seen:
            continue
        seen.add(q.text)
        out.append(q)
    return out


def _qa_question(kb: dict, splits: dict, rng: random.Random, person: str, h: int, distractors: int) -> Problem:
    """One wording of the ``h``-hop chain from ``person``: its facts and ``distractors`` other facts, shuffled."""
    facts, answer = qa_chain(kb, person, h)
    context = list(facts)
    while len(context) < len(facts) + distractors:
        d = _distractor(kb, rng, set(context))
        if d:
            context.append(d)
    rng.shuffle(context)
    text = " ".join(context) + " " + QUESTIONS[h].format(p=person)
    pid = f"qa{h}-" + hashlib.sha256(text.encode()).hexdigest()[:10]
    return Problem(pid, text, answer, {"task": "qa", "level": h, "hops": h, "steps": facts,
                                       "split": splits[person], "person": person})


def make_qa_once(n: int, seed: int = 0, hops=(2, 3, 4), distractors: int = 3, split: str = "test",
                 kb_seed: int = 0) -> list[Problem]:
    """Each chain of ``split`` once (its people × ``hops``), in an order shuffled by ``seed``, at most ``n``
    of them: one wording per underlying problem, for a test or validation set of independent questions."""
    kb = knowledge_base(kb_seed)
    splits = qa_splits(kb, kb_seed)
    if split not in {name for name, _ in QA_SPLITS}:
        raise ValueError(f"collab_qa: unknown split {split!r}; splits: {', '.join(name for name, _ in QA_SPLITS)}")
    rng = random.Random(seed)
    chains = [(p, h) for p in sorted(p for p in kb["mentor"] if splits[p] == split) for h in hops]
    rng.shuffle(chains)
    return [_qa_question(kb, splits, rng, p, h, distractors) for p, h in chains[:n]]


@register_task("collab_qa", grader="qa", levels=True)
def collab_qa(data_dir=None, n: int = 30, seed: int = 0, hops=(2, 3, 4), distractors: int = 3,
              split: str | None = None, once: bool = False):
    """``n`` distinct questions of ``split``; ``once``: each chain of the split at most once
    (:func:`make_qa_once`, at most ``n`` — the split's chains are all there are)."""
    if once:
        return make_qa_once(n, seed, tuple(hops), distractors, split or "test")
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
    (the recorded run's ``cl-base``: 5 of 240 credited that way, 4 under this rule). For the same reason an
    integer-graded answer that is an unevaluated expression (:func:`.projections.unevaluated`: ``"5 ÷ 1"``, which
    the last-integer rule reads as 1) is (False, 0.0)."""
    from ... import runs

    if malformed(answer):
        return False, 0.0
    task = tasks.get(task_for(meta))
    if task.grader == "integer" and unevaluated(answer):
        return False, 0.0
    [g] = runs.grade_completions(task.grader, [answer], [gold], task.grade_options, bare=True)  # None: empty
    if answer is None:
        return False, 0.0
    return bool(g.correct), g.f1 if g.f1 is not None else float(g.correct)
