"""Browse and compare rollouts: an explorer (search, quick filters, a table of problems × systems,
every row opening its traces side by side with a selector over all samples), from any run folder
or from the book's published records.

Works the same in the built book (static HTML, offline) and live in JupyterLab::

    from polyvox import explore
    explore.init()                        # once per notebook: math (and table) libraries, offline
    ro = explore.load("runs/my-sample")   # a run folder, a folder of run folders, or None
    ro.explorer()                         # the explorer (a= / b=: the two systems compared)
    ro.side_by_side("w1-3f2f8c348e", sample=3)   # one problem's traces as static HTML

``polyvox explore RUN`` (:func:`write_notebook`) writes ``RUN/explore.ipynb`` with these cells,
to open in JupyterLab without editing a tracked notebook.

The package keeps reading and showing apart: *loading* (:mod:`.load`: :func:`load`,
:func:`published`, :func:`find_runs`) builds a :class:`Rollouts` (one row per sample in ``traces``),
reading, grading and splitting traces only through :mod:`polyvox.runs`; everything after it renders
(:mod:`.rollouts`: :meth:`Rollouts.table`; :mod:`.page`: :func:`explorer_data`, :func:`explorer_html`;
:mod:`.markdown`: :func:`render_markdown`; :mod:`.mathjax`; :mod:`.notebook`) and reads only that.
The page's JavaScript and style sheets are package data (``assets/``). The package depends on core
only: no study, the book or the command line (the import contract in ``pyproject.toml``).

What it reads
- ``load(None)`` (the default): the published case study of the panel-of-experts study
  (``<data_dir>/multipersona/reports/case_study/transcripts.json``): 20 problems, one
  ``panel`` and one ``thinking`` trace each. Problems in ``graded_categories`` are graded
  against the first number of the study's ``expected`` text (math-verify, task ``math``);
  the others have no single checkable answer (correctness ``None``). These records carry
  no finish reason or token count: a trace without its closing marker (``</answer>`` for
  the panel, ``</think>`` for thinking) counts as a cap hit, and length is in words.
- ``load(path)``: a run folder as ``polyvox sample`` / :mod:`polyvox.runs` writes it
  (``manifest.json`` with ``settings`` and ``rollouts.jsonl`` and/or ``graded.jsonl``) is one
  system, named after the folder; a folder holding run folders at any depth (a
  ``generate=true`` chapter run, ``data/runs/world/seed-0/eval/cap-256``) gives one system per
  run folder, named by its path below ``path``, grouped by benchmark (the run's task).
  ``load([p, q])`` or ``load({"a": p, "b": q})`` names them explicitly. Problem texts and
  golds come from the run's task (:func:`polyvox.runs.load_problems`: the run's task options,
  under ``data_dir``); a run without ``graded.jsonl`` is graded in memory with the task's
  grader (:func:`polyvox.runs.grade_samples`; nothing is written). Length is the recorded ``completion_tokens``; a cap hit is
  ``finish_reason == "length"``; reasoning and final answer are :func:`polyvox.runs.split_trace`;
  format validity is :func:`polyvox.runs.format_ok` of the run's format. Bad input raises :class:`polyvox.records.RecordError` naming the file.

What it shows
- :meth:`Rollouts.explorer`: self-contained HTML and vanilla JavaScript, the data embedded (no
  network): a search box, the page-length menu and the quick filters (:data:`QUICK_FILTERS`:
  A right B wrong, B right A wrong, systems disagree, wrong only, cap hit, invalid format;
  the same rules as :func:`quick_filter`) always shown; one table per benchmark (a menu when
  a folder holds several) with per system its correctness (with the graded answer, ``no
  answer`` when the grader found none) and length (cap hits, invalid formats), the problem
  text wrapped under each row; a click on a row opens the problem and systems A and B side by
  side, each with a selector over all its samples. Traces are embedded up to
  ``max_trace_mb`` (identical traces once); the page says how many problems' traces it holds.
- :meth:`Rollouts.table`: the same summary as a DataFrame; :meth:`Rollouts.show_table`
  renders it with itables (DataTables), offline.
- :meth:`Rollouts.side_by_side` / :meth:`Rollouts.compare`: one problem's (every problem's)
  traces as static HTML, any sample. Markdown and LaTeX rendered (markdown-it; math marked up
  as Sphinx does, ``<span class="math">\\(…\\)</span>``, typeset by MathJax); headings inside a
  trace become bold paragraphs, never page headings.

Math typesetting: :func:`init` embeds MathJax 3 (the SVG build from the ``django-static-mathjax``
package, Apache-2.0), so pages render math without network access. In static HTML it typesets
the page (standing aside when the page has a MathJax); in Jupyter, whose own MathJax typesets
an output only when it renders, it runs in a hidden frame and the explorer converts the math
it draws with it.
"""
from __future__ import annotations

from .. import formats  # noqa: F401 — explore.formats, as before the package
from ..runs import find_runs, format_ok, split_trace
from .load import load
from .markdown import STYLE, TABLE_STYLE, render_markdown, table_html
from .mathjax import init, mathjax_html
from .notebook import NOTEBOOK, default_notebook, explore_command, open_command, write_notebook
from .page import (EXPLORER_JS, EXPLORER_STYLE, MAX_TRACE_MB, QUICK_FILTERS, explorer_data, explorer_html,
                   filter_rows, quick_filter)
from .published import CASE_STUDY, GRADED_CATEGORIES, published
from .rollouts import Rollouts
from .summary import NO_ANSWER, answer_text, summarize

__all__ = ["CASE_STUDY", "EXPLORER_JS", "EXPLORER_STYLE", "GRADED_CATEGORIES", "MAX_TRACE_MB", "NOTEBOOK", "NO_ANSWER",
           "QUICK_FILTERS", "Rollouts", "STYLE", "TABLE_STYLE", "answer_text", "default_notebook", "explore_command",
           "explorer_data", "explorer_html", "filter_rows", "find_runs", "format_ok", "init", "load", "mathjax_html",
           "open_command", "published", "quick_filter", "render_markdown", "split_trace", "summarize", "table_html",
           "write_notebook"]
