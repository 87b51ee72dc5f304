"""GRPO data-parallel: a real two-process run on CPU (gloo), launched with ``accelerate launch``.

Run as a script, this file is the launched program (every rank runs it): two one-step stages
(the second continues the first's adapter) of GRPO on the tiny model, fast generation, a sharded
held-out evaluation at every step, an adapter saved at every step. The test compares the run folder
with the same run made by one process: the same global batch, so the same step statistics and,
up to the order of floating-point sums, the same adapters.
"""
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def varied_reward(completion: str, problem) -> tuple[float, bool, bool]:
    """A reward that varies within a group (the random tiny model never earns the study's reward),
    the same on every process: a digest of the completion's text."""
    return int(hashlib.sha256(completion.encode()).hexdigest(), 16) % 5 / 4, False, False


def config(model: str, out: str):
    from polyvox.studies.world import problems as world
    from polyvox.train import grpo as rl

    probs = [world.to_problem(p) for p in world.generate(4, seed=0, levels=[1], split="train")]
    held = [world.to_problem(p) for p in world.generate(3, seed=1, levels=[1], split="test")]  # 2 + 1 per rank
    return rl.RLConfig(model=model, arm="panel", out=out, stages=[rl.Stage("one", probs, 1), rl.Stage("two", probs, 1)],
                       lora_rank=4, lora_alpha=8, group_size=2, prompts_per_step=2, max_completion_length=8,
                       learning_rate=5e-2, eval_every=1, save_every=1, heldout=held, heldout_samples=1,
                       reward_fn=varied_reward, fast_generation=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(folder: Path) -> set:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _adapter(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_two_processes_train_one_run_written_once(tiny, tmp_path, root):
    import torch

    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(root / "lib"), os.environ.get("PYTHONPATH", "")])}
    # what a GPU user types for two GPUs; on a host without one the ranks meet over gloo
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--main_process_port", str(_free_port())]
    done = subprocess.run([*launch, __file__, str(tiny), str(out)], cwd=root, env=env, capture_output=True,
                          text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.count(f"adapter: {out / 'two/adapter'}") == 2  # both ranks ran train() to its end

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "rl" and manifest["status"] == "complete" and manifest["world_size"] == 2
    log = _lines(out / "train_log.jsonl")
    assert [(r["stage"], r["step"]) for r in log] == [("one", 1), ("two", 2)]  # one line a step, not one a rank
    assert all(r["completions"] == 4 for r in log)  # the global batch: 2 prompts × 2 completions
    assert [r["fastgen_calls"] for r in log] == [1, 1]  # each stage's trainer generated once per step
    held = _lines(out / "heldout_trajectory.jsonl")
    assert [(r["stage"], r["step"]) for r in held] == [("one", 0), ("one", 1), ("two", 2)]
    first, second = _adapter(out / "one/adapter"), _adapter(out / "two/adapter")
    assert max(v.abs().max().item() for k, v in first.items() if "lora_B" in k) > 0  # a new LoRA's B is zero
    assert _max_diff(first, second) > 1e-3  # the second stage trained the adapter it started from

    if torch.cuda.is_available():
        pytest.skip("the one-process reference below is the CPU's fp32 run")
    from polyvox.train import grpo

    ref_out = tmp_path / "one"
    grpo.train(config(str(tiny), str(ref_out)), progress=False)
    ref_manifest = json.loads((ref_out / "manifest.json").read_text())
    assert "world_size" not in ref_manifest and ref_manifest["status"] == "complete"  # one process: as before
    ref_log = _lines(ref_out / "train_log.jsonl")
    assert "completions" not in ref_log[0]
    # nothing more and nothing less than one process writes: the other rank wrote nothing
    assert _files(out) == _files(ref_out)
    # step 1 samples the same global batch with the same seeds: the same statistics
    keys = ("reward_mean", "reward_std", "within_group_std", "frac_groups_all_equal", "completion_tokens_mean")
    assert {k: log[0][k] for k in keys} == {k: ref_log[0][k] for k in keys}
    assert 0 < log[0]["fastgen_tokens"] < ref_log[0]["fastgen_tokens"]  # the main process generated its share
    # the sharded held-out evaluation is the one-process evaluation
    assert held[0] == _lines(ref_out / "heldout_trajectory.jsonl")[0]
    # averaged gradients of two halves = the gradient of the whole batch (a wrong split is off by ~lr = 0.05)
    assert _max_diff(first, _adapter(ref_out / "one/adapter")) < 1e-4
    assert _max_diff(second, _adapter(ref_out / "two/adapter")) < 1e-3


if __name__ == "__main__":  # every rank of the launched run
    from polyvox.train import grpo

    print(f"adapter: {grpo.train(config(sys.argv[1], sys.argv[2]), progress=False)}", flush=True)
