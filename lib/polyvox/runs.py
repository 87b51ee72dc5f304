"""The one run folder: sample → rollouts.jsonl (+ manifest), merge shards, grade, count per problem.

A run folder holds ``rollouts.jsonl`` (one Sample per line, key (problem_id,
sample_index)), ``manifest.json`` (``settings``: task and its options, format, n,
seed, sampling parameters, chunk, shard, the backend's identity — model, weights
hash, adapter hash — and the problems' hash) and, after grading, ``graded.jsonl``.
Every chapter, the miniature world's stages and the ``polyvox sample``/``grade``/
``merge`` commands write runs through these functions.

Resume: the settings are computed and compared with the folder's manifest before
anything is written; a folder holding records under other settings, or records
with no settings at all, is refused with the names of what differs. The work list
is every (problem, sample_index) of this shard not yet recorded, and completions
are appended after each chunk of ``chunk`` requests, flushed to disk. An interrupted
run therefore loses at most the chunk in flight and a rerun never duplicates a key.

A complete run is left as it is: resuming it writes nothing (its manifest, ``grading``
section included, stays byte-identical). A resume that fails puts the previous manifest
back, so the folder keeps its previous status (a new run that fails before its first
record leaves no folder; after it, ``status: failed``).

Shards: ``shard i of k`` takes the problems at positions ≡ i (mod k); ``merge``
joins complete shard folders by key, refuses shards of different settings, and writes
under the out folder's lock after validating everything (an interrupted merge is
redone by running it again; the shards are only read).

Grading reads the rollouts under the run's lock, only of a complete run whose problems
are the ones sampled: the problem set's hash is recomputed from the data it grades
against (``--data-dir``) and compared with the manifest's ``problems_sha256``, and the
manifest's per-problem digests name the first problem that differs. A grader that raises
is an error naming the rollouts line; each graded run records its per-status counts (ok,
timeout, ungradable, no answer), and a run whose ungradable share passes
``max_ungradable`` (default 5 %) fails without writing grades.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from . import formats, grading, tasks
from .backends.base import Backend, BackendSpec, Request, SamplingParams
from .records import (KIND_SAMPLE, GradedSample, RecordError, RunLock, Sample, append_jsonl, check_folder_kind,
                      check_out_path, from_dict, iter_jsonl, manifest_kind, now_iso, read_jsonl, read_manifest,
                      repair_truncated_tail, scrub_text, sha256_file, write_manifest)

ROLLOUTS = "rollouts.jsonl"
GRADED = "graded.jsonl"
MANIFEST = "manifest.json"


def sample_seed(seed: int, problem_id: str, index: int) -> int:
    h = hashlib.sha256(f"{seed}|{problem_id}|{index}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def _jsonable(x):
    return json.loads(json.dumps(x, default=list))


def _existing(out: Path) -> dict[tuple[str, int], Sample]:
    path = out / ROLLOUTS
    if not path.exists():
        return {}
    repair_truncated_tail(path)
    done: dict[tuple[str, int], Sample] = {}
    for line, obj in enumerate(read_jsonl(path, Sample), start=1):
        if obj.key in done:
            raise RecordError(path, line, f"duplicate key {obj.key}")
        done[obj.key] = obj
    return done


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


def check_out_folder(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: a file, not a run folder")


def _out_path(out) -> Path:
    """An output folder as given: ``''`` and ``.`` refused by the name given (before any Path
    conversion, which would turn ``''`` into ``.``), a file refused as not a run folder, a path
    through a file refused. Read-only."""
    if out is None or str(out).strip() in ("", "."):
        check_out_path("" if out is None else out)  # raises, naming what was given
    p = Path(out)
    check_out_folder(p)
    return check_out_path(p)


def check_settings(out: Path, settings: dict) -> None:
    """Refuse a folder that holds records of another run (or records without settings)."""
    old = read_manifest(out).get("settings")
    if old is None:
        if (out / ROLLOUTS).exists():
            raise ValueError(f"{out}: holds records but no manifest settings; polyvox never adopts a run it "
                             "did not start: use a new --out folder")
        return
    if old != settings:
        changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k)) \
            if isinstance(old, dict) else ["settings"]
        raise ValueError(f"{out}: holds a run with other settings ({', '.join(changed)}); use a new --out folder")


def _check_sample_folder(out: Path, settings: dict) -> None:
    """Read-only: the folder may take this run (its kind, then its settings)."""
    if out.is_dir():
        manifest = read_manifest(out)
        if manifest and manifest_kind(manifest) not in (None, KIND_SAMPLE):
            check_folder_kind(out, KIND_SAMPLE)  # raises: a folder of another kind
    check_settings(out, settings)
    check_folder_kind(out, KIND_SAMPLE)


def _digest(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def problem_digests(problems) -> dict[str, str]:
    """Per problem, short digests of its text and gold (``"text <12 hex> gold <12 hex>"``): recorded in a
    sample manifest beside ``problems_sha256``, so a problem that changed later can be named."""
    return {p.id: f"text {_digest(p.text)} gold {_digest(p.gold)}" for p in problems}


def _first_difference(problems, recorded) -> str:
    """Which problem differs from the sampled ones, read from a manifest's ``problem_digests``."""
    if not isinstance(recorded, dict):
        return "which one is not recorded: the run was sampled before polyvox kept per-problem digests"
    current = problem_digests(problems)
    for pid, now in current.items():
        old = recorded.get(pid)
        if old is None:
            return f"problem {pid!r} was not in the sampled set"
        if old != now:
            parts = [name for name, a, b in zip(("text", "gold"), str(old).split()[1::2], now.split()[1::2]) if a != b]
            return f"problem {pid!r}: its {' and '.join(parts) or 'record'} differs from the one sampled"
    for pid in recorded:
        if pid not in current:
            return f"sampled problem {pid!r} is missing"
    return ("every problem's digest matches, but not the problem set's hash (their order, or the manifest's "
            "problems_sha256, changed)")


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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return scrub_text(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:500]


