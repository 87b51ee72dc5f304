"""A pilot of pyramid-supervision RL recipes on one seed's PD models (issue 23, item 3).

The recorded run's RL (``configs/collab/h200-ordered.yaml``: 100 GRPO steps, groups of 4, 4 prompts a step, lr
1e-4) did not train: the mean reward over the last 10 steps is above the first 10's in 1-2 of 3 seeds per agent, and
31-58 % of its groups score all four completions alike (no advantage, no gradient). This pilot trains the same
agents from the same PD models with candidate recipes (learning rate × group × prompts × steps), each candidate in its
own process so that they share the GPU, and reads each curve as the chapter does (:func:`.analysis.rl_change`:
first and last windows, per agent). It picks nothing by itself: ``summary.json`` holds every candidate's windows, for
the powered run's recipe to be chosen by a rule stated before reading them (the rule in the issue's note: the
candidate whose worst agent rises most, every agent rising).

Departure from the pipeline's RL stage: none in the training call (the same :func:`.pipeline.rl_problems`,
reward, LoRA on the fully fine-tuned PD model, seed); only the recipe's numbers differ, and no evaluation follows.

    python -m polyvox.studies.collab.rl_pilot --run RUN --seed 0 --scale h200-ordered --out OUT \\
        --candidates 1e-4:4:4:100 5e-4:8:8:200 1e-3:8:8:200
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from . import analysis as A

AGENTS = ("small", "mid", "big")


def parse_candidate(text: str) -> dict:
    """``lr:group:prompts:steps`` → its numbers (one line naming the text when malformed)."""
    parts = text.split(":")
    if len(parts) != 4:
        raise ValueError(f"candidate {text!r}: expected lr:group:prompts:steps, e.g. 5e-4:8:8:200")
    try:
        lr, group, prompts, steps = float(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])
    except ValueError:
        raise ValueError(f"candidate {text!r}: lr a number, group, prompts and steps integers") from None
    if lr <= 0 or min(group, prompts, steps) < 1 or group < 2:
        raise ValueError(f"candidate {text!r}: lr > 0, group >= 2, prompts and steps >= 1")
    return {"lr": lr, "group": group, "prompts": prompts, "steps": steps}


def name_of(c: dict) -> str:
    return f"lr{c['lr']:g}-g{c['group']}-p{c['prompts']}-s{c['steps']}"


def train_candidate(run: Path, seed: int, scale: str, c: dict, out: Path, agents=AGENTS) -> None:
    """One candidate's RL for every agent, from ``run``'s ``seed-<seed>/pd/<agent>`` (fully fine-tuned PD models)."""
    from ...train import grpo
    from .judge import pyramid_reward
    from .pipeline import load_scale, rl_problems, stage_seed

    s = load_scale(scale)
    pd_dir = run / f"seed-{seed}" / "pd"
    for a in agents:
        cfg = grpo.RLConfig(model=str(pd_dir / a), arm="think", out=str(out / a), init_adapter=None,
                            stages=[grpo.Stage("pyramid", rl_problems(s, a, s["rl"]["problems"], seed), c["steps"])],
                            lora_rank=s["pd"]["rank"], lora_alpha=2 * s["pd"]["rank"], group_size=c["group"],
                            prompts_per_step=c["prompts"], max_completion_length=s["rl"]["max_tokens"],
                            learning_rate=c["lr"], eval_every=10 ** 6, save_every=10 ** 6, seed=stage_seed(s, seed),
                            reward_fn=pyramid_reward)
        grpo.train(cfg, progress=False)


def curves(folder: Path, agents=AGENTS) -> pd.DataFrame:
    """A candidate's RL steps in :func:`.analysis.rl_curves`' columns (seed 0: one seed per candidate)."""
    return pd.DataFrame([row for a in agents for row in A.rl_steps(folder / a / "train_log.jsonl", 0, a)],
                        columns=A.RL_COLUMNS)


def summarize(out: Path, cands: list[dict]) -> list[dict]:
    rows = []
    for c in cands:
        cv = curves(out / name_of(c))
        ch = A.rl_change(cv) if len(cv) else pd.DataFrame()
        rows.append({**c, "name": name_of(c), "agents": ch.to_dict("records"),
                     "all_equal_groups": None if cv.empty else float(cv["all_equal"].mean())})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a collab run folder with models/ and seed-<k>/pd/ weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", default="h200-ordered")
    ap.add_argument("--out", required=True)
    ap.add_argument("--candidates", nargs="+", default=["1e-4:4:4:100", "5e-4:8:8:200", "1e-3:8:8:200"])
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: train this candidate in this process
    a = ap.parse_args(argv)
    try:
        cands = [parse_candidate(x) for x in a.candidates]
    except ValueError as e:
        print(f"polyvox: rl_pilot: {e}", file=sys.stderr)
        return 2
    run, out = Path(a.run), Path(a.out)
    if a.one:
        c = parse_candidate(a.one)
        train_candidate(run, a.seed, a.scale, c, out / name_of(c))
        return 0
    if not (run / f"seed-{a.seed}" / "pd").is_dir():
        print(f"polyvox: rl_pilot: {run}: no seed-{a.seed}/pd/ (the PD models the pilot starts from)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    for text in a.candidates:  # one process per candidate: they share the GPU
        log = open(out / f"{name_of(parse_candidate(text))}.log", "w")
        procs.append((text, log, subprocess.Popen([sys.executable, "-m", "polyvox.studies.collab.rl_pilot", "--run",
                                                   str(run), "--seed", str(a.seed), "--scale", a.scale, "--out",
                                                   str(out), "--one", text], stdout=log, stderr=subprocess.STDOUT)))
    failed = []
    for text, log, p in procs:
        rc = p.wait()
        log.close()
        if rc != 0:
            failed.append(text)
    summary = summarize(out, cands)
    (out / "summary.json").write_text(json.dumps({"run": str(run), "seed": a.seed, "scale": a.scale,
                                                  "failed": failed, "candidates": summary}, indent=1) + "\n")
    for row in summary:
        said = "; ".join(f"{r['agent']} {r['reward, first steps']:.3f}→{r['reward, last steps']:.3f}"
                         for r in row["agents"])
        print(f"{row['name']}: {said}; all-equal groups {row['all_equal_groups']}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
