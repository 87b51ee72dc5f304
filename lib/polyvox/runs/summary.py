"""What a run holds, on one screen: the summary ``polyvox sample`` and ``polyvox grade`` end with.

Per run folder (one task × one system): problems, samples, accuracy with its 95 % Wilson
interval (from ``graded.jsonl``, or graded in memory through :func:`polyvox.runs.grade` with
``write=False`` when the run is not graded yet: nothing is written), the share of samples
that hit the token cap (``finish_reason == "length"``), mean completion tokens, the grading
statuses, and where the files are. When ``--limit`` asked for more problems than the task
holds, the summary says how many it took.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..metrics import wilson_interval
from .folder import GRADED, ROLLOUTS
from .load import load


@dataclass
class RunSummary:
    folder: str
    task: str
    system: str  # the run's name: its folder's path below the folder the command was given
    model: str
    problems: int
    samples: int
    cap_hits: int
    mean_tokens: float
    correct: int | None = None  # None: not graded (grading failed or was not asked for)
    statuses: dict = field(default_factory=dict)
    graded_on_disk: bool = False
    note: str = ""

    @property
    def accuracy(self) -> tuple[float, float, float] | None:
        if self.correct is None or not self.samples:
            return None
        lo, hi = wilson_interval(self.correct, self.samples)
        return self.correct / self.samples, lo, hi


def _model(manifest: dict) -> str:
    settings = manifest.get("settings", {})
    model = str(settings.get("model") or "?")
    adapter = settings.get("adapter_sha256")
    return f"{model} + adapter {adapter[:8]}" if adapter else model


def summarize(run: str | Path, data_dir="data", grade_in_memory: bool = True, name: str | None = None) -> RunSummary:
    """The summary of one run folder (read-only); ``name`` defaults to the folder's name."""
    from .grade import grade

    r = load(run)
    samples = r.samples
    problems = {s.problem_id for s in samples}
    summary = RunSummary(folder=str(r.folder), task=r.task, system=name or r.folder.name,
                         model=_model(r.manifest),
                         problems=len(problems), samples=len(samples),
                         cap_hits=sum(s.finish_reason == "length" for s in samples),
                         mean_tokens=sum(s.completion_tokens for s in samples) / max(1, len(samples)),
                         graded_on_disk=r.graded)
    graded = samples if r.graded else None
    if graded is None and grade_in_memory:
        try:
            graded = grade(r.folder, data_dir, write=False)
        except (ValueError, OSError) as exc:  # e.g. an incomplete run: say why there is no accuracy
            summary.note = f"not graded: {' '.join(str(exc).split())}"
    if graded is not None:
        summary.correct = sum(bool(s.correct) for s in graded)
        for s in graded:
            summary.statuses[str(s.grade_status)] = summary.statuses.get(str(s.grade_status), 0) + 1
    limit = r.settings.get("limit")
    if isinstance(limit, int) and r.settings.get("nshards", 1) == 1 and limit > len(problems):
        summary.note = (summary.note + "; " if summary.note else "") + \
            f"--limit {limit} asked for more problems than the task holds: took all {len(problems)}"
    return summary


def summary_lines(summaries: list[RunSummary]) -> list[str]:
    """The summaries as an aligned text table, then the files and notes."""
    from .grade import STATUSES

    header = ("task", "system", "model", "problems", "samples", "accuracy [95% Wilson]", "cap hits", "mean tokens",
              "grading")
    rows = []
    for s in summaries:
        acc = s.accuracy
        acc_text = "not graded" if acc is None else f"{acc[0]:.1%} [{acc[1]:.1%}, {acc[2]:.1%}]"
        order = [*STATUSES, *sorted(k for k in s.statuses if k not in STATUSES)]
        statuses = "(" + ", ".join(f"{k.replace('_', ' ')} {s.statuses.get(k, 0)}" for k in order) + ")" \
            if s.statuses else "-"
        rows.append((s.task, s.system, s.model, str(s.problems), str(s.samples), acc_text,
                     f"{s.cap_hits / max(1, s.samples):.1%}", f"{s.mean_tokens:.0f}", statuses))
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(row, widths)).rstrip() for row in (header, *rows)]
    for s in summaries:
        files = f"{s.folder}/{GRADED if s.graded_on_disk else ROLLOUTS}"
        if s.graded_on_disk and (Path(s.folder) / ROLLOUTS).exists():
            files += f" (rollouts: {s.folder}/{ROLLOUTS})"
        how = "" if s.graded_on_disk or s.correct is None else " (graded in memory; polyvox grade writes graded.jsonl)"
        lines.append(f"files: {files}{how}" + (f" — {s.note}" if s.note else ""))
    return lines