def _replace_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _after_failure(out: Path, previous: bytes | None, fields: dict, appended: int, exc: BaseException) -> None:
    """A resume that fails leaves the previous manifest, so the previous status; a new run that wrote no
    record leaves no manifest (RunLock then removes the folder it made); a new run that wrote records
    says it failed (or was interrupted) and how many it wrote."""
    path = out / MANIFEST
    try:
        if previous is not None:
            _replace_bytes(path, previous)
        elif not (out / ROLLOUTS).exists():
            path.unlink(missing_ok=True)
        else:
            write_manifest(out, **fields, status="interrupted" if isinstance(exc, KeyboardInterrupt) else "failed",
                           error=_one_line(exc), records_written=appended)
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
        done = _existing(out)
        _check_keys(out, done, problems, n)
        todo = [(p, i) for p in problems for i in range(n) if (p.id, i) not in done]
        if not todo and status == "complete":
            return out  # a complete run: nothing to sample, nothing rewritten
        if todo and isinstance(backend, BackendSpec):
            backend = backend.load()  # a complete run loads nothing
        fields = {"kind": KIND_SAMPLE, "settings": settings, "problem_digests": problem_digests(problems),
                  "started": now_iso()}
        write_manifest(out, **fields, status="running")
        appended = 0
        try:
            if cache is not None:
                from .cache import CachingBackend

                backend = CachingBackend(backend, cache)
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
                append_jsonl(out / ROLLOUTS, records)
                appended += len(records)
                bar.update(len(batch))
                elapsed = time.perf_counter() - t_start
                bar.set_postfix(samples_s=f"{(b + len(batch)) / elapsed:.1f}", tokens_s=f"{n_tok / elapsed:.0f}")
            bar.close()
        except BaseException as exc:
            _after_failure(out, previous, fields, appended, exc)
            raise
        extra = {"cache": {"hits": backend.cache.hits, "misses": backend.cache.misses}} \
            if cache is not None and todo else {}
        write_manifest(out, **fields, finished=now_iso(), status="complete", records=len(problems) * n, **extra)
    return out


# ---------------------------------------------------------------- merge

