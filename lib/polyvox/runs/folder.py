"""A run folder's files and the checks every writer and reader of one makes first (read-only)."""
from __future__ import annotations

import json
from pathlib import Path

from ..records import RecordError, check_out_path, read_manifest

ROLLOUTS = "rollouts.jsonl"
GRADED = "graded.jsonl"
MANIFEST = "manifest.json"


def _jsonable(x):
    return json.loads(json.dumps(x, default=list))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_out_folder(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: a file, not a run folder")


def _out_path(out) -> Path:
    """An output folder as given: ``''`` and ``.`` refused by the name given (before any Path
    conversion, which would turn ``''`` into ``.``), a file refused as not a run folder, a path
    through a file refused. Read-only."""
    if out is None or str(out).strip() in ("", "."):
        check_out_path("" if out is None else out)  # raises, naming what was given
    p = Path(out)
    check_out_folder(p)
    return check_out_path(p)


def check_settings(out: Path, settings: dict) -> None:
    """Refuse a folder that holds records of another run (or records without settings)."""
    old = read_manifest(out).get("settings")
    if old is None:
        if (out / ROLLOUTS).exists():
            raise ValueError(f"{out}: holds records but no manifest settings; polyvox never adopts a run it "
                             "did not start: use a new --out folder")
        return
    if old != settings:
        changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k)) \
            if isinstance(old, dict) else ["settings"]
        raise ValueError(f"{out}: holds a run with other settings ({', '.join(changed)}); use a new --out folder")


def _run_folder(run) -> Path:
    """An existing run folder to grade (``.``, the run one stands in, is read as its absolute path)."""
    if run is None or not str(run).strip():
        raise ValueError(f"a run folder must be named (got {'' if run is None else str(run)!r})")
    p = Path(run)
    if p == Path("."):
        p = Path.cwd()
    if not p.exists():
        raise ValueError(f"{p}: no such folder, so not a run to grade")
    if not p.is_dir():
        raise ValueError(f"{p}: a file, not a run folder")
    if not (p / MANIFEST).exists():
        raise ValueError(f"{p}: not a polyvox run folder (no manifest.json)")
    return p


def is_run(folder) -> bool:
    """Whether folder holds a run: manifest.json and rollouts.jsonl or graded.jsonl (either stored gzipped)."""
    from ..jsonl import exists

    folder = Path(folder)
    return (folder / MANIFEST).is_file() and (exists(folder / ROLLOUTS) or exists(folder / GRADED))


def find_runs(path) -> list[Path]:
    """The run folders at or below path (a folder with manifest.json and rollouts.jsonl or graded.jsonl)."""
    path = Path(path)
    if not path.exists():
        raise RecordError(path, None, "no such run folder")
    if not path.is_dir():
        raise RecordError(path, None, "a file, not a run folder")
    if is_run(path):
        return [path]
    found = sorted({m.parent for m in path.rglob(MANIFEST) if is_run(m.parent)})
    if not found:
        raise RecordError(path, None, "no run here: a run folder holds manifest.json and rollouts.jsonl "
                                      "or graded.jsonl (polyvox sample --out writes one)")
    return found
