"""The Part II commands, added to ``polyvox`` by :func:`add_commands`:

    polyvox judge plan  --a FILE:SYSTEM --b FILE:SYSTEM --out DIR [--judge rubric|openai ...]
    polyvox judge run   --a FILE:SYSTEM --b FILE:SYSTEM --out DIR [--judge ...] [--retry-unparseable]
    polyvox judge tally --a FILE:SYSTEM --b FILE:SYSTEM --out DIR [--by pick_size,preference]
    polyvox judge tally --run data/runs/personas-h200          # every comparison of a recorded run
    polyvox judge tally --run DIR --judge model                # the same, by the run's judge model (judge-by-model/)
    polyvox personas run --scale cpu --out DIR [--stages router,heads,generate,systems,judge]

``--judge rubric`` is the persona world's program judge (free); ``--judge openai`` asks a
model behind any OpenAI-compatible endpoint (``--base-url``, ``--model``, the key read from
the variable ``--api-key-env`` names). ``--judge model`` (``tally --run`` only) reads the verdicts the
run's judge model recorded (issue 22, item 4: ``judge-by-model/``, keyed by the identity its stage record
holds; nothing is loaded or asked); a run without them is refused in one line.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ... import config, launch


def _judge(args):
    from . import pipeline

    if args.judge == "rubric":
        return pipeline.rubric_judge()
    if not args.model:
        raise ValueError("judge: --judge openai needs --model (and --base-url)")
    return pipeline.make_judge({"kind": "openai", "model": args.model, "base_url": args.base_url,
                                "api_key_env": args.api_key_env, "concurrency": args.concurrency,
                                "max_tokens": args.max_tokens})


def _run_judge(args, run: Path, s: dict):
    """(judge, the run's folder of its verdicts) for ``tally --run``: the rubric's (or an openai judge's) in
    ``judge/``; with ``--judge model`` the judge model's recorded verdicts in ``judge-by-model/``, refused in one
    line when the run has none."""
    if args.judge != "model":
        return _judge(args), "judge"
    from . import issue22

    j = issue22.model_judge(run)
    if j is None:
        why = ("its scale has no judge_model section" if s.get("judge_model") is None else
               "run its judge stage with the scale's judge_model")
        raise ValueError(f"judge tally --judge model: {run} has no complete {issue22.MODEL_VERDICTS}/ (the judge "
                         f"model's verdicts; {why}); --judge rubric tallies its judge/")
    return j, j.verdicts_folder


def _cmd_judge(args) -> int:
    from ... import judge
    from . import pipeline

    if args.judge == "model" and not (args.action == "tally" and args.run):
        raise ValueError("judge: --judge model reads a personas run's recorded judge-model verdicts; "
                         "use it with tally --run DIR")
    if args.action == "tally" and args.run:
        run = Path(args.run)
        s = pipeline.load_scale(run / "scale.yaml")
        j, folder = _run_judge(args, run, s)
        if args.judge == "model":
            print(f"# judge: the run's judge model, its recorded verdicts in {folder}/")
        for name, a, b in pipeline.comparisons(s, run / "systems"):
            # the run's own resamples, over test users (a user writes several prompts): the chapter's CIs
            t = judge.tally(a, b, run / folder, j, by=args.by or pipeline.BY,
                            n_boot=s["judge"]["n_boot"] if args.n_boot is None else args.n_boot,
                            groups=args.groups or "user")
            print(f"== {name}")
            print(judge.as_table(t))
        return 0
    if not (args.a and args.b and args.out):
        raise ValueError("judge: --a, --b and --out are needed (or tally --run DIR)")
    j = _judge(args)
    if args.action == "plan":
        p = judge.plan(args.a, args.b, args.out, j, retry_unparseable=args.retry_unparseable)
        print(f"{p['prompts']} prompts, {p['identical']} identical (free ties), {p['calls_needed']} judge calls "
              f"needed, {p['cached']} cached: {p['to_make']} calls to make")
    elif args.action == "run":
        r = judge.run(args.a, args.b, args.out, j, chunk=args.chunk, max_attempts=args.max_attempts,
                      retry_unparseable=args.retry_unparseable, progress=True)
        print(json.dumps(r))
    else:
        t = judge.tally(args.a, args.b, args.out, j, by=args.by or (),
                        n_boot=2000 if args.n_boot is None else args.n_boot, groups=args.groups)
        print(judge.as_table(t))
    return 0


def _cmd_personas_run(args) -> int:
    from . import pipeline

    out = pipeline.run(args.out, args.scale, args.stages or pipeline.STAGES, parallel=args.parallel, gpus=args.gpus,
                       mps=args.mps)
    print(f"personas run folder: {out}")
    return 0


def _system_spec(text: str) -> str:
    """argparse ``type=``: FILE:SYSTEM, an existing systems file and a system name."""
    file, sep, system = text.rpartition(":")
    if not sep or not file or not system:
        raise argparse.ArgumentTypeError(f"must be FILE:SYSTEM (a systems JSONL and a system name), got {text!r}")
    if not Path(file).is_file():
        raise argparse.ArgumentTypeError(f"must be FILE:SYSTEM with an existing FILE; no such file: {file!r}")
    return text


def _run_folder(text: str) -> str:
    """argparse ``type=``: a personas run folder (it holds the run's scale.yaml)."""
    config.existing_dir(text)
    if not (Path(text) / "scale.yaml").is_file():
        raise argparse.ArgumentTypeError(f"must be a personas run folder (with scale.yaml), got {text!r}")
    return text


def _labels(text: str) -> tuple[str, ...]:
    """argparse ``type=``: comma-separated row labels, none empty."""
    labels = tuple(x.strip() for x in text.split(","))
    if not all(labels):
        raise argparse.ArgumentTypeError(f"must be comma-separated labels (e.g. pick_size,preference), got {text!r}")
    return labels


def _stages():
    from .pipeline import STAGES

    return STAGES


def add_commands(subparsers) -> None:
    """Add ``judge plan|run|tally`` and ``personas run`` to the ``polyvox`` parser's subparsers.

    Every number, address, file and stage list is checked as the command line is parsed
    (:mod:`polyvox.config`'s ``type=`` functions), before any judge or model is made."""
    j = subparsers.add_parser("judge", help="pairwise judging in both orders: plan, run, tally")
    j.add_argument("action", choices=("plan", "run", "tally"))
    j.add_argument("--a", type=_system_spec, help="FILE:SYSTEM (a systems JSONL and a system name)")
    j.add_argument("--b", type=_system_spec, help="FILE:SYSTEM")
    j.add_argument("--out", help="verdicts folder (verdicts.jsonl, manifest.json)")
    j.add_argument("--run", type=_run_folder, help="tally: every comparison of a personas run folder")
    j.add_argument("--judge", choices=("rubric", "openai", "model"), default="rubric",
                   help="rubric (default), openai, or model: with tally --run, the run's judge model's recorded "
                        "verdicts (judge-by-model/)")
    j.add_argument("--base-url", type=config.url, default="http://127.0.0.1:8000")
    j.add_argument("--model")
    j.add_argument("--api-key-env", type=config.env_name, default="OPENAI_API_KEY")
    j.add_argument("--concurrency", type=config.integer(1), default=8)
    j.add_argument("--max-tokens", type=config.integer(1), default=16)
    j.add_argument("--max-attempts", type=config.integer(1), default=3)
    j.add_argument("--retry-unparseable", action="store_true")
    j.add_argument("--chunk", type=config.integer(1), default=32)
    j.add_argument("--by", type=_labels, help="tally: comma-separated row labels to break down by (pick_size,preference)")
    j.add_argument("--n-boot", type=config.integer(1), help="bootstrap resamples (default: the run's, or 2000)")
    j.add_argument("--groups", help="tally: resample whole groups by this label (e.g. user) instead of prompts "
                                    "(default with --run: user, as the chapter does)")
    j.set_defaults(func=_cmd_judge)

    p = subparsers.add_parser("personas", help="Part II's miniature pipeline")
    p.add_argument("action", choices=("run",))
    p.add_argument("--scale", default="smoke", help="configs/personas/<scale>.yaml or a YAML path")
    p.add_argument("--out", required=True)
    p.add_argument("--stages", type=config.names(_stages, "stage"),
                   help="comma-separated subset of router,cap,sweep,heads,mixes,generate,systems,judge-model,judge")
    launch.add_arguments(p)
    p.set_defaults(func=_cmd_personas_run)