def _shard_manifest(d: Path) -> tuple[dict, dict]:
    """A shard folder's manifest and settings, checked read-only: a complete sample run of one shard."""
    if not d.exists():
        raise ValueError(f"{d}: no such folder")
    if not d.is_dir():
        raise ValueError(f"{d}: a file, not a run folder")
    manifest = read_manifest(d)
    settings = manifest.get("settings")
    if not isinstance(settings, dict) or not settings:
        raise RecordError(d / MANIFEST, None, "no settings: not a polyvox run folder")
    kind = manifest_kind(manifest)
    if kind != KIND_SAMPLE:
        raise ValueError(f"{d}: holds a {kind or 'unrecognised'} run, not a sample run; merge joins sample shards")
    if settings.get("shard") == "merged":
        raise ValueError(f"{d}: a merged run, not a shard; merge the shards it was merged from")
    shard, nshards = settings.get("shard"), settings.get("nshards")
    if not (_is_int(shard) and _is_int(nshards) and 0 <= shard < nshards):
        raise RecordError(d / MANIFEST, None, f"settings.shard {shard!r} of nshards {nshards!r} is not a shard")
    if not isinstance(settings.get("problems_sha256"), str):
        raise RecordError(d / MANIFEST, None, "settings.problems_sha256 missing: the shard's problems are unknown")
    if not (_is_int(settings.get("n")) and settings["n"] >= 1):
        raise RecordError(d / MANIFEST, None, f"settings.n should be an integer ≥ 1, got {settings.get('n')!r}")
    if manifest.get("status") != "complete":
        raise ValueError(f"{d}: shard {shard} is not complete (status {manifest.get('status')!r}); finish it first "
                         "(a rerun of polyvox sample resumes it), then merge")
    return manifest, settings


def _merge_plan(shard_dirs: list[Path]) -> tuple[dict, list[Sample], dict | None]:
    """Read-only: the merged settings, the merged samples (sorted by key) and the problems' digests."""
    base, first = None, None
    merged: dict[tuple[str, int], Sample] = {}
    origin: dict[tuple[str, int], Path] = {}
    hashes: dict[str, str] = {}
    digests: dict | None = {}
    for d in shard_dirs:
        manifest, settings = _shard_manifest(d)
        common = {k: v for k, v in settings.items() if k not in ("shard", "problems_sha256")}
        if base is None:
            base, first = common, d
        elif common != base:
            changed = sorted(k for k in set(base) | set(common) if base.get(k) != common.get(k))
            raise ValueError(f"{d}: a shard of another run ({', '.join(changed)} differ from {first})")
        path, count = d / ROLLOUTS, 0
        for line, obj in iter_jsonl(path):
            s = from_dict(Sample, obj, path, line)
            if s.key in merged:
                raise RecordError(path, line, f"key {s.key} is also in another shard ({origin[s.key]})")
            if not 0 <= s.sample_index < settings["n"]:
                raise RecordError(path, line, f"sample_index {s.sample_index} is outside 0 … {settings['n'] - 1}")
            merged[s.key], origin[s.key] = s, d
            count += 1
        if count != manifest.get("records"):
            raise RecordError(path, None, f"{count} records, but the shard's manifest says "
                                          f"{manifest.get('records')!r}: the shard is not complete")
        if str(settings["shard"]) in hashes:
            raise ValueError(f"{d}: shard {settings['shard']} is given twice")
        hashes[str(settings["shard"])] = settings["problems_sha256"]
        pd = manifest.get("problem_digests")
        digests = {**digests, **pd} if isinstance(pd, dict) and digests is not None else None
    settings = {**base, "shard": "merged", "merged_from": [d.name for d in shard_dirs],
                "shard_problems_sha256": hashes}
    return settings, sorted(merged.values(), key=lambda s: s.key), digests


def _check_merge_out(out: Path, settings: dict) -> None:
    """Read-only: out is new, empty, or an interrupted merge of these very shards (which is redone)."""
    check_folder_kind(out, KIND_SAMPLE)
    manifest = read_manifest(out) if out.is_dir() else {}
    if manifest:
        if manifest.get("status") == "merging" and manifest.get("settings") == settings:
            return
        raise ValueError(f"{out}: holds a run already (status {manifest.get('status')!r}); merge writes a new folder")
    if (out / ROLLOUTS).exists():
        raise ValueError(f"{out / ROLLOUTS} exists; merge writes a new folder")


