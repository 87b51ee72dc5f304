"""Issue 17, "the core never lies" — grading, merging and resuming (items 1–5, 8, 9).

Runs are written by :func:`polyvox.runs.sample` with a fake backend (the openai backend's identity,
completions made here), so no test here trains or loads a model except the held-out noise test,
which runs the tiny model for a few tokens. The kill tests start real processes (slow tier).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _fixtures import BASE_URL, aime_data, edit_manifest, make_run
from _fixtures import FakeOpenAI as Fake  # completions made here; fail_on call numbers raise
from _hostile import run_cli

from polyvox import grading, runs
from polyvox.backends import Completion
from polyvox.records import GradedSample, RecordError, RunLock, Sample, read_jsonl


def tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- item 1: grade what was sampled, complete

@pytest.mark.parametrize("status", ["running", "failed", None])
def test_grade_refuses_a_run_that_is_not_complete(tmp_path, status):
    run = make_run(tmp_path / "run")
    edit_manifest(run, lambda m: m.update(status=status) if status else m.pop("status"))
    with pytest.raises(ValueError, match=r"not complete \(status"):
        runs.grade(run)
    assert not (run / "graded.jsonl").exists()


def test_grade_refuses_a_complete_run_missing_records(tmp_path):
    run = make_run(tmp_path / "run")
    lines = (run / "rollouts.jsonl").read_text().splitlines(True)
    (run / "rollouts.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(RecordError, match=r"rollouts.jsonl: 5 of 6 records \(key \('.+', 1\) missing\)"):
        runs.grade(run)


def test_grade_refuses_data_whose_golds_changed_naming_the_first_differing_problem(tmp_path, root):
    run = make_run(tmp_path / "run", task="aime_panel", data_dir=root / "data")
    changed = aime_data(root, tmp_path / "data", lambda rows: rows[1].update(answer="999"))
    with pytest.raises(ValueError, match=r"problems changed since sampling: problem '2024_1': its gold differs"):
        runs.grade(run, data_dir=changed)
    assert not (run / "graded.jsonl").exists()
    runs.grade(run, data_dir=root / "data")  # the data it was sampled from
    assert len(read_jsonl(run / "graded.jsonl", GradedSample)) == 6


def test_a_merged_run_is_checked_against_each_shards_problems(tmp_path, root):
    shards = [make_run(tmp_path / f"s{i}", task="aime_panel", data_dir=root / "data", n=1, limit=4, shard=i,
                       nshards=2) for i in (0, 1)]
    merged = runs.merge(shards, tmp_path / "merged")
    changed = aime_data(root, tmp_path / "data", lambda rows: rows[3].update(answer="1"))  # 2024_3: shard 1
    with pytest.raises(ValueError, match=r"problem '2024_3': its gold differs"):
        runs.grade(merged, data_dir=changed)
    runs.grade(merged, data_dir=root / "data")
    assert sorted(s.key for s in read_jsonl(merged / "graded.jsonl", GradedSample)) == \
        [(f"2024_{i}", 0) for i in range(4)]


def test_grade_reads_the_rollouts_under_the_runs_lock(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run")
    graded = []
    real = grading.grade_many
    monkeypatch.setattr(grading, "grade_many", lambda *a, **k: graded.append(1) or real(*a, **k))
    with RunLock(run):  # a writer holds the run
        with pytest.raises(RecordError, match="in use by process"):
            runs.grade(run)
    assert graded == []  # nothing was graded from records read outside the lock
    runs.grade(run)
    assert graded == [1]


# ---------------------------------------------------------------- item 2: errors are errors; counts; threshold

def _raise_on_boom(completion, gold, options=None):
    if "boom" in completion:
        raise ZeroDivisionError("a grader bug")
    return grading.grade_integer(completion, gold)


def test_a_grader_that_raises_is_an_error_naming_the_rollouts_line(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run")
    lines = (run / "rollouts.jsonl").read_text().splitlines()
    third = json.loads(lines[2])
    lines[2] = json.dumps({**third, "completion": "boom"})
    (run / "rollouts.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setitem(grading.GRADERS, "integer", _raise_on_boom)
    with pytest.raises(RecordError, match=r"rollouts.jsonl:3: grader 'integer' raised ZeroDivisionError: a grader "
                                          rf"bug \(problem '{third['problem_id']}', sample {third['sample_index']}\)"):
        runs.grade(run)
    assert not (run / "graded.jsonl").exists()
    # through the command line: one line; --debug: the traceback
    rc, _, err = run_cli(["grade", str(run)])
    assert rc == 1 and err.count("\n") == 1 and "rollouts.jsonl:3: grader 'integer' raised" in err
    with pytest.raises(RecordError) as info:
        run_cli(["--debug", "grade", str(run)])
    assert isinstance(info.value.__cause__, grading.GradingError)


def _math_boom(completion, gold, options=None):
    if "boom" in completion:
        raise KeyError("a grader bug")
    return grading.Grade(completion == gold, completion)


def test_a_math_grader_that_raises_in_a_worker_stops_the_batch(monkeypatch):
    monkeypatch.setitem(grading.GRADERS, "math", _math_boom)  # the fork-started workers inherit it
    with pytest.raises(grading.GradingError, match=r"grader 'math' raised KeyError: 'a grader bug' \(item 2") as info:
        grading.grade_many("math", ["1", "2", "boom", "4"], ["1", "2", "3", "4"], workers=2, chunk=2)
    assert info.value.index == 2
    assert any("in the grading worker" in note and "KeyError" in note for note in info.value.__notes__)


def _dies(completion, gold, options=None):
    if completion == "die":
        os._exit(3)  # a crash (an exhausted stack, the OOM killer) is no raise: that item gets no verdict
    return grading.Grade(completion == gold, completion)


def test_a_worker_that_dies_leaves_its_item_ungradable_and_the_rest_graded(monkeypatch):
    monkeypatch.setitem(grading.GRADERS, "math", _dies)
    got = grading.grade_many("math", ["1", "die", "3"], ["1", "2", "4"], workers=1, chunk=3, item_timeout_s=5)
    assert [(g.correct, g.status) for g in got] == [(True, "ok"), (False, "ungradable"), (False, "ok")]


def test_each_graded_run_records_its_status_counts(tmp_path):
    run = make_run(tmp_path / "run", n=3, limit=4)
    lines = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    for row in lines[:4]:
        row["completion"] = "I do not know."  # no answer
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    runs.grade(run)
    grading_section = json.loads((run / "manifest.json").read_text())["grading"]
    assert grading_section["status_counts"] == {"ok": 8, "timeout": 0, "ungradable": 0, "no_answer": 4}
    assert grading_section["max_ungradable"] == 0.05 and grading_section["records"] == 12
    rc, out, _ = run_cli(["grade", str(run)])
    assert rc == 0 and "(ok 8, timeout 0, ungradable 0, no answer 4)" in out


def test_a_run_whose_ungradable_share_passes_the_threshold_fails(tmp_path, root):
    data = aime_data(root, tmp_path / "data", lambda rows: rows[0].update(answer="12.5"))  # 2 of 6 samples
    run = make_run(tmp_path / "run", task="aime_panel", data_dir=data)
    with pytest.raises(ValueError, match=r"2 of 6 samples \(33.3%\) are ungradable, above --max-ungradable 0.05 "
                                         r"\(the first: problem '2024_0' at .*rollouts.jsonl:1\); nothing was written"):
        runs.grade(run, data_dir=data)
    assert not (run / "graded.jsonl").exists() and "grading" not in json.loads((run / "manifest.json").read_text())
    with pytest.raises(ValueError, match="above --max-ungradable 0.3"):
        runs.grade(run, data_dir=data, max_ungradable=0.3)
    runs.grade(run, data_dir=data, max_ungradable=0.4)
    counts = json.loads((run / "manifest.json").read_text())["grading"]["status_counts"]
    assert counts["ungradable"] == 2 and sum(counts.values()) == 6
    rc, _, err = run_cli(["grade", str(run), "--data-dir", str(data)])
    assert rc == 1 and err.count("\n") == 1 and "are ungradable" in err


# ---------------------------------------------------------------- item 3: graded records have no defaults

def test_a_rollouts_file_read_as_a_graded_file_fails_with_file_and_line(tmp_path):
    run = make_run(tmp_path / "run")
    with pytest.raises(RecordError, match=r"rollouts.jsonl:1: missing field 'correct' for GradedSample"):
        read_jsonl(run / "rollouts.jsonl", GradedSample)
    shutil.copy(run / "rollouts.jsonl", run / "graded.jsonl")  # a graded file that is really rollouts
    with pytest.raises(RecordError, match=r"graded.jsonl:1: missing field 'correct'"):
        runs.graded_samples(run)
    row = json.loads((run / "rollouts.jsonl").read_text().splitlines()[0])
    (run / "graded.jsonl").write_text(json.dumps({**row, "correct": True}) + "\n")
    with pytest.raises(RecordError, match=r"graded.jsonl:1: missing field 'grade_status'"):
        runs.graded_samples(run)


def test_graded_sample_has_no_default_verdict():
    base = Sample("p", 0, "h", "text", 1, 1, "stop", 0.1)
    with pytest.raises(TypeError):
        GradedSample(**vars(base))
    with pytest.raises(TypeError):
        GradedSample(**vars(base), correct=False)
    g = GradedSample(**vars(base), correct=True, grade_status="ok")
    assert g.extracted is None and g.correct is True


# ---------------------------------------------------------------- item 4: held-out seeds as runs.sample's

def _problem(pid, text="What is 2 plus 2?", gold="4"):
    from polyvox.records import Problem

    return Problem(pid, text, gold, {"level": 1})


def test_heldout_evaluation_seeds_each_problem_and_sample_as_runs_sample_does(monkeypatch):
    from polyvox.backends import hf
    from polyvox.train.grpo import evaluate

    seen = []

    def fake_generate(model, tokenizer, reqs, params, batch_size, device, **kw):
        seen.extend(reqs)
        return [Completion("<answer>4</answer>", 3, 2, "stop", 0.0) for _ in reqs]

    monkeypatch.setattr(hf, "generate_batched", fake_generate)
    problems = [_problem("a"), _problem("b")]
    res = evaluate(None, None, "panel", problems, samples=3, seed=11)
    assert res["heldout_mean"] == 1.0
    assert [r.seed for r in seen] == [runs.sample_seed(11, p.id, i) for p in problems for i in range(3)]
    # sample i of problem a and sample i of problem b never share a seed
    assert not {r.seed for r in seen[:3]} & {r.seed for r in seen[3:]}


@pytest.mark.slow  # the tiny model (built once per session), 2 × 2 completions of 12 tokens
def test_two_problems_heldout_noise_streams_differ(tiny, monkeypatch):
    """The same text under two ids: under the old seed + i rule both got the same completions."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from polyvox.backends import hf
    from polyvox.train.grpo import evaluate

    texts = []
    real = hf.generate_batched

    def recording(*a, **k):
        outs = real(*a, **k)
        texts.extend(o.text for o in outs)
        return outs

    monkeypatch.setattr(hf, "generate_batched", recording)
    model, tok = AutoModelForCausalLM.from_pretrained(tiny), AutoTokenizer.from_pretrained(tiny)
    evaluate(model, tok, "panel", [_problem("a"), _problem("b")], samples=2, max_tokens=12, seed=0)
    assert texts[0] != texts[2] and texts[1] != texts[3]  # sample i of a against sample i of b


