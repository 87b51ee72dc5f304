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

Departure from Jupyter Book's own cache: jupyter-cache keys on notebook source
only; here the data a chapter reads, the library code and the locked library
versions are part of the key.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .. import paths
from .render import BookError, corrections_page, load_corrections, render

CACHE_DIR = Path("_build/.polyvox")


def find_root(start: os.PathLike | str | None = None) -> Path:
    """:func:`polyvox.paths.find_root` (the repository root), none found being a BookError here."""
    try:
        return paths.find_root(start)
    except FileNotFoundError as exc:
        raise BookError(str(exc)) from None


def repo_path(path: os.PathLike | str) -> Path:
    """A relative path (e.g. a chapter's ``data_dir``) resolved against the repository root.

    Chapters run with the root as working directory under ``polyvox book build``; opened
    from ``notebooks/<part>/`` in Jupyter they resolve the same files. Outside a checkout
    the path is returned as given.
    """
    p = Path(path)
    if p.is_absolute():
        return p
    try:
        return find_root() / p
    except BookError:
        return p


def _toc_files(node) -> list[str]:
    out = []
    if isinstance(node, dict):
        for key in ("root", "file"):
            if key in node:
                out.append(str(node[key]))
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key, []) or []:
                out.extend(_toc_files(child))
    elif isinstance(node, list):
        for child in node:
            out.extend(_toc_files(child))
    return out


@dataclass
class Chapter:
    name: str  # e.g. "panel/accuracy"
    source: Path  # notebooks/panel/accuracy.ipynb
    target: Path  # book/panel/accuracy.ipynb
    toc_entry: str  # book/panel/accuracy


def chapters(root: Path) -> list[Chapter]:
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    found = []
    for entry in _toc_files(toc):
        entry = entry.removesuffix(".ipynb").removesuffix(".md")
        if not entry.startswith("book/"):
            continue
        name = entry[len("book/"):]
        src = root / "notebooks" / f"{name}.ipynb"
        if src.exists():
            found.append(Chapter(name, src, root / f"{entry}.ipynb", entry))
    return found


def resolve_chapter(root: Path, name_or_path: str) -> Chapter:
    """A chapter by name ("panel/accuracy"), toc entry or notebook path."""
    key = str(name_or_path).removesuffix(".ipynb")
    for ch in chapters(root):
        if key in (ch.name, ch.toc_entry, str(ch.source.relative_to(root)).removesuffix(".ipynb"),
                   str(ch.source).removesuffix(".ipynb")):
            return ch
    p = Path(name_or_path)
    if p.suffix == ".ipynb" and p.exists():
        p = p.resolve()
        rel = p.relative_to(root / "notebooks") if (root / "notebooks") in p.parents else Path(p.name)
        name = str(rel).removesuffix(".ipynb")
        return Chapter(name, p, root / "book" / rel, f"book/{name}")
    names = ", ".join(c.name for c in chapters(root))
    raise BookError(f"unknown chapter {name_or_path!r}; chapters: {names}")


def declared_inputs(root: Path, nb) -> list[Path]:
    globs = nb.metadata.get("polyvox", {}).get("inputs", [])
    files: set[Path] = set()
    for pattern in globs:
        for match in glob.glob(str(root / pattern), recursive=True):
            m = Path(match)
            if m.is_file():
                files.add(m)
            elif m.is_dir():
                files.update(x for x in m.rglob("*") if x.is_file())
    return sorted(files)


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


def load_params_file(path: os.PathLike | str | None, root: Path | None = None) -> dict:
    """YAML mapping: {chapter name: {param: value}}, with optional key 'all' applied to every chapter.

    Read within :func:`polyvox.config.load_yaml`'s limits (size, aliases, depth, duplicate keys).
    With ``root``, chapter names and parameter names are checked against the book's chapters and
    each notebook's ``parameters`` cell, and each value against the parameter's default (an
    integer default takes integers, a text default text …: :func:`polyvox.config.check_param_value`),
    so a typo is an error before any chapter runs, not a no-op or a failure halfway through.
    """
    from .. import config

    if not path:
        return {}
    try:
        data = config.load_yaml(path)
    except config.ConfigError as exc:
        raise BookError(str(exc)) from None
    data = {} if data is None else data
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in data.items()):
        raise BookError(f"{path}: expected a mapping of chapter name -> {{parameter: value}}")
    for name, params in data.items():
        odd = [k for k in params if not isinstance(k, str) or not k.isidentifier()]
        if odd:
            raise BookError(f"{path}: {name}: {odd[0]!r} is not a parameter name")
    if root is not None:
        by_name = {c.name: c for c in chapters(root)}
        unknown = sorted(set(data) - set(by_name) - {"all"})
        if unknown:
            raise BookError(f"{path}: unknown chapter(s) {', '.join(unknown)}; chapters: {', '.join(by_name)}")
        declared = {name: notebook_parameters(c) for name, c in by_name.items()}
        for name, params in data.items():
            known = set().union(*map(set, declared.values())) if name == "all" else set(declared[name])
            bad = sorted(set(params) - known)
            if bad:
                raise BookError(f"{path}: {name}: unknown parameter(s) {', '.join(bad)}; "
                                f"parameters: {', '.join(sorted(known))}")
            for chapter, decl in declared.items():
                if name not in ("all", chapter):
                    continue
                for key, value in params.items():
                    if key in decl:
                        problem = config.check_param_value(key, value, str(decl[key].get("default")))
                        if problem:
                            raise BookError(f"{path}: {name}: {key}: {problem}"
                                            + (f" (in {chapter})" if name == "all" else ""))
    return data


