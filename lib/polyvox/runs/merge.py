"""Merging shards: complete shard folders of one run joined by key into a new run folder.

Everything is checked before anything is written (the shards are only read); an interrupted
merge is redone by running it again.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..records import (KIND_SAMPLE, RecordError, RunLock, Sample, append_jsonl, check_folder_kind, from_dict,
                       iter_jsonl, manifest_kind, now_iso, read_manifest, write_manifest)
from ..statuses import RunStatus
from .folder import MANIFEST, ROLLOUTS, _jsonable, _out_path
from .sample import check_run_settings


def _shard_manifest(d: Path) -> tuple[dict, dict]:
    """A shard folder's manifest and settings, checked read-only: a complete sample run of one shard."""
    if not d.exists():
        raise ValueError(f"{d}: no such folder")
    if not d.is_dir():
        raise ValueError(f"{d}: a file, not a run folder")
    manifest = read_manifest(d)
    settings = manifest.get("settings")
    if not isinstance(settings, dict) or not settings:
        raise RecordError(d / MANIFEST, None, "no settings: not a polyvox run folder")
    kind = manifest_kind(manifest)
    if kind != KIND_SAMPLE:
        raise ValueError(f"{d}: holds a {kind or 'unrecognised'} run, not a sample run; merge joins sample shards")
    if settings.get("shard") == "merged":
        raise ValueError(f"{d}: a merged run, not a shard; merge the shards it was merged from")
    check_run_settings(d / MANIFEST, settings)  # as grade checks them: a shard index, its problems' hash, n …
    if manifest.get("status") != RunStatus.COMPLETE:
        raise ValueError(f"{d}: shard {settings['shard']} is not complete (status {manifest.get('status')!r}); "
                         "finish it first (a rerun of polyvox sample resumes it), then merge")
    return manifest, settings


def _merge_plan(shard_dirs: list[Path]) -> tuple[dict, list[Sample], dict | None]:
    """Read-only: the merged settings, the merged samples (sorted by key) and the problems' digests."""
    base, first = None, None
    merged: dict[tuple[str, int], Sample] = {}
    origin: dict[tuple[str, int], Path] = {}
    hashes: dict[str, str] = {}
    digests: dict | None = {}
    labels: dict | None = {}
    for d in shard_dirs:
        manifest, settings = _shard_manifest(d)
        ids = _shard_problem_ids(d, manifest, settings)
        common = {k: v for k, v in settings.items() if k not in ("shard", "problems_sha256")}
        if base is None:
            base, first = common, d
        elif common != base:
            changed = sorted(k for k in set(base) | set(common) if base.get(k) != common.get(k))
            raise ValueError(f"{d}: a shard of another run ({', '.join(changed)} differ from {first})")
        path, count = d / ROLLOUTS, 0
        for line, obj in iter_jsonl(path):
            s = from_dict(Sample, obj, path, line)
            if ids is not None and s.problem_id not in ids:
                raise RecordError(path, line, f"problem {s.problem_id!r} is not one of shard {settings['shard']}'s "
                                              "problems")
            if s.key in merged:
                raise RecordError(path, line, f"key {s.key} is also in another shard ({origin[s.key]})")
            if not 0 <= s.sample_index < settings["n"]:
                raise RecordError(path, line, f"sample_index {s.sample_index} is outside 0 … {settings['n'] - 1}")
            merged[s.key], origin[s.key] = s, d
            count += 1
        if count != manifest.get("records"):
            raise RecordError(path, None, f"{count} records, but the shard's manifest says "
                                          f"{manifest.get('records')!r}: the shard is not complete")
        if str(settings["shard"]) in hashes:
            raise ValueError(f"{d}: shard {settings['shard']} is given twice")
        hashes[str(settings["shard"])] = settings["problems_sha256"]
        pd = manifest.get("problem_digests")
        digests = {**digests, **pd} if isinstance(pd, dict) and digests is not None else None
        ld = manifest.get("label_digests")
        labels = {**labels, **ld} if isinstance(ld, dict) and labels is not None else None
    nshards = base["nshards"]
    missing = [str(k) for k in range(nshards) if str(k) not in hashes]
    if missing:
        raise ValueError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} of {nshards} not given: "
                         f"merge joins every shard of a run (0 … {nshards - 1}, each once)")
    settings = {**base, "shard": "merged", "merged_from": [d.name for d in shard_dirs],
                "shard_problems_sha256": hashes}
    return settings, sorted(merged.values(), key=lambda s: s.key), digests, labels


