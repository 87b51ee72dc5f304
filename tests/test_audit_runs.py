"""The hostile audit's findings on run folders (sample, merge, grade, load), one test each.

The runs are written with a fake backend whose identity is the ``openai`` backend's (no model,
no server): the world task needs no data; the label case copies the MATH-500 file.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from polyvox import runs
from polyvox.backends import BackendSpec, Completion, SamplingParams
from polyvox.backends.openai import OpenAIBackend
from polyvox.records import RecordError

BASE_URL = "http://127.0.0.1:9"
PARAMS = SamplingParams(64, 1.0, 1.0)
SECRET = "PLAINkey0x7Q2mZ9vW4tR8"


class Fake:
    name = "openai"

    def __init__(self, answer="<answer>9</answer>", fail_on_call=None, error=None):
        self.answer, self.inner = answer, OpenAIBackend("m", base_url=BASE_URL)
        self.calls, self.fail_on_call, self.error = 0, fail_on_call, error

    def identity(self):
        return self.inner.identity()

    def prompt(self, fmt, text):
        return self.inner.prompt(fmt, text)

    def secrets(self):
        return (SECRET,)

    def generate(self, requests, params):
        self.calls += 1
        if self.fail_on_call is not None and self.calls >= self.fail_on_call:
            raise self.error
        return [Completion(self.answer, 12, 5, "stop", 0.01) for _ in requests]


def make_run(out, task="world", n=2, limit=3, backend=None, **kw):
    return runs.sample(out, task, "panel", backend or Fake(), n, PARAMS, limit=limit, progress=False, **kw)


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}  # the lock is the lock's


# 4 — a complete run is recognised before anything is repaired or rewritten
def test_resuming_a_complete_run_without_its_final_newline_touches_nothing(tmp_path):
    out = make_run(tmp_path / "run")
    path = out / "rollouts.jsonl"
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    before = snapshot(out)
    make_run(out)
    assert snapshot(out) == before


# 18/19 — a non-empty folder without a manifest is refused before anything is written
@pytest.mark.parametrize("files", [{"notes.txt": "mine", "results.csv": "a,b\n"},
                                   {"README.md": "gsm8k", "test.jsonl": '{"question": "q"}\n'}])
def test_sample_refuses_a_folder_of_other_files(tmp_path, files):
    out = tmp_path / "out"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    before = snapshot(out)
    with pytest.raises(ValueError, match="but no manifest.json"):
        make_run(out)
    assert snapshot(out) == before


def _shards(tmp_path, n=2):
    return [make_run(tmp_path / f"s{k}", limit=4, shard=k, nshards=n) for k in range(n)]


# 24 — a shard record of a problem that is not the shard's
def test_merge_refuses_a_record_of_a_problem_not_in_its_shard(tmp_path):
    s0, s1 = _shards(tmp_path)
    path = s1 / "rollouts.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first["problem_id"] = "injected"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(RecordError, match=r"rollouts\.jsonl:1.*'injected' is not one of shard 1"):
        runs.merge([s0, s1], tmp_path / "m")
    assert not (tmp_path / "m").exists()


# 25 — every shard 0 … nshards-1, each once
def test_merge_refuses_one_shard_of_two(tmp_path):
    s0, _ = _shards(tmp_path)
    with pytest.raises(ValueError, match="shard 1 of 2 not given"):
        runs.merge([s0], tmp_path / "m")
    assert not (tmp_path / "m").exists()


# 54 — out inside (or holding) a shard
@pytest.mark.parametrize("where", ["inside", "holds"])
def test_merge_refuses_an_out_folder_inside_or_holding_a_shard(tmp_path, where):
    s0, s1 = _shards(tmp_path)
    out = s0 / "merged" if where == "inside" else tmp_path
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="is inside shard|holds shard"):
        runs.merge([s0, s1], out)
    assert snapshot(tmp_path) == before


def _graded_run_missing_its_last_rollout(tmp_path):
    """A graded run whose last rollout line was then removed (a resume will draw it again); its grades' bytes."""
    out = make_run(tmp_path / "run")
    runs.grade(out)
    graded = (out / "graded.jsonl").read_bytes()
    path = out / "rollouts.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    return out, graded


# 34 — a resume that changes the rollouts removes the grades of the old ones; stale grades are refused
def test_a_resume_that_adds_records_removes_stale_grades(tmp_path):
    out, stale = _graded_run_missing_its_last_rollout(tmp_path)
    make_run(out, backend=Fake(answer="<answer>7</answer>"))
    assert not (out / "graded.jsonl").exists()
    assert "grading" not in json.loads((out / "manifest.json").read_text())
    assert runs.load(out).graded is False
    (out / "graded.jsonl").write_bytes(stale)  # grades copied back by hand: no grading in the manifest
    with pytest.raises(RecordError, match="graded.jsonl"):
        runs.load(out)
    with pytest.raises(RecordError, match="graded.jsonl"):
        runs.per_problem_counts(out)


