"""A recorded run folder as the repository keeps it: ``python -m polyvox.ship SRC DEST [--keep-weights GLOB …]``.

What a book chapter reads of a run is its records; what a GPU run leaves is far more (rollouts beside their grades,
adapter weights, locks, checkpoints). Shipping copies SRC to DEST keeping every record and storing the large ones
gzipped, so that a recording's size in the repository is what it must be:

- ``rollouts.jsonl`` is left out where ``graded.jsonl`` is beside it (a graded sample is its rollout plus the
  grade; :func:`polyvox.runs.load` reads such a folder as it is);
- a ``.jsonl`` file over ``gzip_over`` bytes (default :data:`GZIP_OVER`) is stored as ``<name>.gz``, which every
  reader takes in its place (:func:`polyvox.jsonl.stored`);
- weights (:data:`WEIGHTS`) are left out unless a ``--keep-weights`` glob (relative to SRC) names them; TRL
  checkpoints (``checkpoint-*/``), lock files and caches are always left out;
- everything else (manifests, stage records, summaries, configs, READMEs) is copied as it is.

Validate first, write second: SRC must be a folder, DEST must not exist; the copy is written under ``DEST.tmp``
and renamed, so a killed ship leaves no half DEST. Symbolic links are refused (a record is a file). Returns and
prints what was kept, stored gzipped and left out, with sizes.
"""
from __future__ import annotations

import argparse
import fnmatch
import gzip
import os
import shutil
import sys
from pathlib import Path

GZIP_OVER = 256 * 1024  # bytes: a JSONL record larger than this is stored gzipped
WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle")
ALWAYS_OUT = (".lock", "__pycache__", "*.tmp")


def _left_out_dir(rel: Path) -> bool:
    return any(p.startswith("checkpoint-") or p == "__pycache__" for p in rel.parts)


def plan(src: str | Path, keep_weights=(), gzip_over: int = GZIP_OVER) -> dict[str, list[tuple[str, int]]]:
    """What shipping ``src`` does to each file: ``{"copy": [...], "gzip": [...], "leave": [...]}`` of (relative
    path, bytes). Refuses a link or anything but files and folders."""
    src = Path(src)
    if not src.is_dir():
        raise ValueError(f"{src}: not a folder")
    out: dict[str, list[tuple[str, int]]] = {"copy": [], "gzip": [], "leave": []}
    for dirpath, dirnames, filenames in os.walk(src):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            if p.is_symlink():
                raise ValueError(f"{p}: a symbolic link; a shipped run holds files only")
        for name in sorted(filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(src)
            size = p.stat().st_size
            if _left_out_dir(rel) or any(fnmatch.fnmatch(name, g) for g in ALWAYS_OUT):
                out["leave"].append((rel.as_posix(), size))
            elif any(fnmatch.fnmatch(name, g) for g in WEIGHTS) and not any(
                    fnmatch.fnmatch(rel.as_posix(), g) for g in keep_weights):
                out["leave"].append((rel.as_posix(), size))
            elif name == "rollouts.jsonl" and (p.parent / "graded.jsonl").is_file():
                out["leave"].append((rel.as_posix(), size))
            elif name.endswith(".jsonl") and size > gzip_over:
                out["gzip"].append((rel.as_posix(), size))
            else:
                out["copy"].append((rel.as_posix(), size))
    return out


def ship(src: str | Path, dest: str | Path, keep_weights=(), gzip_over: int = GZIP_OVER) -> dict:
    """Ship ``src`` into ``dest`` (see the module); returns the plan with the gzipped sizes."""
    src, dest = Path(src), Path(dest)
    if dest.exists() or dest.is_symlink():
        raise ValueError(f"{dest}: already exists; ship into a new folder")
    todo = plan(src, keep_weights, gzip_over)
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)  # a ship killed before its rename: nothing under DEST's own name yet
    stored = []
    for rel, _ in todo["copy"]:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, tmp / rel)
    for rel, size in todo["gzip"]:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        data = gzip.compress((src / rel).read_bytes(), compresslevel=9, mtime=0)  # mtime 0: the same bytes each time
        (tmp / (rel + ".gz")).write_bytes(data)
        stored.append((rel + ".gz", len(data)))
    tmp.mkdir(parents=True, exist_ok=True)
    tmp.rename(dest)
    return {**todo, "stored": stored}


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m polyvox.ship", description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dest")
    ap.add_argument("--keep-weights", action="append", default=[], metavar="GLOB",
                    help="weights to keep, as a glob relative to SRC (e.g. 'seed-0/rl-*/hard/adapter/*'); repeatable")
    ap.add_argument("--gzip-over", type=int, default=GZIP_OVER, help="store JSONL files larger than this gzipped")
    a = ap.parse_args(argv)
    try:
        r = ship(a.src, a.dest, a.keep_weights, a.gzip_over)
    except (ValueError, OSError) as exc:
        print(f"polyvox.ship: {exc}", file=sys.stderr)
        return 2
    total = lambda xs: sum(n for _, n in xs)  # noqa: E731
    print(f"copied {len(r['copy'])} files ({_mb(total(r['copy']))}); stored {len(r['gzip'])} JSONL files gzipped "
          f"({_mb(total(r['gzip']))} → {_mb(total(r['stored']))}); left out {len(r['leave'])} "
          f"({_mb(total(r['leave']))}: rollouts beside their grades, weights, locks, checkpoints)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
