"""The book's chapters: the repository root, the table of contents' chapters, what each declares
(inputs, parameters), and the ``--params`` file checked against them."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from .. import paths
from .render import BookError


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
