"""GRPO over several processes (``accelerate launch`` or ``torchrun``): one writer, the batch shared out.

A GPU user runs, for two GPUs of one host::

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
        --dynamo_backend no -m polyvox.cli rl --config FILE.yaml

(``--mixed_precision no`` leaves the choice to polyvox: bf16 autocast on CUDA, as one process;
``torchrun --nproc_per_node 2 -m polyvox.cli rl --config FILE.yaml`` works too, accelerate's
state reading the same ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` variables). The same command on a
host without a GPU runs the ranks on CPU over gloo, as the slow test does; accelerate's ``--cpu``
flag would not: without MPI it starts one process. One process, without a launcher, runs exactly
as before: nothing here initialises a process group then.

One writer. Only the main process (rank 0) checks the run folder, takes its
:class:`polyvox.records.RunLock` and writes the manifest, the step log, the held-out lines and the
adapters; the other ranks write nothing (not even the ``rng_state_<rank>.pth`` the ``Trainer`` puts
into a checkpoint: polyvox never resumes a ``Trainer`` checkpoint — a run starts over). Rank 0 tells
the others whether it got the folder, so a refused run stops every rank before any model loads.
A rank that saved an adapter the next stage loads is waited for (a barrier). A kill leaves what one
process leaves: a ``running`` manifest that a rerun starts over from.

The batch (:func:`per_rank_completions`). A step is still ``prompts_per_step`` groups of
``group_size`` completions in all: TRL's ``per_device_train_batch_size`` is that global batch
divided by the number of processes, so the learning curve is comparable with a one-process run.
TRL's ``RepeatSampler`` (the same seed on every rank) lays out the global batch group by group, and
each rank takes its contiguous slice: rank ``r`` generates and scores rows ``r·n … (r+1)·n − 1``.
When ``prompts_per_step`` is a multiple of the number of processes, each rank holds whole groups;
otherwise a group may straddle two ranks, which is still correct because TRL gathers every rank's
rewards before normalising them within each group, then hands each rank its slice of advantages.
The step log's statistics are computed from the gathered global batch (:func:`gather`), so a
step's line describes all its completions, written once. (With ``gradient_accumulation_steps`` k a
step is k such batches, on one process as on several.) DDP averages the ranks' gradients; TRL's
token-level loss divides by the whole batch's token count, so a step is the one-process step up
to the order of floating-point sums: on CPU the slow test's two-process run has the one-process
step statistics, and adapters 2·10⁻⁶ (one step) and 1.5·10⁻⁵ (two) from its. DDP's ``find_unused_parameters`` stays on (the ``Trainer``'s default for a PEFT
model): LoRA on MoE experts can leave an expert without tokens in a step.

The held-out evaluation runs on every rank, sharded by problem, and is gathered before rank 0
writes its line (:func:`polyvox.train.grpo.evaluate`).

Seeds. polyvox's fast generation seeds a row by its position in the *global* batch, so the rows
of a step get the seeds a one-process run gives them; TRL's own generation draws from the
process's torch generator, which TRL seeds as ``seed + rank`` (``set_seed(seed,
device_specific=True)``): reproducible for a given number of processes.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Iterator


def world_size() -> int:
    """Processes of this run, as the launcher states it (``WORLD_SIZE``; 1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def per_rank_completions(prompts_per_step: int, group_size: int, processes: int) -> int:
    """Completions each process generates per step: the global batch shared equally."""
    total = prompts_per_step * group_size
    if total % processes:
        raise ValueError(f"prompts_per_step × group_size = {total} completions per step cannot be shared "
                         f"equally by {processes} processes; choose a multiple of {processes}")
    return total // processes


@contextlib.contextmanager
def one_writer(out: str | Path, check: Callable[[str | Path], None]) -> Iterator[bool]:
    """Hold ``out``'s lock on the main process for the block; yields whether this process writes.

    ``check`` validates the folder (read-only), before and again under the lock. One process: the
    lock as :func:`polyvox.train.grpo.train` always took it. Several: rank 0 alone checks and locks,
    then broadcasts the outcome; every rank raises if rank 0 was refused."""
    from ..records import RunLock

    if world_size() == 1:
        check(out)  # read-only: a refused run changes nothing
        with RunLock(out):
            check(out)  # again under the lock
            yield True
        return
    import torch
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    # joins the launcher's process group: NCCL on GPUs; gloo on CPU, as the trainer's ``use_cpu`` will ask
    state = PartialState(cpu=not torch.cuda.is_available())
    with contextlib.ExitStack() as stack:
        refused: BaseException | None = None
        if state.is_main_process:
            try:
                check(out)
                stack.enter_context(RunLock(out))
                check(out)
            except Exception as exc:  # noqa: BLE001 - told to the other ranks, then raised
                refused = exc
        outcome = [None if refused is None else f"{type(refused).__name__}: {refused}"]
        broadcast_object_list(outcome, from_process=0)
        if refused is not None:
            raise refused
        if outcome[0] is not None:
            raise RuntimeError(f"the main process was refused the run folder: {outcome[0]}")
        yield state.is_main_process


def gather(rows: list) -> list:
    """Every process's ``rows``, concatenated in rank order, on every process (one process: ``rows``)."""
    if world_size() == 1:
        return rows
    from accelerate.utils import gather_object

    return gather_object(rows)


def wait_for_everyone() -> None:
    if world_size() > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()
