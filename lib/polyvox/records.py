"""Records on disk: dataclasses, validated JSONL, manifests, resume keys.

Every expensive step in polyvox appends one JSON object per line to a
``*.jsonl`` file and writes a ``manifest.json`` beside it. Reading validates
each line against a dataclass with pydantic, strictly (no coercion: ``"3"`` is not
an int, ``true`` is not a number): a malformed line, a missing field or a field of
the wrong type raises :class:`RecordError`, one line naming the file, the 1-based
line number, the field and what it should be, so a bad record is found where it is,
not three steps later. The records stay plain dataclasses (``dataclasses.asdict``,
pickling and construction in code are unchanged); pydantic checks them only as they
are read. Statuses are the enums of :mod:`polyvox.statuses`.

Appends are line-atomic in practice (one ``write`` of a complete line, then
flush + fsync); a run killed mid-write can leave at most one truncated last
line, which :func:`read_jsonl` with ``tolerate_truncated_tail=True`` drops (and
the resumed run rewrites), so nothing is lost and nothing is duplicated.
Re-exported here: :mod:`polyvox.secrets`' scrubbing and :mod:`polyvox.folders`' guards.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Type, TypeVar

import pydantic

from .jsonl import (RecordError, _check_regular_file, _loads, _no_constant, append_jsonl, iter_jsonl,  # noqa: F401
                    read_json, repair_truncated_tail, to_dict)
from .secrets import scrub, scrub_text  # noqa: F401 - re-exported
from .statuses import GradeStatus, Outcome, RunStatus  # noqa: F401 - re-exported

T = TypeVar("T")

def __getattr__(name: str):  # polyvox.folders' guards, re-exported (it imports this module)
    if name in ("RunLock", "check_out_path", "check_folder_kind"):
        from . import folders

        return getattr(folders, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_AnyStatus = pydantic.Strict(False)  # a status read from JSON is a string: checked against its enum


@dataclass
class Problem:
    id: str
    text: str
    gold: str
    metadata: dict = field(default_factory=dict)


@dataclass
class Sample:
    """One completion for one prompt; the key (problem_id, sample_index) is unique in a run."""

    problem_id: str
    sample_index: int
    prompt_hash: str
    completion: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" | "length" | ...
    latency_s: float
    metadata: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return (self.problem_id, self.sample_index)


@dataclass
class GradedSample(Sample):
    """A Sample with its grade. ``correct`` and ``grade_status`` have no defaults: a record without
    them (a rollouts line read as a graded one) is an error naming its file and line, never a
    silent "wrong, ok"."""

    correct: bool = field(kw_only=True)
    extracted: str | None = None
    grade_status: Annotated[GradeStatus, _AnyStatus] = field(kw_only=True)


@dataclass
class Verdict:
    """A pairwise judgement of two systems on one prompt (both A/B orders folded)."""

    prompt_id: str
    system_a: str
    system_b: str
    outcome: Annotated[Outcome, _AnyStatus]  # W | L | T from system_a's side
    detail: dict = field(default_factory=dict)


# strict: no coercion; enums read as their string values; keys a class does not name are ignored
_STRICT = pydantic.ConfigDict(strict=True, use_enum_values=True, extra="ignore")


@functools.lru_cache(maxsize=None)
def _checker(cls: type) -> type:
    """A pydantic dataclass mirroring ``cls`` (pydantic builds a subclass; ``cls`` stays a plain
    dataclass): built once per class, it checks each record read."""
    return pydantic.dataclasses.dataclass(cls, config=_STRICT)


def _shown(value: Any) -> str:
    """A wrong value in an error: short scalars as written, anything else by its type only
    (a record's text is neither repeated nor leaked into a log)."""
    if value is None:
        return "null"
    short = isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 16)
    return f"{type(value).__name__} {value!r}" if short else type(value).__name__


