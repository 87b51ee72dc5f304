"""A judge run's inputs and records: systems files and ``FILE:SYSTEM`` sides, the pairs of a comparison,
the verdicts cache (``verdicts.jsonl``) and the check that a folder may hold a judge run."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Annotated

import pydantic
from pydantic import Field

from ..records import KIND_JUDGE, RecordError, check_out_path, iter_jsonl, portable_path, repair_truncated_tail
from ..statuses import Choice
from .judges import Call

VERDICTS = "verdicts.jsonl"
CHOICES = (Choice.A, Choice.B, Choice.TIE)  # what a judge may answer
RECORDED = tuple(Choice)  # what a verdict line's ``choice`` may hold: those, or unparseable
# what a verdicts folder holds besides its manifest (tallies.json and stage.json: the personas pipeline's
# judge stage, its tallies and its stage record)
FOLDER_FILES = {VERDICTS, f"{VERDICTS}.gz", "manifest.json", ".lock", "tallies.json", "manifest.json.tmp", "stage.json",
                "stage.json.tmp"}


class SystemsRow(pydantic.BaseModel):
    """One row of a systems file: a prompt, what a good answer prefers, and each system's response
    (other fields, such as the labels a tally groups by, are kept as they are)."""

    model_config = pydantic.ConfigDict(strict=True, extra="allow", frozen=True)

    prompt_id: str = Field(min_length=1)
    prompt: str
    preference: str
    responses: dict[str, str]


def _row_message(exc: pydantic.ValidationError) -> str:
    """pydantic's first error about a systems row as the one line the file's reader gives (a missing
    field before a wrong one)."""
    error = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "missing")[0]
    loc, got = error["loc"], type(error["input"]).__name__
    if error["type"] == "missing":
        return f"missing field {loc[0]!r} for a systems row"
    if loc == ("prompt_id",) and error["type"] == "string_too_short":
        return "empty prompt_id"
    if loc == ("responses",):
        return f"field 'responses' should be an object {{system: text}}, got {got}"
    if loc[0] == "responses":  # ("responses", system) or ("responses", system, "[key]")
        return f"response of system {loc[1]!r} should be a string, got {got}"
    return f"field {loc[0]!r} should be a string, got {got}"


def read_systems(path: str | Path) -> dict[str, dict]:
    """A systems file by prompt id, each row checked as a :class:`SystemsRow` (and returned as read); a
    malformed row is an error naming the file and line. Every text is text UTF-8 can encode: the reader
    refuses a lone surrogate (the JSON escape ``\\ud800``) with its line."""
    rows = {}
    for line, obj in iter_jsonl(path):
        if not isinstance(obj, dict):
            raise RecordError(path, line, f"expected a JSON object (a systems row), got {type(obj).__name__}")
        try:
            SystemsRow.model_validate(obj)
        except pydantic.ValidationError as exc:
            raise RecordError(path, line, _row_message(exc)) from None
        if obj["prompt_id"] in rows:
            raise RecordError(path, line, f"duplicate prompt_id {obj['prompt_id']!r}")
        rows[obj["prompt_id"]] = obj
    if not rows:
        raise RecordError(path, None, "no systems rows")
    return rows


def parse_side(spec: str) -> tuple[Path, str]:
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"expected FILE:SYSTEM, got {spec!r}")
    path, system = spec.rsplit(":", 1)
    if not path.strip() or not system.strip():
        raise ValueError(f"expected FILE:SYSTEM with both parts named, got {spec!r}")
    return Path(path), system


def portable_side(spec: str) -> str:
    """``FILE:SYSTEM`` as a manifest records it: the file as :func:`polyvox.records.portable_path` writes it
    (anything else, e.g. an older manifest's odd entry, is kept as it is)."""
    try:
        path, system = parse_side(spec)
    except ValueError:
        return spec
    return f"{portable_path(path)}:{system}"


@dataclass
class Pair:
    prompt_id: str
    row: dict  # A's row (prompt, preference, labels)
    a: str
    b: str


def pairs(a_spec: str, b_spec: str) -> list[Pair]:
    """The prompts both sides answer, in A's file order."""
    (fa, sa), (fb, sb) = parse_side(a_spec), parse_side(b_spec)
    ra, rb = read_systems(fa), (read_systems(fb) if fb != fa else None)
    rb = rb if rb is not None else ra
    for f, rows, system in ((fa, ra, sa), (fb, rb, sb)):
        if not any(system in r["responses"] for r in rows.values()):
            names = sorted({k for r in rows.values() for k in r["responses"]})
            raise ValueError(f"{f}: no row answers as system {system!r}; systems: {', '.join(names) or 'none'}")
    out = []
    for pid, row in ra.items():
        if pid not in rb or sa not in row["responses"] or sb not in rb[pid]["responses"]:
            continue
        if rb[pid]["prompt"] != row["prompt"]:
            raise ValueError(f"prompt {pid!r} differs between {fa} and {fb}")
        out.append(Pair(pid, row, row["responses"][sa], rb[pid]["responses"][sb]))
    if not out:
        raise ValueError(f"no prompt is answered by both {a_spec} and {b_spec}")
    return out


def _calls(p: Pair) -> tuple[Call, Call]:
    mk = lambda x, y: Call(p.prompt_id, p.row["prompt"], p.row["preference"], x, y, p.row)  # noqa: E731
    return mk(p.a, p.b), mk(p.b, p.a)


def call_key(identity: dict, c: Call) -> str:
    blob = json.dumps([identity, c.prompt_id, c.prompt, c.preference, c.first, c.second], sort_keys=True,
                      ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def check_out(out: str | Path) -> Path:
    """Read-only: ``out`` may hold verdicts — a new or empty folder, or one holding a judge run.

    A folder of another kind (a sample run, a pipeline) is refused, and so is one holding files
    but no manifest: a folder holds one kind of run.
    """
    from ..stages import check_kind  # knows the pipelines' older manifests too

    out = check_out_path(out)
    check_kind(out, KIND_JUDGE)
    if out.is_dir() and not (out / "manifest.json").exists():
        other = sorted(p.name for p in out.iterdir() if p.name not in FOLDER_FILES)
        if other:
            raise ValueError(f"{out}: holds {other[0]}{' …' if len(other) > 1 else ''} but no manifest.json: "
                             "not a judge run folder; a folder holds one kind of run: use a new folder")
    return out


class VerdictLine(pydantic.BaseModel):
    """One line of verdicts.jsonl: the call's key (its sha256) and the judge's :class:`Choice` (the other
    fields: judge, prompt, the texts' digests, raw reply, attempts, latency)."""

    model_config = pydantic.ConfigDict(strict=True, extra="allow", frozen=True)

    key: str = Field(pattern=r"^[0-9a-f]{64}$")
    choice: Annotated[Choice, pydantic.Strict(False)]  # read from JSON: a string, checked against the enum


def _verdict(path: Path, line: int, obj) -> dict:
    """A verdicts line checked as a :class:`VerdictLine`, returned as read."""
    if not isinstance(obj, dict):
        raise RecordError(path, line, f"expected a JSON object (a verdict), got {type(obj).__name__}")
    try:
        VerdictLine.model_validate(obj)
    except pydantic.ValidationError as exc:
        if exc.errors(include_url=False)[0]["loc"] == ("key",):
            key = obj.get("key")
            raise RecordError(path, line, "a verdict needs its 'key' (64 hex digits, the call's sha256), got "
                                          + (repr(key)[:40] if key is not None else "none")) from None
        raise RecordError(path, line, f"choice {obj.get('choice')!r} is not one of {', '.join(RECORDED)}") from None
    return obj


_READ_ONLY: dict[tuple, Mapping[str, dict]] = {}  # load_cache(repair=False) by the file's identity (see there)
_READ_ONLY_MAX = 4


def load_cache(out: str | Path, repair: bool = True) -> Mapping[str, dict]:
    """The recorded calls by key; a parsed record may replace an unparseable one, nothing else repeats.

    Every line is checked (a JSON object with its key and a choice of :data:`RECORDED`); a bad
    line is an error naming the file and line. ``repair``: cut a torn last line (a writer
    killed mid-append) from the file; without it (plan, tally: read-only) the torn line is skipped.

    Read-only loads are remembered in the process, keyed by the file's path, inode, size and modification
    time (a chapter tallies a hundred comparisons against one 128,000-line cache: parsing it each time was
    minutes), and handed out as a read-only mapping so no caller can change what the next one reads; an
    append, a rewrite or a replaced file changes the key and is read again.
    """
    path = Path(out) / VERDICTS
    if not path.exists():
        if not (path.parent / f"{VERDICTS}.gz").is_file():
            return {}
        if repair:  # a writer would start a second, plain cache beside the shipped one and ask every call again
            raise RecordError(path.parent / f"{VERDICTS}.gz", None, "a shipped cache, stored gzipped: read-only "
                              f"(gunzip it to {VERDICTS} to add verdicts)")
        # a shipped run (polyvox.ship) keeps its cache gzipped: read as it is (iter_jsonl reads the .gz)
    elif repair:
        repair_truncated_tail(path)
    if repair:
        return _parse_cache(path, repair)
    read = path if path.exists() else path.parent / f"{VERDICTS}.gz"
    st = read.stat()
    key = (str(read.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _READ_ONLY:
        if len(_READ_ONLY) >= _READ_ONLY_MAX:
            _READ_ONLY.pop(next(iter(_READ_ONLY)))
        _READ_ONLY[key] = MappingProxyType(_parse_cache(path, repair))
    return _READ_ONLY[key]


def _parse_cache(path: Path, repair: bool) -> dict[str, dict]:
    cache: dict[str, dict] = {}
    for line, obj in iter_jsonl(path, tolerate_truncated_tail=not repair):
        obj = _verdict(path, line, obj)
        old = cache.get(obj["key"])
        if old is not None and old["choice"] != Choice.UNPARSEABLE:
            raise RecordError(path, line, f"duplicate verdict for key {obj['key'][:12]}…")
        cache[obj["key"]] = obj
    return cache
