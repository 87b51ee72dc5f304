"""The `polyvox` command: one subcommand per stage.

    polyvox book build [--only CHAPTER] [--force] [--params FILE.yaml] [--no-html]
    polyvox run CHAPTER -p key=value ... [--out DIR]

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


def build_parser() -> argparse.ArgumentParser:
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

    return p


def main(argv: list[str] | None = None) -> int:
    from .book import BookError
    from .records import RecordError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (BookError, RecordError, ValueError, FileNotFoundError) as exc:
        print(f"polyvox: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
