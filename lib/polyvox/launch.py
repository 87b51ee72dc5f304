"""Many runs at once: a study pipeline's stages run K at a time on each GPU of one host.

Parts II–IV run grids of small independent runs (RL seeds × arms, heads × seeds), each using a sliver
of an H200: the launcher runs them concurrently.

Algorithm. The jobs are a :class:`polyvox.stages.Pipeline`'s stages, one folder each; a job waits
for the jobs whose folders it reads (:meth:`~polyvox.stages.Pipeline.graph`). Each GPU slot (``per_gpu``
per GPU; ``CUDA_VISIBLE_DEVICES`` names one GPU per worker) has a worker process that serves its jobs
in turn (:mod:`polyvox.launch_worker`: it rebuilds the pipeline from its factory and runs one stage
under the stage folder's lock, :meth:`~polyvox.stages.Pipeline.run_stage`, then the next), so a grid
pays a process's start-up once per slot, not once per stage; ready jobs start in the pipeline's order.
``fresh_process`` (or ``POLYVOX_LAUNCH_FRESH_PROCESS=1``) runs each stage in a process of its own
(``python -m polyvox.launch JOB``) instead. The launcher itself holds the root's lock and writes the root
manifest (it runs inside :meth:`Pipeline.run <polyvox.stages.Pipeline.run>`), so a folder still has
one writer: the root by the launcher, each stage folder by its one worker.

Several GPUs. Under ``torchrun --nproc_per_node G`` (or ``accelerate launch``), rank r runs the jobs
at positions ≡ r (mod G) of the pipeline's order on its local GPU, K at a time; ranks meet in two
barriers (gloo, so the same code runs on CPU) and see one another's jobs through the stage records
on the shared disk and each rank's ``launch/rank-<r>.json`` (one writer each). Rank 0 holds the
root's lock and writes the root manifest; the other ranks take no lock and write only their own file.

Departures from a plain process pool: a failed job does not stop the others, only the jobs that
read its folder (reported ``skipped``); a job that makes no progress for ``stall_s`` seconds (neither
its log nor any file of its stage folder changed: on the H200 one of eight RL runs sharing the GPU once
hung at its first step for 22 minutes while the others finished) is killed and started once more, then
failed if it stalls again (``POLYVOX_LAUNCH_STALL_S``, default :data:`STALL_S`; 0 turns the watch off); an interrupted launch (Ctrl-C, SIGTERM) stops its workers,
and a rerun resumes, since each stage is resumable and complete stages are skipped. A worker's output
goes to ``launch/rank-<r>/<job>.log`` under the run folder.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .statuses import RunStatus

LAUNCH_DIR = "launch"  # under a pipeline's root folder: the launcher's status files and worker logs
FRESH_ENV = "POLYVOX_LAUNCH_FRESH_PROCESS"  # "1": a process per stage (run_pipeline's fresh_process)
POLL_S = 0.2
STALL_ENV = "POLYVOX_LAUNCH_STALL_S"  # seconds without progress before a job is killed (0: never)
STALL_S = 1800.0  # the default: above any silent phase of this project's stages (a band draw's chunk, a model's build)
STALL_CHECK_S = 10.0  # how often running jobs are looked at (a folder walk each)
STALLED_RC = -9  # the returncode recorded for a job killed for stalling twice


@dataclass
class Job:
    """One process to run: ``name`` (unique; a stage folder), ``argv``, and the jobs it runs ``after``."""
    name: str
    argv: list[str]
    after: tuple[str, ...] = ()
    spec: str | None = None  # a pipeline stage's worker spec: with reuse, sent to a worker that serves the slot


@dataclass
class JobResult:
    name: str
    status: str  # RunStatus.COMPLETE / FAILED / INTERRUPTED, or "skipped" (a job it reads failed)
    seconds: float | None = None
    gpu: str | None = None
    returncode: int | None = None
    log: str | None = None
    rank: int = 0


SKIPPED = "skipped"


@dataclass
class Placement:
    """Where this process's jobs run: its rank among ``world`` launchers, and its GPUs (None: CPU)."""
    rank: int = 0
    world: int = 1
    gpus: list[str] | None = None
    per_gpu: int = 1
    extra: dict = field(default_factory=dict)

    @property
    def slots(self) -> list[str | None]:
        return [g for g in (self.gpus or [None]) for _ in range(self.per_gpu)]


