"""The words polyvox writes for a run's state, a grade, a verdict and a judge's choice: one enum each.

Each is a ``str`` enum, so a member is the very string it stands for: it compares equal
to it, hashes as it, and is written to JSON as it (``json.dumps(GradeStatus.OK)`` is
``"ok"``). Files on disk hold the same strings as before; code that writes one names the
member, so a misspelt status is an ``AttributeError`` where it is written, and a record
read back is checked against the enum (:mod:`polyvox.records`).
"""
from __future__ import annotations

import enum

try:
    from enum import StrEnum
except ImportError:  # Python 3.10: the same behaviour, spelt out
    class StrEnum(str, enum.Enum):  # type: ignore[no-redef]
        __str__ = str.__str__
        __format__ = str.__format__


class RunStatus(StrEnum):
    """``status`` in a run folder's manifest.json."""
    RUNNING = "running"  # written before the first record; left there by a SIGKILL
    COMPLETE = "complete"  # every record written
    FAILED = "failed"  # stopped by an error (the manifest names it)
    INTERRUPTED = "interrupted"  # stopped by Ctrl-C
    MERGING = "merging"  # shards being merged (redone after a kill)
    SHORT = "short"  # an RL run that stopped before its planned steps
    NO_STEPS = "no_steps"  # an RL run that took no step
    STAGES_COMPLETE = "stages complete"  # a study pipeline's root: each stage asked for is complete
    OK = "ok"  # a chapter run of the book that executed


class GradeStatus(StrEnum):
    """How a completion was graded (``Grade.status``, ``GradedSample.grade_status``)."""
    OK = "ok"  # an answer was read and compared
    NO_ANSWER = "no_answer"  # no answer could be read
    UNGRADABLE = "ungradable"  # the gold could not be read, or the grading worker died
    TIMEOUT = "timeout"  # a parse or a comparison ran out of time


class Outcome(StrEnum):
    """A pairwise verdict from system A's side."""
    WIN = "W"
    LOSS = "L"
    TIE = "T"
    UNPARSEABLE = "U"  # a judge's answer in one order could not be read
    MISSING = "M"  # not judged yet


class Choice(StrEnum):
    """A judge's answer to one call, as ``choice`` in a verdicts.jsonl line."""
    A = "A"  # the first response is better
    B = "B"  # the second response is better
    TIE = "tie"
    UNPARSEABLE = "unparseable"  # no answer could be read in any attempt


GRADE_STATUSES = tuple(GradeStatus)
