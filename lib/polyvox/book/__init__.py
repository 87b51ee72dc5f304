"""The book: build (papermill with a content-hash cache, then Jupyter Book), render
(corrections, hidden parameter cells), and what chapters use to show results (report, plots)."""
from .build import (CACHE_DIR, BuildReport, Chapter, build, cache_key, chapters, declared_inputs, execute, find_root,
                    load_params_file, params_for, repo_path, resolve_chapter, run_chapter, run_jupyter_book)
from .render import BookError, banner_markdown, corrections_page, load_corrections, render

__all__ = ["CACHE_DIR", "BookError", "BuildReport", "Chapter", "banner_markdown", "build", "cache_key", "chapters",
           "corrections_page", "declared_inputs", "execute", "find_root", "load_corrections", "load_params_file",
           "params_for", "render", "repo_path", "resolve_chapter", "run_chapter", "run_jupyter_book"]
