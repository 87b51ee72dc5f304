"""The command line's ``type=`` functions: each raises ``argparse.ArgumentTypeError`` starting ``must be …``."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from .fields import _ENV, _url_ok


def integer(minimum: int, maximum: int | None = None):
    """argparse ``type=``: an integer ≥ minimum (≤ maximum)."""
    what = f"an integer ≥ {minimum}" if maximum is None else f"an integer in {minimum} … {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} (invalid int value: {text!r})") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


def number(minimum: float, maximum: float | None = None, above: bool = False, what: str | None = None):
    """argparse ``type=``: a finite number ≥ minimum (> minimum when ``above``), ≤ maximum
    (``what``: the words for it, e.g. "a fraction in [0, 1]")."""
    if what is None and maximum is None:
        what = f"a number {'>' if above else '≥'} {minimum:g}"
    elif what is None:
        what = f"a number in {'(' if above else '['}{minimum:g}, {maximum:g}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} (invalid float value: {text!r})") from None
        if not math.isfinite(value) or value < minimum or (above and value == minimum) \
                or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    parse.__name__ = "float"
    return parse


def url(text: str) -> str:
    """argparse ``type=``: an http(s) address with a host."""
    problem = _url_ok(text)
    if problem:
        raise argparse.ArgumentTypeError(f"must be {problem}, got {text!r}")
    return text


def env_name(text: str) -> str:
    """argparse ``type=``: the name of an environment variable."""
    if not _ENV.fullmatch(text):  # not echoed: it may be the key itself
        raise argparse.ArgumentTypeError("must be the name of an environment variable (letters, digits, _), "
                                         "not the key itself or other text")
    return text


def existing_dir(text: str) -> str:
    """argparse ``type=``: a folder that exists."""
    p = Path(text)
    if not text or not p.exists():
        raise argparse.ArgumentTypeError(f"must be an existing folder; no such folder: {text!r}")
    if not p.is_dir():
        raise argparse.ArgumentTypeError(f"must be a folder, got the file {text!r}")
    return text


def existing_file(text: str) -> str:
    """argparse ``type=``: a file that exists (the message says "No such file or directory" as the OS does)."""
    p = Path(text)
    if not text or not p.exists():
        raise argparse.ArgumentTypeError(f"No such file or directory: {text!r}")
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"must be a file, got the folder {text!r}")
    return text


def names(choices, what: str = "stage"):
    """argparse ``type=``: a comma-separated list of names of ``choices`` (a tuple), the one syntax of every
    list of names on the command line (``--stages router,heads``).

    ``choices`` may be a callable returning them, so a study's list is imported only when the argument is given."""
    def parse(text: str):
        known = tuple(choices() if callable(choices) else choices)
        items = [x.strip() for x in text.split(",")]
        bad = [x or "''" for x in items if x not in known]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {what}(s) {', '.join(bad)}; {what}s: {', '.join(known)}")
        return tuple(items)

    parse.__name__ = what
    return parse
