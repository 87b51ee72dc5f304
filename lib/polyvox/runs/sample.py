"""Sampling into a run folder: n completions per problem into ``rollouts.jsonl``, resumable.

The settings are computed and compared with the folder's manifest before anything is written;
the work list is every (problem, sample_index) of this shard not yet recorded, appended after
each chunk of ``chunk`` requests (see :mod:`polyvox.runs`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Literal

import pydantic
from pydantic import Field

from .. import formats, tasks
from ..backends.base import Backend, BackendSpec, LocalBackend, Request, SamplingParams
from ..records import (KIND_SAMPLE, RecordError, RunLock, Sample, append_jsonl, check_folder_kind, from_dict,
                       iter_jsonl, manifest_kind, now_iso, portable_path, read_manifest, repair_truncated_tail,
                       scrub_text, write_manifest)
from ..statuses import RunStatus
from .folder import GRADED, MANIFEST, ROLLOUTS, _jsonable, _out_path, check_settings

# files a sample folder without a manifest may hold (its lock, a torn manifest write); any other file
# means the folder is someone else's, and sampling into it is refused before anything is written
_OWN_FILES = {".lock", MANIFEST + ".tmp"}


def sample_seed(seed: int, problem_id: str, index: int) -> int:
    h = hashlib.sha256(f"{seed}|{problem_id}|{index}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


class SampleArgs(pydantic.BaseModel):
    """Sampling's arguments, checked before anything loads or is written. Strict: ``True`` is not an
    integer, ``"3"`` not a number. A field's description is what it must be, as the one-line refusal
    says it (``--n must be an integer ≥ 1, got 0``)."""

    model_config = pydantic.ConfigDict(strict=True, frozen=True)

    n: int = Field(ge=1, description="an integer ≥ 1")
    max_tokens: int = Field(ge=1, description="an integer ≥ 1")
    temperature: float = Field(ge=0, allow_inf_nan=False, description="a number ≥ 0")
    top_p: float = Field(gt=0, le=1, description="a number in (0, 1]")
    limit: int | None = Field(ge=1, description="an integer ≥ 1 (or absent)")
    nshards: int = Field(ge=1, description="an integer ≥ 1")
    chunk: int = Field(ge=1, description="an integer ≥ 1")
    seed: int = Field(ge=0, description="an integer ≥ 0")
    shard: int = Field(ge=0, description="in 0 … {last} (--nshards {nshards})")
    fmt: str

    @pydantic.model_validator(mode="after")
    def _shard_and_format(self):
        if self.shard >= self.nshards:
            raise ValueError(f"--shard must be in 0 … {self.nshards - 1} (--nshards {self.nshards}), "
                             f"got {self.shard!r}")
        if self.fmt not in formats.FORMATS:
            raise ValueError(f"unknown format {self.fmt!r}; formats: {', '.join(formats.FORMATS)}")
        return self


SAMPLE_RULES = SampleArgs  # the name polyvox.runs exports (the rules were a table; the model's fields hold them now)


def _first_error(exc: pydantic.ValidationError) -> tuple[str | None, dict]:
    """The first of pydantic's errors (a missing field before a wrong one) and the field it names; a
    validator's own message is the error itself."""
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "missing")
    first = errors[0]
    return (str(first["loc"][0]) if first["loc"] else None), first


def _validator_message(error: dict) -> str | None:
    return str(error["ctx"]["error"]) if error["type"] == "value_error" else None


def check_sample_args(fmt: str, n: int, params: SamplingParams, limit, shard: int, nshards: int, chunk: int,
                      seed: int) -> SampleArgs:
    """The arguments as a :class:`SampleArgs`; a bad one is a ValueError in one line naming the option."""
    values = {"n": n, "max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p,
              "limit": limit, "nshards": nshards, "chunk": chunk, "seed": seed, "shard": shard, "fmt": fmt}
    try:
        return SampleArgs(**values)
    except pydantic.ValidationError as exc:
        name, error = _first_error(exc)
        what = SampleArgs.model_fields[name].description.format(last=nshards - 1, nshards=nshards) if name else ""
        message = _validator_message(error) or f"--{name.replace('_', '-')} must be {what}, got {values[name]!r}"
        raise ValueError(message) from None


