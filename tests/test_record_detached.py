"""scripts/record_detached.sh: a recording detached from the call that starts it, watched, unstuck and packed
(real processes, a real tar)."""
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "record_detached.sh"
pytestmark = pytest.mark.slow  # processes that sleep for seconds


def _run(tmp: Path, *args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp), **(env or {})})


def _alive(pid: int) -> bool:
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def test_start_watch_and_exit_statuses(tmp_path):
    assert _run(tmp_path, "start", "ok", "bash", "-c", "echo step 1; sleep 2.5; echo step 2").returncode == 0
    again = _run(tmp_path, "start", "ok", "true")
    assert again.returncode == 1 and "already running" in again.stderr
    early = _run(tmp_path, "watch", "1", "ok")
    assert early.returncode == 3 and "ok: running" in early.stdout  # still running after 1 s: 3
    done = _run(tmp_path, "watch", "60", "ok")
    assert done.returncode == 0 and "step 2" in done.stdout and "ok: exit 0" in done.stdout
    _run(tmp_path, "start", "bad", "bash", "-c", "exit 4")
    bad = _run(tmp_path, "watch", "60", "bad", "ok")
    assert bad.returncode == 1 and "bad: exit 4" in bad.stdout
    assert _run(tmp_path, "watch", "1", "never").returncode == 1


def test_unstick_kills_the_holder_of_a_held_silent_stage_only(tmp_path):
    """Only a lock held now counts: a released lock file still names its last holder, often a launcher worker
    that lives on to run other stages (on the H200 an unstick that trusted the file killed the workers running
    the hill-climbs, 15 minutes after they had finished the pilot)."""
    run = tmp_path / "run"
    (run / "launch" / "rank-0").mkdir(parents=True)
    procs = {}
    for name in ("stuck", "busy", "released"):
        folder = run / "seed-0" / name
        folder.mkdir(parents=True)
        lock = folder / ".lock"
        lock.touch()
        hold = ["flock", str(lock)] if name != "released" else []  # "released": a live process, no lock
        procs[name] = subprocess.Popen([*hold, "sleep", "300"], start_new_session=True)
        lock.write_text(f"{procs[name].pid}\n")
    deadline = time.time() + 10
    while time.time() < deadline and subprocess.run(["flock", "-n", str(run / "seed-0" / "busy" / ".lock"),
                                                      "true"]).returncode == 0:
        time.sleep(0.05)  # until both holders have taken their locks
    old = time.time() - 600
    for name in ("stuck", "released"):
        os.utime(run / "seed-0" / name / ".lock", (old, old))
    (run / "seed-0" / "busy" / "train_log.jsonl").write_text("{}\n")  # written just now
    out = _run(tmp_path, "unstick", str(run), "60")
    assert "seed-0/stuck: nothing written" in out.stdout
    assert "busy" not in out.stdout and "released" not in out.stdout
    procs["stuck"].wait(timeout=10)
    assert procs["stuck"].returncode == -9
    assert _alive(procs["busy"].pid) and _alive(procs["released"].pid)
    for name in ("busy", "released"):
        os.killpg(procs[name].pid, 9)


def test_pack_leaves_out_weights_and_checkpoints_in_pieces(tmp_path):
    run = tmp_path / "wv2"
    (run / "seed-0" / "rl" / "checkpoint-2").mkdir(parents=True)
    (run / "seed-0" / "rl" / "train_log.jsonl").write_text("{}\n" * 1000)
    (run / "seed-0" / "rl" / "adapter_model.safetensors").write_bytes(b"w" * 100)
    (run / "seed-0" / "rl" / "checkpoint-2" / "optimizer.pt").write_bytes(b"p")
    (run / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024))  # 3 MiB that gzip cannot shrink: 3 pieces of 1 MiB
    assert _run(tmp_path, "pack", str(tmp_path / "out"), str(run), "1").returncode == 0
    pieces = sorted((tmp_path / "out").glob("wv2.tgz.part-*"))
    assert len(pieces) >= 3 and all(p.stat().st_size <= 1024 * 1024 for p in pieces)
    joined = tmp_path / "joined.tgz"
    joined.write_bytes(b"".join(p.read_bytes() for p in pieces))
    with tarfile.open(joined) as tar:
        names = tar.getnames()
    assert "wv2/seed-0/rl/train_log.jsonl" in names and "wv2/big.bin" in names
    assert not [n for n in names if n.endswith(".safetensors") or "checkpoint-" in n]


def test_pack_keeps_the_weights_pack_keep_names(tmp_path):
    run = tmp_path / "wv2"
    for rel in ("seed-0/rl-panel/easy/adapter", "seed-0/rl-panel/hard/adapter", "seed-1/rl-panel/easy/adapter",
                "models/tiny-base"):
        (run / rel).mkdir(parents=True)
        (run / rel / "adapter_model.safetensors").write_bytes(b"w")
    (run / "seed-0" / ".lock").write_text("1")
    keep = {"PACK_KEEP": "seed-0/rl-*/easy/adapter/* models/*"}
    assert _run(tmp_path, "pack", str(tmp_path / "out"), str(run), env=keep).returncode == 0
    with tarfile.open(next((tmp_path / "out").glob("wv2.tgz.part-*"))) as tar:
        names = set(tar.getnames())
    assert names == {"wv2/seed-0/rl-panel/easy/adapter/adapter_model.safetensors",
                     "wv2/models/tiny-base/adapter_model.safetensors"}
    # '*' keeps every weight, whatever files sit in the folder the script runs from (no pathname expansion)
    (tmp_path / "decoy").write_text("a file a shell glob would have matched")
    env = {"PACK_KEEP": "*"}
    assert _run(tmp_path, "pack", str(tmp_path / "all"), str(run), env=env).returncode == 0
    with tarfile.open(next((tmp_path / "all").glob("wv2.tgz.part-*"))) as tar:
        kept = {n for n in tar.getnames() if n.endswith(".safetensors")}
    assert len(kept) == 4
