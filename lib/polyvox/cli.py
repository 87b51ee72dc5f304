"""The `polyvox` command: one subcommand per stage.

    polyvox book build [--only CHAPTER] [--force] [--params FILE.yaml] [--no-html]
    polyvox run CHAPTER -p key=value ... [--out DIR]
    polyvox sample --task T --format F --model M [--adapter A] --backend B --n N --out DIR ...
    polyvox merge SHARD_DIR ... --out DIR
    polyvox grade DIR

Errors the user can fix (bad input, unknown chapter, a failing notebook) print
one line to stderr and exit 1, without a traceback.
"""
from __future__ import annotations

import argparse
import sys

import yaml


def parse_kv(pairs: list[str]) -> dict:
    """Parse key=value pairs; values are read as YAML scalars (true, 3, 0.5, text)."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SystemExit(f"polyvox: expected key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = yaml.safe_load(value) if value != "" else ""
    return out


def _cmd_book_build(args) -> int:
    from .book import build

    report = build(only=args.only, force=args.force, params_file=args.params, html=not args.no_html)
    print(f"executed {len(report.executed)} chapter(s), {len(report.cached)} from cache"
          f" in {report.seconds:.1f}s")
    for f in report.failures:
        print(f"polyvox: chapter {f.chapter} failed: {f.message}", file=sys.stderr)
    if report.failures:
        print("polyvox: the other chapters' outputs are kept; HTML not built", file=sys.stderr)
        return 1
    if report.html:
        print(f"HTML: {report.html / 'index.html'}")
    return 0


def _cmd_run(args) -> int:
    from .book import run_chapter

    out = run_chapter(args.chapter, parse_kv(args.param), out=args.out)
    print(f"run folder: {out}")
    return 0


def _cmd_sample(args) -> int:
    from .backends import SamplingParams, accepted_options, make_backend
    from .runs import sample

    options = accepted_options(args.backend, batch_size=args.batch_size, base_url=args.base_url,
                               api_key_env=args.api_key_env, concurrency=args.concurrency)
    backend = make_backend(args.backend, args.model, args.adapter, **options)
    task_options = {"level": args.level} if args.level is not None else {}
    out = sample(args.out, args.task, args.format, backend, args.n,
                 SamplingParams(args.max_tokens, args.temperature, args.top_p), seed=args.seed,
                 limit=args.limit, shard=args.shard, nshards=args.nshards, data_dir=args.data_dir,
                 chunk=args.chunk, task_options=task_options, cache=args.cache)
    print(f"rollouts: {out / 'rollouts.jsonl'}")
    return 0


def _cmd_merge(args) -> int:
    from .runs import merge

    print(f"merged: {merge(args.shards, args.out) / 'rollouts.jsonl'}")
    return 0


def _cmd_grade(args) -> int:
    from .runs import grade

    print(f"graded: {grade(args.run, args.data_dir)}")
    return 0


def _cmd_world(args) -> int:
    from .studies.world.pipeline import STAGES, run

    run(args.out, args.scale, args.stages or STAGES, seed=args.seed)
    print(f"world runs: {args.out}")
    return 0


def _cmd_rl(args) -> int:
    from .train.grpo import load_config, train

    print(f"adapter: {train(load_config(args.config))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import studies  # noqa: F401 - registers the studies' tasks (world) before choices are listed

    p = argparse.ArgumentParser(prog="polyvox", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    book = sub.add_parser("book", help="build the book")
    book_sub = book.add_subparsers(dest="book_command", required=True)
    b = book_sub.add_parser("build", help="execute chapters (cached) and build the HTML")
    b.add_argument("--only", help="execute only this chapter (name like panel/accuracy)")
    b.add_argument("--force", action="store_true", help="ignore the cache")
    b.add_argument("--params", help="YAML file: {chapter: {param: value}}, key 'all' for every chapter")
    b.add_argument("--no-html", action="store_true", help="execute and render, skip jupyter-book")
    b.set_defaults(func=_cmd_book_build)

    r = sub.add_parser("run", help="run one chapter with parameters into a run folder")
    r.add_argument("chapter", help="chapter name (panel/accuracy) or notebook path")
    r.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--out", help="run folder (default runs/<chapter>-<time>)")
    r.set_defaults(func=_cmd_run)

    from .backends import BACKENDS
    from .formats import FORMATS
    from .tasks import TASKS

    s = sub.add_parser("sample", help="sample completions into a resumable run folder")
    s.add_argument("--task", required=True, choices=sorted(TASKS))
    s.add_argument("--format", required=True, choices=FORMATS)
    s.add_argument("--model", required=True, help="path or hub id (openai: the served model name)")
    s.add_argument("--adapter", help="PEFT LoRA folder (safetensors)")
    s.add_argument("--backend", default="transformers", choices=sorted(BACKENDS))
    s.add_argument("--n", type=int, default=1, help="samples per problem")
    s.add_argument("--max-tokens", type=int, default=4096)
    s.add_argument("--temperature", type=float, default=1.0)
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--limit", type=int, help="first N problems")
    s.add_argument("--level", help="level filter (tasks with levels: MATH, world)")
    s.add_argument("--shard", type=int, default=0)
    s.add_argument("--nshards", type=int, default=1)
    s.add_argument("--chunk", type=int, default=64, help="samples per backend call (and per flush)")
    s.add_argument("--batch-size", type=int, default=16, help="transformers batch size")
    s.add_argument("--base-url", default="http://127.0.0.1:8000", help="openai backend server")
    s.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    s.add_argument("--concurrency", type=int, default=8)
    s.add_argument("--data-dir", default="data")
    s.add_argument("--cache", help="request cache file (JSONL): repeated requests are answered from it")
    s.add_argument("--out", required=True)
    s.set_defaults(func=_cmd_sample)

    m = sub.add_parser("merge", help="join shard run folders")
    m.add_argument("shards", nargs="+")
    m.add_argument("--out", required=True)
    m.set_defaults(func=_cmd_merge)

    g = sub.add_parser("grade", help="grade a run folder into graded.jsonl")
    g.add_argument("run")
    g.add_argument("--data-dir", default="data")
    g.set_defaults(func=_cmd_grade)

    w = sub.add_parser("world", help="the miniature replication: models, panel RL, evaluations, bands, hill-climbs")
    w.add_argument("action", choices=["run"])
    w.add_argument("--out", required=True)
    w.add_argument("--scale", default="smoke", help="a scale in configs/world/ (smoke, h200) or a YAML path")
    w.add_argument("--stages", nargs="*", help="subset of: models panel-rl eval bands hillclimb-panel hillclimb-think")
    w.add_argument("--seed", type=int, default=0)
    w.set_defaults(func=_cmd_world)

    rlp = sub.add_parser("rl", help="GRPO with LoRA from a YAML config")
    rlp.add_argument("--config", required=True)
    rlp.set_defaults(func=_cmd_rl)

    return p


def main(argv: list[str] | None = None) -> int:
    from .book.render import BookError
    from .records import RecordError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (BookError, RecordError, ValueError, FileNotFoundError, ImportError) as exc:
        print(f"polyvox: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
