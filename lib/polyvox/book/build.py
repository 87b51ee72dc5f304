"""Build the book: execute chapters with papermill (content-hash cache), then Jupyter Book.

Algorithm
1. Read ``_toc.yml``. A toc entry ``book/<part>/<name>`` whose source
   ``notebooks/<part>/<name>.ipynb`` exists is a *chapter*; other entries are
   hand-written pages.
2. For each chapter compute a cache key: sha256 over the notebook source, the
   parameters passed to it, every input file it declares (notebook metadata
   ``polyvox.inputs``: globs relative to the repo root, each file keyed by its path
   relative to the root and its content), polyvox's own source (keyed the same way)
   and the hash of ``requirements.lock`` — a new library version re-executes.
   If ``_build/.polyvox/executed/<part>/<name>.ipynb`` was filed under that key
   (its metadata ``polyvox.cache_key``), the chapter is not executed.
3. Otherwise execute it with papermill (cwd = repo root, so chapters read
   ``data/`` by relative path). A failing chapter is reported as one line
   (notebook, cell, error); its partial output goes to ``_build/.polyvox/failed``
   and the other chapters go on. A chapter that ran is filed with its key in one
   atomic rename (:func:`publish`): a build killed at any instant leaves each
   chapter's old notebook and key or its new ones, never new output under an old key.
   Executed notebooks name no absolute path (:func:`portable_notebook`).
4. Render: copy each executed notebook to ``book/<part>/<name>.ipynb`` with the
   injected-parameters cell removed from the HTML (tag ``remove-cell``), the
   parameters cell collapsed, and a dated banner for each correction in
   ``data/corrections.yml`` naming the chapter. Rendering is cheap and never
   re-executes, so a new correction shows without recomputing anything. Files
   are rewritten only when their bytes change, so Sphinx's incremental build
   stays incremental.
5. Write ``book/corrections.md`` and run ``jupyter-book build`` with execution
   off (``_config.yml``).

One build writes a book at a time: ``build`` holds ``records.RunLock`` on ``_build/.polyvox``
(kind ``book build``) from before the first chapter until the manifest is written.

Beside this module: :mod:`.toc` (the root, the chapters of ``_toc.yml``, the ``--params`` file),
:mod:`.execution` (papermill, notebooks made portable), :mod:`.cache` (a chapter filed under its key)
and :mod:`.run` (``polyvox run``); their public names are importable from here too.

Departure from Jupyter Book's own cache: jupyter-cache keys on notebook source
only; here the data a chapter reads, the library code and the locked library
versions are part of the key.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..statuses import RunStatus

# the modules beside this one; their public names are re-exported here, as they were when all of it
# lived in build.py. _build calls execute and _library_hash by this module's names (tests replace them)
from .cache import cached_key, publish  # noqa: F401
from .execution import ExecutionFailure, execute, path_replacer, portable_notebook, portable_params  # noqa: F401
from .render import BookError, corrections_page, load_corrections, render
from .run import run_chapter  # noqa: F401
from .toc import Chapter, chapters, declared_inputs, find_root, load_params_file  # noqa: F401
from .toc import notebook_parameters, params_for, repo_path, resolve_chapter  # noqa: F401


CACHE_DIR = Path("_build/.polyvox")


LOCK_FILE = "requirements.lock"


def _library_hash(root: Path) -> str:
    """polyvox's source (files keyed by their path inside the package) and the environment's lock file."""
    h = hashlib.sha256()
    lib = Path(__file__).resolve().parents[1]
    for f in sorted(lib.rglob("*.py")):
        h.update(b"source\0" + f.relative_to(lib).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    lock = root / LOCK_FILE
    h.update(b"lock\0" + (hashlib.sha256(lock.read_bytes()).digest() if lock.exists() else b"none"))
    return h.hexdigest()


def cache_key(root: Path, chapter: Chapter, params: dict, library_hash: str | None = None) -> str:
    import nbformat

    nb_bytes = chapter.source.read_bytes()
    nb = nbformat.reads(nb_bytes.decode(), as_version=4)
    h = hashlib.sha256()
    h.update(b"notebook\0" + nb_bytes)
    h.update(b"params\0" + json.dumps(params, sort_keys=True, default=str).encode())
    for f in declared_inputs(root, nb):
        h.update(b"input\0" + str(f.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    h.update(b"library\0" + (library_hash or _library_hash(root)).encode())
    return h.hexdigest()


@dataclass
class BuildReport:
    executed: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    failures: list[ExecutionFailure] = field(default_factory=list)
    html: Path | None = None
    seconds: float = 0.0


def build(root: os.PathLike | str | None = None, only: str | None = None, force: bool = False,
          params_file: os.PathLike | str | None = None, html: bool = True,
          progress: bool | None = None) -> BuildReport:
    """Execute (or take from the cache), render and build; every input is checked before anything is written.

    One build at a time writes a book: the build holds ``records.RunLock`` on ``_build/.polyvox``
    (a second one is refused in one line naming the holder), and refuses that folder when its
    manifest describes another kind of run. The progress bar shows when ``progress`` is true (by
    default: when stderr is a terminal).
    """
    from ..records import KIND_BOOK_CACHE, RunLock, check_folder_kind

    t0 = time.perf_counter()
    if progress is None:
        progress = sys.stderr.isatty()
    root = find_root(root)
    overrides = load_params_file(params_file, root)
    corrections = load_corrections(root)
    all_chapters = chapters(root)
    todo = [resolve_chapter(root, only)] if only is not None else all_chapters
    cache = root / CACHE_DIR
    check_folder_kind(cache, KIND_BOOK_CACHE)  # read-only: a refused build changes nothing
    with RunLock(cache):
        check_folder_kind(cache, KIND_BOOK_CACHE)
        report = _build(root, todo, all_chapters, corrections, overrides, force, html, progress)
        report.seconds = time.perf_counter() - t0
        write_build_manifest(root, report, overrides)
    return report


def _build(root: Path, todo: list[Chapter], all_chapters: list[Chapter], corrections: list[dict], overrides: dict,
           force: bool, html: bool, progress: bool) -> BuildReport:
    from tqdm.auto import tqdm

    report = BuildReport()
    lib_hash = _library_hash(root)
    bar = tqdm(todo, desc="chapters", unit="nb", disable=not progress)
    for ch in bar:
        bar.set_postfix_str(ch.name)
        params = params_for(ch, overrides)
        key = cache_key(root, ch, params, lib_hash)
        executed = root / CACHE_DIR / "executed" / f"{ch.name}.ipynb"
        if not force and cached_key(executed) == key:
            report.cached.append(ch.name)
        else:
            tmp = root / CACHE_DIR / RunStatus.RUNNING / f"{ch.name}.ipynb"  # a folder per state
            try:
                execute(ch, params, tmp, root, write_embeddings=True)
            except BookError as exc:
                failed = root / CACHE_DIR / RunStatus.FAILED / f"{ch.name}.ipynb"
                failed.parent.mkdir(parents=True, exist_ok=True)
                if tmp.exists():
                    shutil.move(str(tmp), failed)
                report.failures.append(ExecutionFailure(ch.name, str(exc)))
                continue
            publish(tmp, executed, key)
            report.executed.append(ch.name)
        mine = [c for c in corrections if ch.toc_entry in c["chapters"]]
        render(executed, ch.target, mine, chapter=ch.name, root=root)
    page = root / "book" / "corrections.md"
    text = corrections_page(corrections)
    if not page.exists() or page.read_text() != text:
        page.write_text(text)
    if html and not report.failures:
        missing = [c.name for c in all_chapters if not c.target.exists()]
        if missing:
            raise BookError(f"cannot build HTML: chapters never executed: {', '.join(missing)}")
        write_findings(root)
        report.html = run_jupyter_book(root)
    return report


FINDINGS = CACHE_DIR / "findings.md"  # included by book/intro.md


def write_findings(root: Path) -> Path:
    """The intro's findings summary, computed from the records now (seconds; rewritten only when it changes)."""
    from .findings import findings, findings_markdown

    path = root / FINDINGS
    text = findings_markdown(findings(root))
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def write_build_manifest(root: Path, report: "BuildReport", params: dict) -> Path:
    """_build/.polyvox/manifest.json: chapters executed and cached, parameters, versions, git commit ("-dirty")."""
    from ..records import KIND_BOOK_CACHE, now_iso, portable_path, write_manifest

    replace = path_replacer(root)

    def portable(x):  # a --params file may name absolute paths: the manifest names none
        if isinstance(x, str):
            x = replace(x)
            return portable_path(x) if Path(x).is_absolute() else x
        if isinstance(x, dict):
            return {k: portable(v) for k, v in x.items()}
        return [portable(v) for v in x] if isinstance(x, (list, tuple)) else x

    return write_manifest(root / CACHE_DIR, kind=KIND_BOOK_CACHE, finished=now_iso(), executed=report.executed,
                          cached=report.cached, failures=[f.chapter for f in report.failures],
                          parameters=portable(params), html=str(report.html.relative_to(root)) if report.html else None)


def run_jupyter_book(root: Path) -> Path:
    exe = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(root), "--quiet"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise BookError(f"jupyter-book build failed (exit {proc.returncode}):\n{tail}")
    return root / "_build" / "html"