def merge(shard_dirs: list[str | Path], out: str | Path) -> Path:
    """Join complete shard folders into one run (by key); shards of different settings are refused.

    Everything is checked before anything is written, then under out's lock: the manifest is
    written first (``status: merging``), the records go to a temporary file renamed into place,
    and the manifest says ``complete`` last. A merge killed at any instant leaves the shards as
    they were and out either without a run or ``merging``; running the same merge again redoes it.
    """
    shard_dirs = [Path(d) for d in shard_dirs]
    if not shard_dirs:
        raise ValueError("merge needs at least one shard folder")
    out = _out_path(out)
    settings, samples, digests = _merge_plan(shard_dirs)
    _check_merge_out(out, settings)
    with RunLock(out):
        _check_merge_out(out, settings)  # again under the lock: another merge may have begun meanwhile
        fields = {"kind": KIND_SAMPLE, "settings": _jsonable(settings), "started": now_iso()}
        if digests:
            fields["problem_digests"] = digests
        tmp = out / (ROLLOUTS + ".tmp")
        try:
            write_manifest(out, **fields, status="merging")
            tmp.unlink(missing_ok=True)
            (out / ROLLOUTS).unlink(missing_ok=True)
            append_jsonl(tmp, samples)
            os.replace(tmp, out / ROLLOUTS)
            write_manifest(out, **fields, finished=now_iso(), status="complete", records=len(samples))
        except Exception:
            for name in (ROLLOUTS + ".tmp", ROLLOUTS, MANIFEST):  # ours: out held no run before
                (out / name).unlink(missing_ok=True)
            raise
    return out


# ---------------------------------------------------------------- grade

DEFAULT_MAX_UNGRADABLE = 0.05  # a graded run fails when more than this share of its samples is ungradable
STATUSES = ("ok", "timeout", "ungradable", "no_answer")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _short_metadata(meta: dict) -> dict:
    """The problem's scalar labels (level, subject, source …) carried onto graded records."""
    return {k: v for k, v in meta.items() if isinstance(v, (int, str)) and len(str(v)) <= 64}


def _run_folder(run) -> Path:
    """An existing run folder to grade (``.``, the run one stands in, is read as its absolute path)."""
    if run is None or not str(run).strip():
        raise ValueError(f"a run folder must be named (got {'' if run is None else str(run)!r})")
    p = Path(run)
    if p == Path("."):
        p = Path.cwd()
    if not p.exists():
        raise ValueError(f"{p}: no such folder, so not a run to grade")
    if not p.is_dir():
        raise ValueError(f"{p}: a file, not a run folder")
    if not (p / MANIFEST).exists():
        raise ValueError(f"{p}: not a polyvox run folder (no manifest.json)")
    return p


# settings a sample run's manifest must hold to be graded: (key, test, what it must be)
_RUN_SETTINGS = (
    ("task", lambda v: isinstance(v, str) and v != "", "a task name"),
    ("task_options", lambda v: isinstance(v, dict), "a mapping"),
    ("n", lambda v: _is_int(v) and v >= 1, "an integer ≥ 1"),
    ("limit", lambda v: v is None or (_is_int(v) and v >= 1), "an integer ≥ 1 or null"),
    ("nshards", lambda v: _is_int(v) and v >= 1, "an integer ≥ 1"),
)


def _check_run_settings(path: Path, settings: dict) -> None:
    for key, ok, what in _RUN_SETTINGS:
        if key not in settings:
            raise RecordError(path, None, f"settings.{key} missing: not a complete polyvox sample manifest")
        if not ok(settings[key]):
            raise RecordError(path, None, f"settings.{key} should be {what}, got {settings[key]!r}")
    shard, nshards = settings.get("shard"), settings["nshards"]
    if shard == "merged":
        parts = settings.get("shard_problems_sha256")
        if not isinstance(parts, dict) or not parts:
            raise RecordError(path, None, "settings.shard_problems_sha256 missing: this run was merged before polyvox "
                                          "recorded its shards' problems, so they cannot be checked; merge the "
                                          "shards again")
        for k, v in parts.items():
            if not (isinstance(k, str) and k.isdigit() and int(k) < nshards and isinstance(v, str)):
                raise RecordError(path, None, f"settings.shard_problems_sha256 has a bad entry {k!r}: {v!r}")
    elif not (_is_int(shard) and 0 <= shard < nshards):
        raise RecordError(path, None, f"settings.shard should be an index below nshards ({nshards}) or 'merged', "
                                      f"got {shard!r}")
    elif not isinstance(settings.get("problems_sha256"), str):
        raise RecordError(path, None, "settings.problems_sha256 missing: the run's problems cannot be checked")


