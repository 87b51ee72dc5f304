"""The execution cache's filing: a chapter's notebook and its key are one file (the key in the
notebook's metadata), replaced in one atomic rename."""
from __future__ import annotations

import json
import os
from pathlib import Path


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
