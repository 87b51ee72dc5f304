"""``polyvox collab run``: every Part III stage for a scale into one folder (resumable).

    polyvox collab run --scale cpu --out runs/collab [--stages models,pd,rl,eval] [--models DIR]

A scale with ``seeds`` runs ``models/`` once and pd, rl and eval once per seed, in ``seed-<k>/``
(``--parallel K``: the seeds at once).
    python -m polyvox.studies.collab.cli collab run ...   (the same, before the lead wires it into polyvox)

The lead's ``polyvox.cli`` calls :func:`add_commands` with its subparsers. A failing agent
(:class:`.scheduler.AgentError`) or a refused folder prints one line and exits 1.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ... import config, launch

MODELS = ("small", "mid", "big", "large")  # the pool's base models, each a folder of --models


def _cmd_run(args) -> int:
    from .pipeline import STAGES, run
    from .scheduler import AgentError

    todo = args.stages or STAGES  # names checked as the command line was parsed
    try:
        times = run(args.out, args.scale, todo, models_dir=args.models, parallel=args.parallel, gpus=args.gpus,
                    mps=args.mps)
    except (AgentError, ValueError) as exc:
        from ...records import scrub_text

        print(scrub_text(f"polyvox collab: {' '.join(str(exc).split())}"), file=sys.stderr)
        return 1
    print("seconds per stage: " + ", ".join(f"{k} {v}" for k, v in times.items()))
    return 0


def _models_dir(text: str) -> str:
    """argparse ``type=``: a folder of trained base models (small, mid, big, large, each with config.json)."""
    config.existing_dir(text)
    missing = [m for m in MODELS if not (Path(text) / m / "config.json").is_file()]
    if missing:
        raise argparse.ArgumentTypeError(f"must be a folder of trained base models ({', '.join(MODELS)}, each "
                                         f"with config.json); {text!r} lacks {', '.join(missing)}")
    return text


def _stages():
    from .pipeline import STAGES

    return STAGES


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("collab", help="Part III: sliced models collaborating by hand-offs")
    sub = p.add_subparsers(dest="collab_command", required=True)
    r = sub.add_parser("run", help="run every stage (models, pd, rl, eval) for a scale into --out",
                       description="Run every stage for a scale into --out: models/, pd/, rl/, eval/; a scale with "
                                   "seeds: models/ once, then seed-<k>/pd, seed-<k>/rl, seed-<k>/eval for each "
                                   "seed k (--parallel runs the seeds concurrently). Complete stages are skipped.")
    r.add_argument("--scale", default="smoke", help="configs/collab/<scale>.yaml or a YAML path")
    r.add_argument("--out", required=True)
    r.add_argument("--stages", default=None, type=config.names(_stages, "stage"),
                   help="comma-separated subset of models,pd,rl,eval (with seeds: that stage of every seed)")
    r.add_argument("--models", default=None, type=_models_dir,
                   help="use trained base models from this folder (small, mid, big, large)")
    launch.add_arguments(r)
    r.set_defaults(func=_cmd_run)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # a usage error is one line, as in ``polyvox`` itself
        self.exit(2, f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")


def main(argv=None) -> int:
    parser = _Parser(prog="polyvox-collab")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
