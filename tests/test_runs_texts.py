"""One evaluation path (issue 18 item 1): :func:`polyvox.runs.sample_texts` samples as :func:`polyvox.runs.sample`
writes, and every pipeline call site that samples or grades in memory goes through it and
:func:`polyvox.runs.grade_completions` — the personas validation scorer and model card check, the
collaboration scheduler's turns and solo runs, the collaboration's answer grading.

The backends here are fakes whose text is a function of the request's seed: a call site that derived
its own seeds (or sampled around ``runs``) would write other texts than ``runs.sample``. Nothing loads
a model."""
from __future__ import annotations

import json

import pytest

from polyvox import runs, tasks
from polyvox.backends import Completion, SamplingParams
from polyvox.formats import Prompt
from polyvox.records import Problem, Sample, read_jsonl

PARAMS = SamplingParams(32, 1.0, 1.0)


class Seeded:
    """A backend whose completion names the request's seed and prompt; records every request."""

    name = "seeded"

    def __init__(self, answer=None, tokenizer=None):
        self.requests, self.answer, self.tokenizer = [], answer, tokenizer

    def identity(self):
        return {"backend": "seeded", "model": "fake"}

    def prompt(self, fmt, text):
        return Prompt(f"[{fmt}] {text}", (), False)

    def generate(self, requests, params):
        self.requests += requests
        return [Completion(f"<think>{r.prompt[:12]}</think> <answer>{self.answer or r.seed % 97}</answer> "
                           f"<action>stop</action>", len(r.prompt), 7, "stop", 0.00123456) for r in requests]


@pytest.fixture
def spy(monkeypatch):
    """Counts calls of runs.sample_texts and runs.grade_completions (the one in-memory sampling and grading)."""
    calls = {"sample_texts": 0, "grade_completions": 0}
    for name in calls:
        real = getattr(runs, name)

        def wrapped(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)
        monkeypatch.setattr(runs, name, wrapped)
    return calls


@pytest.mark.parametrize("fmt", ["panel", "think"])
def test_sample_texts_are_the_records_runs_sample_writes(tmp_path, root, fmt):
    out = runs.sample(tmp_path / "r", "world", fmt, Seeded(), 3, PARAMS, seed=11, limit=4, data_dir=root / "data",
                      progress=False, chunk=5)
    written = read_jsonl(out / runs.ROLLOUTS, Sample)
    problems = tasks.load("world", root / "data", limit=4)
    for chunk in (None, 2):
        got = runs.sample_texts(Seeded(), fmt, problems, PARAMS, seed=11, n=3, chunk=chunk)
        assert got == written  # same keys, prompt hashes, texts (panel: closed, as written), tokens


def test_sample_texts_seeds_and_indices():
    be = Seeded()
    ps = [Problem("a", "x", "1"), Problem("b", "y", "2")]
    got = runs.sample_texts(be, "think", ps, PARAMS, seed=4, indices=[5, 0])
    assert [(s.problem_id, s.sample_index) for s in got] == [("a", 5), ("b", 0)]
    assert [r.seed for r in be.requests] == [runs.sample_seed(4, "a", 5), runs.sample_seed(4, "b", 0)]
    assert runs.sample_texts(be, "think", [], PARAMS) == []
    with pytest.raises(ValueError, match="indices"):
        runs.sample_texts(be, "think", ps, PARAMS, n=2, indices=[0, 1])
    with pytest.raises(ValueError, match="seed"):
        runs.sample_texts(be, "think", ps, PARAMS, seed=-1)


def test_grade_completions_bare_answers():
    got = runs.grade_completions("integer", ["The answer is 12.", None, "12"], ["12", "12", "13"], bare=True)
    assert [g.correct for g in got] == [True, False, False] and got[1].status == "no_answer"


# ---------------------------------------------------------------- collaboration

def test_solo_runs_sample_as_runs_sample(tmp_path, spy):
    from polyvox.studies.collab import scheduler

    opts = {"levels": [1, 2], "per_level": 3, "seed": 0, "split": "test"}
    problems = tasks.load("collab_world", None, **opts)
    ref = runs.sample(tmp_path / "ref", "collab_world", "think", Seeded(), 1, PARAMS, seed=3, task_options=opts,
                      progress=False)
    want = {s.problem_id: s for s in read_jsonl(ref / runs.ROLLOUTS, Sample)}
    out = scheduler.run_solo(tmp_path / "solo", problems, "small", Seeded(), PARAMS, {"system": "solo"}, seed=3,
                             chunk=4)
    assert spy["sample_texts"] == 2  # 6 questions in chunks of 4
    recs = scheduler.load(out)
    assert {r["id"] for r in recs} == set(want)
    for r in recs:
        [turn] = r["turns"]
        assert turn["text"] == want[r["id"]].completion and turn["prompt_tokens"] == want[r["id"]].prompt_tokens
        assert r["status"] == "confirmed" and r["final"] == str(runs.sample_seed(3, r["id"], 0) % 97)