def _sampled_problems(run: Path, settings: dict, manifest: dict, data_dir) -> list:
    """The problems this run sampled, loaded from data_dir and checked against the manifest's hashes."""
    name, nshards = settings["task"], settings["nshards"]
    every = tasks.load(name, data_dir, limit=settings["limit"], **settings["task_options"])
    if settings["shard"] == "merged":
        parts = sorted(settings["shard_problems_sha256"].items(), key=lambda kv: int(kv[0]))
        subs = [(every[int(k)::nshards], h) for k, h in parts]
        problems = [p for sub, _ in subs for p in sub]
        same = all(tasks.problem_hash(sub) == h for sub, h in subs)
    else:
        problems = every[settings["shard"]::nshards]
        same = tasks.problem_hash(problems) == settings["problems_sha256"]
    if not same:
        raise ValueError(f"{run}: its problems changed since sampling: "
                         f"{_first_difference(problems, manifest.get('problem_digests'))} (task {name}, "
                         f"data {data_dir}); grade against the data the run was sampled from")
    return problems


class _GradePlan:
    """What grade will grade, all checked: the task, the problems by id, the (line, sample) records,
    and the bytes it was read from (compared again under the lock)."""

    def __init__(self, task, problems, samples, manifest_bytes, rollouts_sha256):
        self.task, self.problems, self.samples = task, problems, samples
        self.manifest_bytes, self.rollouts_sha256 = manifest_bytes, rollouts_sha256


def _grade_plan(run: Path, data_dir) -> _GradePlan:
    """Read-only checks of a run before grading it; every refusal names the file (and line)."""
    mpath, path = run / MANIFEST, run / ROLLOUTS
    manifest_bytes = mpath.read_bytes()
    manifest = read_manifest(run)
    kind = manifest_kind(manifest)
    if kind is not None and kind != KIND_SAMPLE:
        raise ValueError(f"{run}: holds a {kind} run, not a sample run; polyvox grade grades sampled runs")
    settings = manifest.get("settings")
    if not isinstance(settings, dict) or not settings:
        raise RecordError(mpath, None, "no settings: not a polyvox run folder")
    _check_run_settings(mpath, settings)
    if manifest.get("status") != "complete":
        raise ValueError(f"{run}: the run is not complete (status {manifest.get('status')!r}); finish it first "
                         "(a rerun of polyvox sample resumes it), then grade")
    task = tasks.get(settings["task"])
    problems = {p.id: p for p in _sampled_problems(run, settings, manifest, data_dir)}
    rollouts_sha256 = sha256_file(path) if path.is_file() else None
    n, samples, seen = settings["n"], [], set()
    for line, obj in iter_jsonl(path):
        s = from_dict(Sample, obj, path, line)
        if s.problem_id not in problems:
            raise RecordError(path, line, f"problem {s.problem_id!r} is not in task {task.name} as this run "
                                          "sampled it")
        if not 0 <= s.sample_index < n:
            raise RecordError(path, line, f"sample_index {s.sample_index} is outside 0 … {n - 1} (n = {n})")
        if s.key in seen:
            raise RecordError(path, line, f"duplicate key {s.key}")
        seen.add(s.key)
        samples.append((line, s))
    if not samples:
        raise RecordError(path, None, "no records to grade")
    expected = len(problems) * n
    if len(samples) != expected:
        missing = next((pid, i) for pid in problems for i in range(n) if (pid, i) not in seen)
        raise RecordError(path, None, f"{len(samples)} of {expected} records (key {missing} missing): the run is "
                                      "not complete; resume it with polyvox sample, then grade")
    return _GradePlan(task, problems, samples, manifest_bytes, rollouts_sha256)


