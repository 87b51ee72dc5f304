"""Where things are: the repository root (the checkout holding the book), found from any folder in it."""
from __future__ import annotations

import os
from pathlib import Path


def find_root(start: os.PathLike | str | None = None) -> Path:
    """The repository root: the nearest folder above start holding _toc.yml and _config.yml.

    None found is a :class:`FileNotFoundError` (:func:`polyvox.book.find_root` says it as a ``BookError``).
    """
    here = Path(start or os.getcwd()).resolve()
    for p in (here, *here.parents):
        if (p / "_toc.yml").exists() and (p / "_config.yml").exists():
            return p
    raise FileNotFoundError(f"no _toc.yml/_config.yml found at or above {here}")
