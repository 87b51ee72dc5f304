"""Benchmark the book build and pass@k.

Measures, in one run on this machine:
- cold build: every chapter executed with papermill + jupyter-book HTML, in a fresh copy;
- warm rebuild with nothing changed (target: 0 notebooks executed, <= 20 s);
- pass_at_k over 10^6 (n, c) pairs (target <= 0.2 s), against a scalar math.comb loop
  on a 10^4 subsample (the ratio is what to compare across machines).

Usage: .venv/bin/python bench/book_build.py [--out bench/results/book-build.json]
"""
import argparse
import json
import math
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
from polyvox import book, metrics  # noqa: E402


def time_passk() -> dict:
    rng = np.random.default_rng(0)
    n = rng.integers(4, 65, size=1_000_000)
    c = rng.integers(0, 65, size=1_000_000) % (n + 1)
    k = 4
    metrics.pass_at_k(n[:1000], c[:1000], k)  # warm-up
    t0 = time.perf_counter()
    metrics.pass_at_k(n, c, k)
    vec = time.perf_counter() - t0
    sub = 10_000
    t0 = time.perf_counter()
    for a, b in zip(n[:sub].tolist(), c[:sub].tolist()):
        1.0 - math.comb(a - b, k) / math.comb(a, k)
    scalar = (time.perf_counter() - t0) * (len(n) / sub)
    return {"pairs": len(n), "vectorised_s": vec, "scalar_math_comb_s_extrapolated": scalar,
            "speedup_vs_scalar": scalar / vec, "target_s": 0.2, "meets_target": vec <= 0.2}


def time_build() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp)
        for name in ("_config.yml", "_toc.yml"):
            shutil.copy(ROOT / name, dest / name)
        for name in ("notebooks", "data"):
            shutil.copytree(ROOT / name, dest / name)
        shutil.copytree(ROOT / "book", dest / "book", ignore=shutil.ignore_patterns("*.ipynb", "corrections.md"))
        t0 = time.perf_counter()
        cold = book.build(dest, progress=False)
        cold_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = book.build(dest, progress=False)
        warm_s = time.perf_counter() - t0
    return {"cold_s": cold_s, "cold_executed": len(cold.executed), "warm_s": warm_s,
            "warm_executed": len(warm.executed), "warm_over_cold": warm_s / cold_s,
            "targets": {"cold_s": 300, "warm_s": 20, "warm_executed": 0},
            "meets_targets": cold_s <= 300 and warm_s <= 20 and len(warm.executed) == 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench/results/book-build.json"))
    args = ap.parse_args()
    result = {"machine": f"{platform.node()} {platform.processor()} ({__import__('os').cpu_count()} cores)",
              "pass_at_k": time_passk(), "build": time_build()}
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