def grade(run: str | Path, data_dir="data", workers: int | None = None,
          max_ungradable: float = DEFAULT_MAX_UNGRADABLE) -> Path:
    """Grade run/rollouts.jsonl into run/graded.jsonl (rewritten whole; grading is cheap and pure).

    Only a complete sample run whose problems under ``data_dir`` are the ones it sampled is
    graded; the rollouts are graded as read under the run's lock. A grader that raises is an
    error naming the rollouts line; more than ``max_ungradable`` (a fraction) ungradable samples
    fail the run with nothing written. The manifest's ``grading`` records per-status counts.
    """
    if isinstance(max_ungradable, bool) or not isinstance(max_ungradable, (int, float)) \
            or not 0 <= max_ungradable <= 1:
        raise ValueError(f"--max-ungradable must be a fraction in [0, 1], got {max_ungradable!r}")
    if workers is not None and not (_is_int(workers) and workers >= 1):
        raise ValueError(f"--workers must be an integer ≥ 1, got {workers!r}")
    run = _run_folder(run)
    plan = _grade_plan(run, data_dir)  # read-only: a refused run changes no file
    with RunLock(run):
        rollouts = run / ROLLOUTS
        if (run / MANIFEST).read_bytes() != plan.manifest_bytes or \
                (sha256_file(rollouts) if rollouts.is_file() else None) != plan.rollouts_sha256:
            plan = _grade_plan(run, data_dir)  # a writer came between the checks and the lock: read again
        task, samples = plan.task, [s for _, s in plan.samples]
        options = grading.GradeOptions(**task.grade_options)
        try:
            grades = grading.grade_many(task.grader, [s.completion for s in samples],
                                        [plan.problems[s.problem_id].gold for s in samples], workers=workers,
                                        options=options)
        except grading.GradingError as exc:
            line, s = plan.samples[exc.index]
            raise RecordError(rollouts, line, f"grader {exc.grader!r} raised {exc.error} (problem "
                                              f"{s.problem_id!r}, sample {s.sample_index}); nothing was "
                                              "written") from exc
        statuses = Counter(g.status for g in grades)
        counts = {**{k: statuses.get(k, 0) for k in STATUSES}, **statuses}
        share = counts["ungradable"] / len(grades)
        if share > max_ungradable:
            line, s = next(ls for ls, g in zip(plan.samples, grades) if g.status == "ungradable")
            raise ValueError(f"{run}: {counts['ungradable']} of {len(grades)} samples ({share:.1%}) are ungradable, "
                             f"above --max-ungradable {max_ungradable:g} (the first: problem {s.problem_id!r} at "
                             f"{rollouts}:{line}); nothing was written")
        records = [GradedSample(**{**asdict(s), "metadata": {**_short_metadata(plan.problems[s.problem_id].metadata),
                                                             **s.metadata}},
                                correct=g.correct, extracted=g.extracted, grade_status=g.status)
                   for s, g in zip(samples, grades)]
        tmp = run / (GRADED + ".tmp")
        tmp.unlink(missing_ok=True)
        append_jsonl(tmp, records)
        tmp.replace(run / GRADED)
        manifest = read_manifest(run)
        manifest["grading"] = {"grader": task.grader, "options": options.as_dict(), "graded": now_iso(),
                               "records": len(records), "status_counts": counts, "max_ungradable": max_ungradable}
        write_manifest(run, **manifest)
    return run / GRADED

def graded_samples(run: str | Path):
    """A graded run as a DataFrame, one row per sample, metadata labels (level …) as columns."""
    import pandas as pd

    rows = []
    for s in read_jsonl(Path(run) / GRADED, GradedSample):
        row = asdict(s)
        for k, v in s.metadata.items():
            row.setdefault(k, v)
        rows.append(row)
    return pd.DataFrame(rows)


def per_problem_counts(samples) -> "pd.DataFrame":  # noqa: F821
    """id, n_samples, n_correct (and the problem's labels) from graded samples: a run folder or a DataFrame.

    The one per-problem count in polyvox: chapters, bands and pass@k all read this shape.
    """
    import pandas as pd

    df = samples if isinstance(samples, pd.DataFrame) else graded_samples(samples)
    labels = [c for c in ("level", "subject", "source") if c in df.columns]
    g = df.groupby("problem_id", sort=False).agg(n_samples=("correct", "size"), n_correct=("correct", "sum"),
                                                 **{c: (c, "first") for c in labels})
    g = g.reset_index().rename(columns={"problem_id": "id"})
    g["n_correct"] = g["n_correct"].astype(int)
    return g
