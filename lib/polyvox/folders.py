"""Run folders: one writer each, one kind each, never the current folder.

:class:`RunLock` holds an exclusive ``flock`` on ``<folder>/.lock`` for a whole run;
:func:`check_out_path` refuses an output path that is empty, ``.``, a file or inside one;
:func:`check_folder_kind` refuses a folder whose manifest records another kind of run
(the kinds are :mod:`polyvox.records`' ``KIND_*``). ``polyvox.records`` re-exports all three.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .records import RecordError, manifest_kind, read_manifest


class RunLock:
    """One writer per run folder: an exclusive ``flock`` on ``<folder>/.lock``, held for the whole run.

    The lock file holds the holder's PID; a second writer gets one line naming it. The
    kernel drops the lock when the holder dies (a SIGKILL included), so a stale lock
    file never blocks a resume. A folder this lock created is removed again when the
    block it guards raises before writing anything else there: a refused run leaves
    neither an empty folder nor a lock file behind.
    """

    def __init__(self, folder: os.PathLike | str):
        self.folder = Path(folder)
        self.fh = None
        self.created: list[Path] = []

    def __enter__(self) -> "RunLock":
        import fcntl

        check_out_path(self.folder)
        missing = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
        self.folder.mkdir(parents=True, exist_ok=True)
        self.created = missing  # deepest first
        lock = self.folder / ".lock"
        try:  # never through a link: a planted .lock symlink would have its target truncated
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RecordError(lock, None, "is a symlink; polyvox never opens a run's lock through a link "
                                  "(remove it)") from None
            raise RecordError(lock, None, f"cannot be opened ({exc.strerror or exc})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:  # a hard link would be truncated as well
            os.close(fd)
            why = "is not a regular file" if not stat.S_ISREG(st.st_mode) else "has other hard links"
            raise RecordError(lock, None, f"{why}; polyvox never truncates it (remove it)") from None
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "r+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise RecordError(self.folder, None, f"in use by process {holder}; one writer per run folder") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self.fh = fh
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self.fh is not None:
            self.fh.close()  # closing releases the flock
            self.fh = None
        if exc_type is not None and self.created:
            # the run failed before writing anything but the lock: leave no trace of it
            if {p.name for p in self.folder.iterdir()} <= {".lock"}:
                (self.folder / ".lock").unlink(missing_ok=True)
                for p in self.created:
                    try:
                        p.rmdir()
                    except OSError:
                        break


def check_out_path(folder: os.PathLike | str) -> Path:
    """A folder a command may write into: refuses ``''``/``.``, a file, a path through a file."""
    if folder is None or str(folder).strip() in ("", "."):
        raise ValueError(f"an output folder must be named (got {str(folder)!r}); polyvox never writes into "
                         "the current folder itself")
    p = Path(folder)
    for q in (p, *p.parents):
        if q.exists() and not q.is_dir():
            raise ValueError(f"{q}: a file, not a folder" + ("" if q == p else f" (in the path {p})"))
    return p


def check_folder_kind(folder: os.PathLike | str, kind: str) -> Path:
    """Read-only check that ``folder`` may hold a run of ``kind``: a new folder, an empty one, or one whose
    manifest is of the same kind. Call it before writing anything (validate first, write second)."""
    p = check_out_path(folder)
    if not p.is_dir():
        return p
    manifest = read_manifest(p)
    if manifest:
        old = manifest_kind(manifest)
        if old != kind:
            raise ValueError(f"{p}: holds a {old or 'unrecognised'} run (its manifest.json), not a {kind} run; "
                             "a folder holds one kind of run: use a new folder")
    return p
