"""Runs per device-minute for Part IV's seed × arm grid: sequential against K concurrent workers on one GPU.

The grid is Part IV's hill-climbs (``hillclimb-panel`` and ``hillclimb-think``, one per RL seed and arm)
at the recorded H200 scale (configs/world/h200.yaml: 20 GRPO steps of 8 prompts × 8 completions, 256
tokens, a held-out evaluation every 5 steps), started from the recorded models, seed 0's easy-stage
adapter and bands (data/models, data/runs/world): what a re-run of Part IV's grid does after its
first seed. Arms, each into a fresh copy of that starting point, in one process of this script:

- ``sequential``: ``polyvox world run --stages hillclimb-panel,hillclimb-think --seeds …`` (one
  process, the stages one after another: the path the pipeline took before the launcher);
- ``K=k``: the same command with ``--parallel k`` (polyvox.launch: k worker processes at once, each
  serving its runs in turn); ``+mps`` (``--order``, e.g. ``K=8+mps``) adds ``--mps``: the workers share
  the GPU through CUDA's Multi-Process Service; ``+fresh`` starts a process per run instead
  (``POLYVOX_LAUNCH_FRESH_PROCESS=1``, the launcher before worker reuse).

Rate = runs ÷ wall minutes, the wall time of the whole command (process start-up, model loading and the
launcher's polling included). Each arm runs the whole grid unless ``--runs-at`` gives it fewer runs (a
shorter sequential arm is dominated by its first run's one-off warm-up and flatters the launcher).
Records: each run's train_log.jsonl and heldout_trajectory.jsonl are compared, for the runs two arms
share, with the sequential arm's (bf16 kernels are not bitwise deterministic across processes).
Every arm's wall time and per-run seconds are kept.

Warm-up (untimed; ``--no-warmup`` skips it): before the timed arms, one sequential run of seed 1's
panel climb at 2 steps fills the on-disk caches every later process reads (TorchInductor's FX-graph
and Triton caches under the system's temp folder), so no timed arm pays a cold compile that another
arm did not; its wall time is kept as ``warmup`` beside the rounds, not in any ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("panel", "think")


def base_folder(out: Path, models: Path, world: Path) -> Path:
    """The starting point: the recorded models, seed 0's panel RL folder and the bands (copied)."""
    base = out / "base"
    if (base / "READY").is_file():
        return base
    shutil.rmtree(base, ignore_errors=True)
    (base / "models").mkdir(parents=True)
    for m in ("tiny-base", "tiny-think"):
        shutil.copytree(models / m, base / "models" / m)
    shutil.copy(world / "models" / "manifest.json", base / "models" / "manifest.json")
    shutil.copytree(world / "seed-0" / "panel-rl", base / "seed-0" / "panel-rl")
    # the recording ships the weights of seed 0's hard-stage adapter only (data/runs/README.md): the
    # panel climbs start from it, put where the pipeline reads the easy-stage adapter
    easy = base / "seed-0" / "panel-rl" / "easy" / "adapter"
    if not (easy / "adapter_model.safetensors").is_file():
        shutil.rmtree(easy)
        shutil.copytree(world / "seed-0" / "panel-rl" / "hard" / "adapter", easy)
    shutil.copytree(world / "bands", base / "bands")
    (base / "READY").write_text("")
    return base


def bench_scale(out: Path, seeds: list[int], climb_steps: int | None) -> Path:
    scale = yaml.safe_load((ROOT / "configs/world/h200.yaml").read_text())
    scale["seeds"] = [0, *seeds]
    scale["eval"]["sweep_seeds"] = [k for k in scale["eval"]["sweep_seeds"] if k in scale["seeds"]]
    if climb_steps is not None:
        scale["rl"]["climb_steps"] = climb_steps
    path = out / "grid-bench.yaml"
    path.write_text(yaml.safe_dump(scale, sort_keys=False))
    return path


