"""The one run folder: sample → rollouts.jsonl (+ manifest), merge shards, grade, load, count per problem.

A run folder holds ``rollouts.jsonl`` (one Sample per line, key (problem_id,
sample_index)), ``manifest.json`` (``settings``: task and its options, format, n,
seed, sampling parameters, chunk, shard, the backend's identity — model, weights
hash, adapter hash — and the problems' hash) and, after grading, ``graded.jsonl``.
Every chapter, the miniature world's stages and the ``polyvox sample``/``grade``/
``merge`` commands write runs through these functions; :mod:`polyvox.explore` and the RL
held-out evaluation read and grade through them too (one evaluation path).

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

The API (one module each): :mod:`.folder` (file names, :func:`find_runs`), :mod:`.sample`
(:func:`sample`, :func:`sample_seed`), :mod:`.merge`, :mod:`.plan` (grading's read-only checks),
:mod:`.grade` (:func:`grade`, ``write=False`` for in-memory grades; :func:`grade_samples`;
:func:`grade_completions`, the one call every grade goes through, ``bare=True`` for answers already
projected), :mod:`.texts` (:func:`sample_texts`: :func:`sample`'s requests and records in memory, no
folder: validation scores during training, the collaboration's turns), :mod:`.load` (:func:`load` → a
:class:`Run`: manifest and records; :func:`load_problems`; :func:`graded_samples`;
:func:`per_problem_counts`) and :mod:`.trace` (:func:`split_trace`: a completion's reasoning and
final answer; :func:`format_ok`) and :mod:`.summary` (:func:`summarize`: the one-screen summary the
commands end with).
"""
from __future__ import annotations

from .folder import GRADED, MANIFEST, ROLLOUTS, check_out_folder, check_settings, find_runs, is_run
from .grade import DEFAULT_MAX_UNGRADABLE, STATUSES, grade, grade_completions, grade_samples
from .load import Run, graded_samples, load, load_problems, per_problem_counts
from .merge import merge
from .sample import (SAMPLE_RULES, check_recorded_prompts, check_sample_args, problem_digests, prompt_mismatches,
                     sample, sample_seed)
from .summary import RunSummary, summarize, summary_lines
from .texts import sample_texts
from .trace import format_ok, split_trace

__all__ = ["DEFAULT_MAX_UNGRADABLE", "GRADED", "MANIFEST", "ROLLOUTS", "Run", "SAMPLE_RULES", "STATUSES",
           "check_out_folder", "check_sample_args", "check_settings", "find_runs", "format_ok", "grade",
           "grade_completions", "grade_samples", "graded_samples", "is_run", "load", "load_problems", "merge",
           "per_problem_counts", "problem_digests", "prompt_mismatches", "check_recorded_prompts", "RunSummary", "sample", "sample_seed", "sample_texts",
           "split_trace", "summarize", "summary_lines"]
