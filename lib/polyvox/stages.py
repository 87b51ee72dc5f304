"""Staged pipelines: a scale read from YAML, and stage folders that resume by their manifest's settings.

Every study's pipeline (the miniature world, the persona basis, the collaboration pool)
is a list of stages; each stage writes into its own folder and ends by writing a manifest
with ``settings`` (the parts of the scale its outputs depend on) and ``status: complete``.
A rerun skips a stage whose manifest is complete under the same settings and refuses a
folder holding a stage run under other settings, naming what differs.

Scales live in ``configs/<study>/<scale>.yaml``; a path to a YAML file works too.

A pipeline's ``--out`` folder holds one kind of run, recorded as ``kind`` in its own
``manifest.json`` with the scale it runs (:func:`check_root`); every stage folder's manifest
records its kind too (``stage``, or that of the run it holds: ``rl``, ``judge``, ``distill``,
``collab trajectories``). A pipeline validates every folder it would write — the root's kind and
scale, each stage's kind and settings — before it writes anything (validate first, write second),
then holds the root's one-writer lock (:class:`polyvox.records.RunLock`) for the whole run, so
every stage runs under it. Manifests written before kinds were recorded are recognised by their
shape (:func:`folder_kind`).
"""
from __future__ import annotations

import json
from pathlib import Path

from . import config
from .records import KIND_RL, check_out_path, manifest_kind, read_manifest

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"  # the repository's configs/