def visible_gpus() -> list[str] | None:
    """The GPUs this process may use (``CUDA_VISIBLE_DEVICES``, else every device torch sees), None on CPU."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
        return ids or None
    try:
        import torch
        n = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no CUDA build: the CPU
        return None
    return [str(i) for i in range(n)] or None


def placement(per_gpu: int, gpus: list[str] | None = None) -> Placement:
    """This process's placement: under torchrun/accelerate (``WORLD_SIZE`` > 1) the rank's local GPU."""
    if per_gpu < 1:
        raise ValueError(f"--parallel must be at least 1, got {per_gpu}")
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    gpus = visible_gpus() if gpus is None else list(gpus)
    if world > 1 and gpus:
        local = int(os.environ.get("LOCAL_RANK", rank))
        gpus = [gpus[local % len(gpus)]]
    return Placement(rank, world, gpus, per_gpu)


def run_jobs(jobs: list[Job], where: Placement, logs: Path, *, done: Callable[[str], bool] = lambda name: False,
             others: Callable[[], dict[str, str]] = dict, report: Callable[[list[JobResult]], None] | None = None,
             progress: bool = True, log_root: Path | None = None, reuse: bool = False,
             stall_s: float | None = None) -> list[JobResult]:
    """Run ``jobs``, K per GPU slot of ``where``, each once the jobs it runs ``after`` are complete.

    ``reuse``: a job with a ``spec`` is sent to the slot's worker process (:mod:`polyvox.launch_worker`),
    started on first use and kept for the slot's next jobs; other jobs run in a process of their own.

    An ``after`` that is not among ``jobs`` is run elsewhere (another rank, an earlier launch): its state
    comes from ``done(name)`` (complete on disk) and ``others()`` (name → status of other ranks' finished
    jobs), so a job whose input failed elsewhere is skipped. ``report`` receives the results after each
    change (the rank's status file). Results come back in the order of ``jobs``.

    ``stall_s`` (default ``POLYVOX_LAUNCH_STALL_S`` or :data:`STALL_S`; 0: off): a running job whose log and
    stage folder (``log_root / name``, when it exists) have not changed for that long is killed (its whole
    process group; a worker with it) and queued again, once; a second stall fails it (returncode
    :data:`STALLED_RC`). A restarted stage starts over, as after any interruption."""
    if len({j.name for j in jobs}) != len(jobs):
        raise ValueError("job names must be unique")
    from .launch_worker import Worker

    mine = list(jobs)
    results: dict[str, JobResult] = {}
    running: dict[str, tuple[object, float, int, object]] = {}  # name -> (process or Worker, start, slot, log)
    slots = where.slots
    free = list(range(len(slots)))
    workers: dict[int, Worker] = {}  # slot -> its worker (reuse)
    logs.mkdir(parents=True, exist_ok=True)
    total, t_start = len(mine), time.time()
    if stall_s is None:
        stall_s = float(os.environ.get(STALL_ENV, "") or STALL_S)
    activity: dict[str, float] = {}  # name -> the newest change seen in its log or stage folder
    restarted: set[str] = set()
    last_watch = time.time()

    complete_elsewhere: set[str] = set()  # read from disk once: a complete stage stays complete
    def state_of(name: str) -> str | None:  # complete / failed / skipped / None (not finished)
        if name in results:
            return results[name].status
        if name in complete_elsewhere or done(name):
            complete_elsewhere.add(name)
            return RunStatus.COMPLETE
        return others().get(name)

    def finish(res: JobResult) -> None:
        results[res.name] = res
        if report is not None:
            report(list(results.values()))
        if progress:
            took = f" in {res.seconds:.1f} s" if res.seconds is not None else ""
            on = f" (gpu {res.gpu})" if res.gpu is not None else ""
            print(f"[{len(results)}/{total}] {res.name}: {res.status}{took}{on}", flush=True)

    try:
        while len(results) < total:
            for j in mine:
                if j.name in results or j.name in running or not free:
                    continue
                states = [state_of(a) for a in j.after]
                if any(s in (RunStatus.FAILED, RunStatus.INTERRUPTED, SKIPPED) for s in states):
                    finish(JobResult(j.name, SKIPPED, rank=where.rank))
                    continue
                if any(s != RunStatus.COMPLETE for s in states):
                    continue
                slot = free.pop(0)
                log_path = logs / (j.name.replace("/", "__") + ".log")
                if reuse and j.spec is not None:
                    if slot not in workers or not workers[slot].alive():
                        workers[slot] = Worker(_worker_env(where, slots[slot]), logs / f"worker-{slot}.log")
                    workers[slot].send(j.spec, log_path)
                    running[j.name] = (workers[slot], time.time(), slot, None)
                    continue
                log = open(log_path, "w", encoding="utf-8")
                proc = subprocess.Popen(j.argv, stdout=log, stderr=subprocess.STDOUT, env=_worker_env(where, slots[slot]),
                                        start_new_session=True)
                running[j.name] = (proc, time.time(), slot, log)
            if stall_s > 0 and time.time() - last_watch >= min(STALL_CHECK_S, stall_s / 2):
                last_watch = time.time()
                for name, (proc, t0, slot, log) in list(running.items()):
                    folder = (log_root / name) if log_root is not None else None
                    seen = max(t0, activity.get(name, t0), _newest_change(logs / (name.replace("/", "__") + ".log"),
                                                                          folder))
                    activity[name] = seen
                    if time.time() - seen < stall_s:
                        continue
                    quiet = round(time.time() - seen)
                    _kill(proc)
                    if isinstance(proc, Worker):
                        workers.pop(slot, None)
                    if log is not None:
                        log.close()
                    del running[name]
                    free.append(slot)
                    activity.pop(name, None)
                    if name not in restarted:
                        restarted.add(name)
                        if progress:
                            print(f"[stalled] {name}: no progress for {quiet} s; killed and queued again", flush=True)
                        continue
                    log_path = logs / (name.replace("/", "__") + ".log")
                    shown = os.path.relpath(log_path, log_root) if log_root is not None else str(log_path)
                    if progress:
                        print(f"[stalled] {name}: no progress for {quiet} s again; failed", flush=True)
                    finish(JobResult(name, RunStatus.FAILED, round(time.time() - t0, 2), slots[slot], STALLED_RC,
                                     shown, where.rank))
            for name, (proc, t0, slot, log) in list(running.items()):
                if isinstance(proc, Worker):
                    got = proc.result()
                    rc = None if got is None else got["rc"]
                    if rc:  # a failed stage ends its worker (or it died): the slot's next job gets a fresh one
                        workers.pop(slot).close()
                else:
                    rc = proc.poll()
                if rc is None:
                    continue
                if log is not None:
                    log.close()
                del running[name]
                free.append(slot)
                gpu = slots[slot]
                status = RunStatus.COMPLETE if rc == 0 else RunStatus.FAILED
                # the log's path relative to the run folder (launch/rank-<r>/<job>.log): a run folder moves whole
                log_path = logs / (name.replace("/", "__") + ".log")
                shown = os.path.relpath(log_path, log_root) if log_root is not None else str(log_path)
                finish(JobResult(name, status, round(time.time() - t0, 2), gpu, rc, shown, where.rank))
            if len(results) < total:
                time.sleep(POLL_S)
    except BaseException:
        _stop(running, workers)
        for name, (_p, t0, slot, _log) in running.items():
            results[name] = JobResult(name, RunStatus.INTERRUPTED, round(time.time() - t0, 2), slots[slot],
                                      rank=where.rank)
        if report is not None:
            report(list(results.values()))
        raise
    for w in workers.values():
        w.close()
    if progress:
        print(f"rank {where.rank}: {total} jobs in {time.time() - t_start:.1f} s", flush=True)
    return [results[j.name] for j in mine]


def _newest_change(log: Path, folder: Path | None) -> float:
    """The newest modification time of ``log`` and of the files under ``folder`` (0 if none exist)."""
    newest = 0.0
    paths = [log] + ([p for p in folder.rglob("*")] if folder is not None and folder.is_dir() else [])
    for path in paths:
        with contextlib.suppress(OSError):
            newest = max(newest, path.stat().st_mtime)
    return newest


def _kill(proc) -> None:
    """SIGKILL a job's process group (a stalled process may ignore SIGTERM) and reap it, so that the
    stage folder's lock is free before the job starts again."""
    popen = proc.proc if hasattr(proc, "send") else proc
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()
    if hasattr(proc, "send"):
        with contextlib.suppress(OSError):
            os.close(proc.results)


def _worker_env(where: Placement, gpu: str | None) -> dict:
    env = dict(os.environ)
    env.update(where.extra)  # e.g. the MPS daemon's pipe folder
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(var, None)  # a worker is a one-process run, whatever launched the launcher
    return env


def _stop(running: dict, workers: dict) -> None:
    """SIGTERM every worker's process group (idle reused workers too), then SIGKILL what is left after 10 s."""
    procs = {id(p): p for p, *_ in running.values()} | {id(w): w for w in workers.values()}
    for proc in procs.values():
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    for proc in procs.values():
        popen = proc.proc if hasattr(proc, "send") else proc
        try:
            popen.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
    for *_rest, log in running.values():
        if log is not None:
            log.close()


def worker_spec(factory: str, kwargs: dict, folder: str) -> str:
    """The stage at ``folder`` of the pipeline ``factory(**kwargs)`` (JSON values), as a worker reads it."""
    return json.dumps({"factory": factory, "kwargs": kwargs, "folder": folder}, sort_keys=True)


def worker_argv(factory: str, kwargs: dict, folder: str) -> list[str]:
    """The command that runs the stage at ``folder`` of the pipeline ``factory(**kwargs)`` in a process of its own."""
    return [sys.executable, "-m", "polyvox.launch", worker_spec(factory, kwargs, folder)]


def run_pipeline(pipeline, names, factory: str, kwargs: dict, per_gpu: int = 1, gpus: list[str] | None = None,
                 progress: bool = True, mps: bool = False, fresh_process: bool | None = None) -> dict[str, float | None]:
    """Run ``pipeline``'s stages ``names`` with K = ``per_gpu`` workers per GPU (see the module docstring).

    ``factory`` ("module:function") and ``kwargs`` rebuild the same pipeline in each worker. ``mps``: the
    workers share each GPU through CUDA's Multi-Process Service (:func:`mps_daemon`). ``fresh_process``: a
    process per stage instead of workers that serve their slot's stages in turn (:mod:`polyvox.launch_worker`);
    None reads ``POLYVOX_LAUNCH_FRESH_PROCESS`` (``1``: fresh). Returns seconds per stage folder; raises when a
    job failed (after every job that could run has run)."""
    if fresh_process is None:
        fresh_process = os.environ.get(FRESH_ENV, "") == "1"
    where = placement(per_gpu, gpus)
    todo = pipeline.todo(names)
    pipeline.check(todo)  # every rank validates; rank 0 alone takes the root lock and writes the root manifest
    if not mps:
        return _launch(pipeline, todo, factory, kwargs, where, progress, not fresh_process)
    with mps_daemon(pipeline.out, where) as env:
        where.extra.update(env)
        return _launch(pipeline, todo, factory, kwargs, where, progress, not fresh_process)


def _launch(pipeline, todo, factory, kwargs, where: Placement, progress: bool, reuse: bool) -> dict[str, float | None]:
    root = Path(pipeline.out) / LAUNCH_DIR
    dist = _group(where)

    def jobs_of(p) -> list[Job]:
        return [Job(folder, worker_argv(factory, kwargs, folder), after, worker_spec(factory, kwargs, folder))
                for folder, after in p.graph(todo)]

    def execute(p, todo) -> dict:
        _barrier(dist)  # the root manifest is written: the other ranks may start
        results = _run_rank(p, jobs_of(p), where, root, progress, reuse)
        _barrier(dist)
        return _finish(p, _gather(dist, results))

    try:
        if where.rank == 0:
            return pipeline.run(todo, execute=execute)
        _barrier(dist)
        results = _run_rank(pipeline, jobs_of(pipeline), where, root, progress, reuse)
        _barrier(dist)
        _gather(dist, results)
        return {r.name: r.seconds for r in results}
    finally:  # a rank that exits with its gloo group alive aborts (SIGABRT) and torchrun stops the rest
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()


@contextlib.contextmanager
def mps_daemon(out, where: Placement):
    """CUDA's Multi-Process Service for a launch. Without it, processes sharing a GPU take turns on it
    (time-slicing), so small runs whose kernels each fill a few of its SMs gain only the overlap of their
    host-side work; with it, kernels of several processes run at once. One control daemon per host, started
    by local rank 0 (``nvidia-cuda-mps-control -d``; pipe and log folders under the system's temp folder,
    named after the run folder so that every rank finds them), serving every GPU; stopped (``quit``) at the
    end. Yields the variables the workers need."""
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        raise RuntimeError("--mps: nvidia-cuda-mps-control is not on PATH (CUDA's Multi-Process Service comes "
                           "with the NVIDIA driver's utilities)")
    tag = hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:10]
    base = Path(tempfile.gettempdir()) / f"polyvox-mps-{tag}"
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(base / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(base / "log")}
    full = {**os.environ, **env}
    full.pop("CUDA_VISIBLE_DEVICES", None)  # the daemon serves every GPU; each worker names its own
    starter = int(os.environ.get("LOCAL_RANK", where.rank)) == 0
    if starter:
        for d in env.values():
            Path(d).mkdir(parents=True, exist_ok=True)
        subprocess.run([exe, "-d"], env=full, check=True, timeout=60)
    try:
        yield env
    finally:
        if starter:
            subprocess.run([exe], input="quit\n", text=True, env=full, timeout=60)


