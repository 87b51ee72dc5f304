"""Grading throughput on realistic MATH completions, process pool vs one process (target: >= 1,000 samples/s on 2 cores).

Items: the 500 MATH-500 reference solutions (real worked solutions ending in a \\boxed{}
answer), each graded against its gold and labelled correct; the same solutions with the
first boxed answer corrupted (``\\boxed{1+...``), labelled wrong; and the 40 case-study
traces (long panel and thinking completions, unlabelled). Every item once unless --n asks
for more (repeats then warm the gold cache within an arm, equally for both arms).

Fair comparison: both arms grade the *same* items, and the gold-parse cache
(``grading._parse_gold``) and sympy's global cache are cleared before every arm, in the
parent, so the pool's forked workers and the single process both start cold, and the single
process grades in grade_many's order (grouped by gold; with repeated items, identical
completions then sit together and math-verify's small caches hit in both arms alike);
math-verify and sympy are imported once
before any arm, so neither pays for imports. The arms alternate over --rounds rounds (pool
first in even rounds, single first in odd ones); the medians are reported and every round
is kept. Verdicts must be identical across all arms.

Selection rule check: the labelled items are also graded by the grader of an earlier
commit (--old-rev, loaded with ``git show``); the agreement with the labels of the new rule
must not be lower than the old one's, and the items where the two rules differ are listed.

Usage: .venv/bin/python bench/grading.py [--rounds 3] [--workers 2] [--n 0] [--old-rev d4f623d]
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
from polyvox import grading, tasks  # noqa: E402
from polyvox.studies.panel import published  # noqa: E402

OLD_REV = "d4f623d"  # the last commit with the old rule (last box, else a 1,500-character tail)


def corpus(n: int = 0):
    """(completion, gold, label) items; label None for the unlabelled case-study traces."""
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
    if n <= 0:
        return items
    reps = (n + len(items) - 1) // len(items)
    return (items * reps)[:n]


def clear_caches():
    """polyvox's gold-parse cache and sympy's global cache, emptied in this process (workers fork from it)."""
    from sympy.core.cache import clear_cache

    grading._parse_gold.cache_clear()
    clear_cache()


def pool_arm(comps, golds, workers):
    clear_caches()  # workers fork from here: they start cold
    t0 = time.perf_counter()
    grades = grading.grade_many("math", comps, golds, workers=workers)
    return time.perf_counter() - t0, grades


def single_arm(comps, golds):
    """One process, in grade_many's order (items grouped by gold): the same work in the same order as the pool."""
    clear_caches()
    order = sorted(range(len(comps)), key=lambda i: str(golds[i]))
    t0 = time.perf_counter()
    graded = {i: grading.grade("math", comps[i], golds[i]) for i in order}
    secs = time.perf_counter() - t0
    return secs, [graded[i] for i in range(len(comps))]


def load_old_grader(rev: str):
    """polyvox/grading.py as of rev, imported under another name; None where git cannot give it."""
    try:
        src = subprocess.run(["git", "show", f"{rev}:lib/polyvox/grading.py"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "old_grading.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_grading", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_grading"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def rule_comparison(items, new_grades, rev: str) -> dict:
    labelled = [(i, it) for i, it in enumerate(items) if it[2] is not None]
    new_ok = [new_grades[i].correct == label for i, (_, _, label) in labelled]
    out = {"labelled_items": len(labelled), "new_rule_agreement": sum(new_ok) / len(labelled)}
    old = load_old_grader(rev)
    if old is None:
        out["old_rule"] = f"not measured: git show {rev} failed"
        return out
    old_grades = [old.grade("math", c, g) for _, (c, g, _) in labelled]
    out["old_rule_rev"] = rev
    out["old_rule_agreement"] = sum(o.correct == label for o, (_, (_, _, label)) in zip(old_grades, labelled)) / len(labelled)
    differ = [(i, label, o, new_grades[i]) for o, (i, (_, _, label)) in zip(old_grades, labelled)
              if o.correct != new_grades[i].correct]
    out["verdicts_that_differ"] = len(differ)
    out["differences"] = [{"item": i, "label": label, "old": [o.correct, o.extracted, o.status],
                           "new": [n.correct, n.extracted, n.status]} for i, label, o, n in differ[:20]]
    out["agreement_not_lower"] = out["new_rule_agreement"] >= out["old_rule_agreement"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=0, help="items (0: every item once)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--old-rev", default=OLD_REV)
    ap.add_argument("--out", default=str(ROOT / "bench/results/grading.json"))
    args = ap.parse_args()
    items = corpus(args.n)
    comps, golds = [c for c, _, _ in items], [g for _, g, _ in items]
    grading.grade("math", comps[0], golds[0])  # imports math-verify and sympy before either arm
    rounds, verdicts = [], set()
    for r in range(args.rounds):
        arms = ("pool", "single") if r % 2 == 0 else ("single", "pool")
        row = {"round": r, "order": list(arms), "loadavg_1min_before": os.getloadavg()[0]}
        for arm in arms:
            secs, grades = pool_arm(comps, golds, args.workers) if arm == "pool" else single_arm(comps, golds)
            row[f"{arm}_s"] = secs
            row[f"{arm}_samples_per_s"] = len(items) / secs
            verdicts.add(tuple((g.correct, g.status) for g in grades))
        rounds.append(row)
        print(json.dumps(row), flush=True)
    pool_rate = statistics.median(r["pool_samples_per_s"] for r in rounds)
    single_rate = statistics.median(r["single_samples_per_s"] for r in rounds)
    result = {
        "command": "bench/grading.py " + " ".join(sys.argv[1:]),
        "items": len(items), "distinct_items": len(set(zip(comps, map(str, golds)))), "workers": args.workers,
        "cache_state": "polyvox gold-parse cache and sympy cache cleared before every arm (both arms start cold); imports done before any arm",
        "cpus": os.cpu_count(), "note": "the machine's cores are shared with other jobs: see each round's load average",
        "rounds": rounds,
        "pool_samples_per_s_median": pool_rate, "single_process_samples_per_s_median": single_rate,
        "pool_over_single_median": statistics.median(r["pool_samples_per_s"] / r["single_samples_per_s"] for r in rounds),
        "verdicts_identical_across_arms": len(verdicts) == 1,
        "target_samples_per_s": 1000, "meets_target": pool_rate >= 1000,
        "statuses": {s: sum(g.status == s for g in grades) for s in ("ok", "no_answer", "ungradable", "timeout")},
        "selection_rule": rule_comparison(items, grades, args.old_rev),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
