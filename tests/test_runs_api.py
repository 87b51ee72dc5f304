"""The one evaluation path (issue 18 item 1): what explore, the RL held-out evaluation and the pipelines
read and grade through — ``runs.load``, ``runs.grade(write=False)``, ``runs.grade_samples``,
``runs.grade_completions``, ``runs.split_trace`` — and ``polyvox.paths.find_root``.

Runs are written by :func:`polyvox.runs.sample` with a fake backend (the openai backend's identity,
completions made here); nothing loads a model."""
from __future__ import annotations

import json
import shutil

import pytest

from polyvox import book, grading, paths, runs
from polyvox.backends import Completion, SamplingParams
from polyvox.backends.openai import OpenAIBackend
from polyvox.records import GradedSample, RecordError, Sample

PARAMS = SamplingParams(64, 1.0, 1.0)


class Fake:
    """The openai backend's identity and prompts; every completion answers ``<answer>{answer}</answer>``."""

    name = "openai"

    def __init__(self, answer="9"):
        self.answer = answer
        self.inner = OpenAIBackend("m", base_url="http://127.0.0.1:9")

    def identity(self):
        return self.inner.identity()

    def prompt(self, fmt, text):
        return self.inner.prompt(fmt, text)

    def generate(self, requests, params):
        return [Completion(f"<mutipersonaDebate>hm</mutipersonaDebate><answer>{self.answer}</answer>", 12, 5,
                           "stop", 0.01) for _ in requests]


@pytest.fixture
def run(tmp_path, root):
    return runs.sample(tmp_path / "run", "world", "panel", Fake(), 2, PARAMS, limit=3, data_dir=root / "data",
                       progress=False)


def test_grade_in_memory_is_the_written_grade_and_writes_nothing(run, root):
    before = sorted(p.name for p in run.iterdir())
    manifest = (run / "manifest.json").read_bytes()
    graded = runs.grade(run, root / "data", write=False)
    assert sorted(p.name for p in run.iterdir()) == before and (run / "manifest.json").read_bytes() == manifest
    assert all(isinstance(g, GradedSample) for g in graded) and len(graded) == 3 * 2
    written = runs.grade(run, root / "data")
    assert [json.loads(x) for x in written.read_text().splitlines()] == [
        json.loads(json.dumps(g.__dict__)) for g in graded]


def test_load_reads_the_graded_records_when_there_are_some(run, root):
    r = runs.load(run)
    assert not r.graded and r.task == "world" and r.format == "panel" and r.settings["n"] == 2
    assert all(type(s) is Sample for s in r.samples) and len(r.samples) == 6
    runs.grade(run, root / "data")
    r = runs.load(run)
    assert r.graded and all(isinstance(s, GradedSample) for s in r.samples)
    problems = runs.load_problems(r, root / "data")
    assert {s.problem_id for s in r.samples} <= set(problems)
    # grade_samples grades what load read (graded records again, from their Sample fields): what grade wrote
    again = runs.grade_samples(r.task, runs.load(run).samples, problems)
    assert again == r.samples


def test_load_refuses_a_folder_without_settings_or_records(tmp_path, run):
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "manifest.json").write_text(json.dumps({"status": "complete"}))
    with pytest.raises(RecordError, match="no run settings"):
        runs.load(tmp_path / "bare")
    empty = tmp_path / "empty"
    shutil.copytree(run, empty)
    (empty / "rollouts.jsonl").write_text("")
    with pytest.raises(RecordError, match="rollouts.jsonl: no records"):
        runs.load(empty)


def test_grade_completions_uses_the_grader_and_its_options(monkeypatch):
    seen = []
    real = grading.grade_many

    def spy(task, completions, golds, workers=None, options=None, **kw):
        seen.append((task, workers, options))
        return real(task, completions, golds, workers=workers, options=options, **kw)

    monkeypatch.setattr(grading, "grade_many", spy)
    out = runs.grade_completions("integer", ["<answer>4</answer>", "<answer>5</answer>", "nothing"], ["4", "4", "4"])
    assert [g.correct for g in out] == [True, False, False] and out[2].status == "no_answer"
    runs.grade_completions("integer", ["4"], ["4"], options={}, workers=1)
    assert seen[1] == ("integer", 1, grading.GradeOptions())


def test_heldout_evaluation_grades_through_runs(monkeypatch):
    from polyvox.backends import hf
    from polyvox.records import Problem
    from polyvox.train.grpo import evaluate

    calls = []
    real = runs.grade_completions
    monkeypatch.setattr(runs, "grade_completions", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(hf, "generate_batched", lambda model, tok, reqs, params, batch_size, device, **kw: [
        Completion("<answer>4</answer>" if r.seed % 2 else "<answer>5</answer>", 3, 2, "stop", 0.0) for r in reqs])
    problems = [Problem("a", "2 + 2?", "4", {"level": 1}), Problem("b", "2 + 2?", "4", {"level": 2})]
    res = evaluate(None, None, "panel", problems, samples=4, seed=3)
    assert len(calls) == 1 and calls[0][0] == "integer" and len(calls[0][1]) == 8
    wins = [runs.sample_seed(3, p.id, i) % 2 for p in problems for i in range(4)]
    assert res["heldout_mean"] == pytest.approx(sum(wins) / 8)
    assert res["per_level"] == {"1": pytest.approx(sum(wins[:4]) / 4), "2": pytest.approx(sum(wins[4:]) / 4)}
    # each problem's correct samples, by id: two evaluations of a run pair problem by problem
    assert res["samples"] == 4 and res["per_problem_correct"] == {"a": sum(wins[:4]), "b": sum(wins[4:])}


@pytest.mark.parametrize("fmt, completion, parts", [
    ("panel", "<mutipersonaDebate> A: x\nB: y </mutipersonaDebate><answer> 4 </answer>", ("A: x\nB: y", "4")),
    ("panel", "<mutipersonaDebate>cut off by the cap", ("cut off by the cap", "")),
    ("panel", "<mutipersonaDebate>no close<answer>7</answer>", ("no close", "7")),
    ("panel", "no tags <answer>3", ("no tags", "3")),
    ("think", "<think>hmm</think> so \\boxed{2}", ("hmm", "so \\boxed{2}")),
    ("think", "<think>cut", ("cut", "")),
    ("plain", "  just text ", ("", "just text")),
])
def test_split_trace_gives_reasoning_and_final_answer(fmt, completion, parts):
    assert runs.split_trace(fmt, completion) == parts


def test_find_root_is_core_and_the_book_still_says_book_error(tmp_path, root):
    assert paths.find_root(root / "lib" / "polyvox") == root.resolve() == book.find_root(root / "lib")
    with pytest.raises(FileNotFoundError, match="no _toc.yml/_config.yml"):
        paths.find_root(tmp_path)
    with pytest.raises(book.BookError, match="no _toc.yml/_config.yml"):
        book.find_root(tmp_path)
