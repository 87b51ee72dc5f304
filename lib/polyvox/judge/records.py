"""A judge run's inputs and records: systems files and ``FILE:SYSTEM`` sides, the pairs of a comparison,
the verdicts cache (``verdicts.jsonl``) and the check that a folder may hold a judge run."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..records import KIND_JUDGE, RecordError, check_out_path, iter_jsonl, portable_path, repair_truncated_tail
from .judges import Call

VERDICTS = "verdicts.jsonl"
CHOICES = ("A", "B", "tie")
RECORDED = CHOICES + ("unparseable",)  # what a verdict line's ``choice`` may hold
# what a verdicts folder holds besides its manifest (tallies.json and stage.json: the personas pipeline's
# judge stage, its tallies and its stage record)
FOLDER_FILES = {VERDICTS, "manifest.json", ".lock", "tallies.json", "manifest.json.tmp", "stage.json",
                "stage.json.tmp"}


def read_systems(path: str | Path) -> dict[str, dict]:
    """A systems file by prompt id; a malformed row is an error naming the file and line.

    Every text of a row (its field names and string fields, system names and responses) must be text UTF-8
    can encode: a lone surrogate (the JSON escape ``\\ud800``) is refused here, not met later.
    """
    rows = {}
    for line, obj in iter_jsonl(path):
        if not isinstance(obj, dict):
            raise RecordError(path, line, f"expected a JSON object (a systems row), got {type(obj).__name__}")
        for k in ("prompt_id", "prompt", "preference", "responses"):
            if k not in obj:
                raise RecordError(path, line, f"missing field {k!r} for a systems row")
        for k in ("prompt_id", "prompt", "preference"):
            if not isinstance(obj[k], str):
                raise RecordError(path, line, f"field {k!r} should be a string, got {type(obj[k]).__name__}")
        if not obj["prompt_id"]:
            raise RecordError(path, line, "empty prompt_id")
        responses = obj["responses"]
        if not isinstance(responses, dict):
            raise RecordError(path, line, f"field 'responses' should be an object {{system: text}}, "
                                          f"got {type(responses).__name__}")
        bad = next((k for k, v in responses.items() if not isinstance(v, str)), None)
        if bad is not None:
            raise RecordError(path, line, f"response of system {bad!r} should be a string, "
                                          f"got {type(responses[bad]).__name__}")
        texts = [(f"field name {k!r}"[:60], k) for k in obj]
        texts += [(f"field {k!r}"[:60], v) for k, v in obj.items() if isinstance(v, str)]
        texts += [(f"system name {k!r}"[:60], k) for k in responses]
        texts += [(f"response of system {k!r}"[:60], v) for k, v in responses.items()]
        bad = next((name for name, text in texts if not _encodable(text)), None)
        if bad is not None:
            raise RecordError(path, line, f"{bad} holds a lone surrogate (such as the JSON escape \\ud800), "
                                          "not text that UTF-8 can encode")
        if obj["prompt_id"] in rows:
            raise RecordError(path, line, f"duplicate prompt_id {obj['prompt_id']!r}")
        rows[obj["prompt_id"]] = obj
    if not rows:
        raise RecordError(path, None, "no systems rows")
    return rows


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


def _verdict(path: Path, line: int, obj) -> dict:
    if not isinstance(obj, dict):
        raise RecordError(path, line, f"expected a JSON object (a verdict), got {type(obj).__name__}")
    key = obj.get("key")
    if not isinstance(key, str) or not re.fullmatch(r"[0-9a-f]{64}", key):
        raise RecordError(path, line, "a verdict needs its 'key' (64 hex digits, the call's sha256), got "
                                      + (repr(key)[:40] if key is not None else "none"))
    if obj.get("choice") not in RECORDED:
        raise RecordError(path, line, f"choice {obj.get('choice')!r} is not one of {', '.join(RECORDED)}")
    return obj


def load_cache(out: str | Path, repair: bool = True) -> dict[str, dict]:
    """The recorded calls by key; a parsed record may replace an unparseable one, nothing else repeats.

    Every line is checked (a JSON object with its key and a choice of :data:`RECORDED`); a bad
    line is an error naming the file and line. ``repair``: cut a torn last line (a writer
    killed mid-append) from the file; without it (plan, tally: read-only) the torn line is skipped.
    """
    path = Path(out) / VERDICTS
    if not path.exists():
        return {}
    if repair:
        repair_truncated_tail(path)
    cache: dict[str, dict] = {}
    for line, obj in iter_jsonl(path, tolerate_truncated_tail=not repair):
        obj = _verdict(path, line, obj)
        old = cache.get(obj["key"])
        if old is not None and old["choice"] != "unparseable":
            raise RecordError(path, line, f"duplicate verdict for key {obj['key'][:12]}…")
        cache[obj["key"]] = obj
    return cache
