"""Part III's QA splits are by the underlying problem (issue 23): each person of the knowledge base is in
one split, so no fact chain — the problem a question's wording is built on — appears in two of train,
validation and test, whatever seed each draw uses; the split is deterministic. The recorded run keeps
the questions its records hold (drawn under the old split by text, whose chains leaked)."""
import json
from collections import Counter
from pathlib import Path

import pytest

from polyvox.studies.collab import models, pipeline
from polyvox.studies.collab.tasks import QA_SPLITS, collab_qa, knowledge_base, make_qa, qa_splits

pytestmark = pytest.mark.xdist_group("collab-ordered")  # with test_collab_split: h200-ordered's sets drawn once

ROOT = Path(__file__).resolve().parents[1]
SPLITS = [name for name, _ in QA_SPLITS]


def chains(problems) -> set:
    return {models.underlying(p) for p in problems if p.metadata["task"] == "qa"}


def test_people_are_cut_into_the_stated_shares_deterministically():
    kb = knowledge_base(0)
    cut = qa_splits(kb)
    assert Counter(cut.values()) == {"train": 28, "validation": 10, "test": 10} and set(cut) == set(kb["mentor"])
    assert qa_splits(knowledge_base(0)) == cut  # no hidden state
    assert qa_splits(kb, kb_seed=1) != cut  # the knowledge base's seed enters the hash


@pytest.mark.parametrize("seeds", [(0, 0, 0), (0, 200, 101), (5, 6, 7)])
def test_no_chain_is_in_two_splits_whatever_each_draw_s_seed(seeds):
    drawn = {sp: make_qa(150, seed=s, split=sp) for sp, s in zip(SPLITS, seeds)}
    for sp, qs in drawn.items():
        assert {q.metadata["split"] for q in qs} == {sp} and len({q.text for q in qs}) == 150
    for a, b in [("train", "validation"), ("train", "test"), ("validation", "test")]:
        assert not chains(drawn[a]) & chains(drawn[b]), (a, b)
        # nor a shorter chain of the same person (its prefix): people are disjoint
        assert not {q.metadata["person"] for q in drawn[a]} & {q.metadata["person"] for q in drawn[b]}
    every = make_qa(300, seed=seeds[0])  # no split asked: each question still carries its person's split
    cut = qa_splits(knowledge_base(0))
    assert all(q.metadata["split"] == cut[q.metadata["person"]] for q in every) and len(Counter(
        q.metadata["split"] for q in every)) == 3


def test_a_draw_is_deterministic_given_its_seed():
    for sp in SPLITS:
        a, b = collab_qa(n=40, seed=3, split=sp), collab_qa(n=40, seed=3, split=sp)
        assert [(p.id, p.text, p.gold, p.metadata) for p in a] == [(p.id, p.text, p.gold, p.metadata) for p in b]
        assert [p.id for p in collab_qa(n=40, seed=4, split=sp)] != [p.id for p in a]


def test_an_unknown_split_is_refused():
    with pytest.raises(ValueError, match="unknown split 'dev'; splits: test, validation, train"):
        make_qa(3, split="dev")


@pytest.mark.parametrize("scale", ["smoke", "cpu", pytest.param("h200-ordered", marks=pytest.mark.slow)])
def test_the_pipeline_s_train_validation_and_test_questions_share_no_chain(scale):
    if scale == "h200-ordered":  # drawn once per process with test_collab_split's (the same calls)
        from test_collab_split import ordered_sets

        train, test, val = (ordered_sets()[k] for k in ("train", "test", "validation"))
    else:
        s = pipeline.load_scale(scale)
        train, test = pipeline.problems(s, "train"), pipeline.problems(s, "test")
        val = models.validation_problems(s, test, train)
    got = {"train": chains(train), "validation": chains(val), "test": chains(test)}
    assert all(got.values())
    for a, b in [("train", "validation"), ("train", "test"), ("validation", "test")]:
        assert not got[a] & got[b], (a, b)


def test_the_recorded_run_keeps_its_own_questions():
    """Its records hold each question's text, gold and metadata; they were drawn under the old split (a hash
    of the text), whose QA test chains were all training chains too — read as recorded, not redrawn."""
    recs = [json.loads(line) for line in (ROOT / "data/runs/collab-h200/eval/cl/trajectories.jsonl").read_text()
            .splitlines()]
    qa = [r for r in recs if r["metadata"]["task"] == "qa"]
    assert len(recs) == 240 and len(qa) == 120 and all(r["question"] and r["gold"] for r in qa)
    assert all("person" not in r["metadata"] for r in qa)  # written before the split by chain
    train_now = make_qa(1500, seed=1, split="train")  # the split by chain: 28 of the 48 people
    recorded = {("qa", None, tuple(r["metadata"]["steps"])) for r in qa}
    assert recorded & chains(train_now)  # the leak the new split removes from new runs
