"""Workers that run several of a launch's stages in turn: one process per slot, not one per stage.

Why. A stage in a fresh process pays a start-up before its first step: imports, the CUDA context,
tracing the compiled decode step (TorchInductor's on-disk cache spares only the compilation), CUDA
graph captures, the first forward and backward. On the H200 that was about 43 s with warm caches
against 9–12 s for a whole 20-step hill-climb run after it in the same process
(bench/results/grid-h200.json), so a launcher that starts a process per stage spends most of a
grid's time starting. A worker here pays it once and serves its slot's stages one after another, as
the sequential path (:meth:`polyvox.stages.Pipeline.run`) does in its one process.

Protocol. The launcher starts ``python -m polyvox.launch_worker FD`` with one GPU visible; it writes
one JSON request per line on the worker's stdin (``{"spec": …, "log": path}``: the pipeline's factory,
its arguments and the stage folder, as :func:`polyvox.launch.worker_argv` encodes them); the worker
runs the stage with its stdout and stderr (file descriptors 1 and 2, so the output of C code too)
sent to the stage's log, then writes ``{"rc": 0 or 1, "seconds": …}`` as one line to the pipe ``FD``.
EOF on stdin ends it.

Departures from a process per stage, each for isolation:
- a stage that raises ends its worker (after writing its result): an error can leave the CUDA context
  or a library's global state unusable, so the next stage gets a fresh process;
- between stages the worker collects garbage and returns cached GPU memory to the device
  (``torch.cuda.empty_cache``), since other workers share the GPU;
- a worker that dies (a crash, the OOM killer) fails the stage it was running; the launcher starts a
  fresh worker for the slot's next stage.
"""
from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path


class Worker:
    """The launcher's handle on one worker process (see the module docstring)."""

    def __init__(self, env: dict, log: Path):
        """``log``: the worker's own output outside its stages (a crash before or between them)."""
        read, write = os.pipe()
        with open(log, "a", encoding="utf-8") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "polyvox.launch_worker", str(write)],
                                         stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                         env=env, pass_fds=(write,), start_new_session=True, text=True)
        os.close(write)
        os.set_blocking(read, False)
        self.results, self._buf = read, b""
        self.pid = self.proc.pid

    def send(self, spec: str, log: Path) -> None:
        self.proc.stdin.write(json.dumps({"spec": spec, "log": str(log)}) + "\n")
        self.proc.stdin.flush()

    def result(self) -> dict | None:
        """The running stage's result once written; ``{"rc": returncode, "died": True}`` if the worker
        died without one; None while it runs."""
        try:
            chunk = os.read(self.results, 65536)
        except BlockingIOError:
            chunk = None
        if chunk:
            self._buf += chunk
        if b"\n" in self._buf:
            line, _, self._buf = self._buf.partition(b"\n")
            return json.loads(line)
        if chunk == b"" or self.proc.poll() is not None:  # the pipe closed or the process ended, no line
            rc = self.proc.wait()
            return {"rc": rc if rc else 1, "died": True}
        return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 30) -> None:
        """EOF on its stdin (it exits after the stage it runs), then wait."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.results)


@contextlib.contextmanager
def _output_to(log: Path):
    """File descriptors 1 and 2 to ``log`` (C-level output too), restored after."""
    sys.stdout.flush(), sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "w", encoding="utf-8") as f:
        os.dup2(f.fileno(), 1), os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])


def _free_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def run_one(spec_text: str) -> float | None:
    """Rebuild the pipeline from its factory and run the one stage (as :func:`polyvox.launch._worker`)."""
    spec = json.loads(spec_text)
    module, _, name = spec["factory"].partition(":")
    pipeline = getattr(importlib.import_module(module), name)(**spec["kwargs"])
    seconds = pipeline.run_stage(spec["folder"])
    print(f"{spec['folder']}: done ({seconds} s)", flush=True)
    return seconds


def serve(result_fd: int) -> int:
    out = os.fdopen(result_fd, "w", encoding="utf-8")
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        t0, rc = time.time(), 0
        with _output_to(Path(req["log"])):
            try:
                run_one(req["spec"])
            except BaseException:  # noqa: BLE001 - reported in the stage's log and by its result
                traceback.print_exc()
                rc = 1
        _free_memory()
        out.write(json.dumps({"rc": rc, "seconds": round(time.time() - t0, 2)}) + "\n")
        out.flush()
        if rc:
            return rc  # a failed stage ends the worker (the module docstring says why)
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
