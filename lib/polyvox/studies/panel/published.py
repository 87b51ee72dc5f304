"""Loaders for the panel-of-experts study's published records (data/multipersona).

Each function reads one published file, validates the per-problem fields it
needs (a missing field raises RecordError naming file and line) and returns a
pandas DataFrame with one row per problem, in a common shape:

    id, n_samples, n_correct, + whatever metadata the file carries

so the same metric code runs on published records and on fresh runs. Paths
follow the original repository (scasella/multi-model, MIT) under
``<data_dir>/multipersona``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pydantic

from ...records import RecordError, from_dict, iter_jsonl, read_json, read_jsonl

ROOT = "multipersona"
MATH_L5 = {"panel": "reports/eval_math500_vibecheck/panel_l5_full/summary.json",
           "thinking": "reports/eval_math500_vibecheck/thinking_l5_full/summary.json"}
AIME = {"panel": "reports/eval_aime_vibecheck/aime_panel_postmath_n16/summary.json",
        "thinking": "reports/eval_aime_vibecheck/aime_thinking_n16/summary.json"}
DISPERSION = {"math50": "reports/diversity_analysis", "aime": "reports/diversity_analysis_aime"}
# labels the dispersion files use for the two systems compared in the README
DISPERSION_LABELS = {"math50": {"panel": "panel_postmath", "thinking": "thinking"},
                     "aime": {"panel": "panel_aime", "thinking": "thinking_aime"}}
BAND = {"panel": "reports/variance_band/panel_g8", "thinking": "reports/variance_band/thinking_g8"}


def _root(data_dir) -> Path:
    return Path(data_dir) / ROOT


@dataclass
class _EvalRow:
    n_samples: int
    n_correct: int
    gold: str = ""


def _per_problem(path: Path, summary: dict) -> list[dict]:
    rows = summary.get("per_problem")
    if not isinstance(rows, list):
        raise RecordError(path, None, "missing list 'per_problem'")
    for i, r in enumerate(rows):
        # validation: raises naming the file and the row (JSON arrays have no line numbers)
        try:
            from_dict(_EvalRow, r, path, None)
        except RecordError as exc:
            raise RecordError(path, None, f"per_problem[{i}]: {str(exc).split(': ', 1)[1]}") from None
    return rows


def eval_counts(data_dir, bench: str, system: str) -> pd.DataFrame:
    """Per-problem (n_samples, n_correct) for bench 'math_l5' or 'aime' and system 'panel'|'thinking'."""
    table = {"math_l5": MATH_L5, "aime": AIME}[bench]
    path = _root(data_dir) / table[system]
    summary = read_json(path)
    rows = _per_problem(path, summary)
    df = pd.DataFrame(rows)
    if bench == "aime":
        df["id"] = df["year"].astype(str) + "_" + df["problem_idx"].astype(str)
    else:
        df["id"] = df["unique_id"]
    df.attrs["summary"] = {k: v for k, v in summary.items() if k != "per_problem"}
    df.attrs["source"] = str(path)
    return df


class DispersionRow(pydantic.BaseModel):
    """One problem of a published dispersion file: what the analysis reads (the other columns, level,
    subject, lengths …, are kept as they are)."""

    model_config = pydantic.ConfigDict(strict=True, extra="allow", frozen=True)

    label: str
    uid: str
    n_samples: int
    n_correct: int
    mean_pairwise_dist: float


def dispersion(data_dir, which: str) -> pd.DataFrame:
    """Published per-problem dispersion rows for 'math50' (stratified slice) or 'aime', all labels."""
    path = _root(data_dir) / DISPERSION[which] / "per_problem.jsonl"
    rows = []
    for line, r in iter_jsonl(path):
        from_dict(DispersionRow, r, path, line)  # checked (its file line named); the row is kept as read
        rows.append(r)
    df = pd.DataFrame(rows)
    df.attrs["summary"] = read_json(_root(data_dir) / DISPERSION[which] / "summary.json")
    return df


def stratified50_counts(data_dir, system: str) -> pd.DataFrame:
    """Per-problem counts on the stratified MATH-500 50-problem slice (n = 4 per system)."""
    df = dispersion(data_dir, "math50")
    sub = df[df["label"] == DISPERSION_LABELS["math50"][system]].copy()
    sub["id"] = sub["uid"]
    return sub.reset_index(drop=True)


def passk_tables(data_dir) -> dict[str, list[dict]]:
    """Published pass@k tables keyed 'math50', 'math_l5', 'aime' (rows as published)."""
    root = _root(data_dir)
    crossover = read_json(root / "reports/pass_at_k_crossover/results.json")
    out = {}
    for block in crossover:
        key = "math50" if "stratified" in block["slice"] else "math_l5"
        out[key] = block["rows"]
    out["aime"] = read_json(root / "reports/pass_at_k_aime/results.json")["rows"]
    return out


def token_efficiency(data_dir) -> dict:
    return read_json(_root(data_dir) / "reports/token_efficiency/summary.json")


@dataclass
class BandRow:
    uid: str
    source: str
    n_samples: int
    n_correct: int
    band: str
    year: int | None = None


def band_records(data_dir, arm: str) -> pd.DataFrame:
    """Per-problem G = 8 records on the olympiad pool for arm 'panel' or 'thinking'."""
    path = _root(data_dir) / BAND[arm] / "per_problem.jsonl"
    rows = read_jsonl(path, BandRow)
    df = pd.DataFrame([r.__dict__ for r in rows])
    df.attrs["summary"] = read_json(_root(data_dir) / BAND[arm] / "summary.json")
    return df


def split_summary(data_dir) -> dict:
    return read_json(_root(data_dir) / "data/olympiad_pool/split_summary.json")


@dataclass
class TrajectoryRow:
    batch: int
    heldout_mean: float
    by_source: dict = field(default_factory=dict)


def heldout_trajectory(data_dir) -> pd.DataFrame:
    """The panel olympiad RL run's held-out evaluations: one row per evaluation, a column per source."""
    path = _root(data_dir) / "reports/olympiad_panel_only/heldout_trajectory.jsonl"
    rows = read_jsonl(path, TrajectoryRow)
    df = pd.DataFrame([{"step": r.batch, "heldout_mean": r.heldout_mean, **r.by_source} for r in rows])
    df.attrs["summary"] = read_json(_root(data_dir) / "reports/olympiad_panel_only/summary.json")
    return df


def training_log(data_dir) -> pd.DataFrame:
    return pd.DataFrame(read_jsonl(_root(data_dir) / "reports/olympiad_panel_only/train_per_batch.jsonl"))


def heldout_sources(data_dir) -> pd.Series:
    """Problems per source in the held-out set (counted from the set itself)."""
    rows = read_jsonl(_root(data_dir) / "data/olympiad_pool/heldout_eval.jsonl")
    return pd.Series([r["source"] for r in rows]).value_counts().sort_index()


def case_study(data_dir) -> tuple[list[dict], dict]:
    """The 20 case-study problems with one panel and one thinking trace each, and the metadata."""
    from ...explore.published import check_case_study  # the explorer reads the same file (imported when needed)

    path = _root(data_dir) / "reports/case_study/transcripts.json"
    data = read_json(path)
    check_case_study(path, data)  # a CaseStudy: 20 items, each with its id, texts and both traces
    return data["items"], data.get("metadata", {})
