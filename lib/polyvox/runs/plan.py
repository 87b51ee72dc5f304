"""What grading checks before it grades a run (read-only): a complete sample run whose problems,
loaded from the data it is graded against, are the ones it sampled; every refusal names the file
(and line)."""
from __future__ import annotations

from pathlib import Path

from .. import tasks
from ..records import (KIND_SAMPLE, RecordError, Sample, from_dict, iter_jsonl, manifest_kind, read_manifest,
                       sha256_file)
from ..statuses import RunStatus
from .folder import MANIFEST, ROLLOUTS
from .sample import check_run_settings, label_digests, problem_digests


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
    _check_labels(run, problems, manifest, name, data_dir)
    return problems


def _check_labels(run: Path, problems, manifest: dict, name: str, data_dir) -> None:
    """A run that recorded its problems' labels (``labels_sha256``, ``label_digests``) is graded only
    against data whose labels (level, subject …) are the sampled ones; older runs recorded none."""
    recorded = manifest.get("label_digests")
    if not isinstance(recorded, dict):
        return
    for pid, now in label_digests(problems).items():
        if recorded.get(pid) != now:
            raise ValueError(f"{run}: its problems' labels changed since sampling: problem {pid!r}: its labels "
                             f"(level, subject …) differ from the ones sampled (task {name}, data {data_dir}); "
                             "grade against the data the run was sampled from")


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
    check_run_settings(mpath, settings)  # a SampleSettings: task, n, limit, the shards' problems
    if manifest.get("status") != RunStatus.COMPLETE:
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