def _run_rank(p, jobs, where: Placement, root: Path, progress: bool, reuse: bool = True) -> list[JobResult]:
    status = root / f"rank-{where.rank}.json"

    def done(name: str) -> bool:
        return p.state(p.stage_at(name)) == "done"

    def others() -> dict[str, str]:
        seen = {}
        for f in root.glob("rank-*.json"):
            if f != status:
                try:
                    seen.update({r["name"]: r["status"] for r in json.loads(f.read_text())["jobs"]})
                except (OSError, ValueError, KeyError, TypeError):
                    pass  # being replaced: read again at the next poll
        return seen

    def report(results: list[JobResult]) -> None:
        tmp = status.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"rank": where.rank, "gpus": where.gpus, "per_gpu": where.per_gpu,
                                   "jobs": [asdict(r) for r in results]}, indent=1, default=str) + "\n")
        os.replace(tmp, status)

    root.mkdir(parents=True, exist_ok=True)
    report([])
    # positions in the full list, so that every rank agrees on who runs what; complete stages are
    # not relaunched (a job after one of them finds it complete through done())
    share = [j for i, j in enumerate(jobs) if i % where.world == where.rank and not done(j.name)]
    return run_jobs(share, where, root / f"rank-{where.rank}", done=done, others=others, report=report,
                    progress=progress, log_root=Path(p.out), reuse=reuse)


