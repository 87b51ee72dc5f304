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

Shards: ``shard i of k`` takes the problems at positions ≡ i (mod k); ``merge``
joins shard folders by key and refuses shards of different settings.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path

from . import formats, grading, tasks
from .backends.base import Backend, BackendSpec, Request, SamplingParams
from .records import (GradedSample, RecordError, RunLock, Sample, append_jsonl, now_iso, read_jsonl, read_manifest,
                      repair_truncated_tail, write_manifest)

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


def check_settings(out: Path, settings: dict) -> None:
    """Refuse a folder that holds records of another run (or records without settings)."""
    old = read_manifest(out).get("settings")
    if old is None:
        if (out / ROLLOUTS).exists():
            raise ValueError(f"{out}: holds records but no manifest settings; polyvox never adopts a run it "
                             "did not start: use a new --out folder")
        return
    if old != settings:
        changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
        raise ValueError(f"{out}: holds a run with other settings ({', '.join(changed)}); use a new --out folder")


def sample(out: str | Path, task: str, fmt: str, backend: Backend | BackendSpec, n: int, params: SamplingParams,
           seed: int = 0, limit: int | None = None, shard: int = 0, nshards: int = 1, data_dir="data",
           chunk: int = 64, progress: bool = True, task_options: dict | None = None,
           cache: str | Path | None = None) -> Path:
    """Sample n completions per problem into out/rollouts.jsonl, resuming what is there.

    ``backend`` may be a :class:`~polyvox.backends.BackendSpec`: it is loaded only after
    every argument, the task, the model path and the folder's settings have been checked.
    ``task_options`` go to :func:`polyvox.tasks.load` (``level``, ``per_level``, …);
    ``cache`` names a :mod:`polyvox.cache` file to answer repeated requests from.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    check_sample_args(fmt, n, params, limit, shard, nshards, chunk, seed)
    check_out_folder(out)
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
    check_settings(out, settings)  # read-only: a refused run changes no file
    with RunLock(out):
        check_settings(out, settings)  # again under the lock: another writer may have started meanwhile
        done = _existing(out)
        todo = [(p, i) for p in problems for i in range(n) if (p.id, i) not in done]
        if todo and isinstance(backend, BackendSpec):
            backend = backend.load()  # a complete run loads nothing
        started = now_iso()
        write_manifest(out, settings=settings, started=started, status="running")
        if cache is not None:
            from .cache import CachingBackend

            backend = CachingBackend(backend, cache)
        prompts = {p.id: backend.prompt(fmt, p.text) for p in problems} if todo else {}
        bar = tqdm(total=len(problems) * n, initial=len(problems) * n - len(todo), desc="samples", unit="sample",
                   disable=not progress)
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
            append_jsonl(out / ROLLOUTS, records)
            bar.update(len(batch))
            elapsed = time.perf_counter() - t_start
            bar.set_postfix(samples_s=f"{(b + len(batch)) / elapsed:.1f}", tokens_s=f"{n_tok / elapsed:.0f}")
        bar.close()
        extra = {"cache": {"hits": backend.cache.hits, "misses": backend.cache.misses}} \
            if cache is not None and todo else {}
        write_manifest(out, settings=settings, started=started, finished=now_iso(), status="complete",
                       records=len(problems) * n, **extra)
    return out


def merge(shard_dirs: list[str | Path], out: str | Path) -> Path:
    """Join shard folders into one run (by key); shards of different settings are refused."""
    out = Path(out)
    check_out_folder(out)
    if (out / ROLLOUTS).exists():
        raise ValueError(f"{out / ROLLOUTS} exists; merge writes a new folder")
    merged: dict[tuple[str, int], Sample] = {}
    base = None
    for d in map(Path, shard_dirs):
        settings = read_manifest(d).get("settings")
        if settings is None:
            raise RecordError(d / MANIFEST, None, "no settings: not a polyvox run folder")
        common = {k: v for k, v in settings.items() if k not in ("shard", "problems_sha256")}
        if base is None:
            base = common
        elif common != base:
            changed = sorted(k for k in set(base) | set(common) if base.get(k) != common.get(k))
            raise ValueError(f"{d}: a shard of another run ({', '.join(changed)} differ from {shard_dirs[0]})")
        for line, s in enumerate(read_jsonl(d / ROLLOUTS, Sample), start=1):
            if s.key in merged:
                raise RecordError(d / ROLLOUTS, line, f"key {s.key} is also in another shard")
            merged[s.key] = s
    with RunLock(out):
        append_jsonl(out / ROLLOUTS, sorted(merged.values(), key=lambda s: s.key))
        write_manifest(out, settings={**(base or {}), "shard": "merged",
                                      "merged_from": [Path(d).name for d in shard_dirs]},
                       finished=now_iso(), status="complete", records=len(merged))
    return out


def _short_metadata(meta: dict) -> dict:
    """The problem's scalar labels (level, subject, source …) carried onto graded records."""
    return {k: v for k, v in meta.items() if isinstance(v, (int, str)) and len(str(v)) <= 64}


def grade(run: str | Path, data_dir="data", workers: int | None = None) -> Path:
    """Grade run/rollouts.jsonl into run/graded.jsonl (rewritten whole; grading is cheap and pure)."""
    run = Path(run)
    settings = read_manifest(run).get("settings")
    if not settings:
        raise RecordError(run / MANIFEST, None, "no settings: not a polyvox run folder")
    task = tasks.get(settings["task"])
    problems = {p.id: p for p in tasks.load(task.name, data_dir, **settings.get("task_options", {}))}
    samples = read_jsonl(run / ROLLOUTS, Sample)
    if not samples:
        raise RecordError(run / ROLLOUTS, None, "no records to grade")
    seen = set()
    for line, s in enumerate(samples, start=1):
        if s.problem_id not in problems:
            raise RecordError(run / ROLLOUTS, line, f"problem {s.problem_id!r} is not in task {task.name}")
        if s.key in seen:
            raise RecordError(run / ROLLOUTS, line, f"duplicate key {s.key}")
        seen.add(s.key)
    options = grading.GradeOptions(**task.grade_options)
    grades = grading.grade_many(task.grader, [s.completion for s in samples],
                                [problems[s.problem_id].gold for s in samples], workers=workers, options=options)
    records = [GradedSample(**{**asdict(s), "metadata": {**_short_metadata(problems[s.problem_id].metadata),
                                                                  **s.metadata}},
                            correct=g.correct, extracted=g.extracted, grade_status=g.status)
               for s, g in zip(samples, grades)]
    with RunLock(run):
        tmp = run / (GRADED + ".tmp")
        tmp.unlink(missing_ok=True)
        append_jsonl(tmp, records)
        tmp.replace(run / GRADED)
        manifest = read_manifest(run)
        manifest["grading"] = {"grader": task.grader, "options": options.as_dict(), "graded": now_iso(),
                               "records": len(records)}
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
