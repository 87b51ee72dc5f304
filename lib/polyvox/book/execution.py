"""One chapter executed with papermill (the kernel's own output to a log beside it), and the executed
notebook made portable: no absolute path of this machine in it, in its log or in a message."""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .render import BookError
from .toc import Chapter


@dataclass
class ExecutionFailure:
    chapter: str
    message: str


def _kernel_manager_class(log: Path):
    """A kernel manager whose kernel talks over IPC (Unix sockets in the system's temp folder, not
    loopback TCP: ipykernel rightly warns about unencrypted TCP) and whose process writes its own
    stdout/stderr (kernel-level logs, a shutdown interrupt's "KeyboardInterrupt caught in kernel")
    to ``log`` instead of the terminal. A chapter's outputs and errors travel over the kernel's
    channels as before; a failure message names the log."""
    from jupyter_client.manager import AsyncKernelManager

    class BookKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            import tempfile
            import uuid

            kwargs.setdefault("transport", "ipc")
            # the sockets' path prefix: jupyter_client's default ("kernel-ipc") is relative, so the five
            # sockets landed in the current folder (the repository, when a chapter runs from its root);
            # a short absolute one, since a Unix socket's path must stay under ~107 bytes (a runtime
            # folder under a deep HOME does not)
            kwargs.setdefault("ip", str(Path(tempfile.gettempdir()) / f"polyvox-{uuid.uuid4().hex[:12]}-ipc"))
            super().__init__(**kwargs)

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as fh:  # the child keeps its own copy of the descriptor
                kw.setdefault("stdout", fh)
                kw.setdefault("stderr", subprocess.STDOUT)
                return await super()._async_launch_kernel(kernel_cmd, **kw)

    return BookKernelManager


EMBED_CACHE = Path("_build/.polyvox/embeddings")  # the book build's embeddings (polyvox.embed.EmbeddingCache)


def execute(chapter: Chapter, params: dict, output: Path, root: Path, paths: dict[str, str] | None = None,
            write_embeddings: bool = False) -> None:
    """Run one notebook with papermill into output; raise BookError with notebook/cell/error on failure.

    The chapter's embeddings are cached in the book build's folder (:data:`EMBED_CACHE`, passed to the
    kernel as ``POLYVOX_EMBED_CACHE``): the build writes them (``write_embeddings``, it holds that folder's
    lock); a chapter run (``polyvox run``) only reads them, so it writes nothing outside its ``--out``.

    The kernel's own process output goes to ``<output>.kernel.log`` (see ``_kernel_manager_class``).
    Afterwards (failed or not) the notebook and the log name no absolute path of this machine: the
    root becomes relative, and each of ``paths`` (absolute path → what to write instead) is replaced
    (:func:`portable_notebook`).
    """
    import papermill as pm

    output.parent.mkdir(parents=True, exist_ok=True)
    log = output.with_name(output.stem + ".kernel.log")
    log.unlink(missing_ok=True)
    # progress bars inside a chapter are debris in the book (and tqdm's notebook fallback
    # warning carries the venv's absolute path): the kernel inherits TQDM_DISABLE, and the
    # one warning tqdm.auto gives on import without ipywidgets ("IProgress not found") is
    # filtered by its message; every other warning still shows
    quiet = {"TQDM_DISABLE": "1",
             "PYTHONWARNINGS": ",".join(x for x in (os.environ.get("PYTHONWARNINGS"), "ignore:IProgress not found") if x),
             "POLYVOX_EMBED_CACHE": str(root / EMBED_CACHE), "POLYVOX_EMBED_CACHE_WRITE": "1" if write_embeddings else "0"}
    saved = {k: os.environ.get(k) for k in quiet}
    os.environ.update(quiet)
    replace = path_replacer(root, paths)
    try:
        pm.execute_notebook(
            str(chapter.source), str(output), parameters=params, cwd=str(root),
            kernel_name="python3", progress_bar=False, log_output=False, request_save_on_cell_execute=False,
            kernel_manager_class=_kernel_manager_class(log),
        )
    except pm.PapermillExecutionError as exc:
        evalue = str(exc.evalue).strip().splitlines()[-1] if str(exc.evalue).strip() else ""
        raise BookError(replace(
            f"{chapter.source.relative_to(root) if chapter.source.is_relative_to(root) else chapter.source}: "
            f"cell {exc.cell_index} (execution count {exc.exec_count}) raised {exc.ename}: {evalue}"
        )) from None
    except RuntimeError as exc:  # the kernel died or never started: its own output says why
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        raise BookError(replace(f"{chapter.name}: kernel failed ({' '.join(str(exc).split())})"
                                + (f"; kernel log {log}: " + " | ".join(tail) if tail else ""))) from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if output.exists():
            portable_notebook(output, root, paths)
        if log.exists():
            text = log.read_text(errors="replace")
            if not text.strip():
                log.unlink()
            elif replace(text) != text:
                log.write_text(replace(text))


def path_replacer(root: Path, paths: dict[str, str] | None = None):
    """A function text → text that writes each absolute path of ``paths`` as its value, and the root
    (with what is under it) relative to the root: ``<root>/data/x`` → ``data/x``, ``<root>`` → ``.``.

    A path is matched whole (``/a/b`` but not the start of ``/a/bc``), the longest first.
    """
    table: dict[str, str] = {}
    for path, new in (paths or {}).items():
        path = str(path).rstrip("/")
        if path and Path(path).is_absolute():
            table[path] = new
    for r in (str(root), str(Path(root).resolve())):
        table.setdefault(r.rstrip("/"), ".")
    pattern = re.compile("|".join(re.escape(k) + r"(?:/|(?![\w.\-~]))"
                                  for k in sorted(table, key=len, reverse=True)))

    def sub(m: re.Match) -> str:
        text = m.group(0)
        slash = text.endswith("/")
        new = table[text[:-1] if slash else text]
        if new == ".":
            return "" if slash else "."
        return new + ("/" if slash else "")

    return lambda text: pattern.sub(sub, text)


def portable_notebook(notebook: Path, root: Path, paths: dict[str, str] | None = None) -> None:
    """Rewrite an executed notebook so that it names no absolute path of this machine.

    Every text in it (cell sources — the injected parameters among them —, outputs, metadata:
    papermill's ``input_path``/``output_path``/``cwd`` and its record of the parameters) goes
    through :func:`path_replacer`; a papermill path still absolute after that (a notebook run
    from outside the root) becomes :func:`polyvox.records.portable_path`. Written only when it
    changes.
    """
    import nbformat

    from ..records import portable_path

    replace = path_replacer(root, paths)

    def walk(x):
        if isinstance(x, str):
            return replace(x)
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        return x

    raw = notebook.read_text(encoding="utf-8")
    nb = nbformat.from_dict(walk(json.loads(raw)))
    meta = nb.metadata.get("papermill", {})
    for key in ("input_path", "output_path", "cwd"):
        if meta.get(key) and Path(meta[key]).is_absolute():
            meta[key] = portable_path(meta[key])
    text = nbformat.writes(nb)
    if not text.endswith("\n"):
        text += "\n"
    if text != raw:
        notebook.write_text(text, encoding="utf-8")


def portable_params(params: dict, root: Path, paths: dict[str, str] | None = None) -> dict:
    """Parameters as a manifest records them: every absolute path in a text value made portable."""
    replace = path_replacer(root, paths)
    return {k: replace(v) if isinstance(v, str) else v for k, v in params.items()}
