"""Part IV's tables of a recorded world run's bands and environment (split from :mod:`.analysis`, which
re-exports them): the band draws (:func:`bands`), how stable band membership is across two draws
(:func:`band_stability`), held-out levels no climb ever moved (:func:`dead_levels`), and every manifest's
device and library versions (:func:`environment`)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ... import metrics
from ...records import read_jsonl

ARMS = {"panel": "panel", "think": "thinking"}  # hill-climb arm -> its name in prose
VERSION_KEYS = ("torch", "transformers", "trl", "peft", "platform")  # library versions compared across manifests


def records(path: str | Path) -> list[dict]:
    """JSONL records without the notes the trainer writes into its logs."""
    return [r for r in read_jsonl(path) if "note" not in r]


def bands(root: str | Path) -> tuple[dict[str, pd.DataFrame], int]:
    """Per arm the band draw's per-problem records with ``band (recomputed)``, and G."""
    root = Path(root)
    out = {a: pd.DataFrame(records(root / "bands" / a / "per_problem.jsonl")) for a in ARMS}
    g = json.loads((root / "bands" / "panel" / "summary.json").read_text())["n_samples_per_problem"]
    for df in out.values():
        df["band (recomputed)"] = metrics.variance_band(df.n_correct.to_numpy(), g)
    return out, g


def band_stability(root: str | Path, bands_: dict[str, pd.DataFrame], g: int, climb: dict, seed_list) -> pd.DataFrame | None:
    """Band membership and success rates on the first and a second draw of the pool (``bands-redraw/``),
    the share of all-equal groups each predicts (on the first draw's band, and on the problems in the band in
    both draws, which the matched design's climbs train on), and that share in RL steps 1–5 (runs that did not
    collapse; nan when every run of an arm collapsed); None when no second draw was recorded."""
    redraw = Path(root) / "bands-redraw"
    if not redraw.exists():
        return None
    rows = []
    for a in ARMS:
        r2 = pd.DataFrame(records(redraw / a / "per_problem.jsonl"))
        j = bands_[a][["uid", "n_correct"]].merge(r2[["uid", "n_correct"]], on="uid", suffixes=("", " redraw"))
        in1 = (j.n_correct > 0) & (j.n_correct < g)
        in2 = j["n_correct redraw"].between(1, g - 1)
        p1, p2 = j.loc[in1, "n_correct"] / g, j.loc[in1, "n_correct redraw"] / g
        kept = [climb["logs"][a][k][climb["logs"][a][k].step <= 5] for k in seed_list if (a, k) not in climb["collapsed"]]
        early = pd.concat(kept) if kept else pd.DataFrame({"frac_groups_all_equal": [float("nan")]})
        both = in1 & in2  # the matched design's climbs train on these
        pb = j.loc[both, "n_correct redraw"] / g
        rows.append({"arm": ARMS[a], "band, first draw": int(in1.sum()), "band, redraw": int(in2.sum()),
                     "in both": int((in1 & in2).sum()), "first band kept": (in1 & in2).sum() / in1.sum() if in1.any() else float("nan"),
                     "mean p, first draw": p1.mean(), "mean p, redraw (same problems)": p2.mean(),
                     "all-equal groups expected (first draw)": (p1 ** g + (1 - p1) ** g).mean(),
                     "all-equal groups expected (redraw)": (p2 ** g + (1 - p2) ** g).mean(),
                     "all-equal groups expected (in both draws, redraw)": (pb ** g + (1 - pb) ** g).mean(),
                     "all-equal groups in RL steps 1–5": early.frac_groups_all_equal.mean()})
    return pd.DataFrame(rows).set_index("arm")


def dead_levels(climb: dict) -> tuple[list[str], int]:
    """Held-out levels that scored 0 in every hill-climb evaluation (both arms, every seed and step), and
    how many levels there are."""
    level_max: dict[str, float] = {}
    for a in climb["traj"]:
        for t in climb["traj"][a].values():
            for row in t.per_level:
                for lv, v in row.items():
                    level_max[lv] = max(level_max.get(lv, 0.0), v)
    return [lv for lv, v in level_max.items() if v == 0], len(level_max)


def environment(root: str | Path, keys=VERSION_KEYS) -> pd.DataFrame:
    """Every manifest of the run: its folder, the device it records and its library versions."""
    root = Path(root)
    rows = []
    for f in sorted(root.rglob("manifest.json")):
        m = json.loads(f.read_text())
        rows.append({"record": str(f.parent.relative_to(root)), "device": m.get("device"),
                     **{k: m.get("versions", {}).get(k) for k in keys}})
    return pd.DataFrame(rows)


def launch_sessions(root: str | Path) -> pd.DataFrame:
    """The launcher's job tables of the run (``launch/rank-*.json``, and ``launch/earlier/<n>-<time>/rank-*.json``
    for the device sessions before the last one): one row per job and session — the session (its folder name, the
    last one ``latest``), the job (``seed-0/rl-panel``, ``bands`` …) and its status. A job in more than one
    session was run again; the records kept are the last session's."""
    root = Path(root) / "launch"
    rows = []
    sessions = [(d.name, d) for d in sorted((root / "earlier").iterdir(), key=lambda d: d.name)
                if d.is_dir()] if (root / "earlier").is_dir() else []
    sessions.append(("latest", root))
    for order, (name, folder) in enumerate(sessions):
        for f in sorted(folder.glob("rank-*.json")):
            for job in json.loads(f.read_text()).get("jobs", []):
                rows.append({"session": name, "order": order, "job": job["name"], "status": job.get("status")})
    return pd.DataFrame(rows, columns=["session", "order", "job", "status"])


def rerun_jobs(sessions: pd.DataFrame) -> dict[str, list[str]]:
    """Job → the sessions it ran in, for every job of :func:`launch_sessions` run in more than one."""
    runs = sessions.sort_values("order").groupby("job", sort=False).session.apply(list)
    return {job: s for job, s in runs.items() if len(s) > 1}


def session_label(name: str) -> str:
    """A session of :func:`launch_sessions` in prose: ``1-2026-12-02T2210Z`` → ``session 1 (2026-12-02 22:10 UTC)``,
    ``latest`` → ``the last session``; a name of another form as it is."""
    import re

    if name == "latest":
        return "the last session"
    m = re.fullmatch(r"(\d+)-(\d{4}-\d\d-\d\d)T(\d\d)(\d\d)Z", name)
    return f"session {m[1]} ({m[2]} {m[3]}:{m[4]} UTC)" if m else name
