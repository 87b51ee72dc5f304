"""The `polyvox` command: one subcommand per stage.

    polyvox book build [--only CHAPTER] [--force] [--params FILE.yaml] [--no-html]
    polyvox run CHAPTER -p key=value ... [--out DIR] [--html]
    polyvox sample --task T --format F --model M [--adapter A] --backend B --n N --out DIR ...
    polyvox merge SHARD_DIR ... --out DIR
    polyvox grade DIR [--data-dir D] [--workers N] [--max-ungradable F]
    polyvox explore RUN [--out FILE.ipynb] [--force]
    polyvox world run --out DIR [--scale smoke|h200-v2] [--stages models,pilot,rl-panel,…] [--seeds …]
    polyvox rl --config FILE.yaml
    polyvox personas run --scale S --out DIR;  polyvox judge plan|run|tally …
    polyvox collab run --scale S --out DIR

Every error prints one line, ``polyvox: <what> (<where>)``, on stderr and exits 1
(2 for a malformed command line); arguments are checked before any model loads or any
file is written. ``--debug`` (or ``POLYVOX_DEBUG=1``) shows the traceback instead.
"""
from __future__ import annotations

import argparse
from pathlib import Path
import re
import sys

from . import config, launch


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage is one --help away).

    A value refused by a ``type=`` function of :mod:`polyvox.config` reads ``--n must be an
    integer ≥ 1, got 0`` rather than argparse's ``argument --n: must be …``; credentials in the
    line (a URL's user:password, key-shaped text) are redacted, as in every other error line.
    """

    def error(self, message: str):
        from .records import scrub_text

        message = re.sub(r"^argument (?:\S+/)?(\S+): (must be )", r"\1 \2", " ".join(message.split()))
        self.exit(2, scrub_text(f"polyvox: {message} (see {self.prog} --help)") + "\n")


def parse_kv(pairs: list[str]) -> dict:
    """Parse key=value pairs; values are read as YAML scalars (true, 3, 0.5, text), within
    :func:`polyvox.config.parse_yaml`'s limits (a value's aliases cannot expand without bound)."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"-p expects key=value, got {pair!r}")
        if key in out:
            raise ValueError(f"-p {key} is given twice")
        try:
            out[key] = config.parse_yaml(value, f"-p {key}") if value != "" else ""
        except config.ConfigError as exc:
            raise ValueError(f"-p {key}: not a YAML value ({str(exc).split(': ', 1)[-1]})") from None
    return out


def _cmd_book_build(args) -> int:
    from .book import build

    # the progress bar only on a terminal: a failure read from a log or a pipe is its one error line
    report = build(only=args.only, force=args.force, params_file=args.params, html=not args.no_html,
                   progress=sys.stderr.isatty())
    print(f"executed {len(report.executed)} chapter(s), {len(report.cached)} from cache"
          f" in {report.seconds:.1f}s")
    if report.failures:
        failed = "; ".join(f"chapter {f.chapter} failed: {' '.join(str(f.message).split())}" for f in report.failures)
        print(f"polyvox: {failed}; the other chapters' outputs are kept, HTML not built", file=sys.stderr)
        return 1
    if report.html:
        print(f"HTML: {report.html / 'index.html'}")
    return 0


def _cmd_run(args) -> int:
    from .book import run_chapter

    out = run_chapter(args.chapter, parse_kv(args.param), out=args.out, html=args.html)
    print(f"run folder: {out}")
    if args.html:
        from .book.run import chapter_page

        print(f"page: {chapter_page(out)} (offline, in the book's style: open it in a browser)")
    return 0


def _cmd_sample(args) -> int:
    from .backends import BackendSpec, SamplingParams, accepted_options
    from .runs import sample

    options = accepted_options(args.backend, batch_size=args.batch_size, base_url=args.base_url,
                               api_key_env=args.api_key_env, concurrency=args.concurrency)
    if "batch_size" in options and options["batch_size"] < 1:
        raise ValueError(f"--batch-size must be an integer ≥ 1, got {args.batch_size}")
    backend = BackendSpec(args.backend, args.model, args.adapter, options)  # loaded after every check
    task_options = {"level": args.level} if args.level is not None else {}
    # the output folder goes as given ('' is refused as '', not as '.'); the progress bar only on a
    # terminal, so a failure read from a log or a pipe is its one error line
    out = sample(args.out, args.task, args.format, backend, args.n,
                 SamplingParams(args.max_tokens, args.temperature, args.top_p), seed=args.seed,
                 limit=args.limit, shard=args.shard, nshards=args.nshards, data_dir=args.data_dir,
                 chunk=args.chunk, task_options=task_options, cache=args.cache, progress=sys.stderr.isatty())
    from .runs import summarize, summary_lines

    print("\n".join(summary_lines([summarize(out, args.data_dir)])))
    return 0