def test_grades_whose_keys_differ_from_the_rollouts_are_refused(tmp_path):
    out = make_run(tmp_path / "run")
    runs.grade(out)
    graded = out / "graded.jsonl"
    graded.write_text("".join(graded.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(RecordError, match="keys differ from rollouts.jsonl"):
        runs.load(out)


# 35 — edited labels in the data are refused by grade, naming the problem
def test_grade_refuses_data_whose_problem_labels_were_edited(tmp_path, root):
    data = tmp_path / "data"
    (data / "benchmarks/math500").mkdir(parents=True)
    src = root / "data/benchmarks/math500/test.jsonl"
    shutil.copy(src, data / "benchmarks/math500/test.jsonl")
    out = runs.sample(tmp_path / "run", "math500", "plain", Fake(), 1, PARAMS, limit=3, data_dir=data,
                      progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["labels_sha256"]) == 64 and len(manifest["label_digests"]) == 3
    rows = [json.loads(x) for x in (data / "benchmarks/math500/test.jsonl").read_text().splitlines()]
    rows[1]["level"], rows[1]["subject"] = 5 if rows[1]["level"] != 5 else 4, "Edited"
    (data / "benchmarks/math500/test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=f"problem {rows[1]['unique_id']!r}: its labels"):
        runs.grade(out, data_dir=data)
    assert not (out / "graded.jsonl").exists()


# 46 / 6 — a failed run's error holds no absolute path and none of the backend's secrets
def test_a_failed_runs_error_has_no_absolute_path_and_no_backend_secret(tmp_path):
    where = tmp_path / "cache" / "c.jsonl"
    err = IsADirectoryError(21, f"Is a directory (key {SECRET})", str(where))
    with pytest.raises(IsADirectoryError):
        make_run(tmp_path / "run", chunk=1, backend=Fake(fail_on_call=2, error=err))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "IsADirectoryError" in manifest["error"]
    assert str(tmp_path) not in manifest["error"] and SECRET not in manifest["error"]
    assert SECRET[:8] not in manifest["error"] and "c.jsonl" in manifest["error"]


# 50 (part) — a failed write of graded.jsonl leaves no temporary file
def test_grade_removes_its_temporary_file_when_writing_fails(tmp_path, monkeypatch):
    out = make_run(tmp_path / "run")
    import sys

    grade_module = sys.modules["polyvox.runs.grade"]

    def broken(path, records):
        Path(path).write_text("partial")
        raise OSError("disk full")

    monkeypatch.setattr(grade_module, "append_jsonl", broken)
    with pytest.raises(OSError, match="disk full"):
        runs.grade(out)
    assert not (out / "graded.jsonl.tmp").exists() and not (out / "graded.jsonl").exists()


# 53 — never more grading workers than items, nor than 2 × CPUs
def test_grading_starts_no_more_workers_than_items_or_twice_the_cpus(monkeypatch):
    from polyvox import grading

    seen = []

    def fake_many(grader, completions, golds, workers=None, options=None):
        seen.append(workers)
        return [grading.Grade(True, "9") for _ in completions]

    monkeypatch.setattr(grading, "grade_many", fake_many)
    runs.grade_completions("math", ["<answer>9</answer>"] * 3, ["9"] * 3, workers=24)
    runs.grade_completions("math", ["x"] * 500, ["9"] * 500, workers=10_000)
    assert seen == [3, min(500, (os.cpu_count() or 1) * 2)]


# 56 — a malformed --cache file is refused before the model loads and before anything is written
LOADED: list = []


class _Spec(BackendSpec):
    def load(self):
        LOADED.append(True)
        return Fake()


def test_a_malformed_cache_is_refused_before_the_model_loads(tmp_path):
    cache = tmp_path / "cache.jsonl"
    cache.write_text('{"completion": {}}\n')  # no key
    spec = _Spec("openai", "m", options={"base_url": BASE_URL})
    LOADED.clear()
    with pytest.raises(RecordError, match=r"cache\.jsonl"):
        make_run(tmp_path / "run", backend=spec, cache=cache)
    assert LOADED == []
    assert not (tmp_path / "run").exists()


def test_a_failed_resume_after_new_records_keeps_no_grading_of_the_old_rollouts(tmp_path):
    out = make_run(tmp_path / "run", chunk=1)
    runs.grade(out)
    path = out / "rollouts.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-2]))
    with pytest.raises(OSError):
        make_run(out, chunk=1, backend=Fake(fail_on_call=2, error=OSError("server gone")))
    assert not (out / "graded.jsonl").exists()
    assert "grading" not in json.loads((out / "manifest.json").read_text())


def test_a_resume_that_fails_before_any_record_keeps_the_grades(tmp_path):
    out, graded = _graded_run_missing_its_last_rollout(tmp_path)
    with pytest.raises(OSError):
        make_run(out, backend=Fake(fail_on_call=1, error=OSError("server gone")))
    assert (out / "graded.jsonl").read_bytes() == graded