def validation_message(exc: pydantic.ValidationError, name: str) -> str:
    """pydantic's errors as one line: the first, naming its field and what it should be."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first["type"] == "missing":
        return f"missing field {where!r} for {name}{more}"
    where, msg = where or name, first["msg"]
    if not msg.startswith("Input should be "):  # a keyword the class lacks, a validator's message
        return f"field {where!r}: {msg}{more}"
    return f"field {where!r} should be {msg[16:]}, got {_shown(first['input'])}{more}"


def from_dict(cls: Type[T], obj: Any, path: os.PathLike | str = "<memory>", line: int | None = None) -> T:
    """A record (a dataclass, or a pydantic model) from a dict, checked strictly; a bad one is a
    :class:`RecordError` naming path, line, field and expectation."""
    if not isinstance(obj, dict):
        raise RecordError(path, line, f"expected a JSON object, got {type(obj).__name__}")
    try:
        if isinstance(cls, type) and issubclass(cls, pydantic.BaseModel):
            return cls.model_validate(obj)
        checked = _checker(cls)(**{str(k): v for k, v in obj.items()})
    except pydantic.ValidationError as exc:
        raise RecordError(path, line, validation_message(exc, cls.__name__)) from None
    # the values as read (a checked int stays an int in a float field), defaults from the check
    return cls(**{f.name: obj[f.name] if f.name in obj else getattr(checked, f.name)
                  for f in dataclasses.fields(cls) if f.init})


def read_jsonl(path: os.PathLike | str, cls: Type[T] | None = None, tolerate_truncated_tail: bool = False) -> list:
    """Read a JSONL file; with cls, validate each line into that dataclass."""
    out = []
    for line, obj in iter_jsonl(path, tolerate_truncated_tail):
        out.append(from_dict(cls, obj, path, line) if cls is not None else obj)
    return out


def sha256_file(path: os.PathLike | str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_tree(path: os.PathLike | str) -> str:
    """Hash of a file, or of a folder's files (relative names and contents, sorted)."""
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    h = hashlib.sha256()
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        h.update(str(f.relative_to(p)).encode())
        h.update(sha256_file(f).encode())
    return h.hexdigest()


def library_versions() -> dict:
    from importlib import metadata

    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in ("polyvox", "torch", "transformers", "peft", "trl", "vllm", "math-verify",
                 "sentence-transformers", "papermill", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def portable_path(path: os.PathLike | str | None) -> str | None:
    """A path as a manifest records it: relative to the working directory when inside it,
    else just its last two parts — never this machine's absolute layout."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    try:
        return p.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return Path(*p.parts[-2:]).as_posix() if len(p.parts) > 2 else p.name


def git_commit() -> str | None:
    """The checkout's commit, with "-dirty" when tracked files changed; None outside a git checkout.

    ``POLYVOX_GIT_COMMIT`` overrides it, for copies whose ``.git`` is not the code's (a remote
    machine sent a working tree with an older ``.git``; an unpacked archive).
    """
    import subprocess

    if os.environ.get("POLYVOX_GIT_COMMIT"):
        return os.environ["POLYVOX_GIT_COMMIT"]

    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


# What a folder holds is recorded as ``kind`` in its manifest; a folder never changes kind.
KIND_SAMPLE, KIND_JUDGE, KIND_CHAPTER, KIND_BOOK_CACHE, KIND_RL = "sample", "judge", "chapter", "book build", "rl"


def manifest_kind(manifest: dict) -> str | None:
    """The kind of run a manifest describes; manifests written before kinds were recorded are recognised
    by their shape (a sample run's settings name a task and a format; a judge run lists comparisons)."""
    if manifest.get("kind"):
        return str(manifest["kind"])
    settings = manifest.get("settings")
    if isinstance(settings, dict) and "task" in settings and "format" in settings:
        return KIND_SAMPLE
    if "comparisons" in manifest:
        return KIND_JUDGE
    return None


def write_manifest(folder: os.PathLike | str, **fields: Any) -> Path:
    """Write folder/manifest.json atomically with the given fields plus versions; secrets scrubbed.

    ``kind`` (what the folder holds) is kept from the existing manifest when not given, and a
    manifest of another kind is never replaced: a folder holds one kind of run.
    """
    folder = Path(folder)
    path = folder / "manifest.json"
    old = read_manifest(folder) if path.exists() else {}
    old_kind = manifest_kind(old) if old else None
    if "kind" not in fields and old_kind is not None:
        fields["kind"] = old_kind
    if old and old_kind is not None and fields.get("kind") is not None and fields["kind"] != old_kind:
        raise ValueError(f"{path}: describes a {old_kind} run; a {fields['kind']} run cannot replace it")
    folder.mkdir(parents=True, exist_ok=True)
    data = scrub(dict(fields))
    data.setdefault("versions", library_versions())
    data.setdefault("git_commit", git_commit())
    text = json.dumps(data, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"
    tmp = path.with_suffix(".json.tmp")
    # never through a link: a manifest.json.tmp planted as a symlink is removed, not followed
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def read_manifest(folder: os.PathLike | str) -> dict:
    """folder/manifest.json as a dict ({} when absent); anything but a JSON object is an error naming the file."""
    path = Path(folder) / "manifest.json"
    if not path.exists():
        return {}
    data = read_json(path)
    if not isinstance(data, dict):
        raise RecordError(path, None, f"expected a JSON object, got {type(data).__name__}")
    return data


