"""Staged pipelines: a scale read from YAML, and stage folders that resume by their manifest's settings.

Every study's pipeline (the miniature world, the persona basis, the collaboration pool)
is a list of stages; each stage writes into its own folder and ends by writing a manifest
with ``settings`` (the parts of the scale its outputs depend on) and ``status: complete``.
A rerun skips a stage whose manifest is complete under the same settings and refuses a
folder holding a stage run under other settings, naming what differs.

Scales live in ``configs/<study>/<scale>.yaml``; a path to a YAML file works too.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import config
from .records import read_manifest

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


def stage_done(folder: Path, settings: dict) -> bool:
    """True when the stage is complete with these settings; a folder of another stage run is refused."""
    old = read_manifest(folder)
    if not old:
        return False
    prior = old.get("settings")
    if prior is not None and prior != settings:
        changed = sorted(k for k in set(settings) | set(prior) if prior.get(k) != settings.get(k))
        raise ValueError(f"{folder}: holds a stage run with other settings ({', '.join(changed)}); use a new --out")
    return old.get("status") == "complete" and prior == settings
