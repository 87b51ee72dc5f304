"""The Part II commands, added to ``polyvox`` by :func:`add_commands`:

    polyvox judge plan  --a FILE:SYSTEM --b FILE:SYSTEM --out DIR [--judge rubric|openai ...]
    polyvox judge run   --a FILE:SYSTEM --b FILE:SYSTEM --out DIR [--judge ...] [--retry-unparseable]
    polyvox judge tally --a FILE:SYSTEM --b FILE:SYSTEM --out DIR [--by pick_size,preference]
    polyvox judge tally --run data/runs/personas-h200          # every comparison of a recorded run
    polyvox personas run --scale cpu --out DIR [--stages router,heads,generate,systems,judge]

``--judge rubric`` is the persona world's program judge (free); ``--judge openai`` asks a
model behind any OpenAI-compatible endpoint (``--base-url``, ``--model``, the key read from
the variable ``--api-key-env`` names).
"""
from __future__ import annotations

import json
from pathlib import Path


def _judge(args):
    from . import pipeline

    if args.judge == "rubric":
        return pipeline.rubric_judge()
    if not args.model:
        raise SystemExit("polyvox judge: --judge openai needs --model (and --base-url)")
    return pipeline.make_judge({"kind": "openai", "model": args.model, "base_url": args.base_url,
                                "api_key_env": args.api_key_env, "concurrency": args.concurrency,
                                "max_tokens": args.max_tokens})


def _cmd_judge(args) -> int:
    from ... import judge
    from . import pipeline

    if args.action == "tally" and args.run:
        run = Path(args.run)
        s = pipeline.load_scale(run / "scale.yaml")
        j = _judge(args)
        for name, a, b in pipeline.comparisons(s, run / "systems"):
            # the run's own resamples, over test users (a user writes several prompts): the chapter's CIs
            t = judge.tally(a, b, run / "judge", j, by=tuple(args.by.split(",")) if args.by else pipeline.BY,
                            n_boot=args.n_boot or s["judge"]["n_boot"], groups=args.groups or "user")
            print(f"== {name}")
            print(judge.as_table(t))
        return 0
    if not (args.a and args.b and args.out):
        raise SystemExit("polyvox judge: --a, --b and --out are needed (or tally --run DIR)")
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
        t = judge.tally(args.a, args.b, args.out, j, by=tuple(args.by.split(",")) if args.by else (),
                        n_boot=args.n_boot or 2000, groups=args.groups)
        print(judge.as_table(t))
    return 0


def _cmd_personas_run(args) -> int:
    from . import pipeline

    stages = tuple(args.stages.split(",")) if args.stages else pipeline.STAGES
    out = pipeline.run(args.out, args.scale, stages)
    print(f"personas run folder: {out}")
    return 0


def add_commands(subparsers) -> None:
    """Add ``judge plan|run|tally`` and ``personas run`` to the ``polyvox`` parser's subparsers."""
    j = subparsers.add_parser("judge", help="pairwise judging in both orders: plan, run, tally")
    j.add_argument("action", choices=("plan", "run", "tally"))
    j.add_argument("--a", help="FILE:SYSTEM (a systems JSONL and a system name)")
    j.add_argument("--b", help="FILE:SYSTEM")
    j.add_argument("--out", help="verdicts folder (verdicts.jsonl, manifest.json)")
    j.add_argument("--run", help="tally: every comparison of a personas run folder")
    j.add_argument("--judge", choices=("rubric", "openai"), default="rubric")
    j.add_argument("--base-url", default="http://127.0.0.1:8000")
    j.add_argument("--model")
    j.add_argument("--api-key-env", default="OPENAI_API_KEY")
    j.add_argument("--concurrency", type=int, default=8)
    j.add_argument("--max-tokens", type=int, default=16)
    j.add_argument("--max-attempts", type=int, default=3)
    j.add_argument("--retry-unparseable", action="store_true")
    j.add_argument("--chunk", type=int, default=32)
    j.add_argument("--by", help="tally: comma-separated row labels to break down by (pick_size,preference)")
    j.add_argument("--n-boot", type=int, help="bootstrap resamples (default: the run's, or 2000)")
    j.add_argument("--groups", help="tally: resample whole groups by this label (e.g. user) instead of prompts "
                                    "(default with --run: user, as the chapter does)")
    j.set_defaults(func=_cmd_judge)

    p = subparsers.add_parser("personas", help="Part II's miniature pipeline")
    p.add_argument("action", choices=("run",))
    p.add_argument("--scale", default="smoke", help="configs/personas/<scale>.yaml or a YAML path")
    p.add_argument("--out", required=True)
    p.add_argument("--stages", help="comma-separated subset of router,heads,generate,systems,judge")
    p.set_defaults(func=_cmd_personas_run)
