"""Sampling runs on disk: sample → rollouts.jsonl (+ manifest), merge shards, grade.

A run folder holds ``rollouts.jsonl`` (one Sample per line, key (problem_id,
sample_index)), ``manifest.json`` and, after grading, ``graded.jsonl``.

Resume: on start the folder's records are read (a last line cut off by a crash
is dropped), the work list is every (problem, sample_index) of this shard not
yet recorded, and completions are appended after each backend batch, flushed
to disk. An interrupted run therefore loses at most the batch in flight and a
rerun never duplicates a key. A rerun with different parameters into the same
folder is refused (the manifest's parameters must match).

Shards: ``shard i of k`` takes the problems at positions ≡ i (mod k); ``merge``
joins shard folders by key (duplicates with different text are an error).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path

from . import formats, grading, tasks
from .records import (GradedSample, RecordError, Sample, append_jsonl, now_iso, read_json, read_jsonl,
                      repair_truncated_tail, write_manifest)
from .sampling import Backend, Request, SamplingParams

ROLLOUTS = "rollouts.jsonl"
GRADED = "graded.jsonl"


def sample_seed(seed: int, problem_id: str, index: int) -> int:
    h = hashlib.sha256(f"{seed}|{problem_id}|{index}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def _existing(out: Path) -> dict[tuple[str, int], Sample]:
    path = out / ROLLOUTS
    if not path.exists():
        return {}
    repair_truncated_tail(path)
    done = {}
    for s in read_jsonl(path, Sample):
        if s.key in done:
            raise RecordError(path, None, f"duplicate key {s.key}")
        done[s.key] = s
    return done


def sample_run(out: str | Path, task: str, fmt: str, backend: Backend, n: int, params: SamplingParams,
               seed: int = 0, limit: int | None = None, shard: int = 0, nshards: int = 1, data_dir="data",
               model: str = "", adapter: str | None = None, tokenizer=None, chunk: int = 64,
               progress: bool = True, task_filters: dict | None = None) -> Path:
    """Sample n completions per problem into out/rollouts.jsonl, resuming what is there."""
    from tqdm import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    problems = tasks.load(task, data_dir, limit=limit, **(task_filters or {}))[shard::nshards]
    settings = {"task": task, "format": fmt, "n": n, "seed": seed, "limit": limit, "shard": shard,
                "nshards": nshards, "model": model, "adapter": adapter, "backend": backend.name,
                "sampling": asdict(params), "task_filters": task_filters or {},
                "problems_sha256": tasks.problem_hash(problems)}
    if adapter:
        from .records import sha256_tree

        settings["adapter_sha256"] = sha256_tree(adapter)  # a changed adapter is a different run
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        old = read_json(manifest_path).get("settings")
        if old and old != json.loads(json.dumps(settings)):
            changed = sorted(k for k in settings if old.get(k) != json.loads(json.dumps(settings))[k])
            raise ValueError(f"{out}: holds a run with other settings ({', '.join(changed)}); "
                             "use a new --out folder")
    started = now_iso()
    write_manifest(out, settings=settings, started=started, status="running")
    done = _existing(out)
    stop = params.stop or (tuple(formats.PANEL_STOP) if fmt == "panel" else ())
    params = SamplingParams(params.max_tokens, params.temperature, params.top_p, stop)
    prompts = {p.id: formats.build_prompt(fmt, p.text, tokenizer) for p in problems} if backend.name != "openai" \
        or fmt == "panel" else {p.id: formats.Prompt(p.text, stop, True) for p in problems}
    todo = [(p, i) for p in problems for i in range(n) if (p.id, i) not in done]
    bar = tqdm(total=len(problems) * n, initial=len(problems) * n - len(todo), desc="samples", unit="sample",
               disable=not progress)
    t_start, n_tok = time.perf_counter(), 0
    for b in range(0, len(todo), chunk):
        batch = todo[b:b + chunk]
        reqs = [Request(prompts[p.id].text, sample_seed(seed, p.id, i), prompts[p.id].chat) for p, i in batch]
        comps = backend.generate(reqs, params)
        records = []
        for (p, i), req, c in zip(batch, reqs, comps):
            text = formats.finish_panel(c.text, c.finish_reason) if fmt == "panel" else c.text
            records.append(Sample(p.id, i, hashlib.sha256(req.prompt.encode()).hexdigest()[:16], text,
                                  c.prompt_tokens, c.completion_tokens, c.finish_reason, round(c.latency_s, 4)))
            n_tok += c.completion_tokens
        append_jsonl(out / ROLLOUTS, records)
        bar.update(len(batch))
        elapsed = time.perf_counter() - t_start
        bar.set_postfix(samples_s=f"{(b + len(batch)) / elapsed:.1f}", tokens_s=f"{n_tok / elapsed:.0f}")
    bar.close()
    write_manifest(out, settings=settings, started=started, finished=now_iso(), status="complete",
                   records=len(problems) * n)
    return out


def merge(shard_dirs: list[str | Path], out: str | Path) -> Path:
    """Join shard folders into one run (by key; conflicting duplicates are an error)."""
    out = Path(out)
    merged: dict[tuple[str, int], Sample] = {}
    settings = []
    for d in shard_dirs:
        d = Path(d)
        settings.append(read_json(d / "manifest.json").get("settings", {}))
        for s in read_jsonl(d / ROLLOUTS, Sample):
            if s.key in merged and merged[s.key].completion != s.completion:
                raise RecordError(d / ROLLOUTS, None, f"key {s.key} differs from another shard")
            merged[s.key] = s
    out.mkdir(parents=True, exist_ok=True)
    if (out / ROLLOUTS).exists():
        raise ValueError(f"{out / ROLLOUTS} exists; merge writes a new folder")
    append_jsonl(out / ROLLOUTS, sorted(merged.values(), key=lambda s: s.key))
    base = {k: v for k, v in (settings[0] if settings else {}).items() if k not in ("shard", "problems_sha256")}
    write_manifest(out, settings={**base, "shard": "merged", "merged_from": [str(d) for d in shard_dirs]},
                   finished=now_iso(), status="complete", records=len(merged))
    return out


def grade_run(run: str | Path, data_dir="data", workers: int | None = None) -> Path:
    """Grade out/rollouts.jsonl into out/graded.jsonl (rewritten whole; grading is cheap and pure)."""
    run = Path(run)
    settings = read_json(run / "manifest.json").get("settings", {})
    task = settings.get("task")
    if task not in tasks.GRADING_TASK:
        raise ValueError(f"{run / 'manifest.json'}: unknown task {task!r}")
    problems = {p.id: p for p in tasks.load(task, data_dir, **settings.get("task_filters", {}))}
    samples = read_jsonl(run / ROLLOUTS, Sample)
    for line, s in enumerate(samples, start=1):
        if s.problem_id not in problems:
            raise RecordError(run / ROLLOUTS, line, f"problem {s.problem_id!r} is not in task {task}")
    grades = grading.grade_many(tasks.GRADING_TASK[task], [s.completion for s in samples],
                                [problems[s.problem_id].gold for s in samples], workers=workers)
    tmp = run / (GRADED + ".tmp")
    tmp.unlink(missing_ok=True)
    append_jsonl(tmp, [GradedSample(**asdict(s), correct=g.correct, extracted=g.extracted, grade_status=g.status)
                       for s, g in zip(samples, grades)])
    tmp.replace(run / GRADED)
    return run / GRADED


def per_problem_counts(run: str | Path):
    """DataFrame id, n_samples, n_correct from a graded run (the shape metrics and chapters use)."""
    import pandas as pd

    df = pd.DataFrame([asdict(s) for s in read_jsonl(Path(run) / GRADED, GradedSample)])
    g = df.groupby("problem_id").agg(n_samples=("correct", "size"), n_correct=("correct", "sum")).reset_index()
    return g.rename(columns={"problem_id": "id"})