def _cmd_merge(args) -> int:
    from .runs import merge

    out = merge(args.shards, args.out)  # checks every shard (complete, same run) before writing anything
    print(f"merged: {out / 'rollouts.jsonl'}")
    return 0


def _cmd_grade(args) -> int:
    from .records import RecordError
    from .runs import find_runs, grade, summarize, summary_lines

    limit = {} if args.max_ungradable is None else {"max_ungradable": args.max_ungradable}
    # a run folder (graded as given, so its errors name what is wrong with it), or a folder of run folders
    root = Path(args.run)
    runs = [args.run]  # as given: grade refuses '' by its own name
    if args.run.strip() and root.is_dir() and not any((root / f).exists() for f in ("manifest.json", "rollouts.jsonl", "graded.jsonl")):
        try:
            runs = find_runs(root)
        except RecordError:  # nothing below either: grading the folder itself says what it lacks
            pass
    for run in runs:
        grade(run, args.data_dir, workers=args.workers, **limit)
    names = [Path(run).relative_to(root).as_posix() if Path(run) != root else Path(run).resolve().name for run in runs]
    print("\n".join(summary_lines([summarize(run, args.data_dir, grade_in_memory=False, name=name)
                                    for run, name in zip(runs, names)])))
    return 0


def _cmd_explore(args) -> int:
    from .explore import explore_command

    for line in explore_command(args.run, out=args.out, data_dir=args.data_dir, force=args.force):
        print(line)
    return 0


def _cmd_world(args) -> int:
    from .studies.world.pipeline import STAGES, run

    run(args.out, args.scale, args.stages or STAGES, seeds=args.seeds, parallel=args.parallel, gpus=args.gpus,
        mps=args.mps, models_from=args.models_from)
    print(f"world runs: {args.out}")
    return 0


def _cmd_rl(args) -> int:
    from .train.grpo import load_config, train

    print(f"adapter: {train(load_config(args.config))}")
    return 0


def _world_stages() -> tuple[str, ...]:
    from .studies.world.pipeline import STAGES

    return STAGES