def _finish(p, results: list[JobResult]) -> dict[str, float | None]:
    """Seconds per stage folder; one line naming each failed job and its log, then an error, when any failed."""
    bad = [r for r in results if r.status != RunStatus.COMPLETE]
    for r in bad:
        where = f": see {Path(p.out) / r.log}" if r.log else ""
        print(f"{r.name}: {r.status}{where}", file=sys.stderr, flush=True)
    if bad:
        failed = sum(r.status == RunStatus.FAILED for r in bad)
        raise RuntimeError(f"{failed} job(s) failed and {len(bad) - failed} did not run; the complete stages stay "
                           "(run the same command again to resume)")
    times = {r.name: r.seconds for r in results}
    return {n: times[n] for n in (st.folder.relative_to(p.out).as_posix() for st in p.stages) if n in times}


def _group(where: Placement):
    """torch.distributed's default group over the ranks (gloo: it runs on CPU too), None for one rank."""
    if where.world == 1:
        return None
    import torch.distributed as dist

    if not dist.is_initialized():  # a grid may run for hours between its two barriers
        dist.init_process_group("gloo", timeout=datetime.timedelta(days=7))
    return dist


def _barrier(dist) -> None:
    dist is not None and dist.barrier()


def _gather(dist, results: list[JobResult]) -> list[JobResult]:
    if dist is None:  # one rank
        return results
    everything: list = [None] * dist.get_world_size()
    dist.all_gather_object(everything, [asdict(r) for r in results])
    return [JobResult(**r) for part in everything for r in part]


