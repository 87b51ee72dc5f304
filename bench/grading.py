"""Grading throughput on realistic MATH completions (target: >= 1,000 samples/s on 2 cores).

Completions: the 500 MATH-500 reference solutions (real worked solutions ending in a
\\boxed{} answer), each graded against its gold, and the same solutions with the boxed
answer replaced by a wrong one; plus the 40 case-study traces (long panel and thinking
completions). Repeated to --n items. Prints samples/s for polyvox.grading.grade_many
(process pool) and the ratio to grading in one process, which the pool must beat.

Usage: .venv/bin/python bench/grading.py [--n 8000] [--workers 2]
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
from polyvox import grading, tasks  # noqa: E402
from polyvox.studies.panel import published  # noqa: E402


def corpus(n: int):
    problems = tasks.load("math500", ROOT / "data")
    sols = [json.loads(l) for l in (ROOT / "data/benchmarks/math500/test.jsonl").read_text().splitlines()]
    items = []
    for p, s in zip(problems, sols):
        items.append((s["solution"], p.gold, True))
        items.append((s["solution"].replace("\\boxed{", "\\boxed{1+", 1) if "\\boxed{" in s["solution"] else "no answer",
                      p.gold, False))
    case, _ = published.case_study(ROOT / "data")
    for it in case:
        for sys_ in ("panel", "thinking"):
            items.append((it[sys_]["raw"], "5", None))
    reps = (n + len(items) - 1) // len(items)
    return (items * reps)[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=str(ROOT / "bench/results/grading.json"))
    args = ap.parse_args()
    items = corpus(args.n)
    comps, golds = [c for c, _, _ in items], [g for _, g, _ in items]
    t0 = time.perf_counter()
    grades = grading.grade_many("math", comps, golds, workers=args.workers)
    pool_s = time.perf_counter() - t0
    single_n = min(1000, len(items))
    grading.grade("math", comps[0], golds[0])  # imports sympy/math-verify outside the timing
    t0 = time.perf_counter()
    for c, g in zip(comps[:single_n], golds[:single_n]):
        grading.grade("math", c, g)
    single_rate = single_n / (time.perf_counter() - t0)
    labelled = [(g.correct, want) for g, (_, _, want) in zip(grades, items) if want is not None]
    agree = sum(a == b for a, b in labelled) / len(labelled)
    result = {"items": len(items), "workers": args.workers, "pool_samples_per_s": len(items) / pool_s,
              "single_process_samples_per_s": single_rate, "pool_over_single": (len(items) / pool_s) / single_rate,
              "reference_solution_agreement": agree, "target_samples_per_s": 1000,
              "meets_target": len(items) / pool_s >= 1000,
              "statuses": {s: sum(g.status == s for g in grades) for s in ("ok", "no_answer", "ungradable", "timeout")}}
    print(json.dumps(result, indent=2))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
