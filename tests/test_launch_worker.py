"""polyvox.launch_worker: a slot's worker process serves its stages in turn (real processes).

A toy pipeline module written into tmp_path (on the workers' PYTHONPATH) records, for each stage, the
worker's pid and the stage's start and end; a stage named ``fail-*`` raises, one named ``die-*`` kills
its own process (SIGKILL), as a crash or the OOM killer would; one named ``hang-*`` sleeps without a word and
ignores SIGTERM (``hang-once-*``: only the first time), one named ``busy-*`` prints for 2 s before it ends.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from polyvox import launch
from polyvox.statuses import RunStatus

TOY = '''
import json, os, signal, time
from pathlib import Path

class Toy:
    def __init__(self, out):
        self.out = Path(out)

    def run_stage(self, folder):
        t0 = time.time()
        print(f"stage {folder} in {os.getpid()}", flush=True)
        os.write(2, b"from C level\\n")
        if folder.startswith("fail"):
            raise RuntimeError(f"{folder} failed on purpose")
        if folder.startswith("die"):
            os.kill(os.getpid(), signal.SIGKILL)
        marker = self.out / f"{folder}.started"
        if folder.startswith("hang") and not (folder.startswith("hang-once") and marker.exists()):
            marker.write_text("")
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a hung CUDA call does not answer SIGTERM either
            time.sleep(3600)
        if folder.startswith("busy"):  # silent for no more than 0.2 s at a time, for 2 s in all
            for _ in range(10):
                print("step", flush=True)
                time.sleep(0.2)
        time.sleep(0.05)
        (self.out / f"{folder}.json").write_text(json.dumps({"pid": os.getpid(), "span": [t0, time.time()]}))
        return 0.05

def pipeline(out):
    return Toy(out)
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy_pipeline.py").write_text(TOY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    return tmp_path


def _jobs(out, names, after=None):
    after = after or {}
    return [launch.Job(n, launch.worker_argv("toy_pipeline:pipeline", {"out": str(out)}, n), tuple(after.get(n, ())),
                       launch.worker_spec("toy_pipeline:pipeline", {"out": str(out)}, n)) for n in names]


def _rec(out, name):
    return json.loads((out / f"{name}.json").read_text())


@pytest.mark.slow  # starts Python processes (a second each)
def test_two_slots_serve_five_stages_from_two_processes_in_order(toy):
    names = ["a0", "a1", "a2", "a3", "z"]
    res = launch.run_jobs(_jobs(toy, names, {"z": ["a0", "a3"]}), launch.Placement(per_gpu=2), toy / "logs",
                          progress=False, reuse=True)
    assert [r.status for r in res] == [RunStatus.COMPLETE] * 5
    assert len({_rec(toy, n)["pid"] for n in names}) == 2  # one process per slot, not per stage
    assert _rec(toy, "z")["span"][0] >= max(_rec(toy, "a0")["span"][1], _rec(toy, "a3")["span"][1])
    log = (toy / "logs" / "a2.log").read_text()  # each stage's own log, C-level output included
    assert "stage a2 in" in log and "from C level" in log and "stage a1" not in log


@pytest.mark.slow  # starts Python processes (a second each)
def test_without_reuse_every_stage_has_a_process_of_its_own(toy):
    names = ["a0", "a1", "a2"]
    res = launch.run_jobs(_jobs(toy, names), launch.Placement(per_gpu=1), toy / "logs", progress=False, reuse=False)
    assert [r.status for r in res] == [RunStatus.COMPLETE] * 3
    assert len({_rec(toy, n)["pid"] for n in names}) == 3


@pytest.mark.slow  # starts Python processes (a second each)
def test_a_failed_stage_ends_its_worker_and_the_next_stage_gets_a_fresh_one(toy):
    names = ["a0", "fail-1", "after", "a2"]
    res = {r.name: r for r in launch.run_jobs(_jobs(toy, names, {"after": ["fail-1"]}), launch.Placement(per_gpu=1),
                                              toy / "logs", progress=False, reuse=True)}
    assert res["fail-1"].status == RunStatus.FAILED and res["fail-1"].returncode == 1
    assert res["after"].status == launch.SKIPPED
    assert res["a0"].status == res["a2"].status == RunStatus.COMPLETE
    assert _rec(toy, "a0")["pid"] != _rec(toy, "a2")["pid"]  # one slot: a2 ran in a fresh worker
    assert "RuntimeError: fail-1 failed on purpose" in (toy / "logs" / "fail-1.log").read_text()


@pytest.mark.slow  # starts Python processes (a second each)
def test_a_worker_killed_mid_stage_fails_that_stage_only(toy):
    names = ["a0", "die-1", "a2", "a3"]
    res = {r.name: r for r in launch.run_jobs(_jobs(toy, names), launch.Placement(per_gpu=1), toy / "logs",
                                              progress=False, reuse=True)}
    assert res["die-1"].status == RunStatus.FAILED and res["die-1"].returncode != 0
    assert [res[n].status for n in ("a0", "a2", "a3")] == [RunStatus.COMPLETE] * 3
    assert _rec(toy, "a2")["pid"] == _rec(toy, "a3")["pid"] != _rec(toy, "a0")["pid"]


def test_workers_exit_when_the_launch_ends(toy):
    launch.run_jobs(_jobs(toy, ["a0", "a1"]), launch.Placement(per_gpu=2), toy / "logs", progress=False, reuse=True)
    for pid in {_rec(toy, n)["pid"] for n in ("a0", "a1")}:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow  # starts Python processes (a second each)
@pytest.mark.parametrize("reuse", [True, False])
def test_a_stalled_stage_is_killed_and_started_once_more_then_failed(toy, reuse):
    import time

    t0 = time.time()
    names = ["hang-1", "hang-once-2", "busy-3", "after"]
    res = {r.name: r for r in launch.run_jobs(_jobs(toy, names, {"after": ["hang-1"]}), launch.Placement(per_gpu=2),
                                              toy / "logs", progress=False, reuse=reuse, stall_s=1.0)}
    assert res["hang-1"].status == RunStatus.FAILED and res["hang-1"].returncode == launch.STALLED_RC
    assert res["after"].status == launch.SKIPPED
    assert res["hang-once-2"].status == RunStatus.COMPLETE  # killed once, complete when started again
    assert res["busy-3"].status == RunStatus.COMPLETE  # 2 s of steady output: never taken for a stall
    assert time.time() - t0 < 60  # an hour's sleep did not hold the launch


@pytest.mark.slow  # a 2 s stage
def test_the_stall_watch_is_off_at_zero_and_reads_its_variable(toy, monkeypatch):
    monkeypatch.setenv(launch.STALL_ENV, "0")
    res = launch.run_jobs(_jobs(toy, ["busy-1"]), launch.Placement(per_gpu=1), toy / "logs", progress=False,
                          reuse=False)
    assert [r.status for r in res] == [RunStatus.COMPLETE]