def _shard_problem_ids(d: Path, manifest: dict, settings: dict) -> set[str] | None:
    """The ids of the problems a shard sampled: its manifest's ``problem_digests``, else its task's
    problems as it was sampled, loaded from ``data`` when their hash is the shard's ``problems_sha256``.
    None when neither is known (a shard written before polyvox kept digests, whose data is elsewhere):
    its records' problems are then checked by grade, against the data it is graded with."""
    pd = manifest.get("problem_digests")
    if isinstance(pd, dict) and pd:
        return set(pd)
    from .. import tasks

    try:
        every = tasks.load(settings["task"], "data", limit=settings.get("limit"),
                           **(settings.get("task_options") or {}))
    except Exception:  # noqa: BLE001 — the data is not here: grade checks the problems later
        return None
    problems = every[settings["shard"]::settings["nshards"]]
    return {p.id for p in problems} if tasks.problem_hash(problems) == settings["problems_sha256"] else None


def _check_merge_places(shard_dirs: list[Path], out: Path) -> None:
    """out is not inside a shard and holds none of them (out equal to a shard holds a run already:
    :func:`_check_merge_out` refuses it)."""
    o = out.resolve()
    for d in shard_dirs:
        r = d.resolve()
        if r in o.parents or o in r.parents:
            where = "is inside" if r in o.parents else "holds"
            raise ValueError(f"{out}: {where} shard folder {d}; merge writes a new folder apart from its shards")


def _check_merge_out(out: Path, settings: dict) -> None:
    """Read-only: out is new, empty, or an interrupted merge of these very shards (which is redone)."""
    check_folder_kind(out, KIND_SAMPLE)
    manifest = read_manifest(out) if out.is_dir() else {}
    if manifest:
        if manifest.get("status") == RunStatus.MERGING and manifest.get("settings") == settings:
            return
        raise ValueError(f"{out}: holds a run already (status {manifest.get('status')!r}); merge writes a new folder")
    if (out / ROLLOUTS).exists():
        raise ValueError(f"{out / ROLLOUTS} exists; merge writes a new folder")


def merge(shard_dirs: list[str | Path], out: str | Path) -> Path:
    """Join complete shard folders into one run (by key); shards of different settings are refused.

    Everything is checked before anything is written, then under out's lock: the manifest is
    written first (``status: merging``), the records go to a temporary file renamed into place,
    and the manifest says ``complete`` last. A merge killed at any instant leaves the shards as
    they were and out either without a run or ``merging``; running the same merge again redoes it.
    """
    shard_dirs = [Path(d) for d in shard_dirs]
    if not shard_dirs:
        raise ValueError("merge needs at least one shard folder")
    out = _out_path(out)
    _check_merge_places(shard_dirs, out)
    settings, samples, digests, labels = _merge_plan(shard_dirs)
    _check_merge_out(out, settings)
    with RunLock(out):
        _check_merge_out(out, settings)  # again under the lock: another merge may have begun meanwhile
        fields = {"kind": KIND_SAMPLE, "settings": _jsonable(settings), "started": now_iso()}
        if digests:
            fields["problem_digests"] = digests
        if labels:
            fields["label_digests"] = labels
        tmp = out / (ROLLOUTS + ".tmp")
        try:
            write_manifest(out, **fields, status=RunStatus.MERGING)
            tmp.unlink(missing_ok=True)
            (out / ROLLOUTS).unlink(missing_ok=True)
            append_jsonl(tmp, samples)
            os.replace(tmp, out / ROLLOUTS)
            write_manifest(out, **fields, finished=now_iso(), status=RunStatus.COMPLETE, records=len(samples))
        except Exception:
            for name in (ROLLOUTS + ".tmp", ROLLOUTS, MANIFEST):  # ours: out held no run before
                (out / name).unlink(missing_ok=True)
            raise
    return out