def build_parser() -> argparse.ArgumentParser:
    from .tasks import discover

    task_names = sorted(discover())  # the studies' tasks (world) too

    p = OneLineParser(prog="polyvox", description=__doc__.split("\n")[0])
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    book = sub.add_parser("book", help="build the book")
    book_sub = book.add_subparsers(dest="book_command", required=True, parser_class=OneLineParser)
    b = book_sub.add_parser("build", help="execute chapters (cached) and build the HTML")
    b.add_argument("--only", help="execute only this chapter (name like panel/accuracy)")
    b.add_argument("--force", action="store_true", help="ignore the cache")
    b.add_argument("--params", type=config.existing_file,
                   help="YAML file: {chapter: {param: value}}, key 'all' for every chapter")
    b.add_argument("--no-html", action="store_true", help="execute and render, skip jupyter-book")
    b.set_defaults(func=_cmd_book_build)

    r = sub.add_parser("run", help="run one chapter with parameters into a run folder")
    r.add_argument("chapter", help="chapter name (panel/accuracy) or notebook path")
    r.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--out", help="run folder (default runs/<chapter>-<time>)")
    r.add_argument("--html", action="store_true",
                   help="also write CHAPTER.html beside the executed notebook: a page in the book's style that "
                        "opens offline (MathJax from this environment, no network); on a folder holding a "
                        "complete run of the same chapter and parameters, only the page is written")
    r.set_defaults(func=_cmd_run)

    from .backends import BACKENDS
    from .formats import FORMATS

    s = sub.add_parser("sample", help="sample completions into a resumable run folder")
    s.add_argument("--task", required=True, choices=task_names)
    s.add_argument("--format", required=True, choices=FORMATS)
    s.add_argument("--model", required=True, help="path or hub id (openai: the served model name)")
    s.add_argument("--adapter", help="PEFT LoRA folder (safetensors)")
    s.add_argument("--backend", default="transformers", choices=sorted(BACKENDS))
    s.add_argument("--n", type=config.integer(1), default=1, help="samples per problem")
    s.add_argument("--max-tokens", type=config.integer(1), default=4096)
    s.add_argument("--temperature", type=config.number(0), default=1.0)
    s.add_argument("--top-p", type=config.number(0, 1, above=True), default=1.0)
    s.add_argument("--seed", type=config.integer(0), default=0)
    s.add_argument("--limit", type=config.integer(1), help="first N problems")
    s.add_argument("--level", help="level filter (tasks with levels: MATH, world)")
    s.add_argument("--shard", type=config.integer(0), default=0)
    s.add_argument("--nshards", type=config.integer(1), default=1)
    s.add_argument("--chunk", type=config.integer(1), default=64, help="samples per backend call (and per flush)")
    s.add_argument("--batch-size", type=config.integer(1), default=16, help="transformers batch size")
    s.add_argument("--base-url", type=config.url, default="http://127.0.0.1:8000", help="openai backend server")
    s.add_argument("--api-key-env", type=config.env_name, default="OPENAI_API_KEY",
                   help="environment variable holding the API key")
    s.add_argument("--concurrency", type=config.integer(1), default=8)
    s.add_argument("--data-dir", default="data")
    s.add_argument("--cache", help="request cache file (JSONL): repeated requests are answered from it")
    s.add_argument("--out", required=True)
    s.set_defaults(func=_cmd_sample)

    m = sub.add_parser("merge", help="join shard run folders")
    m.add_argument("shards", nargs="+")
    m.add_argument("--out", required=True)
    m.set_defaults(func=_cmd_merge)

    g = sub.add_parser("grade", help="grade a run folder (or every run folder below one) into graded.jsonl")
    g.add_argument("run", help="a run folder, or a folder holding run folders")
    g.add_argument("--data-dir", default="data", help="the data the run was sampled from (its problems are checked)")
    g.add_argument("--workers", type=config.integer(1), help="grading processes (math); default: the CPUs, at most 8")
    g.add_argument("--max-ungradable", type=config.number(0, 1, what="a fraction in [0, 1]"), metavar="FRACTION",
                   help="fail when more than this share of samples is ungradable (default 0.05)")
    g.set_defaults(func=_cmd_grade)

    e = sub.add_parser("explore", help="write RUN/explore.ipynb: the run's explorer, to open in JupyterLab")
    e.add_argument("run", help="a run folder, or a folder holding run folders")
    e.add_argument("--out", help="the notebook to write (default RUN/explore.ipynb)")
    e.add_argument("--data-dir", default="data", help="the benchmarks the run's task reads")
    e.add_argument("--force", action="store_true", help="write the notebook anew over an existing one")
    e.set_defaults(func=_cmd_explore)

    w = sub.add_parser("world", help="the miniature replication: models, panel RL, evaluations, bands, hill-climbs")
    w.add_argument("action", choices=["run"])
    w.add_argument("--out", required=True)
    w.add_argument("--scale", default="smoke", help="a scale in configs/world/ (smoke; h200-v2: the matched design on one H200) or a YAML path")
    w.add_argument("--stages", type=config.names(_world_stages, "stage"),
                   help="comma-separated subset of models,pilot,rl-panel,rl-think,eval,bands,bands-redraw,"
                        "hillclimb-panel,hillclimb-think")
    w.add_argument("--seeds", type=config.integer(0), nargs="+", help="RL seeds to run (default: the scale's seeds)")
    w.add_argument("--models-from", nargs=2, metavar=("MODELS", "RECORD"),
                   help="copy tiny-base and tiny-think from MODELS (e.g. data/models) instead of training them, when "
                        "the models stage record in RECORD (e.g. data/runs/world/models) has this scale's models "
                        "settings")
    launch.add_arguments(w)
    w.set_defaults(func=_cmd_world)

    rlp = sub.add_parser("rl", help="GRPO with LoRA from a YAML config")
    rlp.add_argument("--config", required=True, type=config.existing_file, help="configs/rl/*.yaml or another")
    rlp.set_defaults(func=_cmd_rl)

    # the studies' own commands: judge plan|run|tally and personas run (Part II), collab run (Part III)
    from .studies.collab.cli import add_commands as collab_commands
    from .studies.personas.cli import add_commands as personas_commands

    personas_commands(sub)
    collab_commands(sub)

    return p


def one_line(exc: BaseException) -> str:
    """The error as one line: what happened, and where (file and line) when known."""
    if isinstance(exc, OSError) and exc.filename:
        what = f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    else:
        text = " ".join(str(exc).split()) or type(exc).__name__
        what = text if isinstance(exc, (ValueError, RuntimeError, LookupError)) else f"{type(exc).__name__}: {text}"
    return f"polyvox: {what}"


def main(argv: list[str] | None = None) -> int:
    import os

    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("POLYVOX_DEBUG") == "1"
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("polyvox: interrupted (a rerun resumes)", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the command promises one line; --debug shows the rest
        if debug:
            raise
        from .records import scrub_text

        print(scrub_text(one_line(exc)), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