def notebook_parameters(chapter: Chapter) -> dict:
    import papermill as pm

    return pm.inspect_notebook(str(chapter.source))


def params_for(chapter: Chapter, params_file: dict) -> dict:
    out = dict(params_file.get("all", {}))
    out.update(params_file.get(chapter.name, {}))
    return out


@dataclass
class ExecutionFailure:
    chapter: str
    message: str


def _kernel_manager_class(log: Path):
    """A kernel manager whose kernel talks over IPC (Unix sockets in Jupyter's runtime folder, not
    loopback TCP: ipykernel rightly warns about unencrypted TCP) and whose process writes its own
    stdout/stderr (kernel-level logs, a shutdown interrupt's "KeyboardInterrupt caught in kernel")
    to ``log`` instead of the terminal. A chapter's outputs and errors travel over the kernel's
    channels as before; a failure message names the log."""
    from jupyter_client.manager import AsyncKernelManager

    class BookKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            kwargs.setdefault("transport", "ipc")
            super().__init__(**kwargs)

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as fh:  # the child keeps its own copy of the descriptor
                kw.setdefault("stdout", fh)
                kw.setdefault("stderr", subprocess.STDOUT)
                return await super()._async_launch_kernel(kernel_cmd, **kw)

    return BookKernelManager


def execute(chapter: Chapter, params: dict, output: Path, root: Path, paths: dict[str, str] | None = None) -> None:
    """Run one notebook with papermill into output; raise BookError with notebook/cell/error on failure.

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
             "PYTHONWARNINGS": ",".join(x for x in (os.environ.get("PYTHONWARNINGS"), "ignore:IProgress not found") if x)}
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


def cached_key(executed: Path) -> str | None:
    """The cache key an executed chapter was filed under (its metadata ``polyvox.cache_key``), or None."""
    try:
        nb = json.loads(executed.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    meta = nb.get("metadata", {}).get("polyvox", {}) if isinstance(nb, dict) else {}
    key = meta.get("cache_key") if isinstance(meta, dict) else None
    return key if isinstance(key, str) else None


def publish(tmp: Path, executed: Path, key: str) -> None:
    """File a freshly executed chapter under its key: notebook and key are one file, replaced in one step.

    The key goes into the notebook's metadata (``polyvox.cache_key``), the notebook is flushed to
    disk under its temporary name and then renamed over the cached one (``os.replace``, atomic),
    and the folder entry is flushed. A kill at any instant leaves either the old notebook with its
    old key or the new notebook with the new key — never new output under an old key, which a
    separate key file written after the notebook allowed. A key file of an older polyvox
    (``<name>.key``) is removed afterwards; it is never read.
    """
    import nbformat

    nb = nbformat.read(str(tmp), as_version=4)
    nb.metadata.setdefault("polyvox", {})["cache_key"] = key
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(nbformat.writes(nb) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    executed.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, executed)
    _fsync_folder(executed.parent)
    executed.with_suffix(".key").unlink(missing_ok=True)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class BuildReport:
    executed: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    failures: list[ExecutionFailure] = field(default_factory=list)
    html: Path | None = None
    seconds: float = 0.0


def build(root: os.PathLike | str | None = None, only: str | None = None, force: bool = False,
          params_file: os.PathLike | str | None = None, html: bool = True, progress: bool = True) -> BuildReport:
    """Execute (or take from the cache), render and build; every input is checked before anything is written.

    One build at a time writes a book: the build holds ``records.RunLock`` on ``_build/.polyvox``
    (a second one is refused in one line naming the holder), and refuses that folder when its
    manifest describes another kind of run.
    """
    from ..records import KIND_BOOK_CACHE, RunLock, check_folder_kind

    t0 = time.perf_counter()
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
            tmp = root / CACHE_DIR / "running" / f"{ch.name}.ipynb"
            try:
                execute(ch, params, tmp, root)
            except BookError as exc:
                failed = root / CACHE_DIR / "failed" / f"{ch.name}.ipynb"
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


def run_chapter(name_or_path: str, params: dict, out: os.PathLike | str | None = None,
                root: os.PathLike | str | None = None) -> Path:
    """Execute one chapter with parameters into a run folder (executed notebook + manifest.json).

    The folder is checked before anything is written: ``''``/``.``/a file are refused, so is a folder
    holding another kind of run or files of no run, and so is a complete chapter run. A failed or
    killed chapter run (manifest status ``failed``/``running``) is run again in its folder when the
    chapter and parameters are the same, and refused otherwise. The folder is locked
    (``records.RunLock``) while the chapter runs. The manifest (``kind: chapter``) and the executed
    notebook name no absolute path: the root is written relative, the run folder and any absolute
    path given as a parameter as :func:`polyvox.records.portable_path` (the chapter itself runs with
    the real paths; ``parameters_sha256`` tells runs with different real paths apart).
    """
    import papermill as pm

    from ..records import KIND_CHAPTER, RunLock, check_out_path, now_iso, portable_path, sha256_file, write_manifest

    root = find_root(root)
    ch = resolve_chapter(root, name_or_path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if out is not None and str(out).strip() and Path(out).is_file():
        raise BookError(f"{out}: a file, not a run folder")
    out = Path(check_out_path(out)) if out is not None else root / "runs" / f"{ch.name.replace('/', '-')}-{stamp}"
    out = out.resolve()
    declared = pm.inspect_notebook(str(ch.source))
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise BookError(f"{ch.source.name}: unknown parameter(s) {', '.join(unknown)}; "
                        f"parameters: {', '.join(declared)}")
    params = dict(params)
    if "run_dir" in declared and "run_dir" not in params:
        # the chapter runs with the root as working directory: inside it, a relative path
        params["run_dir"] = out.relative_to(root).as_posix() if out.is_relative_to(root) else str(out)
    where = out.relative_to(root).as_posix() if out.is_relative_to(root) else portable_path(out)
    paths = {str(out): where}
    for v in params.values():
        if isinstance(v, str) and Path(v).is_absolute() and not Path(v).is_relative_to(root):
            paths.setdefault(v, portable_path(v))
    exact = hashlib.sha256(json.dumps([ch.name, params], sort_keys=True, default=str).encode()).hexdigest()
    settings = {"chapter": ch.name, "parameters": _as_recorded(portable_params(params, root, paths)),
                "parameters_sha256": exact}
    _check_chapter_folder(out, settings)  # read-only: a refused run changes nothing
    with RunLock(out):
        _check_chapter_folder(out, settings)  # again under the lock: another writer may have started meanwhile
        source = ch.source.relative_to(root).as_posix() if ch.source.is_relative_to(root) else ch.source.name
        record = {"kind": KIND_CHAPTER, **settings, "notebook": source, "notebook_sha256": sha256_file(ch.source),
                  "started": now_iso()}
        write_manifest(out, **record, status="running")
        try:
            execute(ch, params, out / ch.source.name, root, paths)
        except BaseException as exc:
            status = "failed" if isinstance(exc, Exception) else "interrupted"
            write_manifest(out, **record, finished=now_iso(), status=status,
                           error=path_replacer(root, paths)(" ".join(str(exc).split()))[:500])
            raise
        write_manifest(out, **record, finished=now_iso(), status="ok")
    return out


def _as_recorded(x):
    """A value as write_manifest stores it (JSON, secrets scrubbed), so a recorded run compares equal."""
    from ..records import scrub

    return json.loads(json.dumps(scrub(x), sort_keys=True, default=str))


def _check_chapter_folder(out: Path, settings: dict) -> None:
    """A chapter run may write into ``out``: new, empty, or holding an unfinished run of the same settings."""
    from ..records import KIND_CHAPTER, check_folder_kind, read_manifest

    check_folder_kind(out, KIND_CHAPTER)
    if not out.is_dir():
        return
    manifest = read_manifest(out)
    if not manifest:
        other = sorted(p.name for p in out.iterdir() if p.name != ".lock")
        if other:
            raise BookError(f"{out}: holds files but no manifest.json ({', '.join(other[:3])}"
                            f"{' …' if len(other) > 3 else ''}); polyvox writes a chapter run into a new or "
                            "empty folder: use a new --out folder")
        return
    status = manifest.get("status")
    if status == "ok":
        raise BookError(f"{out}: holds a complete run of chapter {manifest.get('chapter')}; use a new --out folder")
    recorded = {k: manifest.get(k) for k in settings}
    if recorded != settings:
        changed = [k for k in settings if recorded[k] != settings[k]]
        raise BookError(f"{out}: holds an unfinished ({status}) chapter run with other settings "
                        f"({', '.join(changed)}); it runs again only with the same chapter and parameters: "
                        "use a new --out folder")
