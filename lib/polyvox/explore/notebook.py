"""``polyvox explore RUN``: a JupyterLab notebook that explores a run, written beside it (or under
``runs/`` for the checkout's shipped records), and the command that opens it."""
from __future__ import annotations

from pathlib import Path

from ..paths import find_root
from ..runs import find_runs
from .load import _data_dir


NOTEBOOK = "explore.ipynb"


def _data_literal(data: Path, folder: Path) -> tuple[str, bool]:
    """How the notebook in ``folder`` names the data folder: (path, whether absolute).

    Relative to the notebook when the two move together: the data folder lies below the notebook's
    folder, or both lie in one checkout (its ``runs/`` and ``data/``, say). Otherwise absolute: a
    path climbing from a run in ``/tmp`` to a checkout elsewhere would name this machine's layout as
    surely as an absolute path does, and break as soon as either moved."""
    import os

    data, folder = data.resolve(), folder.resolve()

    def checkout(p: Path):
        try:
            return find_root(p)
        except Exception:  # noqa: BLE001 — outside any checkout
            return None

    together = folder in (data, *data.parents) or (checkout(data) is not None and checkout(data) == checkout(folder))
    if not together:
        return str(data), True
    try:
        return Path(os.path.relpath(data, folder)).as_posix(), False
    except ValueError:  # different drives: no relative path
        return str(data), True