def test_scheduler_turns_are_seeded_as_runs_sample(spy):
    from polyvox.studies.collab import scheduler

    agents = {"small": Seeded(), "mid": Seeded()}
    sc = scheduler.Scheduler(agents, "small", seed=9, max_retries=0)
    [t] = sc.run_all([Problem("q1", "What is 2 + 3?", "5", {"task": "world"})])
    assert spy["sample_texts"] == 1 and t.status == "confirmed"
    assert [r.seed for r in agents["small"].requests] == [runs.sample_seed(9, "q1", 0)]
    with pytest.raises(ValueError, match="panel"):
        scheduler.Scheduler(agents, "small", fmt="panel")


def test_collab_answers_are_graded_through_runs(spy):
    from polyvox.studies.collab.tasks import grade_answer, grader_for

    assert grade_answer("North Vale", "North Vale", {"task": "qa"}) == (True, 1.0)
    assert grade_answer("North", "North Vale", {"task": "qa"}) == (False, pytest.approx(2 / 3))
    assert grade_answer("12", "12", {"task": "world"}) == (True, 1.0)
    assert grade_answer(None, "12", {"task": "world"}) == (False, 0.0)
    assert spy["grade_completions"] == 4
    assert (grader_for({"task": "qa"}), grader_for({"task": "world"})) == \
        (tasks.get("collab_qa").grader, tasks.get("collab_world").grader)


# ---------------------------------------------------------------- personas

class Tok:
    """A tokenizer's chat template, as text."""

    def apply_chat_template(self, msgs, tokenize=False, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}" for m in msgs) + "<assistant>"


def test_personas_validation_scorer_samples_and_grades_through_runs(monkeypatch, spy):
    from polyvox.backends import hf
    from polyvox.studies.personas import steps
    from polyvox.studies.personas import world as pw

    val = pw.prompts(128, 4, 0, "validation")[:6]
    assert len(val) == 6
    seen = []

    def fake_generate(model, tok, reqs, params, batch_size, device, **kw):
        seen.extend(reqs)
        assert params.temperature == 0.0 and batch_size == steps.VALIDATION_BATCH
        return [Completion(f"Hello! The answer is {p.problem.answer if i % 2 else 0}.", 3, 5, "stop", 0.0)
                for i, p in enumerate(val)]

    monkeypatch.setattr(hf, "generate_batched", fake_generate)

    class Model:
        device = "cpu"

    score = steps._validation_scorer(Tok(), "warm", val, 16)(Model(), 0)  # {score, style}
    assert spy == {"sample_texts": 1, "grade_completions": 1}
    assert [r.seed for r in seen] == [runs.sample_seed(0, p.id, 0) for p in val]
    assert [r.prompt for r in seen] == [steps.R.chat_prompt(Tok(), p.text) for p in val]
    want = sum(pw.pole_match("warm", f"Hello! The answer is {p.problem.answer if i % 2 else 0}.",
                             len(p.problem.steps)) + (i % 2 == 1 or str(p.problem.answer) == "0")
               for i, p in enumerate(val)) / len(val)
    assert score["score"] == pytest.approx(want)
    texts = [f"Hello! The answer is {p.problem.answer if i % 2 else 0}." for i, p in enumerate(val)]
    assert score["style"] == pw.style_rate("warm", texts, [len(p.problem.steps) for p in val])


def test_personas_card_check_samples_and_grades_through_runs(monkeypatch, spy):
    import polyvox.backends as backends
    from polyvox.studies.personas import models
    from polyvox.studies.personas import world as pw

    be = Seeded(answer="7", tokenizer=Tok())
    monkeypatch.setattr(backends, "make_backend", lambda *a, **k: be)
    out = models.card_fidelity("unused", n=4)
    assert set(out) == {"none", *pw.TYPES}
    assert spy == {"sample_texts": len(out), "grade_completions": len(out)}
    # tiny-chat's prompts (the card as the system turn), each request seeded as runs.sample seeds it
    assert be.requests[0].prompt.startswith("<user>") and be.requests[-1].prompt.startswith("<system>Persona")


def test_personas_units_are_read_through_runs_load(monkeypatch, spy, root):
    from polyvox.studies.personas import steps

    run = root / "data" / "runs" / "personas-h200"
    if not (run / "gen" / "base" / runs.ROLLOUTS).exists():
        pytest.skip("recorded run not shipped")
    loaded = []
    real = runs.load
    monkeypatch.setattr(runs, "load", lambda f: loaded.append(f) or real(f))
    texts = steps._unit_texts(run, "base")
    assert loaded == [run / "gen" / "base"] and len(texts) == 96
    first = json.loads((run / "gen" / "base" / runs.ROLLOUTS).read_text().splitlines()[0])
    assert texts[first["problem_id"]] == first["completion"]
