"""The hill-climbs' recipe and seed count from a climb pilot (issue 21, item 4: a pilot, then a power calculation).

The first recorded 100-step climbs, at the matched RL's learning rate (kept in data/runs/world/replaced-climbs; the
Part IV chapter computes what they showed), swung between held-out evaluations by far more than sampling explains,
and a 10-point gain was not detectable with the seeds run. The pilot runs a few climb seeds per arm for each
candidate recipe (``scripts/record_h200.sh OUT world-climbs`` with a ``climb`` section, one folder per candidate;
climb seeds of their own, never the seeds of the powered run). Per candidate and arm, from the held-out trajectories:

- ``oscillation``: the SD of the change between consecutive held-out evaluations, beside ``noise``, the binomial SD of
  such a change at the trajectory's mean accuracy (√(2 p (1 − p) / (n m)), n problems × m samples);
  ``oscillation_after_rise`` without each climb's first change (a climb that rises steeply from step 0 has a large
  first change that is its trend, not an oscillation);
- ``gains``: each seed's endpoint gain, the endpoint being the mean of its last ``endpoint_evals`` evaluations
  (declared in the scale before the run) minus its step-0 evaluation;
- ``between_sd``: σ_b of those gains beyond sampling (:func:`.power.between_sd`, less the binomial variance of a
  gain, 2 p (1 − p) / (n m): conservative for an averaged endpoint, whose evaluations share problems and
  sampling seeds and so are not independent draws);
- ``seeds_needed``: the fewest seeds (at least :data:`.power.MIN_SEEDS`) whose one-sample t-test detects a gain of
  :data:`.power.CLIMB_GAIN` with 80 % power at α = 0.05 with this held-out set (:func:`.power.power`); None above
  ``max_seeds``; ``seeds_needed_unfloored`` the same without the issue's floor (at least 2).

The rule, fixed before the pilot runs and applied by :func:`choose`: the candidate whose worse arm needs the fewest
seeds; on a tie the larger learning rate (it moves further in the same steps). The pilot's gains are never the
criterion (choosing a recipe by its gain would bias the powered run's test of the gain), only their spread. A pilot
of k seeds estimates σ_b from k values, so the seed count it gives is itself uncertain; :func:`summarize` also
reports the count at σ_b's upper 80 % limit (χ² with k − 1 degrees of freedom).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from statistics import stdev
from pathlib import Path

from . import power as _power
from .logs import read_log

RULE = ("the candidate whose worse arm needs the fewest seeds to detect the gain with 80% power (ties: the larger "
        "learning rate); the pilot's gains themselves are not a criterion")


def climbs(folder: str | Path) -> dict[str, dict[int, dict]]:
    """Every recorded climb under ``folder`` (``seed-<k>/hillclimb-<arm>/``): arm → seed → {trajectory (step,
    accuracy) pairs, the recipe from its manifest}. A climb without a complete manifest is skipped (in flight)."""
    out: dict[str, dict[int, dict]] = {}
    for d in sorted(Path(folder).glob("seed-*/hillclimb-*")):
        manifest = d / "manifest.json"
        traj = d / "heldout_trajectory.jsonl"
        if not manifest.is_file() or not traj.is_file():
            continue
        m = json.loads(manifest.read_text())
        if m.get("status") != "complete":
            continue
        c = m["config"]
        arm, seed = d.name.removeprefix("hillclimb-"), int(d.parent.name.removeprefix("seed-"))
        log = read_log(d, traj.name)[0]  # the last attempt's rows (an interrupted attempt's are kept beside)
        points = [(int(st), float(a)) for st, a in zip(log["step"], log["heldout_mean"])]
        out.setdefault(arm, {})[seed] = {"trajectory": points, "lr": c["learning_rate"], "eval_every": c["eval_every"],
                                         "problems": c["heldout_problems"], "samples": c["heldout_samples"],
                                         "prompts": c["prompts_per_step"]}
    return out


def endpoint_gain(trajectory: list[tuple[int, float]], endpoint_evals: int) -> float:
    """The mean of the last ``endpoint_evals`` evaluations (after step 0) minus the step-0 evaluation."""
    if len(trajectory) < 2 or trajectory[0][0] != 0:
        raise ValueError(f"a climb's trajectory must start at step 0 and hold a later evaluation, got {trajectory[:2]}")
    later = [acc for _, acc in trajectory[1:]][-endpoint_evals:]
    return sum(later) / len(later) - trajectory[0][1]


def seeds_needed(p: float, between_sd: float, samples: int, problems: int, effect: float = _power.CLIMB_GAIN,
                 max_seeds: int = 200, floor: int = _power.MIN_SEEDS) -> int | None:
    """The fewest seeds (≥ ``floor``, the issue's MIN_SEEDS by default) with 80 % power for ``effect`` at this
    held-out size; None above ``max_seeds``."""
    c = _power.climb_gain(p, between_sd, samples, effect)
    for s in range(floor, max_seeds + 1):
        if _power.power(c, s, problems) >= _power.POWER:
            return s
    return None


def summarize(folder: str | Path, endpoint_evals: int, max_seeds: int = 200) -> dict:
    """Per arm of the pilot folder: recipe, seeds, oscillation against sampling noise, endpoint gains, σ_b and the
    seeds needed (at σ_b and at its upper 80 % limit)."""
    from scipy.stats import chi2

    found = climbs(folder)
    if not found:
        raise ValueError(f"{folder}: no complete hill-climb (seed-<k>/hillclimb-<arm>/ with a complete manifest)")
    arms = {}
    for arm, by_seed in sorted(found.items()):
        recipes = {(r["lr"], r["eval_every"], r["problems"], r["samples"], r["prompts"]) for r in by_seed.values()}
        if len(recipes) > 1:
            raise ValueError(f"{folder}: the {arm} climbs ran more than one recipe {sorted(recipes)}; one per folder")
        lr, every, n, m, prompts = recipes.pop()
        if len(by_seed) < 2:
            raise ValueError(f"{folder}: {arm}: {len(by_seed)} climb seed; the spread needs two or more")
        trajs = [by_seed[k]["trajectory"] for k in sorted(by_seed)]
        accs = [a for t in trajs for _, a in t]
        p = sum(accs) / len(accs)
        steps = [b - a for t in trajs for (_, a), (_, b) in zip(t, t[1:])]
        later = [b - a for t in trajs for (_, a), (_, b) in zip(t[1:], t[2:])]  # without the rise from step 0
        gains = [endpoint_gain(t, endpoint_evals) for t in trajs]
        within = 2 * p * (1 - p) / (n * m)
        sd_b = _power.between_sd(gains, within)
        k = len(gains)
        upper = math.sqrt(max(0.0, stdev(gains) ** 2 * (k - 1) / chi2.ppf(0.20, k - 1) - within))
        arms[arm] = {"lr": lr, "eval_every": every, "prompts": prompts, "problems": n, "samples": m,
                     "seeds": sorted(by_seed), "mean_accuracy": p,
                     "oscillation": stdev(steps) if len(steps) > 1 else float("nan"),
                     "oscillation_after_rise": stdev(later) if len(later) > 1 else float("nan"),
                     "noise": math.sqrt(2 * p * (1 - p) / (n * m)), "endpoint_evals": endpoint_evals,
                     "gains": gains, "between_sd": sd_b, "between_sd_upper80": upper,
                     "seeds_needed": seeds_needed(p, sd_b, m, n, max_seeds=max_seeds),
                     "seeds_needed_unfloored": seeds_needed(p, sd_b, m, n, max_seeds=max_seeds, floor=2),
                     "seeds_needed_upper80": seeds_needed(p, upper, m, n, max_seeds=max_seeds)}
    return {"folder": str(folder), "arms": arms}


def _worst(candidate: dict) -> float:
    needs = [a["seeds_needed"] for a in candidate["arms"].values()]
    return math.inf if any(x is None for x in needs) else max(needs)


def choose(candidates: list[dict]) -> dict:
    """:data:`RULE` over :func:`summarize`'s results, one per candidate recipe: the chosen one and the seeds per arm
    it needs (None: no candidate reaches 80 % power within the seeds searched)."""
    if not candidates:
        raise ValueError("no candidate recipe to choose from")
    lrs = [{a["lr"] for a in c["arms"].values()} for c in candidates]
    if any(len(x) != 1 for x in lrs):
        raise ValueError("each candidate folder must hold one learning rate for both arms")
    best = min(candidates, key=lambda c: (_worst(c), -next(iter(c["arms"].values()))["lr"]))
    need = _worst(best)
    return {"rule": RULE, "chosen": best["folder"], "lr": next(iter(best["arms"].values()))["lr"],
            "seeds_per_arm": None if need == math.inf else int(need)}


def climb_section(decision: dict, candidate: dict, max_seeds: int, first_seed: int = 0) -> dict:
    """The ``climb`` section of the powered run: the chosen recipe, the seeds it needs (at most ``max_seeds``, the
    device budget; the design records when it is capped) and the pilot's endpoint."""
    arm = next(iter(candidate["arms"].values()))
    n = decision["seeds_per_arm"] or max_seeds
    return {"lr": decision["lr"], "eval_every": arm["eval_every"], "prompts": arm["prompts"],
            "seeds": list(range(first_seed, first_seed + min(n, max_seeds))), "endpoint_evals": arm["endpoint_evals"]}


def recomputed(pilot_dir: str | Path) -> dict | None:
    """A shipped climb pilot recomputed from its records: ``pilot_dir`` holds one folder per candidate (``lr-*``,
    each with its climbs) and ``design.json`` as the recording wrote it. Summarizes every candidate with the design's
    endpoint, applies :func:`choose` and returns {"table": one row per candidate and arm, "decision": the recomputed
    choice, "recorded": design.json's, "agree": same learning rate and seeds per arm, "design": design.json}; None
    when ``pilot_dir`` has no design.json."""
    import pandas as pd

    pilot_dir = Path(pilot_dir)
    f = pilot_dir / "design.json"
    if not f.is_file():
        return None
    design = json.loads(f.read_text())
    k, max_seeds = int(design["climb"]["endpoint_evals"]), int(design.get("max_seeds", 200))
    cands = [summarize(d, k) for d in sorted(pilot_dir.glob("lr-*")) if d.is_dir()]
    decision = choose(cands)
    rows = [{"learning rate": a["lr"], "arm": arm, "climb seeds": len(a["seeds"]), "mean held-out": a["mean_accuracy"],
             "oscillation": a["oscillation"], "oscillation after the rise": a["oscillation_after_rise"],
             "binomial noise": a["noise"],
             "gains": ", ".join(f"{100 * g:+.1f}" for g in a["gains"]), "σ between seeds": a["between_sd"],
             "σ, upper 80 %": a["between_sd_upper80"], "seeds needed": a["seeds_needed"],
             "seeds needed, no floor": a["seeds_needed_unfloored"],
             "seeds needed, σ upper 80 %": a["seeds_needed_upper80"]}
            for c in cands for arm, a in c["arms"].items()]
    agree = (math.isclose(decision["lr"], design["lr"]) and decision["seeds_per_arm"] == design["seeds_per_arm"])
    return {"table": pd.DataFrame(rows), "decision": decision, "agree": agree, "design": design,
            "recorded": {"lr": design["lr"], "seeds_per_arm": design["seeds_per_arm"]}, "max_seeds": max_seeds,
            "endpoint_evals": k}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m polyvox.studies.world.climb_design",
                                 description="Choose the hill-climbs' recipe and seed count from climb pilot folders.")
    ap.add_argument("pilots", nargs="+", help="one world run folder per candidate recipe (its seed-<k>/hillclimb-*)")
    ap.add_argument("--endpoint-evals", type=int, required=True, help="the endpoint: mean of the last k evaluations")
    ap.add_argument("--max-seeds", type=int, default=12, help="the most seeds per arm the powered run can afford")
    ap.add_argument("--out", required=True, help="design JSON to write (the pilots' summaries, the rule, the choice)")
    args = ap.parse_args(argv)
    try:
        cands = [summarize(p, args.endpoint_evals) for p in args.pilots]
        decision = choose(cands)
    except (ValueError, OSError) as e:
        print(f"climb_design: {e}", file=sys.stderr)
        return 2
    chosen = next(c for c in cands if c["folder"] == decision["chosen"])
    section = climb_section(decision, chosen, args.max_seeds)
    capped = decision["seeds_per_arm"] is None or decision["seeds_per_arm"] > args.max_seeds
    design = {"candidates": cands, **decision, "max_seeds": args.max_seeds, "capped": capped, "climb": section}
    tmp = Path(args.out + ".tmp")
    tmp.write_text(json.dumps(design, indent=2) + "\n")
    tmp.replace(args.out)
    for c in cands:
        for arm, a in c["arms"].items():
            print(f"{c['folder']} {arm}: lr {a['lr']:g}, oscillation {a['oscillation'] * 100:.1f} vs noise "
                  f"{a['noise'] * 100:.1f} points, gains {', '.join(f'{g * 100:+.1f}' for g in a['gains'])}, "
                  f"sigma_b {a['between_sd'] * 100:.1f}, seeds needed {a['seeds_needed']}")
    print(f"chosen: lr {decision['lr']:g}, {decision['seeds_per_arm']} seeds per arm needed"
          + (f" (capped at {args.max_seeds})" if capped else ""))
    print("climb: " + json.dumps(section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
