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

from .. import formats, tasks
from ..backends.base import Backend, BackendSpec, Request, SamplingParams
from ..records import (KIND_SAMPLE, RecordError, RunLock, Sample, append_jsonl, check_folder_kind, from_dict,
                       iter_jsonl, manifest_kind, now_iso, portable_path, read_manifest, repair_truncated_tail,
                       scrub_text, write_manifest)
from .folder import GRADED, MANIFEST, ROLLOUTS, _jsonable, _out_path, check_settings

# files a sample folder without a manifest may hold (its lock, a torn manifest write); any other file
# means the folder is someone else's, and sampling into it is refused before anything is written
_OWN_FILES = {".lock", MANIFEST + ".tmp"}


def sample_seed(seed: int, problem_id: str, index: int) -> int:
    h = hashlib.sha256(f"{seed}|{problem_id}|{index}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


# one table of argument rules for sampling, checked before anything loads or is written:
# (name, test, what it must be)
SAMPLE_RULES = (
    ("n", lambda v: isinstance(v, int) and v >= 1, "an integer ≥ 1"),
    ("max_tokens", lambda v: isinstance(v, int) and v >= 1, "an integer ≥ 1"),
    ("temperature", lambda v: isinstance(v, (int, float)) and 0 <= v < float("inf"), "a number ≥ 0"),
    ("top_p", lambda v: isinstance(v, (int, float)) and 0 < v <= 1, "a number in (0, 1]"),
    ("limit", lambda v: v is None or (isinstance(v, int) and v >= 1), "an integer ≥ 1 (or absent)"),
    ("nshards", lambda v: isinstance(v, int) and v >= 1, "an integer ≥ 1"),
    ("chunk", lambda v: isinstance(v, int) and v >= 1, "an integer ≥ 1"),
    ("seed", lambda v: isinstance(v, int) and v >= 0, "an integer ≥ 0"),
)


def check_sample_args(fmt: str, n: int, params: SamplingParams, limit, shard: int, nshards: int, chunk: int,
                      seed: int) -> None:
    values = {"n": n, "max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p,
              "limit": limit, "nshards": nshards, "chunk": chunk, "seed": seed}
    for name, ok, what in SAMPLE_RULES:
        if not ok(values[name]):
            raise ValueError(f"--{name.replace('_', '-')} must be {what}, got {values[name]!r}")
    if not (isinstance(shard, int) and 0 <= shard < nshards):
        raise ValueError(f"--shard must be in 0 … {nshards - 1} (--nshards {nshards}), got {shard!r}")
    if fmt not in formats.FORMATS:
        raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(formats.FORMATS)}")


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
            write_manifest(out, **fields, status="interrupted" if isinstance(exc, KeyboardInterrupt) else "failed",
                           error=_one_line(exc, secrets), records_written=appended)
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
        if status == "complete" and set(_existing(out, repair=False)) == expected:
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
        secrets = _backend_secrets(backend)
        fields = {"kind": KIND_SAMPLE, "settings": settings, "problem_digests": problem_digests(problems),
                  "label_digests": label_digests(problems),
                  "labels_sha256": tasks.labels_hash(problems), "started": now_iso()}
        write_manifest(out, **fields, status="running")  # (without the grading of the rollouts before)
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
        write_manifest(out, **fields, finished=now_iso(), status="complete", records=len(problems) * n, **extra)
    return out
