"""Work done once per test session and shared by the pytest-xdist workers (``make test`` runs two).

:func:`once` runs ``produce(folder)`` in the first worker that asks for ``name``; a worker that asks while it
runs waits for it (a file lock), and every later one reads its result (pickled) and its folder. A failure is
shared too: the first worker raises it, the others fail with its message, so a broken build fails every test
that reads it instead of being retried on each worker. Without xdist the folder is in the session's own
temporary folder, and the same code runs.
"""
from __future__ import annotations

import os
import pickle
import shutil
import traceback
from pathlib import Path
from typing import Any, Callable

import pytest
from filelock import FileLock


def shared_root(tmp_path_factory) -> Path:
    """The folder all workers of this session see: the parent of a worker's base temporary folder under xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(tmp_path_factory, name: str, produce: Callable[[Path], Any]) -> tuple[Path, Any]:
    """``produce(folder)`` once per session across workers; returns (folder, what it returned)."""
    root = shared_root(tmp_path_factory)
    folder = root / f"shared-{name}"
    done, failed = root / f"shared-{name}.pickle", root / f"shared-{name}.failed"
    with FileLock(str(root / f"shared-{name}.lock")):
        if done.exists():
            return folder, pickle.loads(done.read_bytes())
        if failed.exists():
            pytest.fail(f"{name}: failed in another worker of this session:\n{failed.read_text()[-4000:]}")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            result = produce(folder)
        except BaseException as exc:
            failed.write_text("".join(traceback.format_exception(exc)))
            raise
        done.write_bytes(pickle.dumps(result))
        return folder, result
