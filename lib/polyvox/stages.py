"""Staged pipelines: a scale read from YAML, and :class:`Pipeline`, which runs a study's stages into one folder.

Every study's pipeline (the miniature world, the persona basis, the collaboration pool) is a
:class:`Pipeline` over a list of :class:`Stage`: each stage writes into its own folder and has a
*record* holding ``settings`` (the parts of the scale its outputs depend on, and ``inputs``: the
digests of the manifests of the stages it reads, :func:`manifest_digest`) and a ``status``.

- A rerun skips a stage whose record is complete under the same settings and inputs; a stage
  whose scale settings differ is refused, naming what differs (use a new ``--out``); a stage whose
  inputs differ — an upstream stage was retrained — is *stale*: its folder is cleared (the record
  last, so a kill mid-way leaves it stale) and the stage runs again. Records written before inputs
  were recorded (the shipped runs under ``data/runs``) are *legacy*: recognised, and skipped when
  complete under the same settings, since nothing says what they read.
- One writer per manifest: the record of a stage is written by the pipeline alone — its folder's
  ``manifest.json`` (kind ``stage``), or, when the folder holds another kind of run (``hosts``: an
  RL run's, a judge run's, whose ``manifest.json`` that run writes alone), ``stage.json`` beside it.
- One writer per folder: the pipeline validates every folder it would write (the root's kind and
  scale, each stage's kind and settings) before writing anything, then holds the root's
  :class:`~polyvox.records.RunLock` for the whole run, and each stage runs under its own folder's
  lock (a hosted run takes that lock itself).

Scales live in ``configs/<study>/<scale>.yaml``; a path to a YAML file works too. Manifests
written before kinds were recorded are recognised by their shape (:func:`folder_kind`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from . import config
from .statuses import RunStatus
from .records import (KIND_RL, RunLock, check_out_path, git_commit, library_versions, manifest_kind, now_iso,
                      read_json, read_manifest, scrub, write_manifest)

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
STAGE_RECORD = "stage.json"  # a stage's record beside the manifest of the run its folder hosts
# what a folder may hold before its first manifest: its lock, and a record cut off by a kill mid-write
UNWRITTEN = frozenset({".lock", "manifest.json.tmp", f"{STAGE_RECORD}.tmp"})


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


def _refuse_kind(folder: Path, manifest: dict, kinds: tuple[str, ...], what: str = "use a new --out") -> None:
    kind = folder_kind(manifest)
    if kind not in kinds:
        raise ValueError(f"{folder}: holds a {kind or 'unrecognised'} run (its manifest.json), not a "
                         f"{' or '.join(kinds)} run; a folder holds one kind of run: {what}")


def check_kind(folder: str | Path, *kinds: str) -> dict:
    """Read-only: ``folder`` is new, or its manifest (returned, {} when none) is of one of ``kinds``."""
    folder = check_out_path(folder)
    manifest = read_manifest(folder) if folder.is_dir() else {}
    if manifest:
        _refuse_kind(folder, manifest, kinds)
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


def scale_settings(scale: dict) -> dict:
    """A scale as JSON values (what a pipeline's root manifest records)."""
    return json.loads(json.dumps(scale))


def check_root(out: str | Path, kind: str, scale: dict, recognise=None, ignore: tuple[str, ...] = ()) -> Path:
    """Read-only: ``out`` may take a pipeline run of ``kind`` with ``scale`` — a new or empty folder, or
    one whose manifest records this kind and a scale that differs at most in ``ignore``d keys (those
    that change no output, e.g. a thread count). A folder holding files but no manifest is accepted
    only when ``recognise(out)`` knows it as this pipeline's run from before kinds were recorded."""
    out = check_out_path(out)
    manifest = check_kind(out, kind)
    if manifest:
        old = manifest.get("settings")
        changed = changed_keys(old, scale_settings(scale), ignore) if isinstance(old, dict) else []
        if changed:
            raise ValueError(f"{out}: holds a run of the scale {old.get('name')!r}; the scale "
                             f"{scale['name']!r} differs in {', '.join(changed)}; use a new --out")
    elif out.is_dir() and foreign_files(out) and not (recognise is not None and recognise(out)):
        entries = foreign_files(out)
        raise ValueError(f"{out}: holds {entries[0]}{' …' if len(entries) > 1 else ''} but no manifest.json: not a "
                         f"{kind} folder; a folder holds one kind of run: use a new --out")
    return out


def manifest_digest(folder: str | Path) -> str | None:
    """sha256 of ``folder``'s manifest.json and its :data:`STAGE_RECORD` (if any), read as JSON (key order and
    spacing aside); None when it has neither.

    A stage records the digests of the manifests of the stages it reads: a retrained upstream stage
    writes them anew (a new ``run_id``, times, settings or results), so what read it is stale."""
    folder = Path(folder)
    docs = [read_manifest(folder) if (folder / "manifest.json").is_file() else None,
            read_json(folder / STAGE_RECORD) if (folder / STAGE_RECORD).is_file() else None]
    if docs == [None, None]:
        return None
    text = json.dumps(docs if docs[1] is not None else docs[0], sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Stage:
    """One stage: ``name`` (what ``--stages`` selects; several stages may share it, e.g. one per seed),
    its ``folder``, the scale ``settings`` its outputs depend on, the folders of the stages it ``reads``,
    and ``work()``, which does the stage and returns fields for its record (or None).

    ``hosts``: the kind of run the folder holds (``rl``, ``judge``): that run writes the folder's
    manifest.json alone, and the stage's record is :data:`STAGE_RECORD`. ``legacy_done``: for a folder
    with no record, whether a run recorded before stage records completed it."""

    name: str
    folder: Path
    settings: dict
    work: Callable[[], dict | None]
    reads: tuple[Path, ...] = ()
    hosts: str | None = None
    legacy_done: Callable[[], bool] | None = None

    def record(self) -> dict:
        """The stage's record ({} when none): its folder's manifest.json, or for a hosted run the
        :data:`STAGE_RECORD` beside it (a legacy folder: the hosted manifest, when it holds settings)."""
        if not self.hosts:
            return read_manifest(self.folder) if self.folder.is_dir() else {}
        path = self.folder / STAGE_RECORD
        if path.is_file():
            data = read_json(path)
            if not isinstance(data, dict):
                raise ValueError(f"{path}: expected a JSON object (a stage record), got {type(data).__name__}")
            return data
        manifest = read_manifest(self.folder) if self.folder.is_dir() else {}
        return manifest if "settings" in manifest else {}

    def write(self, **fields) -> None:
        """Write the stage's record (the pipeline's, and only the pipeline's, to write)."""
        fields = {"kind": KIND_STAGE, "stage": self.name, **fields}
        if not self.hosts:
            write_manifest(self.folder, **fields)
            return
        data = scrub({**fields, "versions": library_versions(), "git_commit": git_commit()})
        tmp = self.folder / f"{STAGE_RECORD}.tmp"
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n",
                       encoding="utf-8")
        os.replace(tmp, self.folder / STAGE_RECORD)

    def clear(self) -> None:
        """Remove what a stale run of the stage left (its lock aside), its record last."""
        record = self.folder / (STAGE_RECORD if self.hosts else "manifest.json")
        for p in sorted(self.folder.iterdir()):
            if p.name in (".lock", record.name):
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        record.unlink(missing_ok=True)


def _without_inputs(settings) -> dict | None:
    return {k: v for k, v in settings.items() if k != "inputs"} if isinstance(settings, dict) else settings


class Pipeline:
    """A study's stages run into one folder ``out`` of ``kind`` for ``scale`` (see the module docstring).

    ``names``: every stage name the study has (``--stages`` chooses among them); ``recognise(out)``:
    whether a folder without a root manifest is this pipeline's older run; ``ignore``: scale keys that
    change no output; ``checks``: more read-only checks, each called with the stage names to run;
    ``root``: more fields for the root manifest; ``setup()``: work under the root lock before the stages
    (it calls ``process_setup()`` itself, if it needs it); ``process_setup()``: what every process that
    runs a stage sets first (a thread count), called by :meth:`run_stage` in a launcher's workers."""

    def __init__(self, kind: str, out: str | Path, scale: dict, stages: list[Stage], names: tuple[str, ...], *,
                 recognise=None, ignore: tuple[str, ...] = (), checks: Iterable[Callable] = (),
                 root: dict | None = None, setup: Callable[[], None] | None = None,
                 process_setup: Callable[[], None] | None = None):
        self.kind, self.out, self.scale, self.stages, self.names = kind, Path(out), scale, list(stages), tuple(names)
        self.recognise, self.ignore, self.checks = recognise, ignore, list(checks)
        self.root, self.setup, self.process_setup = dict(root or {}), setup, process_setup

    def todo(self, names: Iterable[str] | None = None) -> tuple[str, ...]:
        """The stage names to run, in the pipeline's order; an unknown name is refused."""
        names = self.names if names is None else tuple(names)
        unknown = [n for n in names if n not in self.names]
        if unknown:
            raise ValueError(f"unknown stage(s) {', '.join(map(str, unknown))}; stages: {', '.join(self.names)}")
        return tuple(n for n in self.names if n in names)

    def check(self, names: Iterable[str] | None = None) -> None:
        """Read-only: every folder a run of ``names`` writes may take it (the root, ``checks``, each stage)."""
        todo = self.todo(names)
        check_root(self.out, self.kind, self.scale, self.recognise, self.ignore)
        for check in self.checks:
            check(todo)
        for st in self.stages:
            if st.name in todo:
                check_kind(st.folder, st.hosts or KIND_STAGE)
                prior = _without_inputs(st.record().get("settings"))
                if prior is not None and prior != st.settings:
                    changed = changed_keys(prior, st.settings) if isinstance(prior, dict) else ["settings"]
                    raise ValueError(f"{st.folder}: holds a stage run with other settings ({', '.join(changed)}); "
                                     "use a new --out")

    def inputs(self, st: Stage) -> dict:
        """The digests of the manifests of the stages ``st`` reads, by folder (relative to ``out``)."""
        return {f.relative_to(self.out).as_posix(): manifest_digest(f) for f in st.reads}

    def state(self, st: Stage) -> str:
        """``done`` (complete under these settings and inputs, or a complete legacy record), ``stale``
        (recorded with other inputs: an upstream stage was retrained) or ``todo``."""
        record = st.record()
        if not record:
            return "done" if st.legacy_done is not None and st.legacy_done() else "todo"
        settings = record.get("settings")
        inputs = settings.get("inputs") if isinstance(settings, dict) else None
        if inputs is not None and inputs != self.inputs(st):
            return "stale"
        return "done" if record.get("status") == RunStatus.COMPLETE else "todo"

    def run(self, names: Iterable[str] | None = None, execute: Callable | None = None) -> dict[str, float | None]:
        """Validate, then run the stages ``names`` (all by default) under the root lock; seconds per stage
        folder (a skipped stage: its record's). ``execute(pipeline, todo)``, when given, runs the stages
        instead of this process, one after another (:func:`polyvox.launch.run_pipeline`: K workers at once)."""
        todo = self.todo(names)
        self.check(todo)  # validate first: a refused run writes nothing
        with RunLock(self.out):
            self.check(todo)  # again under the lock: another writer may have finished meanwhile
            root = {"kind": self.kind, "scale": self.scale["name"], "settings": scale_settings(self.scale),
                    "stages": list(todo), **self.root}
            write_manifest(self.out, **root, status=RunStatus.RUNNING, updated=now_iso())
            if self.setup is not None:
                self.setup()
            if execute is not None:
                times = execute(self, todo)
            else:
                times = {st.folder.relative_to(self.out).as_posix(): self._run(st)
                         for st in self.stages if st.name in todo}
            write_manifest(self.out, **root, status=RunStatus.STAGES_COMPLETE, updated=now_iso())
        return times

    def graph(self, names: Iterable[str] | None = None) -> list[tuple[str, tuple[str, ...]]]:
        """The stages ``names`` as a job graph, in the pipeline's order: (folder relative to ``out``, the
        folders of the stages among them that it reads). :mod:`polyvox.launch` runs it K at a time."""
        todo = self.todo(names)
        chosen = [st for st in self.stages if st.name in todo]
        mine = {st.folder for st in chosen}
        rel = lambda f: f.relative_to(self.out).as_posix()  # noqa: E731
        return [(rel(st.folder), tuple(rel(f) for f in st.reads if f in mine)) for st in chosen]

    def stage_at(self, folder: str) -> Stage:
        """The stage whose folder is ``folder`` (relative to ``out``)."""
        found = [st for st in self.stages if st.folder.relative_to(self.out).as_posix() == folder]
        if not found:
            raise ValueError(f"{self.out}: this pipeline has no stage folder {folder!r}")
        return found[0]

    def run_stage(self, folder: str) -> float | None:
        """Run the one stage at ``folder`` (relative to ``out``) under its own folder's lock, not the root's.

        For :mod:`polyvox.launch`'s workers: the launcher validated the whole run and holds the root's
        lock while its workers each run one stage; the stage is validated again here before it writes."""
        st = self.stage_at(folder)
        check_kind(st.folder, st.hosts or KIND_STAGE)
        prior = _without_inputs(st.record().get("settings"))
        if prior is not None and prior != st.settings:
            raise ValueError(f"{st.folder}: holds a stage run with other settings; use a new --out")
        if self.process_setup is not None:
            self.process_setup()
        return self._run(st)

    def _run(self, st: Stage) -> float | None:
        state = self.state(st)
        if state == "done":
            return st.record().get("seconds")
        settings = {**st.settings, "inputs": self.inputs(st)}
        # run_id: this attempt's own, so that a stage redone within the same second still writes a new record
        started, t0, run_id = now_iso(), time.time(), uuid.uuid4().hex
        with RunLock(st.folder):
            if state == "stale":
                st.clear()
            st.write(settings=settings, status=RunStatus.RUNNING, started=started, run_id=run_id)
            extra = None if st.hosts else st.work()
        if st.hosts:
            extra = st.work()  # the run it hosts takes the folder's lock itself
        seconds = round(time.time() - t0, 1)
        with RunLock(st.folder):
            st.write(**(extra or {}), settings=settings, status=RunStatus.COMPLETE, started=started, finished=now_iso(),
                     seconds=seconds, run_id=run_id)
        print(f"{self.kind}: {st.folder.relative_to(self.out).as_posix()} done in {seconds} s", flush=True)
        return seconds
