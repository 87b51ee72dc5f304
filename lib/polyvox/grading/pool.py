"""Batches: :func:`grade_many`, with ``math`` in worker processes under deadlines.

The workers are a ``pebble.ProcessPool``: a task that overruns its deadline has its worker
stopped (SIGTERM, then SIGKILL after pebble's ``term_timeout``) and replaced, and its future
raises ``TimeoutError``; a worker that dies mid-task (a crash, the OOM killer) is replaced and
its future raises ``pebble.ProcessExpired``. polyvox adds two things pebble does not do:

- workers die with the process that started them (:func:`_die_with_parent`:
  ``PR_SET_PDEATHSIG`` on Linux, a watchdog thread elsewhere), so a SIGKILLed
  ``polyvox grade`` leaves no grading behind;
- a chunk that overruns or loses its worker is graded again item by item in a fresh pool,
  so only the pathological item is marked ``timeout`` (it overran) or ``ungradable`` (its
  worker died).

The numbers (pinned by ``tests/test_grading_integrity.py``): chunks of :data:`CHUNK` items,
grouped by gold; a chunk may run :func:`chunk_deadline` seconds (``item_timeout_s`` per item
plus :data:`CHUNK_GRACE_S`), an item graded alone ``item_timeout_s`` (:data:`ITEM_TIMEOUT_S`
by default); at most :data:`MAX_WORKERS` workers unless asked for more.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import TimeoutError as _Overran
from dataclasses import dataclass

import pebble

from ..statuses import GradeStatus
from .graders import Grade, GradeOptions, grade
from .graders import grader as _registered

CHUNK = 64  # items per task sent to a worker
ITEM_TIMEOUT_S = 20.0  # seconds an item may take
CHUNK_GRACE_S = 30.0  # added to a chunk's deadline (worker start, a gold's first parse)
MAX_WORKERS = 8  # workers when not asked: min(CPU count, this)


def chunk_deadline(items: int, item_timeout_s: float) -> float:
    """Seconds a chunk of ``items`` items may run before its worker is stopped."""
    return item_timeout_s * items + CHUNK_GRACE_S


class GradingError(RuntimeError):
    """A grader raised (anything but a time-out) on one item: an error to fix, never a verdict.

    ``index`` is the item's position in the batch given to :func:`grade_many`.
    """

    def __init__(self, index: int, grader: str, error: str, worker_traceback: str | None = None):
        self.index, self.grader, self.error = index, grader, error
        super().__init__(f"grader {grader!r} raised {error} (item {index} of the batch)")
        if worker_traceback:
            self.add_note(f"in the grading worker:\n{worker_traceback.rstrip()}")  # shown with --debug


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else text[:300] + " …"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class _Raised:
    """What a worker sends back when a grader raised on item ``index`` of its chunk."""
    index: int
    error: str
    traceback: str = ""


def _grade_chunk(grader: str, items: list[tuple[str, object]], options: GradeOptions | None = None):
    """The chunk's grades, or _Raised for the first item whose grader raised (the rest are not graded)."""
    out = []
    for i, (c, g) in enumerate(items):
        try:
            out.append(grade(grader, c, g, options))
        except Exception as exc:  # noqa: BLE001 - sent back to the parent, which stops with GradingError
            import traceback

            return _Raised(i, _describe(exc), traceback.format_exc())
    return out