class SampleSettings(pydantic.BaseModel):
    """What grade and merge rely on in a sample run's ``settings`` (the other settings are kept, unchecked).

    A shard (``shard`` an index below ``nshards``) records its problems' hash; a merged run
    (``shard: "merged"``) records each shard's. A field's description is what it should be, as the
    one-line refusal says it (``settings.n should be an integer ≥ 1, got 0``)."""

    model_config = pydantic.ConfigDict(strict=True, extra="allow", frozen=True)

    task: str = Field(min_length=1, description="a task name")
    task_options: dict = Field(description="a mapping")
    n: int = Field(ge=1, description="an integer ≥ 1")
    limit: int | None = Field(ge=1, description="an integer ≥ 1 or null")
    nshards: int = Field(ge=1, description="an integer ≥ 1")
    shard: Annotated[int, Field(ge=0)] | Literal["merged"] = Field(
        None, description="an index below nshards ({nshards}) or 'merged'", validate_default=True)
    problems_sha256: str | None = Field(None, description="a hash (text)")
    shard_problems_sha256: dict[str, str] | None = Field(None, description="a mapping {shard index: hash}")

    @pydantic.model_validator(mode="after")
    def _shards(self):
        if self.shard != "merged":
            if self.shard >= self.nshards:
                raise ValueError(f"settings.shard should be an index below nshards ({self.nshards}) or 'merged', "
                                 f"got {self.shard!r}")
            if self.problems_sha256 is None:
                raise ValueError("settings.problems_sha256 missing: the run's problems cannot be checked")
            return self
        if not self.shard_problems_sha256:
            raise ValueError("settings.shard_problems_sha256 missing: this run was merged before polyvox recorded "
                             "its shards' problems, so they cannot be checked; merge the shards again")
        for k, v in self.shard_problems_sha256.items():
            if not (k.isdigit() and int(k) < self.nshards):
                raise ValueError(f"settings.shard_problems_sha256 has a bad entry {k!r}: {v!r}")
        return self


def check_run_settings(path: Path, settings: dict) -> SampleSettings:
    """A sample manifest's settings as a :class:`SampleSettings`; bad ones are a :class:`RecordError`
    naming the manifest and the setting."""
    try:
        return SampleSettings.model_validate(settings)
    except pydantic.ValidationError as exc:
        name, error = _first_error(exc)
        message = _validator_message(error)
        if message is None and error["type"] == "missing":
            message = f"settings.{name} missing: not a complete polyvox sample manifest"
        elif message is None and len(error["loc"]) > 1 and name == "shard_problems_sha256":
            message = f"settings.{name} has a bad entry {error['loc'][1]!r}: {error['input']!r}"
        elif message is None:
            what = SampleSettings.model_fields[name].description.format(nshards=settings.get("nshards"))
            message = f"settings.{name} should be {what}, got {settings.get(name)!r}"
        raise RecordError(path, None, message) from None


def _check_sample_folder(out: Path, settings: dict) -> None:
    """Read-only: the folder may take this run (its kind, then its settings)."""
    if out.is_dir():
        manifest = read_manifest(out)
        if manifest and manifest_kind(manifest) not in (None, KIND_SAMPLE):
            check_folder_kind(out, KIND_SAMPLE)  # raises: a folder of another kind
    check_settings(out, settings)
    check_folder_kind(out, KIND_SAMPLE)
    if out.is_dir() and not (out / MANIFEST).exists():
        other = sorted(p.name for p in out.iterdir() if p.name not in _OWN_FILES)
        if other:
            raise ValueError(f"{out}: holds {other[0]}{' …' if len(other) > 1 else ''} but no manifest.json: "
                             "not a sample run folder; polyvox never writes into a folder it did not start: "
                             "use a new --out folder")