def load_scale(study: str, scale: str | Path, required: set[str], optional: set[str] = frozenset()) -> dict:
    """configs/<study>/<scale>.yaml (or a YAML path) as a dict with its ``name``, checked before any work.

    The file is read within :func:`polyvox.config.load_yaml`'s limits (size, aliases, depth,
    duplicate keys); its sections must be ``required`` (and ``optional``); a study with a model in
    :data:`polyvox.config.SCALES` has every key, type and range checked, and a problem is one
    line naming the file and the key. The dict has the file's shape (keys not given stay absent).
    """
    path = Path(scale)
    folder = CONFIG_DIR / study
    if path.suffix not in (".yaml", ".yml"):
        path = folder / f"{scale}.yaml"
    if not path.exists():
        names = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ValueError(f"unknown {study} scale {str(scale)!r}; scales: {', '.join(names)} (or a path to a YAML file)")
    data = config.load_yaml(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of sections, got {type(data).__name__}")
    sections = set(data) - {"name"}  # a run folder's copy of its scale keeps the scale's name
    if not required <= sections or not sections <= required | set(optional):
        missing, unknown = sorted(required - sections), sorted(sections - required - set(optional), key=str)
        raise ValueError(f"{path}: expected the sections {', '.join(sorted(required))}"
                         + (f" (optional: {', '.join(sorted(optional))})" if optional else "")
                         + (f"; missing {', '.join(missing)}" if missing else "")
                         + (f"; unknown {', '.join(map(str, unknown))}" if unknown else ""))
    data = {"name": path.stem, **data} if "name" not in data else data
    checked = config.check_scale(study, data, str(path))
    return {"name": checked.pop("name"), **checked}


def settings_of(scale: dict, *sections: str, **extra) -> dict:
    """The settings a stage's outputs depend on: the scale's name, the named sections, extra values."""
    return json.loads(json.dumps({"scale": scale["name"], **{k: scale[k] for k in sections}, **extra}))


KIND_STAGE = "stage"  # a stage folder of a study pipeline (its manifest: settings, status)
KIND_DISTILL = "distill"  # one distilled head (polyvox.train.distill)
KIND_TRAJECTORIES = "collab trajectories"  # a collaboration or solo run (studies.collab.scheduler)
KIND_WORLD, KIND_PERSONAS, KIND_COLLAB = "world pipeline", "personas pipeline", "collab pipeline"
# what a folder may hold before its first manifest: its lock, and a manifest cut off by a kill mid-write
UNWRITTEN = frozenset({".lock", "manifest.json.tmp"})


def foreign_files(folder: Path, known=frozenset()) -> list[str]:
    """The names in ``folder`` besides :data:`UNWRITTEN` and ``known``, sorted."""
    return sorted(p.name for p in Path(folder).iterdir() if p.name not in UNWRITTEN and p.name not in known)


def folder_kind(manifest: dict) -> str | None:
    """:func:`polyvox.records.manifest_kind`, and the shapes of pipeline manifests written before kinds
    were recorded: an RL run's (``config``), a distilled head's (settings with ``loss`` and ``top_k``),
    a collaboration run's (settings with ``t_max`` and ``first``, or a solo run's ``agent`` and
    ``questions``), a stage's (settings naming the ``scale``)."""
    kind = manifest_kind(manifest)
    if kind:
        return kind
    settings = manifest.get("settings")
    settings = settings if isinstance(settings, dict) else {}
    if "config" in manifest:
        return KIND_RL
    if "loss" in settings and "top_k" in settings:
        return KIND_DISTILL
    if ("t_max" in settings and "first" in settings) or ("agent" in settings and "questions" in settings):
        return KIND_TRAJECTORIES
    if "scale" in settings:
        return KIND_STAGE
    return None


def check_kind(folder: str | Path, *kinds: str) -> dict:
    """Read-only: ``folder`` is new, or its manifest (returned, {} when none) is of one of ``kinds``."""
    folder = check_out_path(folder)
    manifest = read_manifest(folder) if folder.is_dir() else {}
    if manifest:
        kind = folder_kind(manifest)
        if kind not in kinds:
            raise ValueError(f"{folder}: holds a {kind or 'unrecognised'} run (its manifest.json), not a "
                             f"{' or '.join(kinds)} run; a folder holds one kind of run: use a new --out")
    return manifest


def changed_keys(old: dict, new: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    """The top-level keys (``section.key`` one level down) whose values differ, ``ignore``d ones left out."""
    out = []
    for k in sorted(set(old) | set(new), key=str):
        a, b = old.get(k), new.get(k)
        if a == b or k in ignore:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            sub = [f"{k}.{x}" for x in sorted(set(a) | set(b), key=str) if a.get(x) != b.get(x)]
            sub = [x for x in sub if x not in ignore]
            out += sub
        else:
            out.append(str(k))
    return out


def check_stage(folder: Path, settings: dict, kinds: tuple[str, ...] = (KIND_STAGE,)) -> dict:
    """Read-only: ``folder`` may hold this stage — no manifest yet, or one of ``kinds`` whose settings are
    these (a stage run under other settings is refused, naming what differs). Returns the manifest."""
    old = check_kind(folder, *kinds)
    prior = old.get("settings")
    if prior is not None and prior != settings:
        changed = changed_keys(prior, settings) if isinstance(prior, dict) else ["settings"]
        raise ValueError(f"{folder}: holds a stage run with other settings ({', '.join(changed)}); use a new --out")
    return old


def stage_done(folder: Path, settings: dict, kinds: tuple[str, ...] = (KIND_STAGE,)) -> bool:
    """True when the stage is complete with these settings; a folder of another stage run is refused."""
    old = check_stage(folder, settings, kinds)
    return bool(old) and old.get("status") == "complete" and old.get("settings") == settings


def scale_settings(scale: dict) -> dict:
    """A scale as JSON values (what a pipeline's root manifest records)."""
    return json.loads(json.dumps(scale))


def check_root(out: str | Path, kind: str, scale: dict, recognise=None, ignore: tuple[str, ...] = ()) -> Path:
    """Read-only: ``out`` may take a pipeline run of ``kind`` with ``scale`` — a new or empty folder, or
    one whose manifest records this kind and a scale that differs at most in ``ignore``d keys (those
    that change no output, e.g. a thread count). A folder holding files but no manifest is accepted
    only when ``recognise(out)`` knows it as this pipeline's run from before kinds were recorded."""
    out = check_out_path(out)
    if not out.is_dir():
        return out
    manifest = read_manifest(out)
    if manifest:
        old_kind = folder_kind(manifest)
        if old_kind != kind:
            raise ValueError(f"{out}: holds a {old_kind or 'unrecognised'} run (its manifest.json), not a {kind} "
                             "run; a folder holds one kind of run: use a new --out")
        old = manifest.get("settings")
        if isinstance(old, dict):
            changed = changed_keys(old, scale_settings(scale), ignore)
            if changed:
                raise ValueError(f"{out}: holds a run of the scale {old.get('name')!r}; the scale "
                                 f"{scale['name']!r} differs in {', '.join(changed)}; use a new --out")
        return out
    entries = foreign_files(out)
    if entries and not (recognise is not None and recognise(out)):
        raise ValueError(f"{out}: holds {entries[0]}{' …' if len(entries) > 1 else ''} but no manifest.json: not a "
                         f"{kind} folder; a folder holds one kind of run: use a new --out")
    return out
