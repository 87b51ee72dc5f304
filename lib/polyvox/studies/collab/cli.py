"""``polyvox collab run``: every Part III stage for a scale into one folder (resumable).

    polyvox collab run --scale cpu --out runs/collab [--stages models,pd,rl,eval] [--models DIR]
    python -m polyvox.studies.collab.cli collab run ...   (the same, before the lead wires it into polyvox)

The lead's ``polyvox.cli`` calls :func:`add_commands` with its subparsers. A failing agent
(:class:`.scheduler.AgentError`) or a refused folder prints one line and exits 1.
"""
from __future__ import annotations

import sys


def _cmd_run(args) -> int:
    from .pipeline import STAGES, run
    from .scheduler import AgentError

    stages = tuple(args.stages.split(",")) if args.stages else STAGES
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        print(f"polyvox collab: unknown stages {', '.join(unknown)}; stages: {', '.join(STAGES)}", file=sys.stderr)
        return 1
    try:
        times = run(args.out, args.scale, stages, models_dir=args.models)
    except (AgentError, ValueError) as exc:
        print(f"polyvox collab: {exc}", file=sys.stderr)
        return 1
    print("seconds per stage: " + ", ".join(f"{k} {v}" for k, v in times.items()))
    return 0


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("collab", help="Part III: sliced models collaborating by hand-offs")
    sub = p.add_subparsers(dest="collab_command", required=True)
    r = sub.add_parser("run", help="run every stage (models, pd, rl, eval) for a scale into --out")
    r.add_argument("--scale", default="smoke", help="configs/collab/<scale>.yaml or a YAML path")
    r.add_argument("--out", required=True)
    r.add_argument("--stages", default=None, help="comma-separated subset of models,pd,rl,eval")
    r.add_argument("--models", default=None, help="use trained base models from this folder")
    r.set_defaults(func=_cmd_run)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="polyvox-collab")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
