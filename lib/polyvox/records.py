"""Records on disk: dataclasses, validated JSONL, manifests, resume keys.

Every expensive step in polyvox appends one JSON object per line to a
``*.jsonl`` file and writes a ``manifest.json`` beside it. Reading validates
each line against a dataclass: a malformed line, a missing field or a field of
the wrong type raises :class:`RecordError` naming the file and the 1-based line
number, so a bad record is found where it is, not three steps later.

Appends are line-atomic in practice (one ``write`` of a complete line, then
flush + fsync); a run killed mid-write can leave at most one truncated last
line, which :func:`read_jsonl` with ``tolerate_truncated_tail=True`` drops (and
the resumed run rewrites), so nothing is lost and nothing is duplicated.
"""
from __future__ import annotations

import dataclasses
import functools
import datetime as _dt
import functools
import hashlib
import json
import os
import platform
import re
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Type, TypeVar

T = TypeVar("T")


class RecordError(ValueError):
    """A record that cannot be read; the message names file and line."""

    def __init__(self, path: os.PathLike | str, line: int | None, message: str):
        self.path, self.line = str(path), line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


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
    grade_status: str = field(kw_only=True)  # ok | no_answer | ungradable | timeout


@dataclass
class Verdict:
    """A pairwise judgement of two systems on one prompt (both A/B orders folded)."""

    prompt_id: str
    system_a: str
    system_b: str
    outcome: str  # "W" | "L" | "T" from system_a's side
    detail: dict = field(default_factory=dict)


