"""polyvox.launch: a job graph run K at a time, on real processes; the world grid through it; two ranks.

The fast tests drive :func:`polyvox.launch.run_jobs` with small Python processes that record when
they ran; the slow ones run the world pipeline's smoke scale through the launcher (the same records
as the one-process run) and under ``torchrun`` with two CPU ranks (gloo).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # 5 s of the fast suite's test time: in make test, not test-fast (its 60 s)
import yaml

from polyvox import launch
from polyvox.statuses import RunStatus

ROOT = Path(__file__).resolve().parents[1]


def _job(tmp: Path, name: str, after=(), seconds=0.3, code=0) -> launch.Job:
    """A process that writes its start and end times to tmp/<name>.json, then exits with ``code``."""
    script = ("import json,sys,time; t0=time.time(); time.sleep(%r); "
              "open(sys.argv[1],'w').write(json.dumps([t0,time.time()])); sys.exit(%d)") % (seconds, code)
    return launch.Job(name, [sys.executable, "-c", script, str(tmp / f"{name}.json")], tuple(after))


def _span(tmp: Path, name: str) -> tuple[float, float]:
    return tuple(json.loads((tmp / f"{name}.json").read_text()))


def _max_overlap(spans) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def test_k_at_a_time_and_after_its_inputs(tmp_path):
    jobs = [_job(tmp_path, f"a{i}", seconds=0.6) for i in range(4)] + [_job(tmp_path, "z", after=["a0", "a3"])]
    res = launch.run_jobs(jobs, launch.Placement(per_gpu=2), tmp_path / "logs", progress=False)
    assert [r.status for r in res] == [RunStatus.COMPLETE] * 5
    spans = [_span(tmp_path, f"a{i}") for i in range(4)]
    assert _max_overlap(spans) == 2  # two slots: never more, and the slots were used
    assert _span(tmp_path, "z")[0] >= max(spans[0][1], spans[3][1])  # after both of its inputs ended
    assert all((tmp_path / "logs" / f"{n}.log").is_file() for n in ("a0", "z"))


def test_two_gpus_get_their_own_workers(tmp_path):
    script = "import os,sys; open(sys.argv[1],'w').write(os.environ.get('CUDA_VISIBLE_DEVICES','-'))"
    jobs = [launch.Job(f"j{i}", [sys.executable, "-c", script, str(tmp_path / f"j{i}")]) for i in range(4)]
    res = launch.run_jobs(jobs, launch.Placement(gpus=["0", "1"], per_gpu=1), tmp_path / "logs", progress=False)
    seen = sorted((tmp_path / f"j{i}").read_text() for i in range(4))
    assert seen == ["0", "0", "1", "1"] and {r.gpu for r in res} == {"0", "1"}


def test_a_failure_skips_what_reads_it_and_nothing_else(tmp_path):
    jobs = [_job(tmp_path, "bad", code=3), _job(tmp_path, "after-bad", after=["bad"]),
            _job(tmp_path, "after-after", after=["after-bad"]), _job(tmp_path, "fine")]
    res = {r.name: r for r in launch.run_jobs(jobs, launch.Placement(per_gpu=2), tmp_path / "logs", progress=False)}
    assert res["bad"].status == RunStatus.FAILED and res["bad"].returncode == 3
    assert res["after-bad"].status == res["after-after"].status == launch.SKIPPED
    assert res["fine"].status == RunStatus.COMPLETE
    assert not (tmp_path / "after-bad.json").exists()


def test_an_input_run_elsewhere_gates_through_done_and_others(tmp_path):
    state = {"elsewhere": None}
    t0 = time.time()

    def others():  # another rank finishes its job after 0.5 s
        return {"elsewhere": RunStatus.COMPLETE} if time.time() - t0 > 0.5 else {}

    res = launch.run_jobs([_job(tmp_path, "mine", after=["elsewhere"], seconds=0)], launch.Placement(),
                          tmp_path / "logs", others=others, progress=False)
    assert res[0].status == RunStatus.COMPLETE and _span(tmp_path, "mine")[0] >= t0 + 0.5
    failed = launch.run_jobs([_job(tmp_path, "mine2", after=["gone"])], launch.Placement(), tmp_path / "logs",
                             others=lambda: {"gone": RunStatus.FAILED}, progress=False)
    assert failed[0].status == launch.SKIPPED and state["elsewhere"] is None


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unique"):
        launch.run_jobs([launch.Job("x", ["true"]), launch.Job("x", ["true"])], launch.Placement(), Path("/tmp"))
    with pytest.raises(ValueError, match="at least 1"):
        launch.placement(0)
    with pytest.raises(ValueError, match="GPU indices"):
        launch.gpu_list("0,a")


def test_placement_under_torchrun_takes_the_local_gpu(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    p = launch.placement(3, gpus=["4", "5"])
    assert (p.rank, p.world, p.gpus, p.slots) == (1, 2, ["5"], ["5", "5", "5"])


# ---- the world pipeline through the launcher (slow: trains tiny models) ----

def _scale(tmp: Path) -> Path:
    s = yaml.safe_load((ROOT / "configs/world/smoke.yaml").read_text())
    # smaller than the smoke scale (as tests/test_rerun.py's world scale): what these tests check is where
    # and when jobs run and that their records equal the one-process run's, not what the models learn
    s["models"].update(base_steps=4, think_steps=2, n_per_level=40, hidden=32, layers=1, vocab=400, seq_len=128)
    s["rl"].update(stage_steps=[1, 1], climb_steps=1, heldout_per_level=1)
    s["sampling"].update(max_tokens=16)
    path = tmp / "tiny-grid.yaml"
    path.write_text(yaml.safe_dump(s))
    return path


def _polyvox(*args, env=None, launcher=()):
    cmd = [*launcher, "-m", "polyvox.cli", *args] if launcher else [sys.executable, "-m", "polyvox.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})},
                          timeout=900)


def _logs(folder: Path, seeds) -> dict:
    drop = ("time_s", "fastgen_refresh_s", "fastgen_generate_s")
    return {k: [{x: v for x, v in json.loads(line).items() if x not in drop}
                for line in (folder / f"seed-{k}/rl-panel/train_log.jsonl").read_text().splitlines()] for k in seeds}


@pytest.mark.slow
def test_world_grid_in_parallel_writes_the_records_of_the_sequential_run(tmp_path):
    scale = _scale(tmp_path)
    args = ["world", "run", "--scale", str(scale), "--stages", "models,rl-panel", "--seeds", "0", "1"]
    seq = _polyvox(*args, "--out", str(tmp_path / "seq"), env={"OMP_NUM_THREADS": "1"})
    par = _polyvox(*args, "--out", str(tmp_path / "par"), "--parallel", "2", env={"OMP_NUM_THREADS": "1"})
    assert seq.returncode == 0, seq.stderr[-2000:]
    assert par.returncode == 0, par.stderr[-2000:]
    assert _logs(tmp_path / "seq", (0, 1)) == _logs(tmp_path / "par", (0, 1))  # fp32 on CPU: equal
    status = json.loads((tmp_path / "par/launch/rank-0.json").read_text())
    assert [j["name"] for j in status["jobs"]][0] == "models" and len(status["jobs"]) == 3
    assert all(j["status"] == "complete" and j["log"].startswith("launch/rank-0/") for j in status["jobs"])
    root = json.loads((tmp_path / "par/manifest.json").read_text())
    assert root["status"] == "stages complete"
    again = _polyvox(*args, "--out", str(tmp_path / "par"), "--parallel", "2")  # complete: nothing relaunched
    assert again.returncode == 0 and "[1/" not in again.stdout


@pytest.mark.slow
def test_world_grid_over_two_ranks_under_torchrun(tmp_path):
    scale = _scale(tmp_path)
    run = _polyvox("world", "run", "--scale", str(scale), "--stages", "models,rl-panel", "--seeds", "0", "1",
                   "--out", str(tmp_path / "two"), "--parallel", "1",
                   launcher=(sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                             "--master_port", "29517"),
                   env={"OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "terminate called" not in run.stderr  # every rank left its process group before exiting
    ranks = [json.loads((tmp_path / f"two/launch/rank-{r}.json").read_text()) for r in (0, 1)]
    names = [[j["name"] for j in r["jobs"]] for r in ranks]
    # positions ≡ rank (mod 2) of models, seed-0/rl-panel, seed-1/rl-panel
    assert names == [["models", "seed-1/rl-panel"], ["seed-0/rl-panel"]]
    assert all(j["status"] == "complete" for r in ranks for j in r["jobs"])
    assert json.loads((tmp_path / "two/manifest.json").read_text())["status"] == "stages complete"
    assert _logs(tmp_path / "two", (0, 1))[1]


def test_mps_daemon_starts_once_serves_the_workers_and_quits(tmp_path, monkeypatch):
    """CUDA's MPS cannot run here: a stand-in ``nvidia-cuda-mps-control`` on PATH records how it is called
    (``-d`` to start; ``quit`` on stdin to stop), and the workers' environment is checked."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-cuda-mps-control"
    fake.write_text(f"#!{sys.executable}\nimport os, sys\n"
                    f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '|' + sys.stdin.read().strip() + '|'"
                    " + os.environ['CUDA_MPS_PIPE_DIRECTORY'] + '|' + os.environ.get('CUDA_VISIBLE_DEVICES', '-') + "
                    "'\\n')\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    where = launch.Placement(gpus=["1"], per_gpu=2)
    script = "import os,sys; open(sys.argv[1],'w').write(os.environ['CUDA_MPS_PIPE_DIRECTORY'])"
    with launch.mps_daemon(tmp_path / "run", where) as env:
        where.extra.update(env)
        launch.run_jobs([launch.Job("w", [sys.executable, "-c", script, str(tmp_path / "w")])], where,
                        tmp_path / "logs", progress=False)
    lines = calls.read_text().splitlines()
    start, stop = (line.split("|") for line in lines)
    assert start[0] == "-d" and stop[1] == "quit" and len(lines) == 2
    assert start[3] == "-"  # the daemon serves every GPU; each worker names its own
    assert (tmp_path / "w").read_text() == start[2] == env["CUDA_MPS_PIPE_DIRECTORY"]


def test_mps_without_the_daemon_program_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="nvidia-cuda-mps-control is not on PATH"):
        with launch.mps_daemon(tmp_path, launch.Placement()):
            pass
