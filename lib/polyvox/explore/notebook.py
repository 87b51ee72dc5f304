"""``polyvox explore RUN``: a JupyterLab notebook that explores a run, written beside it (or under
``runs/`` for the checkout's shipped records), and the command that opens it."""
from __future__ import annotations

from pathlib import Path

from ..paths import find_root
from ..runs import find_runs
from .load import _data_dir


NOTEBOOK = "explore.ipynb"


def write_notebook(run, out=None, data_dir="data", force: bool = False) -> Path:
    """Write a JupyterLab notebook that explores ``run`` (a run folder or a folder of run folders) and
    return its path: ``out``, else :func:`default_notebook` (``<run>/explore.ipynb``; for the
    checkout's shipped records under ``data/``, ``runs/explore-<name>.ipynb``). No tracked file is
    edited; open it with ``jupyter lab <path>`` (``--allow-root`` when running as root).

    The notebook names the run relative to itself (it keeps working when the run folder moves with it)
    and ``data_dir`` (the benchmarks the run's task reads) as an absolute path. The run is checked
    first (:func:`find_runs`: a folder without runs raises :class:`RecordError`); an existing notebook is
    kept (it may hold the reader's own cells) unless ``force``.
    """
    import os

    import nbformat

    run = Path(run)
    find_runs(run)
    out = Path(out) if out is not None else default_notebook(run)
    if out.suffix != ".ipynb":
        raise ValueError(f"{out}: the notebook's name must end in .ipynb")
    if out.exists() and not force:
        return out
    data = _data_dir(data_dir).resolve()
    rel = Path(os.path.relpath(run.resolve(), out.resolve().parent)).as_posix()
    v4 = nbformat.v4
    cells = [
        v4.new_markdown_cell(
            f"# Explore `{run.resolve().name}`\n\n"
            "Written by `polyvox explore`; this file is yours (not tracked; `polyvox explore --force` writes it "
            "anew). Run all cells (*Run ▸ Run All Cells*). In the explorer: type in the search box, click a quick "
            "filter, choose systems A and B, click a row to open both traces and pick any sample."),
        v4.new_code_cell(f"RUN = {rel!r}  # the run folder (or a folder of run folders), relative to this notebook\n"
                         f"DATA = {str(data)!r}  # the benchmarks the run's task reads", metadata={"tags": ["parameters"]}),
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
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    nbformat.write(nb, str(tmp))
    os.replace(tmp, out)
    return out


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
    path = write_notebook(run, out=out, data_dir=data_dir, force=force)
    return [f"notebook: {path}" + (" (already there: kept; --force writes it anew)" if kept else ""),
            f"open it in JupyterLab, then Run ▸ Run All Cells: {open_command(path)}"]