def _check_notebook_folder(run: Path, folder: Path) -> None:
    """Read-only: the notebook may go into the explored run (or folder of runs), a sample run folder, a
    folder of runs, or a folder inside no run; never into a folder of another kind (a judge run, a
    pipeline's stage) nor anywhere inside a run folder but its top."""
    from ..records import KIND_SAMPLE, RecordError, read_manifest
    from ..stages import folder_kind

    here = folder.resolve()
    if here == run.resolve():
        return  # the run (or folder of runs) find_runs accepted
    existing = next((p for p in (here, *here.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return  # check_out_path refuses a path through a file
    owner = next((p for p in (existing, *existing.parents) if (p / "manifest.json").is_file()), None)
    if owner is None:
        return  # inside no run
    kind = folder_kind(read_manifest(owner))
    if owner == here:
        if kind == KIND_SAMPLE:
            return
        try:
            find_runs(here)  # a folder of runs (a study's folder holding sample runs)
            return
        except RecordError:
            pass
        raise ValueError(f"{here}: holds a {kind or 'unrecognised'} run (its manifest.json), not a sample run; "
                         "a folder holds one kind of run: give --out a sample run folder, a folder of runs, "
                         "or a path outside any run")
    raise ValueError(f"{here}: inside the {kind or 'unrecognised'} run folder {owner}; the notebook goes at the "
                     "top of a sample run folder or a folder of runs, or to a path outside any run")


def write_notebook(run, out=None, data_dir="data", force: bool = False, notes: list | None = None) -> Path:
    """Write a JupyterLab notebook that explores ``run`` (a run folder or a folder of run folders) and
    return its path: ``out``, else :func:`default_notebook` (``<run>/explore.ipynb``; for the
    checkout's shipped records under ``data/``, ``runs/explore-<name>.ipynb``). No tracked file is
    edited; open it with ``jupyter lab <path>`` (``--allow-root`` when running as root).

    The notebook names the run relative to itself (it keeps working when the run folder moves with it)
    and ``data_dir`` (the benchmarks the run's task reads) relative to itself too when the two move
    together (the data below the notebook's folder, or both in one checkout), else as an absolute path (:func:`_data_literal`; a line saying
    so is appended to ``notes``). The run is checked first (:func:`find_runs`: a folder without runs
    raises :class:`RecordError`), then the notebook's folder (:func:`_check_notebook_folder`: not inside
    a judge run or another kind of folder); an existing notebook is kept (it may hold the reader's own
    cells) unless ``force``. A notebook written into a run folder is written under that folder's
    :class:`~polyvox.records.RunLock`: a folder another process is writing is refused, unchanged.
    """
    import os

    import nbformat

    run = Path(run)
    find_runs(run)
    out = Path(out) if out is not None else default_notebook(run)
    if out.suffix != ".ipynb":
        raise ValueError(f"{out}: the notebook's name must end in .ipynb")
    from ..records import RunLock, check_out_path

    check_out_path(out.parent)
    _check_notebook_folder(run, out.parent)
    if out.exists() and not force:
        return out
    data = _data_dir(data_dir).resolve()
    data_text, absolute = _data_literal(data, out.parent)
    rel = Path(os.path.relpath(run.resolve(), out.resolve().parent)).as_posix()
    v4 = nbformat.v4
    cells = [
        v4.new_markdown_cell(
            f"# Explore `{run.resolve().name}`\n\n"
            "Written by `polyvox explore`; this file is yours (not tracked; `polyvox explore --force` writes it "
            "anew). Run all cells (*Run ▸ Run All Cells*). In the explorer: type in the search box, click a quick "
            "filter, choose systems A and B, click a row to open both traces and pick any sample."),
        v4.new_code_cell(f"RUN = {rel!r}  # the run folder (or a folder of run folders), relative to this notebook\n"
                         f"DATA = {data_text!r}  # the benchmarks the run's task reads"
                         + ("" if absolute else ", relative to this notebook"), metadata={"tags": ["parameters"]}),
        v4.new_code_cell("from polyvox import explore\n\n"
                         "explore.init(tables=False)  # math typesetting (MathJax) from this environment, offline\n"
                         "ro = explore.load(RUN, data_dir=DATA)\n"
                         "for note in ro.notes:\n    print(note)\n"
                         "ro.explorer(page_length=10)  # a=..., b=...: the two systems compared; max_trace_mb=..."),
        v4.new_markdown_cell("The same numbers as a pandas DataFrame, one row per problem "
                             "(`ro.traces` holds every sample):"),
        v4.new_code_cell("ro.table()"),
        v4.new_markdown_cell("One problem's traces as static HTML, any sample: "
                             "`ro.side_by_side(problem_id, a, b, sample=3)`."),
    ]
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    if absolute and notes is not None:
        notes.append(f"the notebook names the data folder by its absolute path {data} (it is neither below the "
                     "notebook's folder nor in the notebook's checkout): edit DATA if either moves")
    if (out.parent / "manifest.json").is_file():  # a run folder: one writer at a time
        with RunLock(out.parent):
            _check_notebook_folder(run, out.parent)  # again under the lock
            _write_atomically(nb, out)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(nb, out)
    return out


def _write_atomically(nb, out: Path) -> None:
    import os

    import nbformat

    tmp = out.with_name(out.name + ".tmp")
    nbformat.write(nb, str(tmp))
    os.replace(tmp, out)


def default_notebook(run) -> Path:
    """Where ``polyvox explore RUN`` writes: ``RUN/explore.ipynb``; for a run under the checkout's ``data/``
    (shipped records, tracked, and inputs of the book's cache) ``runs/explore-<its path below data>.ipynb``
    (``runs/`` is git-ignored), so exploring them adds nothing to ``data/``."""
    run = Path(run)
    try:
        root = find_root(run.resolve())
    except Exception:  # noqa: BLE001 — outside a checkout: next to the run
        return run / NOTEBOOK
    data, here = (root / "data").resolve(), run.resolve()
    if here != data and data not in here.parents:
        return run / NOTEBOOK
    name = "-".join(here.relative_to(data).parts) or "data"
    return root / "runs" / f"explore-{name}.ipynb"


def open_command(notebook) -> str:
    """The command that opens a notebook in this environment's JupyterLab (``--allow-root`` when root)."""
    import os
    import shlex
    import sys

    jupyter = Path(sys.executable).parent / "jupyter"
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    return f"{shlex.quote(str(jupyter))} lab {shlex.quote(str(notebook))}" + (" --allow-root" if root else "")


def explore_command(run, out=None, data_dir="data", force: bool = False) -> list[str]:
    """``polyvox explore RUN``: write the notebook (:func:`write_notebook`); the lines to print."""
    target = Path(out) if out is not None else default_notebook(run)
    kept = target.exists() and not force
    notes: list[str] = []
    path = write_notebook(run, out=out, data_dir=data_dir, force=force, notes=notes)
    return [f"notebook: {path}" + (" (already there: kept; --force writes it anew)" if kept else ""),
            f"open it in JupyterLab, then Run ▸ Run All Cells: {open_command(path)}", *notes]
