"""Grading: completions against golds with a task's grader, in memory or into ``graded.jsonl``.

Every grade in polyvox goes through :func:`grade_completions` (the grader, its options, the
worker pool of :func:`polyvox.grading.grade_many`): a run folder (:func:`grade`, written or in
memory), samples read from anywhere (:func:`grade_samples`), or bare completions (the RL
held-out evaluation).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import fields
from pathlib import Path

from .. import grading, tasks
from ..records import (GradedSample, RecordError, RunLock, Sample, append_jsonl, now_iso, read_manifest, sha256_file,
                       write_manifest)
from .folder import GRADED, MANIFEST, ROLLOUTS, _is_int, _run_folder
from .plan import _grade_plan, _GradePlan

DEFAULT_MAX_UNGRADABLE = 0.05  # a graded run fails when more than this share of its samples is ungradable
STATUSES = ("ok", "timeout", "ungradable", "no_answer")


def grade_completions(grader: str, completions, golds, options: grading.GradeOptions | dict | None = None,
                      workers: int | None = None, bare: bool = False) -> list[grading.Grade]:
    """Grade completions against golds with the grader named ``grader`` (a task's ``grader``) and its
    ``options`` (a task's ``grade_options`` or :class:`~polyvox.grading.GradeOptions`); nothing is written.

    math runs in worker processes with a per-item deadline (``workers``: their number, default up to 8;
    never more than the items nor than twice the machine's CPUs, whatever is asked);
    a grader that raises is a :class:`~polyvox.grading.GradingError` naming the item's index.

    ``bare``: each completion is an answer already (a collaboration's projected answer, or a reply read
    whole, as the persona study reads its last number), graded as the body of an ``<answer>`` block;
    ``None`` is an empty answer.
    """
    if isinstance(options, dict):
        options = grading.GradeOptions(**options)
    completions, golds = list(completions), list(golds)
    if bare:
        completions = [f"<answer>{c or ''}</answer>" for c in completions]
    if workers is not None:
        workers = max(1, min(workers, len(completions), (os.cpu_count() or 1) * 2))
    return grading.grade_many(grader, completions, golds, workers=workers, options=options)


def _short_metadata(meta: dict) -> dict:
    """The problem's scalar labels (level, subject, source …) carried onto graded records."""
    return {k: v for k, v in meta.items() if isinstance(v, (int, str)) and len(str(v)) <= 64}


def grade_samples(task, samples, problems: dict, workers: int | None = None) -> list[GradedSample]:
    """``samples`` (:class:`~polyvox.records.Sample`) graded with ``task``'s grader and options (a task
    or its name) against ``problems`` (id → Problem), as :class:`~polyvox.records.GradedSample` records
    carrying their problem's labels; in memory, in order. A sample of an unknown problem is a KeyError."""
    task = tasks.get(task) if isinstance(task, str) else task
    samples = list(samples)
    golds = [problems[s.problem_id].gold for s in samples]
    grades = grade_completions(task.grader, [s.completion for s in samples], golds, task.grade_options, workers)
    return [GradedSample(**{**{f.name: getattr(s, f.name) for f in fields(Sample)},
                            "metadata": {**_short_metadata(problems[s.problem_id].metadata), **s.metadata}},
                         correct=g.correct, extracted=g.extracted, grade_status=g.status)
            for s, g in zip(samples, grades)]


def _graded(run: Path, plan: _GradePlan, workers, max_ungradable) -> tuple[list[GradedSample], dict]:
    """The plan's samples graded, with their per-status counts; a grader that raises or too many
    ungradable samples are refused, naming the rollouts line."""
    rollouts = run / ROLLOUTS
    try:
        records = grade_samples(plan.task, [s for _, s in plan.samples], plan.problems, workers)
    except grading.GradingError as exc:
        line, s = plan.samples[exc.index]
        raise RecordError(rollouts, line, f"grader {exc.grader!r} raised {exc.error} (problem "
                                          f"{s.problem_id!r}, sample {s.sample_index}); nothing was "
                                          "written") from exc
    statuses = Counter(r.grade_status for r in records)
    counts = {**{k: statuses.get(k, 0) for k in STATUSES}, **statuses}
    share = counts["ungradable"] / len(records)
    if share > max_ungradable:
        line, s = next(ls for ls, r in zip(plan.samples, records) if r.grade_status == "ungradable")
        raise ValueError(f"{run}: {counts['ungradable']} of {len(records)} samples ({share:.1%}) are ungradable, "
                         f"above --max-ungradable {max_ungradable:g} (the first: problem {s.problem_id!r} at "
                         f"{rollouts}:{line}); nothing was written")
    return records, counts


def grade(run: str | Path, data_dir="data", workers: int | None = None,
          max_ungradable: float = DEFAULT_MAX_UNGRADABLE, write: bool = True):
    """Grade run/rollouts.jsonl into run/graded.jsonl (rewritten whole; grading is cheap and pure).

    Only a complete sample run whose problems under ``data_dir`` are the ones it sampled is
    graded; the rollouts are graded as read under the run's lock. A grader that raises is an
    error naming the rollouts line; more than ``max_ungradable`` (a fraction) ungradable samples
    fail the run with nothing written. The manifest's ``grading`` records per-status counts.

    Returns the path of ``graded.jsonl``; with ``write=False`` the same checks and grades, in memory:
    the :class:`~polyvox.records.GradedSample` records, in rollouts order, and nothing written (no lock).
    """
    if isinstance(max_ungradable, bool) or not isinstance(max_ungradable, (int, float)) \
            or not 0 <= max_ungradable <= 1:
        raise ValueError(f"--max-ungradable must be a fraction in [0, 1], got {max_ungradable!r}")
    if workers is not None and not (_is_int(workers) and workers >= 1):
        raise ValueError(f"--workers must be an integer ≥ 1, got {workers!r}")
    # --workers is an upper bound: grade_completions starts no more than the samples, nor than 2 × CPUs
    run = _run_folder(run)
    plan = _grade_plan(run, data_dir)  # read-only: a refused run changes no file
    if not write:
        return _graded(run, plan, workers, max_ungradable)[0]
    with RunLock(run):
        rollouts = run / ROLLOUTS
        if (run / MANIFEST).read_bytes() != plan.manifest_bytes or \
                (sha256_file(rollouts) if rollouts.is_file() else None) != plan.rollouts_sha256:
            plan = _grade_plan(run, data_dir)  # a writer came between the checks and the lock: read again
        records, counts = _graded(run, plan, workers, max_ungradable)
        tmp = run / (GRADED + ".tmp")
        tmp.unlink(missing_ok=True)
        try:
            append_jsonl(tmp, records)
            tmp.replace(run / GRADED)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a failed write leaves no temporary file behind
            raise
        manifest = read_manifest(run)
        options = grading.GradeOptions(**plan.task.grade_options)
        manifest["grading"] = {"grader": plan.task.grader, "options": options.as_dict(), "graded": now_iso(),
                               "records": len(records), "status_counts": counts, "max_ungradable": max_ungradable}
        write_manifest(run, **manifest)
    return run / GRADED
