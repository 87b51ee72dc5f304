"""``polyvox run``: one chapter with parameters into a run folder (executed notebook and manifest)."""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from .execution import execute, path_replacer, portable_params
from .render import BookError
from .toc import find_root, resolve_chapter


def run_chapter(name_or_path: str, params: dict, out: os.PathLike | str | None = None,
                root: os.PathLike | str | None = None, html: bool = False) -> Path:
    """Execute one chapter with parameters into a run folder (executed notebook + manifest.json).

    The folder is checked before anything is written: ``''``/``.``/a file are refused, so is a folder
    holding another kind of run or files of no run, and so is a complete chapter run. A failed or
    killed chapter run (manifest status ``failed``/``running``) is run again in its folder when the
    chapter and parameters are the same, and refused otherwise. The folder is locked
    (``records.RunLock``) while the chapter runs. The manifest (``kind: chapter``) and the executed
    notebook name no absolute path: the root is written relative, the run folder and any absolute
    path given as a parameter as :func:`polyvox.records.portable_path` (the chapter itself runs with
    the real paths; ``parameters_sha256`` tells runs with different real paths apart). Each parameter
    is checked against its default as ``book build --params`` checks it
    (:func:`polyvox.config.check_param_value`: the type, finite numbers, no URL credentials) before
    anything runs.

    With ``html``, the executed notebook is also written as an offline page in the book's style beside it
    (``<chapter>.html``, :func:`polyvox.book.html.write_page`); a folder holding a complete run of the same
    chapter and parameters is not run again: its page is written from it.
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
    from .. import config

    for key, value in params.items():  # as book build --params checks them (toc.load_params_file)
        problem = config.check_param_value(key, value, str(declared[key].get("default")))
        if problem:
            raise BookError(f"-p {key}: {problem} ({ch.name})")
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
    if html and _complete_with(out, settings):  # a page from a finished run of the same settings
        _write_page(out, ch, root)
        return out
    _check_chapter_folder(out, settings)  # read-only: a refused run changes nothing
    with RunLock(out):
        _check_chapter_folder(out, settings)  # again under the lock: another writer may have started meanwhile
        source = ch.source.relative_to(root).as_posix() if ch.source.is_relative_to(root) else ch.source.name
        # the names (never the values) of path parameters outside the root: recorded by their last parts, they
        # are no command a reader can rerun, and the --html page's command says so (html.run_box)
        outside = sorted(k for k, v in params.items() if k != "run_dir" and isinstance(v, str)
                         and Path(v).is_absolute() and not Path(v).is_relative_to(root))
        record = {"kind": KIND_CHAPTER, **settings, "notebook": source, "notebook_sha256": sha256_file(ch.source),
                  "started": now_iso(), **({"parameters_outside_root": outside} if outside else {})}
        write_manifest(out, **record, status="running")
        try:
            execute(ch, params, out / ch.source.name, root, paths)
        except BaseException as exc:
            status = "failed" if isinstance(exc, Exception) else "interrupted"
            write_manifest(out, **record, finished=now_iso(), status=status,
                           error=path_replacer(root, paths)(" ".join(str(exc).split()))[:500])
            raise
        write_manifest(out, **record, finished=now_iso(), status="ok")
        if html:
            _write_page(out, ch, root)
    return out


def chapter_page(out: os.PathLike | str) -> Path:
    """The page ``run --html`` writes into a chapter run folder: the executed notebook's name, ``.html``."""
    from ..records import read_manifest

    notebook = Path((read_manifest(Path(out)) or {}).get("notebook", "chapter.ipynb")).name
    return Path(out) / Path(notebook).with_suffix(".html").name


def _complete_with(out: Path, settings: dict) -> bool:
    from ..records import read_manifest

    manifest = read_manifest(out) if out.is_dir() else {}
    return bool(manifest) and manifest.get("status") == "ok" and all(manifest.get(k) == v for k, v in settings.items())


def _write_page(out: Path, ch, root: Path) -> Path:
    from .html import write_page

    notebook = out / ch.source.name
    try:
        return write_page(notebook, root=root)
    except Exception as exc:  # the run itself is complete: say so, and what the page lacks
        raise BookError(f"{out}: the chapter ran (status ok), but its page could not be written: "
                        f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from exc


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
        raise BookError(f"{out}: holds a complete run of chapter {manifest.get('chapter')}; use a new --out folder "
                       "(--html with the same chapter and parameters writes that run's page)")
    recorded = {k: manifest.get(k) for k in settings}
    if recorded != settings:
        changed = [k for k in settings if recorded[k] != settings[k]]
        raise BookError(f"{out}: holds an unfinished ({status}) chapter run with other settings "
                        f"({', '.join(changed)}); it runs again only with the same chapter and parameters: "
                        "use a new --out folder")