# ---------------------------------------------------------------- item 5: timeouts from math-verify's API; workers

@pytest.mark.slow  # moved out of the fast tier (over 1.5 s on 2 cores)
def test_timeouts_are_counted_from_math_verify_exceptions_not_its_log(root):
    """With every log record switched off, a time-out is still a time-out (the old counter read the log)."""
    script = textwrap.dedent(r"""
        import logging
        from polyvox import grading
        logging.disable(logging.CRITICAL)  # nothing reaches any handler
        grading.mathverify.MV_TIMEOUT_S = 1  # the module that reads it
        deep = grading.grade("math", "\\boxed{" + "\\frac{1}{" * 3000 + "2" + "}" * 3000 + "}", "1")
        fine = grading.grade("math", "\\boxed{\\frac{1}{2}}", "0.5")
        print(deep.status, fine.status, fine.correct)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(root / "lib"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["timeout", "ok", "True"]
    assert out.stderr == ""


def test_grading_reads_neither_log_records_nor_private_pool_state():
    import inspect

    for module in (grading, grading.graders, grading.mathverify, grading.pool):
        source = inspect.getsource(module)
        assert "_processes" not in source and "logging.Handler)" not in source
    for name in ("math_verify", "latex2sympy2_extended"):
        grading._math_verify()
        log = logging.getLogger(name)
        # pytest attaches its capture handler to every non-propagating logger during a test: not ours
        ours = [h for h in log.handlers if not type(h).__module__.startswith("_pytest")]
        assert not log.propagate and ours and all(type(h) is logging.NullHandler for h in ours), log.handlers



def test_the_pool_numbers_are_pinned():
    """The deadlines and sizes grading runs under (issue 18 item 5 moved the pool onto pebble; these stay)."""
    import inspect

    assert (grading.CHUNK, grading.ITEM_TIMEOUT_S, grading.CHUNK_GRACE_S, grading.MAX_WORKERS) == (64, 20.0, 30.0, 8)
    assert grading.mathverify.MV_TIMEOUT_S == 5
    assert grading.chunk_deadline(64, 20.0) == 1310.0 and grading.chunk_deadline(1, 3) == 33
    params = inspect.signature(grading.grade_many).parameters
    assert list(params)[:3] == ["grader", "completions", "golds"]
    assert (params["chunk"].default, params["item_timeout_s"].default, params["workers"].default) == (64, 20.0, None)


def test_grade_many_takes_the_grader_by_name():
    got = grading.grade_many(grader="integer", completions=["<answer>3</answer>", "no"], golds=["3", "3"])
    assert [(g.correct, g.status) for g in got] == [(True, "ok"), (False, "no_answer")]
    assert got[1].status is grading.GradeStatus.NO_ANSWER


def _hangs(completion, gold, options=None):
    if completion == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a worker stuck in C code: only SIGKILL stops it
        time.sleep(600)
    return grading.Grade(completion == gold, completion)


@pytest.mark.slow  # ~12 s: a chunk overruns its deadline, then the item alone overruns its own
def test_a_chunk_past_its_deadline_is_graded_again_item_by_item_and_the_hung_worker_killed(monkeypatch):
    monkeypatch.setitem(grading.GRADERS, "math", _hangs)
    monkeypatch.setattr(grading.pool, "CHUNK_GRACE_S", 0.0)  # a chunk's deadline: 1 s per item
    before, t0 = set(_children(os.getpid())), time.perf_counter()
    got = grading.grade_many("math", ["1", "hang", "3"], ["1", "2", "4"], workers=1, chunk=3, item_timeout_s=1)
    assert [(g.correct, g.status) for g in got] == [(True, "ok"), (False, "timeout"), (False, "ok")]
    assert time.perf_counter() - t0 < 60
    assert not [c for c in set(_children(os.getpid())) - before if _alive(c)]  # no worker left, the hung one included

def _proc_stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            stat = _proc_stat(int(d.name))
            if stat and int(stat[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")  # a zombie is dead, waiting to be reaped


@pytest.mark.slow  # ~4 s: a real `polyvox grade` on pathological answers, killed mid-way
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_grading_workers_die_with_a_killed_grade(tmp_path, root):
    run = make_run(tmp_path / "run", task="math500", n=4, limit=4, data_dir=root / "data",
                   backend=Fake(r"\boxed{9^{9^{9^{9}}}}"))  # each answer takes math-verify its full time-out
    proc = subprocess.Popen([sys.executable, "-m", "polyvox.cli", "grade", str(run), "--data-dir", str(root / "data"),
                             "--workers", "2"], cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(_children(proc.pid)) < 2:
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert len(workers) >= 2, "the grading workers never started"
        time.sleep(0.5)  # grading under way
        assert all(_alive(p) for p in workers)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        t0 = time.time()
        while time.time() - t0 < 5 and any(_alive(p) for p in workers):
            time.sleep(0.05)
        left = [p for p in workers if _alive(p)]
        print(f"workers gone {time.time() - t0:.2f} s after the SIGKILL")
        assert not left, f"workers {left} outlived their parent by 5 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in {*workers, *_children(proc.pid)}:  # a failed test leaves no orphan grading behind
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    assert not (run / "graded.jsonl").exists()


# ---------------------------------------------------------------- item 8: merge

def test_merge_refuses_a_shard_that_is_not_complete(tmp_path):
    s0 = make_run(tmp_path / "s0", n=1, limit=4, shard=0, nshards=2)
    s1 = make_run(tmp_path / "s1", n=1, limit=4, shard=1, nshards=2)
    edit_manifest(s1, lambda m: m.update(status="running"))
    with pytest.raises(ValueError, match=r"shard 1 is not complete \(status 'running'\)"):
        runs.merge([s0, s1], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    edit_manifest(s1, lambda m: m.update(status="complete"))
    (s1 / "rollouts.jsonl").write_text((s1 / "rollouts.jsonl").read_text().splitlines(True)[0])  # one record lost
    with pytest.raises(RecordError, match="1 records, but the shard's manifest says 2: the shard is not complete"):
        runs.merge([s0, s1], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_merge_takes_the_out_folders_lock_and_redoes_an_interrupted_merge(tmp_path):
    shards = [make_run(tmp_path / f"s{i}", n=1, limit=4, shard=i, nshards=2) for i in (0, 1)]
    out = tmp_path / "out"
    with RunLock(out):
        with pytest.raises(RecordError, match="in use by process"):
            runs.merge(shards, out)
    assert {p.name for p in out.iterdir()} == {".lock"}
    # killed after its manifest said "merging" and half its records were written: a rerun redoes it
    runs.merge(shards, out)
    whole = (out / "rollouts.jsonl").read_bytes()
    edit_manifest(out, lambda m: m.update(status="merging"))
    (out / "rollouts.jsonl").write_bytes(whole[: len(whole) // 2])
    (out / "rollouts.jsonl.tmp").write_bytes(whole[:10])
    runs.merge(shards, out)
    assert (out / "rollouts.jsonl").read_bytes() == whole and not (out / "rollouts.jsonl.tmp").exists()
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    with pytest.raises(ValueError, match="merge writes a new folder"):
        runs.merge(shards, out)


def _write_shard(folder: Path, shard: int, records: int) -> None:
    folder.mkdir(parents=True)
    settings = {"task": "world", "task_options": {}, "format": "panel", "n": 1, "seed": 0, "limit": None,
                "shard": shard, "nshards": 2, "chunk": 64, "problems_sha256": f"{shard:064d}",
                "sampling": {"max_tokens": 64, "temperature": 1.0, "top_p": 1.0, "stop": []}}
    (folder / "manifest.json").write_text(json.dumps({"kind": "sample", "settings": settings, "status": "complete",
                                                      "records": records}))
    text = "a reasoned completion with some length to it " * 6
    with (folder / "rollouts.jsonl").open("w") as fh:
        for j in range(records):
            fh.write(json.dumps({"problem_id": f"p{2 * j + shard:07d}", "sample_index": 0, "prompt_hash": "h" * 16,
                                 "completion": text, "prompt_tokens": 50, "completion_tokens": 60,
                                 "finish_reason": "stop", "latency_s": 0.5, "metadata": {}}) + "\n")


def _kill_when(proc, ready, timeout_s=120.0) -> None:
    deadline = time.time() + timeout_s
    while proc.poll() is None and time.time() < deadline and not ready():
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow  # ~35 s on a shared 2-core machine: six merges of two 2,500-record shards, killed
def test_a_merge_killed_at_any_instant_loses_nothing(tmp_path, root):
    shards = [tmp_path / "s0", tmp_path / "s1"]
    for i, d in enumerate(shards):
        _write_shard(d, i, 2_500)
    before = {str(d): tree(d) for d in shards}
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "polyvox.cli", "merge", *map(str, shards), "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=root, check=True, capture_output=True)
    whole = time.perf_counter() - t0
    expected = (out / "rollouts.jsonl").read_bytes()
    shutil.rmtree(out)
    # kills at spread instants, and kills the moment the merge starts writing: its first file in out,
    # then its records file
    writing = lambda: any((out / n).exists() for n in ("manifest.json", "rollouts.jsonl.tmp", "rollouts.jsonl"))  # noqa: E731
    records = lambda: any((out / n).exists() for n in ("rollouts.jsonl.tmp", "rollouts.jsonl"))  # noqa: E731
    kills = [lambda f=f: time.sleep(whole * f) or True for f in (0.3, 0.6, 0.85, 0.95)]
    states = []
    for ready in [*kills, writing, records]:
        proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _kill_when(proc, ready)
        assert {str(d): tree(d) for d in shards} == before  # the shards are only read
        manifest = out / "manifest.json"
        status = json.loads(manifest.read_text())["status"] if manifest.exists() else None
        states.append(status)
        assert status in (None, "merging", "complete")
        if status != "complete":
            runs.merge(shards, out)  # the same merge again finishes the job
        assert (out / "rollouts.jsonl").read_bytes() == expected
        assert json.loads(manifest.read_text())["status"] == "complete"
        shutil.rmtree(out)
    print(f"one merge {whole:.2f} s; states at the kills: {states}")
    assert states[-2:] == ["merging", "merging"]  # killed while writing, redone by the rerun


# ---------------------------------------------------------------- item 9: resuming

def test_resuming_a_complete_graded_run_changes_nothing(tmp_path):
    run = make_run(tmp_path / "run")
    runs.grade(run)
    before = tree(run)
    backend = Fake()
    make_run(run, backend=backend)
    assert backend.calls == 0
    after = tree(run)
    assert after.pop(".lock", None) is not None and before.pop(".lock", None) is not None
    assert after == before  # the manifest byte for byte, its grading section included
    assert "grading" in json.loads((run / "manifest.json").read_text())


def test_the_command_line_resume_of_a_complete_run_changes_nothing(tmp_path):
    run = make_run(tmp_path / "run")
    runs.grade(run)
    manifest = (run / "manifest.json").read_bytes()
    rc, out, err = run_cli(["sample", "--task", "world", "--format", "panel", "--backend", "openai", "--model", "m",
                            "--base-url", BASE_URL, "--n", "2", "--limit", "3", "--out", str(run)])
    assert (rc, err) == (0, "") and "rollouts:" in out
    assert (run / "manifest.json").read_bytes() == manifest


def test_a_failed_resume_leaves_the_previous_status(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="went away"):
        make_run(run, backend=Fake(fail_on={2}), chunk=2)  # the first chunk is written, the second fails
    first = json.loads((run / "manifest.json").read_text())
    assert first["status"] == "failed" and first["records_written"] == 2
    assert "RuntimeError: the server went away" in first["error"]
    manifest = (run / "manifest.json").read_bytes()
    with pytest.raises(RuntimeError, match="went away"):
        make_run(run, backend=Fake(fail_on={1}), chunk=2)
    assert (run / "manifest.json").read_bytes() == manifest  # "failed", as before: never left "running"
    edit_manifest(run, lambda m: m.update(status="running"))  # as a killed run leaves it
    manifest = (run / "manifest.json").read_bytes()
    with pytest.raises(RuntimeError, match="went away"):
        make_run(run, backend=Fake(fail_on={2}), chunk=2)  # one more chunk, then a failure
    assert (run / "manifest.json").read_bytes() == manifest
    assert len(read_jsonl(run / "rollouts.jsonl", Sample)) == 4
    make_run(run, chunk=2)
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    assert len(read_jsonl(run / "rollouts.jsonl", Sample)) == 6


def test_a_new_run_that_fails_before_its_first_record_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="went away"):
        make_run(tmp_path / "a/run", backend=Fake(fail_on={1}))
    assert not (tmp_path / "a").exists()


def test_grade_dot_grades_the_run_one_stands_in(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run")
    monkeypatch.chdir(run)
    assert run_cli(["grade", "."])[0] == 0
    assert len(read_jsonl(run / "graded.jsonl", GradedSample)) == 6


def test_out_empty_is_refused_by_its_own_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"\(got ''\)"):
        make_run("")
    with pytest.raises(ValueError, match=r"\(got ''\)"):
        runs.merge([tmp_path], "")
    assert list(tmp_path.iterdir()) == []