def _worker(spec_text: str) -> int:
    """One job in a process of its own (see :func:`worker_argv`)."""
    from .launch_worker import run_one

    run_one(spec_text)
    return 0


def gpu_list(text: str) -> list[str]:
    """``--gpus 0,1``: GPU indices, as CUDA_VISIBLE_DEVICES takes them."""
    ids = [t.strip() for t in text.split(",")]
    if not ids or any(not t.isdigit() for t in ids):
        raise ValueError(f"--gpus takes comma-separated GPU indices (e.g. 0,1), got {text!r}")
    return ids


def add_arguments(parser) -> None:
    """``--parallel K`` and ``--gpus``, the same for every pipeline command."""
    import argparse

    from .config import integer

    def gpus(text: str) -> list[str]:
        try:
            return gpu_list(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parser.add_argument("--parallel", type=integer(1), default=None, metavar="K",
                        help="run the stages as a job graph, K worker processes per GPU at once (polyvox.launch); "
                             "under torchrun each rank takes its share on its own GPU")
    parser.add_argument("--gpus", type=gpus, default=None, help="with --parallel: the GPUs to use (default: all visible)")
    parser.add_argument("--mps", action="store_true",
                        help="with --parallel: share each GPU through CUDA's Multi-Process Service (kernels of "
                             "several workers at once, instead of taking turns)")


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1]))
