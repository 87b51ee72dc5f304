"""The book: build (papermill with a content-hash cache, then Jupyter Book), render
(corrections, re-run boxes, table downloads, numbered figures), findings (the intro's summary),
and what chapters use to show results: ``tables.show_table`` (the one table style),
``plots.show_figure`` (the one figure style), ``report`` (recomputed beside published)."""
from .build import CACHE_DIR, BuildReport, build, cache_key, run_jupyter_book
from .execution import execute
from .render import BookError, banner_markdown, corrections_page, load_corrections, render
from .run import run_chapter
from .toc import Chapter, chapters, declared_inputs, find_root, load_params_file, params_for, repo_path, resolve_chapter

__all__ = ["CACHE_DIR", "BookError", "BuildReport", "Chapter", "banner_markdown", "build", "cache_key", "chapters",
           "corrections_page", "declared_inputs", "execute", "find_root", "load_corrections", "load_params_file",
           "params_for", "render", "repo_path", "resolve_chapter", "run_chapter", "run_jupyter_book"]