def _digest(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def problem_digests(problems) -> dict[str, str]:
    """Per problem, short digests of its text and gold (``"text <12 hex> gold <12 hex>"``): recorded in a
    sample manifest beside ``problems_sha256``, so a problem that changed later can be named."""
    return {p.id: f"text {_digest(p.text)} gold {_digest(p.gold)}" for p in problems}


def label_digests(problems) -> dict[str, str]:
    """Per problem, a short digest of its labels (``metadata``: level, subject …), recorded in a sample
    manifest beside :func:`problem_digests` (which cover text and gold only), so grade can name a
    problem whose labels were edited in the data since sampling."""
    return {p.id: _digest(json.loads(json.dumps(p.metadata, sort_keys=True, default=str))) for p in problems}


def _existing(out: Path, repair: bool = True) -> dict[tuple[str, int], int]:
    """The keys already recorded (key → line). ``repair`` cuts a torn last line first (a write); without
    it the torn line is only skipped (read-only, for the checks made before the lock)."""
    path = out / ROLLOUTS
    if not path.exists():
        return {}
    if repair:
        repair_truncated_tail(path)
    done: dict[tuple[str, int], int] = {}
    for line, obj in iter_jsonl(path, tolerate_truncated_tail=not repair):
        s = from_dict(Sample, obj, path, line)
        if s.key in done:
            raise RecordError(path, line, f"duplicate key {s.key}")
        done[s.key] = line
    return done


def _check_keys(out: Path, done: dict, problems, n: int) -> None:
    """Every recorded key belongs to this run (its problems, sample indices 0 … n-1)."""
    ids = {p.id for p in problems}
    for key, line in done.items():
        if key[0] not in ids or not 0 <= key[1] < n:
            raise RecordError(out / ROLLOUTS, line, f"key {key} is not in this run (its problems, sample indices "
                                                    f"0 … {n - 1}): the folder holds records of another run")


def prompt_mismatches(path: str | Path, prompts: dict, tokenizer=None) -> list[tuple[int, str, str, object, object]]:
    """Recorded samples in ``path`` (rollouts or graded JSONL, gzipped or not) not drawn from the prompt this code
    builds for their problem (``prompts``: problem id → :class:`~polyvox.formats.Prompt`, as
    ``backend.prompt(fmt, text)`` gives): ``(line, problem id, field, recorded, expected)`` each, ``field``
    ``"prompt_hash"`` (:meth:`Request.hash`: the request's text and template options) or, with the local model's
    ``tokenizer``, ``"prompt_tokens"`` (the length of the text the model read, rendered as a local backend renders
    it). The hash alone cannot see how a request is rendered (a chat flag, a template applied twice); the token
    count can. Problems absent from ``prompts`` are not checked."""
    return _scan_prompts(path, prompts, tokenizer)[1]


def _scan_prompts(path, prompts: dict, tokenizer=None) -> tuple[int, list]:
    """(records of the problems in ``prompts``, their mismatches): :func:`prompt_mismatches` in one read."""
    from ..backends.base import local_prompt

    want_hash = {pid: Request.of(pr, 0).hash() for pid, pr in prompts.items()}
    want_len = {}
    if tokenizer is not None:
        rendered = {pid: local_prompt(tokenizer, Request.of(pr, 0)) for pid, pr in prompts.items()}
        ids = tokenizer(list(rendered.values()), add_special_tokens=False)["input_ids"] if rendered else []
        want_len = {pid: len(x) for pid, x in zip(rendered, ids)}
    out, checked = [], 0
    for line, obj in iter_jsonl(path):
        pid = obj.get("problem_id")
        if pid not in want_hash:
            continue
        checked += 1
        if obj.get("prompt_hash") != want_hash[pid]:
            out.append((line, pid, "prompt_hash", obj.get("prompt_hash"), want_hash[pid]))
        elif want_len and obj.get("prompt_tokens") != want_len[pid]:
            out.append((line, pid, "prompt_tokens", obj.get("prompt_tokens"), want_len[pid]))
    return checked, out


def check_recorded_prompts(folder: str | Path, tokenizer, data_dir="data", cache: dict | None = None) -> dict:
    """A sampled folder's records against the prompts this code builds for its problems (task, options and format
    from its manifest; ``tokenizer``: the sampled model's, whose chat template a chat format uses), as a local
    backend builds them: ``{"file", "format", "checked", "mismatched", "first"}``, ``first`` the first mismatch
    ``(line, problem id, recorded hash, expected hash)`` or None. Reads rollouts, else grades (gzipped or not)."""
    from ..jsonl import stored

    folder = Path(folder)
    settings = read_manifest(folder)["settings"]
    key = json.dumps([settings["task"], settings.get("limit"), settings.get("task_options"), settings["format"]],
                     sort_keys=True)
    prompts = None if cache is None else cache.get(key)
    if prompts is None:  # ``cache`` (the caller's, one tokenizer): folders sampled on one problem set build it once
        problems = tasks.load(settings["task"], data_dir, limit=settings.get("limit"),
                              **(settings.get("task_options") or {}))
        local = LocalBackend()
        local.tokenizer = tokenizer
        prompts = {p.id: local.prompt(settings["format"], p.text) for p in problems}
        if cache is not None:
            cache[key] = prompts
    path = stored(folder / ROLLOUTS)
    if not path.exists():
        path = stored(folder / GRADED)
    checked, bad = _scan_prompts(path, prompts, tokenizer)
    return {"file": path, "format": settings["format"], "checked": checked, "mismatched": len(bad),
            "first": bad[0] if bad else None}


def _check_prompts(out: Path, prompts: dict, tokenizer=None) -> None:
    """A resumed run appends only to samples drawn from the prompts this code builds: the settings do not name the
    prompt code, so a folder sampled by other prompt code (a changed template, a template applied twice) would
    otherwise take new samples from another distribution silently. ``tokenizer``: a local backend's, so that the
    rendered prompt's length is compared too."""
    if not (out / ROLLOUTS).exists():
        return
    bad = prompt_mismatches(out / ROLLOUTS, prompts, tokenizer)
    if bad:
        line, pid, field, got, want = bad[0]
        raise RecordError(out / ROLLOUTS, line, f"problem {pid} was sampled from another prompt than this code "
                                                f"builds ({field} {got}, now {want}; {len(bad)} such records): "
                                                "sample into a new folder")


_ABSOLUTE = re.compile(r"(?<![\w.:/~-])/[^\s'\"`]+")


def _portable_text(text: str) -> str:
    """text with every absolute path replaced by its portable form (relative to the working
    directory, else its last two parts): no machine's layout in a manifest."""
    return _ABSOLUTE.sub(lambda m: portable_path(m.group(0)) or "", text)


def _one_line(exc: BaseException, secrets=()) -> str:
    """An error as one line for a manifest: scrubbed of credentials (and of the backend's known
    secrets), its absolute paths made portable."""
    text = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return _portable_text(scrub_text(text, *secrets))[:500]


def _backend_secrets(backend) -> tuple[str, ...]:
    """The secrets a backend knows (the openai backend's key and URL credentials), else none."""
    inner = getattr(backend, "backend", backend)  # a CachingBackend wraps one
    for b in (backend, inner):
        fn = getattr(b, "secrets", None)
        if callable(fn):
            try:
                return tuple(x for x in fn() if x)
            except Exception:  # noqa: BLE001 — a failing lookup must not hide the run's own error
                return ()
    return ()


def _replace_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _after_failure(out: Path, previous: bytes | None, fields: dict, appended: int, exc: BaseException,
                   secrets=()) -> None:
    """A resume that fails leaves the previous manifest, so the previous status; a new run that wrote no
    record leaves no manifest (RunLock then removes the folder it made); a new run that wrote records
    says it failed (or was interrupted) and how many it wrote."""
    path = out / MANIFEST
    try:
        if previous is not None:
            if appended and b'"grading"' in previous:  # its grades went with the rollouts they graded
                data = json.loads(previous)
                data.pop("grading", None)
                previous = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()
            _replace_bytes(path, previous)
        elif not (out / ROLLOUTS).exists():
            path.unlink(missing_ok=True)
        else:
            stopped = RunStatus.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else RunStatus.FAILED
            write_manifest(out, **fields, status=stopped, error=_one_line(exc, secrets), records_written=appended)
    except OSError:
        pass  # the manifest keeps saying "running", which is true of a run that stopped mid-way


def sample(out: str | Path, task: str, fmt: str, backend: Backend | BackendSpec, n: int, params: SamplingParams,
           seed: int = 0, limit: int | None = None, shard: int = 0, nshards: int = 1, data_dir="data",
           chunk: int = 64, progress: bool = True, task_options: dict | None = None,
           cache: str | Path | None = None) -> Path:
    """Sample n completions per problem into out/rollouts.jsonl, resuming what is there.

    ``backend`` may be a :class:`~polyvox.backends.BackendSpec`: it is loaded only after
    every argument, the task, the model path and the folder's settings have been checked.
    ``task_options`` go to :func:`polyvox.tasks.load` (``level``, ``per_level``, …);
    ``cache`` names a :mod:`polyvox.cache` file to answer repeated requests from.
    A complete run is returned untouched (its manifest byte for byte).
    """
    from tqdm.auto import tqdm

    check_sample_args(fmt, n, params, limit, shard, nshards, chunk, seed)
    out = _out_path(out)
    task_options = dict(task_options or {})
    problems = tasks.load(task, data_dir, limit=limit, **task_options)[shard::nshards]
    if not problems:
        raise ValueError(f"task {task} with {task_options or 'no options'}: no problems in shard {shard}")
    stop = params.stop or (tuple(formats.PANEL_STOP) if fmt == "panel" else ())
    params = SamplingParams(params.max_tokens, params.temperature, params.top_p, tuple(stop))
    settings = _jsonable({"task": task, "task_options": task_options, "format": fmt, "n": n, "seed": seed,
                          "limit": limit, "shard": shard, "nshards": nshards, "chunk": chunk,
                          "sampling": asdict(params), "problems_sha256": tasks.problem_hash(problems),
                          **backend.identity()})
    # read-only checks first: a refused run changes no file
    _check_sample_folder(out, settings)
    _check_keys(out, _existing(out, repair=False), problems, n)
    with RunLock(out):
        _check_sample_folder(out, settings)  # again under the lock: another writer may have started meanwhile
        previous = (out / MANIFEST).read_bytes() if (out / MANIFEST).exists() else None
        status = read_manifest(out).get("status")
        expected = {(p.id, i) for p in problems for i in range(n)}
        if status == RunStatus.COMPLETE and set(_existing(out, repair=False)) == expected:
            return out  # a complete run: nothing to sample, nothing repaired or rewritten
        done = _existing(out)
        _check_keys(out, done, problems, n)
        todo = [(p, i) for p in problems for i in range(n) if (p.id, i) not in done]
        cache_file = None
        if cache is not None and todo:
            from ..cache import CompletionCache

            try:  # read (and refused if malformed) before the model loads
                cache_file = CompletionCache(cache)
            except RecordError:
                raise
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise RecordError(Path(cache), None, f"not a polyvox request cache: an entry lacks or mistypes "
                                                     f"{exc} ({type(exc).__name__})") from None
        if todo and isinstance(backend, BackendSpec):
            backend = backend.load()  # a complete run loads nothing
        if todo and done:  # before anything is written: a refused resume changes no file
            _check_prompts(out, {p.id: backend.prompt(fmt, p.text) for p in problems},
                           getattr(backend, "tokenizer", None) if isinstance(backend, LocalBackend) else None)
        secrets = _backend_secrets(backend)
        fields = {"kind": KIND_SAMPLE, "settings": settings, "problem_digests": problem_digests(problems),
                  "label_digests": label_digests(problems),
                  "labels_sha256": tasks.labels_hash(problems), "started": now_iso()}
        write_manifest(out, **fields, status=RunStatus.RUNNING)  # (without the grading of the rollouts before)
        appended = 0
        try:
            if cache_file is not None:
                from ..cache import CachingBackend

                backend = CachingBackend(backend, cache_file)
            prompts = {p.id: backend.prompt(fmt, p.text) for p in problems} if todo else {}
            bar = tqdm(total=len(problems) * n, initial=len(problems) * n - len(todo), desc="samples",
                       unit="sample", disable=not progress)
            t_start, n_tok = time.perf_counter(), 0
            for b in range(0, len(todo), chunk):
                batch = todo[b:b + chunk]
                reqs = [Request.of(prompts[p.id], sample_seed(seed, p.id, i)) for p, i in batch]
                comps = backend.generate(reqs, params)
                records = []
                for (p, i), req, c in zip(batch, reqs, comps):
                    text = formats.finish_panel(c.text, c.finish_reason) if fmt == "panel" else c.text
                    records.append(Sample(p.id, i, req.hash(), text, c.prompt_tokens, c.completion_tokens,
                                          c.finish_reason, round(c.latency_s, 4)))
                    n_tok += c.completion_tokens
                if len(records) != len(batch):
                    raise RuntimeError(f"backend {getattr(backend, 'name', '?')} returned {len(records)} "
                                       f"completions for {len(batch)} requests")
                if not appended:  # the rollouts change now: the grades of the old ones go
                    (out / GRADED).unlink(missing_ok=True)
                append_jsonl(out / ROLLOUTS, records)
                appended += len(records)
                bar.update(len(batch))
                elapsed = time.perf_counter() - t_start
                bar.set_postfix(samples_s=f"{(b + len(batch)) / elapsed:.1f}", tokens_s=f"{n_tok / elapsed:.0f}")
            bar.close()
        except BaseException as exc:
            _after_failure(out, previous, fields, appended, exc, secrets)
            raise
        extra = {"cache": {"hits": backend.cache.hits, "misses": backend.cache.misses}} \
            if cache_file is not None else {}
        write_manifest(out, **fields, finished=now_iso(), status=RunStatus.COMPLETE, records=len(problems) * n, **extra)
    return out