def warm_up(base: Path, out: Path, scale: Path) -> dict:
    """One sequential 2-step panel climb into a scratch copy (untimed in every ratio; see the docstring)."""
    short = yaml.safe_load(scale.read_text())
    short["rl"]["climb_steps"] = 2
    path = out / "warmup.yaml"
    path.write_text(yaml.safe_dump(short, sort_keys=False))
    folder = out / "warmup"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(base, folder)
    (folder / "READY").unlink()
    cmd = [sys.executable, "-m", "polyvox.cli", "world", "run", "--out", str(folder), "--scale", str(path),
           "--stages", "hillclimb-panel", "--seeds", "1"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    res = {"wall_s": round(time.perf_counter() - t0, 2), "returncode": proc.returncode, "climb_steps": 2}
    if proc.returncode != 0:
        res["stderr_tail"] = proc.stderr[-3000:]
    print(f"warm-up (untimed): {res['wall_s']} s (exit {proc.returncode})", flush=True)
    return res


def run_arm(arm: str, base: Path, out: Path, scale: Path, seeds: list[int]) -> dict:
    folder = out / arm
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(base, folder)
    (folder / "READY").unlink()
    cmd = [sys.executable, "-m", "polyvox.cli", "world", "run", "--out", str(folder), "--scale", str(scale),
           "--stages", "hillclimb-panel,hillclimb-think", "--seeds", *map(str, seeds)]
    env = dict(os.environ)
    if arm != "sequential":  # K=8, K=8+mps (CUDA's MPS), K=8+fresh (a process per run), K=8+mps+fresh
        k, *flags = arm.split("=")[1].split("+")
        cmd += ["--parallel", k] + (["--mps"] if "mps" in flags else [])
        env["POLYVOX_LAUNCH_FRESH_PROCESS"] = "1" if "fresh" in flags else "0"
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - t0
    runs = {f"seed-{k}/hillclimb-{a}": _run_seconds(folder / f"seed-{k}" / f"hillclimb-{a}")
            for k in seeds for a in ARMS}
    res = {"arm": arm, "seeds": seeds, "n_runs": len(runs), "wall_s": round(wall, 2),
           "runs_per_device_minute": round(len(runs) / (wall / 60), 3), "run_seconds": runs,
           "returncode": proc.returncode}
    if proc.returncode != 0:
        res["stderr_tail"] = proc.stderr[-3000:]
    print(f"{arm}: {len(runs)} runs in {wall:.1f} s = {res['runs_per_device_minute']} runs/min "
          f"(exit {proc.returncode})", flush=True)
    return res


def _run_seconds(folder: Path) -> float | None:
    path = folder / "stage.json"
    return json.loads(path.read_text()).get("seconds") if path.is_file() else None


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def compare(a: Path, b: Path, runs: list[str]) -> dict:
    """Per shared run: rows equal in every logged number but time, and the largest absolute difference."""
    skip = {"time_s", "fastgen_refresh_s", "fastgen_generate_s", "seconds", "elapsed_s"}
    out = {}
    for run in runs:
        for log in ("train_log.jsonl", "heldout_trajectory.jsonl"):
            ra, rb = _lines(a / run / log), _lines(b / run / log)
            diffs, equal = [], 0
            for x, y in zip(ra, rb):
                keys = [k for k in x if k not in skip and isinstance(x[k], (int, float)) and not isinstance(x[k], bool)]
                d = [abs(float(x[k]) - float(y.get(k, float("nan")))) for k in keys]
                diffs += d
                equal += all(v == 0 for v in d)
            out[f"{run}/{log}"] = {"rows": [len(ra), len(rb)], "rows_equal": equal,
                                   "max_abs_diff": max(diffs) if diffs else None}
    return out


def write(path: str, results: list[dict], out: Path, gpu, scale: Path, earlier: list | None = None,
          warmup: dict | None = None) -> dict | None:
    """The JSON document of the arms run so far (ratios against the sequential arm of the same round,
    records compared), after the ``earlier`` rounds (another call's, ``--append``)."""
    seq = next((r for r in results if r["arm"] == "sequential"), None)
    for r in results:
        if seq is None or r is seq:
            continue
        r["ratio_vs_sequential"] = round(r["runs_per_device_minute"] / seq["runs_per_device_minute"], 3)
        shared = [k for k in seq["run_seconds"] if k in r["run_seconds"]]
        r["records_vs_sequential"] = compare(out / "sequential", out / r["arm"], shared)
    rounds = [*(earlier or []), results]
    ratios: dict[str, list[float]] = {}
    for rnd in rounds:
        for r in rnd:
            if "ratio_vs_sequential" in r:
                ratios.setdefault(r["arm"], []).append(r["ratio_vs_sequential"])
    # the best K by its smallest ratio over the rounds (every round counts against the target)
    best_arm = max(ratios, key=lambda k: min(ratios[k])) if ratios else None
    best = {"arm": best_arm, "ratio_vs_sequential": min(ratios[best_arm]), "ratios": ratios[best_arm]} if best_arm else None
    doc = {"bench": "grid", "what": "Part IV hill-climb grid (seed × arm), runs per device-minute", "gpu": gpu,
           "scale": yaml.safe_load(scale.read_text()), "rounds": rounds, "ratios_by_arm": ratios, "best": best,
           "target": ">= 4x sequential at the best K", "cpu_count": os.cpu_count(), "warmup": warmup}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="scratch folder for the arms' run folders")
    ap.add_argument("--json", default=str(ROOT / "bench/results/grid-h200.json"))
    ap.add_argument("--models", default=str(ROOT / "data/models"))
    ap.add_argument("--world", default=str(ROOT / "data/runs/world"))
    ap.add_argument("--seeds", type=int, default=4, help="RL seeds 1..N (× 2 arms = the grid's runs)")
    ap.add_argument("--ks", default="1,2,4,8")
    ap.add_argument("--order", default=None, help="arm order, e.g. K=8,sequential,K=2,... (default: interleaved)")
    # every arm runs the whole grid by default: a shorter sequential arm is dominated by its first run's
    # one-off warm-up (compilation, graph capture) and flatters the launcher (grid-h200.json's README entry)
    ap.add_argument("--runs-at", default="", help="arm:runs for arms that run fewer (e.g. K=1:4)")
    ap.add_argument("--append", action="store_true", help="add this call's arms as a new round to --json")
    ap.add_argument("--climb-steps", type=int, default=None, help="override the scale's climb steps (default: h200's)")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the untimed warm-up run")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(1, a.seeds + 1))
    base = base_folder(out, Path(a.models), Path(a.world))
    scale = bench_scale(out, seeds, a.climb_steps)
    ks = [int(k) for k in a.ks.split(",")]
    # the sequential arm first (every ratio needs it), then the largest K: a cut-off bench loses K=1 first
    arms = a.order.split(",") if a.order else ["sequential", *[f"K={k}" for k in sorted(ks, reverse=True)]]
    fewer = dict(x.split(":") for x in a.runs_at.split(",") if x)
    earlier = json.loads(Path(a.json).read_text())["rounds"] if a.append and Path(a.json).is_file() else []
    results = []
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip() if shutil.which("nvidia-smi") else None
    warmup = warm_up(base, out, scale) if a.warmup else None
    for arm in arms:
        n = int(fewer.get(arm, len(seeds) * len(ARMS)))
        results.append(run_arm(arm, base, out, scale, seeds[: max(1, n // len(ARMS))]))
        write(a.json, results, out, gpu, scale, earlier, warmup)  # after every arm: a cut-off bench keeps what it measured
    best = write(a.json, results, out, gpu, scale, earlier, warmup)
    if best:
        print(f"best: {best['arm']} at {best['ratio_vs_sequential']}x sequential; written {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
