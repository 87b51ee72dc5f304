"""Reading a run folder: its manifest and records (:func:`load`), its task's problems, and the
per-sample and per-problem tables chapters count from."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from .. import tasks
from ..jsonl import exists as jsonl_exists
from ..records import GradedSample, RecordError, Sample, read_jsonl, read_manifest
from .folder import GRADED, MANIFEST, ROLLOUTS


@dataclass(frozen=True)
class Run:
    """A run folder as read: ``manifest`` (its ``settings`` hold task, task options, format, n …) and
    ``samples``, the records of ``graded.jsonl`` (:class:`~polyvox.records.GradedSample`) when
    ``graded``, else those of ``rollouts.jsonl`` (:class:`~polyvox.records.Sample`), in file order."""

    folder: Path
    manifest: dict
    samples: list
    graded: bool

    @property
    def settings(self) -> dict:
        return self.manifest["settings"]

    @property
    def task(self) -> str:
        return self.settings["task"]

    @property
    def format(self) -> str:
        return self.settings.get("format", "plain")


def load(run: str | Path) -> Run:
    """A run folder's manifest and records, read-only; any run that holds records (complete or not).

    A manifest without settings (task …) or a folder without records is a
    :class:`~polyvox.records.RecordError` naming the file, as is any malformed record.
    """
    folder = Path(run)
    manifest = read_manifest(folder)
    settings = manifest.get("settings")
    if not isinstance(settings, dict) or "task" not in settings:
        raise RecordError(folder / MANIFEST, None, "no run settings (task, format): not a polyvox run folder")
    graded = jsonl_exists(folder / GRADED)
    path = folder / (GRADED if graded else ROLLOUTS)
    samples = read_jsonl(path, GradedSample if graded else Sample)
    if graded:
        _check_graded(folder, manifest, samples)
    if not samples:
        raise RecordError(path, None, "no records")
    return Run(folder, manifest, samples, graded)


def _check_graded(folder: Path, manifest: dict, graded: list) -> None:
    """graded.jsonl beside rollouts.jsonl is the grading of those rollouts: the manifest records a
    grading and the keys are the same (a resume that changed the rollouts leaves stale grades).
    A folder of grades alone (some shipped runs: graded.jsonl, no rollouts, no grading section) has
    nothing to be stale against and is read as it is."""
    path, rollouts = folder / GRADED, folder / ROLLOUTS
    if not jsonl_exists(rollouts):
        return
    if manifest and isinstance(manifest.get("settings"), dict) and not isinstance(manifest.get("grading"), dict):
        raise RecordError(path, None, "the manifest records no grading of rollouts.jsonl: these grades are "
                                      "not of its rollouts now (a resume changed them?); run polyvox grade again")
    keys = [s.key for s in read_jsonl(rollouts, Sample)]
    if sorted(keys) != sorted(s.key for s in graded):
        raise RecordError(path, None, "its keys differ from rollouts.jsonl's: stale grades of other rollouts; "
                                      "run polyvox grade again")


def load_problems(run: Run, data_dir="data") -> dict:
    """The problems of the run's task as it was sampled (its task options and limit, every shard),
    by id, from ``data_dir``; not checked against the manifest's hashes (:func:`grade` checks them)."""
    options = dict(run.settings.get("task_options") or {})
    return {p.id: p for p in tasks.load(run.task, data_dir, limit=run.settings.get("limit"), **options)}


def graded_samples(run: str | Path):
    """A graded run as a DataFrame, one row per sample, metadata labels (level …) as columns."""
    import pandas as pd

    rows = []
    folder = Path(run)
    graded = read_jsonl(folder / GRADED, GradedSample)
    _check_graded(folder, read_manifest(folder) if (folder / MANIFEST).exists() else {}, graded)
    for s in graded:
        row = asdict(s)
        for k, v in s.metadata.items():
            row.setdefault(k, v)
        rows.append(row)
    return pd.DataFrame(rows)


def per_problem_counts(samples) -> "pd.DataFrame":  # noqa: F821
    """id, n_samples, n_correct (and the problem's labels) from graded samples: a run folder or a DataFrame.

    The one per-problem count in polyvox: chapters, bands and pass@k all read this shape.
    """
    import pandas as pd

    df = samples if isinstance(samples, pd.DataFrame) else graded_samples(samples)
    labels = [c for c in ("level", "subject", "source") if c in df.columns]
    g = df.groupby("problem_id", sort=False).agg(n_samples=("correct", "size"), n_correct=("correct", "sum"),
                                                 **{c: (c, "first") for c in labels})
    g = g.reset_index().rename(columns={"problem_id": "id"})
    g["n_correct"] = g["n_correct"].astype(int)
    return g