def _die_with_parent(parent: int) -> None:
    """In a worker: be killed when the process that started it dies, a SIGKILL included.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, then a check that the parent did not die before
    it took effect. (The signal comes when the *thread* that forked the worker ends: pebble forks
    replacements from its pool-manager thread, which lives until the pool is stopped, when its
    workers are stopped anyway.) Elsewhere: a daemon thread that exits when the worker is orphaned.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ok = ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL) == 0  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            ok = False
        if ok:
            if os.getppid() != parent:
                os._exit(1)
            return

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="polyvox-orphan-watch", daemon=True).start()


def _pool_context():
    import multiprocessing as mp

    return mp.get_context("fork") if hasattr(os, "fork") else mp.get_context("spawn")


class _Pool:
    """A pebble ProcessPool whose workers die with this process; leaving the block stops every
    worker (a hung one included) whether the block finished or raised."""

    def __init__(self, workers: int):
        self.pool = pebble.ProcessPool(max_workers=workers, initializer=_die_with_parent,
                                       initargs=(os.getpid(),), context=_pool_context())

    def __enter__(self) -> pebble.ProcessPool:
        return self.pool

    def __exit__(self, *exc) -> None:
        self.pool.stop()  # every result is in (or no longer wanted): nothing is left running
        self.pool.join()


def grade_many(grader: str, completions: list[str], golds: list, workers: int | None = None,
               chunk: int = CHUNK, item_timeout_s: float = ITEM_TIMEOUT_S,
               options: GradeOptions | None = None) -> list[Grade]:
    """Grade many completions with the grader named ``grader``; ``math`` runs in worker processes.

    A chunk whose worker dies or overruns :func:`chunk_deadline` is graded again item by item
    in a fresh pool, each item with ``item_timeout_s``, so only the pathological item is marked
    ``timeout`` (it overran) or ``ungradable`` (its worker died). A grader that raises stops the
    batch with :class:`GradingError` naming the item; the workers are stopped first. Workers die
    with this process.
    """
    _registered(grader)  # an unknown name fails here, before any work
    if len(completions) != len(golds):
        raise ValueError("grade_many: completions and golds differ in length")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an integer ≥ 1 (or None), got {workers!r}")
    items = list(zip(completions, golds))
    if grader != "math":
        graded_here = []
        for i, (c, g) in enumerate(items):
            try:
                graded_here.append(grade(grader, c, g, options))
            except Exception as exc:  # noqa: BLE001 - an error, not a verdict
                raise GradingError(i, grader, _describe(exc)) from exc
        return graded_here
    if not items:
        return []
    workers = workers or max(1, min(os.cpu_count() or 1, MAX_WORKERS))
    # Items grouped by gold (stably) before chunking: a gold's items land in one or two
    # chunks, so each worker parses only its own golds instead of nearly all of them.
    order = sorted(range(len(items)), key=lambda i: str(items[i][1]))
    chunks = [order[i:i + chunk] for i in range(0, len(order), chunk)]
    out: list[Grade | None] = [None] * len(items)
    again: list[int] = []  # items of chunks that overran or lost their worker
    with _Pool(workers) as pool:
        futures = [pool.schedule(_grade_chunk, (grader, [items[i] for i in ch], options),
                                 timeout=chunk_deadline(len(ch), item_timeout_s)) for ch in chunks]
        for ch, fut in zip(chunks, futures):
            try:
                res = fut.result()
            except KeyboardInterrupt:
                raise
            except BaseException:  # noqa: BLE001 - time-out or dead worker: graded item by item below
                again += ch
                continue
            if isinstance(res, _Raised):
                raise GradingError(ch[res.index], grader, res.error, res.traceback)
            for i, g in zip(ch, res):
                out[i] = g
    if again:
        with _Pool(min(workers, len(again))) as pool:
            alone = [(i, pool.schedule(_grade_chunk, (grader, [items[i]], options), timeout=item_timeout_s))
                     for i in again]
            for i, fut in alone:
                out[i] = _alone(fut, i, grader)
    return out


def _alone(fut, index: int, grader: str) -> Grade:
    """One item's grade from its own task: ``timeout`` when it overran, ``ungradable`` when its worker
    died; a grader that raised is a GradingError."""
    from .mathverify import _timeout_exception

    try:
        res = fut.result()
    except _Overran:
        return Grade(False, None, GradeStatus.TIMEOUT)
    except pebble.ProcessExpired:
        return Grade(False, None, GradeStatus.UNGRADABLE)  # a crash, an exhausted stack: no verdict
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - raised outside the grader's own call
        if isinstance(exc, _timeout_exception()):
            return Grade(False, None, GradeStatus.TIMEOUT)
        raise GradingError(index, grader, _describe(exc)) from None
    if isinstance(res, _Raised):
        raise GradingError(index, grader, res.error, res.traceback)
    return res[0]
