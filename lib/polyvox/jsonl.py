"""JSON and JSONL on disk, strictly: one object per line, validated as read, appended line-atomically.

Reading refuses what a reader elsewhere could not read back, each with ``file:line``: malformed
JSON, duplicate keys in an object, NaN and ±Infinity (and numbers that overflow to them), integers
past Python's digit limit, lone UTF-16 surrogates, and anything but a regular file (a FIFO would
hang, ``/dev/zero`` would fill memory). Writing refuses the same before a byte is written, and
appends each batch with one ``write``, then flush and fsync: a run killed mid-write leaves at most
one torn last line, which :func:`repair_truncated_tail` cuts (never rewriting the file).

A finished record may be *stored* gzipped, as ``<name>.gz`` beside where ``<name>`` would be (the
recorded runs the repository ships: trained tiny models repeat themselves, and their samples compress
about 30×). Readers take either (:func:`stored` finds the one on disk; :func:`iter_jsonl` reads a ``.gz``
whole, refusing a damaged one in one line); writers only ever append to plain files.
:mod:`polyvox.records` builds typed records on these functions and re-exports them.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterable, Iterator


class RecordError(ValueError):
    """A record that cannot be read; the message names file and line."""

    def __init__(self, path: os.PathLike | str, line: int | None, message: str):
        self.path, self.line = str(path), line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


class _Refused(ValueError):
    """A value json.loads must not accept (a duplicate key, a non-finite or oversized number);
    ``needle`` is text of the document that locates it."""

    def __init__(self, message: str, needle: str | None = None):
        super().__init__(message)
        self.message, self.needle = message, needle


def _no_duplicates(pairs: list) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _Refused(f"duplicate key {k!r}", json.dumps(k))
        out[k] = v
    return out


def _no_constant(name: str):
    # NaN and ±Infinity are not JSON; Python's json module accepts them unless told not to
    raise json.JSONDecodeError(f"{name} is not a JSON value", name, 0)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {text[:20]}{'...' if len(text) > 20 else ''} is out of range (not finite)", text)
    return value


def _checked_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # more digits than sys.get_int_max_str_digits()
        raise _Refused(f"integer of {len(text.lstrip('-'))} digits is too long", text) from None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _loads(text: str) -> Any:
    """json.loads refusing NaN/Infinity, numbers that overflow, oversized integers, duplicate keys and
    lone surrogates (``\\ud800`` unpaired: not text, and nothing can write it back as UTF-8)."""
    obj = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_checked_int,
                     object_pairs_hook=_no_duplicates)
    if _SURROGATE_ESCAPE.search(text):  # a pair is one character; a lone half cannot be encoded
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start:exc.end]
            needle = "\\u" + f"{ord(bad[0]):04x}" if bad else None
            raise _Refused(f"holds a lone surrogate ({needle or 'an unpaired half'}), which is not text",
                           needle) from None
    return obj


def _line_of(text: str, needle: str | None, nth: int = 1) -> int | None:
    """1-based line of the ``nth`` occurrence of needle in text (None when not found)."""
    if not needle:
        return None
    at = -1
    for _ in range(nth):
        at = text.find(needle, at + 1)
        if at < 0:
            return None
    return text.count("\n", 0, at) + 1


def _check_regular_file(path: Path, what: str) -> None:
    """Refuse, before opening it, anything but a regular file (following a link): a FIFO would hang a
    read, a device (/dev/zero) would fill memory."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise RecordError(path, None, "file not found") from None
    except OSError as exc:
        raise RecordError(path, None, f"cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise RecordError(path, None, f"is a folder, not a {what} file")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise RecordError(path, None, f"is {kind}, not a regular {what} file; polyvox reads only regular files")


GZ = ".gz"


def stored(path: os.PathLike | str) -> Path:
    """Where the record ``path`` is on disk: ``path`` itself, else its gzipped copy ``path.gz`` when only that
    exists (a shipped record), else ``path`` (missing: the caller's read says so)."""
    path = Path(path)
    if path.suffix != GZ and not os.path.lexists(path):
        gz = path.with_name(path.name + GZ)
        if os.path.lexists(gz):
            return gz
    return path


def exists(path: os.PathLike | str) -> bool:
    """Whether the record ``path`` is on disk, plain or stored gzipped (:func:`stored`)."""
    return stored(path).is_file()


def _read_bytes(path: Path) -> bytes:
    with path.open("rb") as fh:
        raw = fh.read()
    if path.suffix != GZ:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:  # not gzip, or a stream cut short
        raise RecordError(path, None, f"not a readable gzip file ({type(exc).__name__}: {exc})") from None


def iter_jsonl(path: os.PathLike | str, tolerate_truncated_tail: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield (line_number, object) for each non-blank line; bad JSON raises RecordError.

    ``path`` may be stored gzipped (:func:`stored`: ``path.gz`` is read when ``path`` is not there). Refused,
    with file and line: anything but a regular file (checked before it is opened), a damaged gzip file, a
    duplicate key in an object, a number that is not finite (``1e400``) or an integer too long to
    convert."""
    path = stored(path)
    _check_regular_file(path, "JSONL")
    raw = _read_bytes(path)
    try:
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise RecordError(path, line, f"not UTF-8 text (byte {exc.start})") from None
    # A file written by append_jsonl ends in "\n"; a final fragment without it
    # is a write cut off by a crash.
    last = len(lines) - 1
    for i, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj = _loads(text)
        except json.JSONDecodeError as exc:
            if tolerate_truncated_tail and i - 1 == last:
                return
            raise RecordError(path, i, f"malformed JSON ({exc.msg} at column {exc.colno})") from None
        except _Refused as exc:
            raise RecordError(path, i, exc.message) from None
        except (ValueError, RecursionError) as exc:
            raise RecordError(path, i, f"cannot be read ({type(exc).__name__}: {str(exc)[:120]})") from None
        yield i, obj


def to_dict(record: Any) -> dict:
    return dataclasses.asdict(record) if dataclasses.is_dataclass(record) else dict(record)


def _record_name(record: dict, n: int) -> str:
    """A record in an error: its position in the batch and its key fields (never its text)."""
    keys = [f"{k} {record[k]!r}" for k in ("problem_id", "sample_index", "prompt_id", "key", "id")
            if k in record and isinstance(record[k], (str, int)) and len(repr(record[k])) <= 80]
    return f"record {n}" + (f" ({', '.join(keys[:2])})" if keys else "")


def append_jsonl(path: os.PathLike | str, records: Iterable[Any]) -> int:
    """Append records (dataclasses or dicts), one line each, flushed to disk. Returns the count.

    The whole batch is encoded first: a record that cannot be written as strict JSON in UTF-8 (a
    NaN or infinite number, a lone surrogate) is a one-line :class:`RecordError` naming the file and
    the record, and nothing of the batch is written."""
    path = Path(path)
    lines = []
    for n, r in enumerate(records, start=1):
        d = to_dict(r)
        try:
            lines.append((json.dumps(d, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8"))
        except ValueError as exc:  # UnicodeEncodeError is one
            why = ("holds a lone surrogate (not encodable as UTF-8)" if isinstance(exc, UnicodeEncodeError)
                   else "holds a number that is not finite (NaN or Infinity is not JSON)"
                   if "Out of range float" in str(exc) else str(exc).splitlines()[0][:120])
            raise RecordError(path, None, f"cannot write {_record_name(d, n)}: {why}; nothing of this batch "
                              "was written") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        for line in lines:
            fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    return len(lines)


def repair_truncated_tail(path: os.PathLike | str) -> bool:
    """Drop a final line cut off by a crash (no trailing newline). Returns True if it cut one.

    The file is truncated in place (``os.truncate``), never rewritten, so a crash
    during the repair cannot lose the records before the torn line. A last line that
    is a complete JSON object and only lacks its newline (written by another tool) is
    kept: the newline is appended instead.
    """
    path = Path(path)
    size = path.stat().st_size if path.exists() else 0
    if size == 0:
        return False
    with path.open("rb") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return False
        # walk back to the last newline in blocks; keep everything up to and including it
        pos, keep = size, 0
        while pos > 0:
            step = min(1 << 16, pos)
            pos -= step
            fh.seek(pos)
            block = fh.read(step)
            nl = block.rfind(b"\n")
            if nl >= 0:
                keep = pos + nl + 1
                break
        fh.seek(keep)
        tail = fh.read()
    try:
        whole = isinstance(json.loads(tail), dict)
    except (json.JSONDecodeError, UnicodeDecodeError):
        whole = False
    if whole:
        with path.open("ab") as fh:
            fh.write(b"\n")
        return False
    os.truncate(path, keep)
    return True


def read_json(path: os.PathLike | str) -> Any:
    """A JSON file, strictly: refused in one line naming the file (and the line where known) when it
    is not a regular file, not UTF-8, malformed, or holds a duplicate key, a non-finite number or
    an integer too long to convert."""
    path = Path(path)
    _check_regular_file(path, "JSON")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordError(path, None, "file not found") from None
    except IsADirectoryError:
        raise RecordError(path, None, "is a folder, not a JSON file") from None
    except UnicodeDecodeError:
        raise RecordError(path, None, "not UTF-8 text") from None
    try:
        return _loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(path, exc.lineno, f"malformed JSON ({exc.msg})") from None
    except _Refused as exc:
        nth = 2 if exc.message.startswith("duplicate key") else 1
        raise RecordError(path, _line_of(text, exc.needle, nth), exc.message) from None
    except (ValueError, RecursionError) as exc:
        raise RecordError(path, None, f"cannot be read ({type(exc).__name__}: {str(exc)[:120]})") from None