def _type_ok(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        return any(_type_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is dict:
        return isinstance(value, dict)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


@functools.lru_cache(maxsize=None)
def _type_hints(cls: type) -> dict:
    # resolving annotations is most of the cost of reading a record: once per class, not per line
    return typing.get_type_hints(cls)


def from_dict(cls: Type[T], obj: Any, path: os.PathLike | str = "<memory>", line: int | None = None) -> T:
    """Build a dataclass from a dict, checking required fields and their types."""
    if not isinstance(obj, dict):
        raise RecordError(path, line, f"expected a JSON object, got {type(obj).__name__}")
    hints = _type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in obj:
            if not _type_ok(obj[f.name], hints[f.name]):
                raise RecordError(
                    path, line, f"field {f.name!r} should be {hints[f.name]}, got {type(obj[f.name]).__name__}"
                )
            kwargs[f.name] = obj[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(path, line, f"missing field {f.name!r} for {cls.__name__}")
    return cls(**kwargs)


def iter_jsonl(path: os.PathLike | str, tolerate_truncated_tail: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield (line_number, object) for each non-blank line; bad JSON raises RecordError."""
    path = Path(path)
    if not path.exists():
        raise RecordError(path, None, "file not found")
    if path.is_dir():
        raise RecordError(path, None, "is a folder, not a JSONL file")
    with path.open("rb") as fh:
        raw = fh.read()
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
            yield i, json.loads(text, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            if tolerate_truncated_tail and i - 1 == last:
                return
            raise RecordError(path, i, f"malformed JSON ({exc.msg} at column {exc.colno})") from None


def _no_constant(name: str):
    # NaN and ±Infinity are not JSON; Python's json module accepts them unless told not to
    raise json.JSONDecodeError(f"{name} is not a JSON value", name, 0)


def read_jsonl(path: os.PathLike | str, cls: Type[T] | None = None, tolerate_truncated_tail: bool = False) -> list:
    """Read a JSONL file; with cls, validate each line into that dataclass."""
    out = []
    for line, obj in iter_jsonl(path, tolerate_truncated_tail):
        out.append(from_dict(cls, obj, path, line) if cls is not None else obj)
    return out


def to_dict(record: Any) -> dict:
    return dataclasses.asdict(record) if dataclasses.is_dataclass(record) else dict(record)


def append_jsonl(path: os.PathLike | str, records: Iterable[Any]) -> int:
    """Append records (dataclasses or dicts), one line each, flushed to disk. Returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(to_dict(r), ensure_ascii=False) + "\n")
            n += 1
        fh.flush()
        os.fsync(fh.fileno())
    return n


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


# Key names that hold credentials: api_key, hf_token, access_token, client_secret, password,
# authorization ... but not max_tokens, eos_token, pad_token, cache_key or api_key_env (which
# names a variable, not a value).
_SECRET_NAME = re.compile(
    r"(?i)^(.*_)?(api_?key|secret(_key)?|password|passwd|authorization|credentials?|private_key|access_key)$"
    r"|^((hf|access|auth|bearer|refresh|session|id|github|gh|openai|api)_)?token$")
# Values that look like keys wherever they appear: OpenAI/Anthropic-style sk-…, Hugging Face
# hf_…, AWS access key ids, GitHub tokens, Slack tokens, and bearer credentials (a Basic credential is
# ordinary base64 after an ordinary word: it is removed as a known secret, see scrub_text).
_SECRET_VALUE = re.compile(
    r"sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|(?i:bearer)\s+[A-Za-z0-9._\-~+/]{8,}=*")
# Credentials inside a URL: scheme://user:password@host (or scheme://token@host).
_SECRET_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>]+@")
# A known secret is removed whole, and so is every run of text made of its pieces of this many
# characters or more: an error body cut in the middle of a key still shows none of it.
_SECRET_FRAGMENT = 6
_REDACTED = "<redacted>"


def _secret_forms(secret: str) -> set[str]:
    """The forms a secret takes in text: as is, JSON-escaped, percent-encoded, and inside a Basic credential."""
    import base64
    import urllib.parse

    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
             urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    try:
        forms.add(base64.b64encode(secret.encode()).decode().rstrip("="))
    except UnicodeEncodeError:
        pass
    return {f for f in forms if f}


@functools.lru_cache(maxsize=64)
def _fragment_pattern(secret: str) -> tuple[tuple[str, ...], re.Pattern]:
    n = _SECRET_FRAGMENT
    grams = tuple(sorted({secret[i:i + n] for i in range(len(secret) - n + 1)}))
    return grams, re.compile("(?=(?:" + "|".join(map(re.escape, grams)) + "))")


def _secret_spans(text: str, secret: str) -> list[tuple[int, int]]:
    """Where the secret, or any piece of ``_SECRET_FRAGMENT`` characters of it, stands in text."""
    n = _SECRET_FRAGMENT
    if len(secret) < n:
        spans, at = [], text.find(secret)
        while at >= 0:
            spans.append((at, at + len(secret)))
            at = text.find(secret, at + 1)
        return spans
    grams, pattern = _fragment_pattern(secret)
    if not any(g in text for g in grams):
        return []
    return [(m.start(), m.start() + n) for m in pattern.finditer(text)]  # overlapping starts included


def _redact_spans(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for start, end in sorted(spans):
        if start > pos or not out:
            out += [text[pos:start], _REDACTED]
        pos = max(pos, end)
    out.append(text[pos:])
    return "".join(out)


def scrub_text(text: str, *known: str | None) -> str:
    """text with credentials replaced by ``<redacted>``: key-shaped substrings (sk-…, hf_…, Bearer …),
    credentials in URLs (``scheme://user:pass@``), and each known secret value — whole, in its
    escaped and encoded forms, and any piece of six or more of its characters.

    A known value shorter than four characters is not searched for (it would cut ordinary words out
    of the text): callers refuse such secrets instead (the openai backend asks for six or more)."""
    spans = [s for k in known if k and len(k) >= 4 for form in _secret_forms(k) if len(form) >= 4
             for s in _secret_spans(text, form)]
    if spans:
        text = _redact_spans(text, spans)
    text = _SECRET_URL_USERINFO.sub(lambda m: m.group(1) + _REDACTED + "@", text)
    return _SECRET_VALUE.sub(_REDACTED, text)


def scrub(params, *known: str | None):
    """Copy of params with credentials redacted: by key name, and by value (:func:`scrub_text`) at any depth."""
    if isinstance(params, dict):
        return {k: _REDACTED if isinstance(k, str) and _SECRET_NAME.match(k) and v not in (None, "")
                else scrub(v, *known) for k, v in params.items()}
    if isinstance(params, (list, tuple)):
        return [scrub(v, *known) for v in params]
    if isinstance(params, str):
        return scrub_text(params, *known)
    return params


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
    import os
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


class RunLock:
    """One writer per run folder: an exclusive ``flock`` on ``<folder>/.lock``, held for the whole run.

    The lock file holds the holder's PID; a second writer gets one line naming it. The
    kernel drops the lock when the holder dies (a SIGKILL included), so a stale lock
    file never blocks a resume. A folder this lock created is removed again when the
    block it guards raises before writing anything else there: a refused run leaves
    neither an empty folder nor a lock file behind.
    """

    def __init__(self, folder: os.PathLike | str):
        self.folder = Path(folder)
        self.fh = None
        self.created: list[Path] = []

    def __enter__(self) -> "RunLock":
        import fcntl

        check_out_path(self.folder)
        missing = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
        self.folder.mkdir(parents=True, exist_ok=True)
        self.created = missing  # deepest first
        fh = open(self.folder / ".lock", "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise RecordError(self.folder, None, f"in use by process {holder}; one writer per run folder") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self.fh = fh
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self.fh is not None:
            self.fh.close()  # closing releases the flock
            self.fh = None
        if exc_type is not None and self.created:
            # the run failed before writing anything but the lock: leave no trace of it
            if {p.name for p in self.folder.iterdir()} <= {".lock"}:
                (self.folder / ".lock").unlink(missing_ok=True)
                for p in self.created:
                    try:
                        p.rmdir()
                    except OSError:
                        break


def check_out_path(folder: os.PathLike | str) -> Path:
    """A folder a command may write into: refuses ``''``/``.``, a file, a path through a file."""
    if folder is None or str(folder).strip() in ("", "."):
        raise ValueError(f"an output folder must be named (got {str(folder)!r}); polyvox never writes into "
                         "the current folder itself")
    p = Path(folder)
    for q in (p, *p.parents):
        if q.exists() and not q.is_dir():
            raise ValueError(f"{q}: a file, not a folder" + ("" if q == p else f" (in the path {p})"))
    return p


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


def check_folder_kind(folder: os.PathLike | str, kind: str) -> Path:
    """Read-only check that ``folder`` may hold a run of ``kind``: a new folder, an empty one, or one whose
    manifest is of the same kind. Call it before writing anything (validate first, write second)."""
    p = check_out_path(folder)
    if not p.is_dir():
        return p
    manifest = read_manifest(p)
    if manifest:
        old = manifest_kind(manifest)
        if old != kind:
            raise ValueError(f"{p}: holds a {old or 'unrecognised'} run (its manifest.json), not a {kind} run; "
                             "a folder holds one kind of run: use a new folder")
    return p


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
    with open(tmp, "w", encoding="utf-8") as fh:
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


def read_json(path: os.PathLike | str) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except FileNotFoundError:
        raise RecordError(path, None, "file not found") from None
    except IsADirectoryError:
        raise RecordError(path, None, "is a folder, not a JSON file") from None
    except UnicodeDecodeError:
        raise RecordError(path, None, "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise RecordError(path, exc.lineno, f"malformed JSON ({exc.msg})") from None
