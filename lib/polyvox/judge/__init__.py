"""Pairwise judging: both A/B orders, free ties, plan / run / tally, a rubric and an LLM judge.

Inputs are *systems files*: JSONL, one row per prompt — ``prompt_id``, ``prompt`` (what the
judge is shown), ``preference`` (the label the judge reads), ``gold`` (optional), any labels
to break tallies down by, and ``responses`` ({system: text}). A side of a comparison is
``FILE:SYSTEM``. A comparison of A against B covers the prompts both files hold.

Protocol (seed 002's, run21's judge_compare):

- every pair is judged twice, A shown first then B shown first; the outcome from A's side
  is W or L only when both orders agree, T otherwise; identical texts are free ties (no
  call is made);
- win rate = (W + T/2)/n with a 95% percentile bootstrap CI over prompts
  (:func:`polyvox.metrics.bootstrap_ci`); with ``groups=`` (a label such as ``user``) the
  bootstrap resamples whole groups instead (:func:`cluster_bootstrap_ci`), for prompts that
  cluster (several prompts per user);
- a verdict that cannot be parsed is retried with another seed up to ``max_attempts``
  times and then recorded as ``unparseable``: tallies count such prompts separately and
  leave them out of n — never as a tie. ``run --retry-unparseable`` asks again;
- tallies are broken down by any row label (the router's pick, the true preference type).

Cache and resume: ``<out>/verdicts.jsonl`` holds one line per judge call, keyed by sha256
over (judge identity, prompt id, prompt, preference, the text shown first, the text shown
second) — the order is part of the key, the system names are not, so the same two texts met
in another comparison are not paid twice. Lines are appended (flushed, fsynced) after each
chunk of calls; a torn last line is cut on open; a later line for the same key is accepted
only when it replaces an ``unparseable`` one. A run killed at any point therefore loses at
most the chunk in flight and a rerun duplicates nothing. :func:`plan` counts the calls still
to make before :func:`run` spends them.

One writer, one kind: ``<out>`` holds a judge run only (``kind: judge`` in its manifest; a
folder of a sample run, a pipeline or a stage is refused, and so is one holding other files
but no manifest). :func:`run` validates first — the folder, both systems files (every row:
an object with string ``prompt_id``, ``prompt``, ``preference`` and ``responses`` of string
texts) and every recorded verdict (its ``key``, a ``choice`` of :data:`RECORDED`) — and
writes second, under the folder's :class:`~polyvox.records.RunLock`, so a refused or
concurrent run changes nothing; a bad line is an error naming the file and line. :func:`plan`
and :func:`tally` only read. The manifest records each side as ``FILE:SYSTEM`` with the file
as :func:`~polyvox.records.portable_path` writes it, never this machine's absolute path.

Judges share one interface (``identity()``, ``ask(calls) -> [raw text]``, ``parse(raw)``):
:class:`RubricJudge` scores each text with a program (free, exact, order-blind) and
:class:`LLMJudge` asks any :mod:`polyvox.backends` backend — an OpenAI-compatible endpoint
with its key from the environment — with the template :data:`JUDGE_TEMPLATE`.

Length control (:func:`length_controlled`), after AlpacaEval 2: regress each prompt's score
(W 1, T ½, L 0) on the length difference (words of A − words of B, divided by its standard
deviation) with a logistic link, and report σ(intercept) — the win rate predicted at zero
length difference — with a bootstrap CI. AlpacaEval 2's GLM also has model and instruction
terms; with two fixed systems and one label per prompt, the length term is the one left.

The package: :mod:`.judges` (the judges and the verdict parser), :mod:`.records` (systems files,
sides, pairs, the verdicts cache and the folder check), :mod:`.calls` (:func:`plan`, :func:`run`),
:mod:`.tallies` (outcomes, win rates, length control, the text table); every public name is
re-exported here.
"""
from __future__ import annotations

from .calls import plan, run
from .judges import JUDGE_TEMPLATE, Call, Judge, LLMJudge, RubricJudge, parse_verdict
from .records import (CHOICES, FOLDER_FILES, RECORDED, VERDICTS, Pair, call_key, check_out, load_cache, pairs,
                      parse_side, portable_side, read_systems)
from .tallies import SCORE, as_table, cluster_bootstrap_ci, length_controlled, outcomes, summarize, tally

__all__ = ["CHOICES", "FOLDER_FILES", "JUDGE_TEMPLATE", "RECORDED", "SCORE", "VERDICTS", "Call", "Judge", "LLMJudge",
           "Pair", "RubricJudge", "as_table", "call_key", "check_out", "cluster_bootstrap_ci", "length_controlled",
           "load_cache", "outcomes", "pairs", "parse_side", "parse_verdict", "plan", "portable_side", "read_systems",
           "run", "summarize", "tally"]
