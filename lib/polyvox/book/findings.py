"""The findings summary on the intro page, computed when the book is built.

Each claim of each study gets a status computed from the same records and the same
library functions its chapter uses, with the tolerance stated beside it:

- **reproduced** — recomputed from the published per-problem records, every value within
  ``TOL`` (half a unit of the 4th decimal, the chapters' print precision) of the
  published one;
- **differs by Δ** — recomputed, and the largest difference exceeds the tolerance;
- **withdrawn by its authors** — a correction in ``data/corrections.yml`` with
  ``status: withdrawn``;
- **published only** — the records needed to recompute it were not released; shown as
  published (with an internal-consistency check where the aggregates allow);
- **miniature only** — answered by this book's own miniature runs, not by the study's.

A finding whose records cannot be read is listed with status *not computed* and the
error, never silently dropped.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

TOL = 0.5e-4  # print precision of the chapters' comparison tables (4 decimals)
PP_TOL = 0.005  # percentage points: Part III's recount of a rate published to two decimals
WIN_TOL = 0.05  # Part II: win-rate distance from 50% within which forward and reverse are "indistinguishable"

STATUSES = ("reproduced", "differs", "withdrawn", "published only", "miniature only", "not computed")
STUDIES = {
    "panel": "Part I — a panel of experts trained by RL",
    "personas": "Part II — persona heads, a router, a judge",
    "collab": "Part III — sliced models collaborating",
    "world": "Part IV — the miniature replication",
}


@dataclass
class Finding:
    study: str  # key of STUDIES
    claim: str
    status: str  # one of STATUSES
    detail: str  # what the numbers say, with the tolerance
    chapter: str  # toc entry, e.g. book/panel/accuracy

    def label(self) -> str:
        """The status as a coloured badge (text, so it reads without emoji fonts or colour)."""
        text = {"reproduced": "reproduced", "differs": "differs", "withdrawn": "withdrawn by its authors",
                "published only": "published only", "miniature only": "miniature only",
                "not computed": "not computed"}[self.status]
        return f'<span class="pv-status pv-{self.status.replace(" ", "-")}">{text}</span>'


def _compare(claim: str, chapter: str, diffs, what: str, tol: float = TOL, unit: str = "") -> Finding:
    d = float(np.nanmax(np.abs(np.asarray(diffs, dtype=float))))
    status = "reproduced" if d <= tol else "differs"
    word = "within" if d <= tol else "**outside**"
    return Finding("panel", claim, status, f"{what}: largest |Δ| = {_num(d)}{unit}, {word} the tolerance {tol:g}{unit}",
                   chapter)


def _num(d: float) -> str:
    return "0" if d == 0 else f"{d:.1e}"


def _panel(root: Path) -> list[Finding]:
    from .. import metrics
    from ..studies.panel import published as P

    data = root / "data"
    out = []
    benches = {"math_l5": "MATH-500 level 5", "aime": "AIME 2024 + 2025 (first 10 each)"}
    counts = {(b, s): P.eval_counts(data, b, s) for b in benches for s in ("panel", "thinking")}
    for b, name in benches.items():
        diffs, acc = [], {}
        for s in ("panel", "thinking"):
            df = counts[(b, s)]
            n, c = int(df.n_samples.sum()), int(df.n_correct.sum())
            lo, hi = metrics.wilson_interval(c, n)
            summ = df.attrs["summary"]
            diffs += [c / n - summ["avg_hit_rate"], lo - summ["wilson_ci95"][0], hi - summ["wilson_ci95"][1]]
            acc[s] = c / n
        out.append(_compare(f"Per-sample accuracy on {name}: panel {100 * acc['panel']:.1f}% vs thinking model "
                            f"{100 * acc['thinking']:.1f}%", "book/panel/accuracy", diffs,
                            "accuracy and Wilson bounds recomputed from per-problem counts"))
    tables = P.passk_tables(data)
    sources = {"math50": {s: P.stratified50_counts(data, s) for s in ("panel", "thinking")},
               **{b: {s: counts[(b, s)] for s in ("panel", "thinking")} for b in benches}}
    diffs, rows = [], 0
    for key, pub_rows in tables.items():
        m = sources[key]["panel"].merge(sources[key]["thinking"], on="id", suffixes=("_p", "_t"))
        rec = pd.DataFrame(metrics.passk_crossover_table(m.n_samples_p, m.n_correct_p, m.n_samples_t, m.n_correct_t,
                                                         [r["k"] for r in pub_rows]))
        pub = pd.DataFrame(pub_rows)
        for a, b in (("a_pass_at_k", "panel_pass_at_k"), ("b_pass_at_k", "thinking_pass_at_k"),
                     ("delta_mean", "delta_mean"), ("delta_se", "delta_se"), ("t", "t")):
            diffs += list(rec[a].to_numpy() - pub[b].to_numpy())
        rows += len(pub_rows)
    out.append(_compare(f"The published pass@k tables ({len(tables)} tables, {rows} rows: pass@k of both systems, "
                        "paired difference, se, t)", "book/panel/accuracy", diffs, "recomputed from per-problem counts"))
    diffs = []
    for key in ("math50", "aime"):
        df = P.dispersion(data, key)
        summary, labels = df.attrs["summary"], P.DISPERSION_LABELS[key]
        p = df[df.label == labels["panel"]].set_index("uid")["mean_pairwise_dist"]
        t = df[df.label == labels["thinking"]].set_index("uid")["mean_pairwise_dist"]
        p, t = p.align(t, join="inner")
        d = metrics.paired_difference(p, t)
        pair = summary["paired"][f"{labels['panel']}_minus_{labels['thinking']}"]
        diffs += [p.mean() - summary["by_variant"][labels["panel"]]["mean_pairwise_dist_mean"],
                  t.mean() - summary["by_variant"][labels["thinking"]]["mean_pairwise_dist_mean"],
                  d.mean - pair["mean_pairwise_dist_delta_mean"], d.t - pair["mean_pairwise_dist_t"]]
    out.append(_compare("Per-problem embedding dispersion summary (means, paired difference, t; MATH slice and AIME)",
                        "book/panel/dispersion", diffs, "recomputed from the published per-problem values"))
    tok = P.token_efficiency(data)
    diffs, ratio = [], {}
    for key in ("math", "aime"):
        t = tok[key]
        allp = t["buckets"]["all_paired"]
        for s, tcol, ccol in (("panel", "panel_tokens_mean", "panel_correct_count"),
                              ("thinking", "think_tokens_mean", "thinking_correct_count")):
            diffs.append(allp[tcol] * allp["n"] / t[ccol] - t["cost_per_correct"][f"{s}_tokens_per_correct"])
        ratio[key] = (t["cost_per_correct"]["thinking_tokens_per_correct"]
                      / t["cost_per_correct"]["panel_tokens_per_correct"])
    d = float(np.max(np.abs(diffs)))
    out.append(Finding("panel", f"Tokens per correct sampled answer: thinking model {ratio['math']:.2f}× the panel's "
                       f"(MATH-500 L5), {ratio['aime']:.2f}× (AIME)", "published only",
                       "per-sample token counts were not released; the summary is internally consistent "
                       f"(largest |Δ| = {_num(d)} tokens, tolerance {TOL:g})" if d <= TOL else
                       f"per-sample token counts were not released; the summary is **not** internally consistent "
                       f"(largest |Δ| = {_num(d)} tokens)", "book/panel/length"))
    diffs, vb = [], {}
    for a in ("panel", "thinking"):
        df = P.band_records(data, a)
        band = pd.Series(metrics.variance_band(df.n_correct.to_numpy(), 8)).value_counts()
        pub = df.attrs["summary"]["bands"]
        diffs += [int(band.get(b, 0)) - int(pub.get(b, 0)) for b in metrics.BANDS]
        vb[a] = int(band.get("variance_band", 0))
    out.append(_compare(f"Variance-band sizes on the olympiad pool: panel {vb['panel']}, thinking model {vb['thinking']}",
                        "book/panel/variance_band", diffs, "recomputed from per-problem counts (G = 8)", tol=0,
                        unit=" problems"))
    traj = P.heldout_trajectory(data)
    sizes = P.heldout_sources(data)
    rec = (traj[list(sizes.index)] * sizes).sum(axis=1) / sizes.sum()
    head = traj.attrs["summary"]["headline"]
    gain = 100 * (rec.iloc[-1] - rec.iloc[0])
    pub_gain = head["heldout_absolute_gain_pp"]
    decimals = len(str(pub_gain).split(".")[1]) if "." in str(pub_gain) else 0
    tol_pp = 0.5 * 10 ** -decimals
    f = _compare(f"RL on the panel's band: held-out accuracy {100 * rec.iloc[0]:.0f}% → {100 * rec.iloc[-1]:.0f}% "
                 f"({gain:+.1f} points; one run, one seed)", "book/panel/variance_band",
                 [gain - pub_gain], f"gain recomputed from the per-source trajectory (published to {decimals} "
                 "decimal(s))", tol=tol_pp, unit=" points")
    out.append(f)
    return out


def _withdrawn(root: Path) -> list[Finding]:
    from .render import load_corrections

    out = []
    for c in load_corrections(root):
        if c.get("status") != "withdrawn":
            continue
        study = "panel" if "panel" in c.get("study", "") or any("/panel/" in ch for ch in c["chapters"]) else "panel"
        chapter = c["chapters"][0] if c["chapters"] else "book/corrections"
        out.append(Finding(study, c["claimed"].strip(), "withdrawn",
                           f"{c['date']}: {c['stands'].strip()}", chapter))
    return out


def _personas(root: Path) -> list[Finding]:
    import yaml

    from ..studies.personas import analysis as A

    run = root / "data" / "runs" / "personas-h200"
    published = yaml.safe_load((root / "data" / "personas" / "run21_published.yaml").read_text())
    out = [Finding("personas", f"run21 (forward KL): router heads' win rates, {published['test_prompts']} test prompts, "
                   "LLM judge", "published only", "transcribed from the study's README; per-prompt verdicts were not "
                   "released, and the miniature's numbers are not comparable with them", "book/personas/persona_basis")]
    tallies = json.loads((run / "judge" / "tallies.json").read_text())
    by_name = {t["name"]: t for t in tallies}
    scale = yaml.safe_load((run / "scale.yaml").read_text())
    heads = A.convergence(A.head_training(run, scale["arms"]["losses"], scale["arms"]["seeds"]), loss_drop=0.5)
    failed = {a: (int((~g["trained"]).sum()), len(g)) for a, g in heads.groupby("arm")}
    failed_text = ", ".join(f"{n} of {m} {a}" for a, (n, m) in failed.items())
    for system in ("router_head", "oracle_head"):
        rows = [t["overall"] for name, t in sorted(by_name.items())
                if name.endswith(f": reverse {system} vs forward {system}")]
        if not rows:
            continue
        cat, sentence = A.verdict([r["win_rate"] for r in rows], [r["ci_low"] for r in rows],
                                  [r["ci_high"] for r in rows], WIN_TOL)
        out.append(Finding("personas", f"run22 (reverse KL) against run21 (forward KL), `{system}` — asked by the "
                           "study, never run", "miniature only",
                           f"raw head-to-head over {len(rows)} seeds: {sentence} (tolerance ±{100 * WIN_TOL:.0f} "
                           f"points); heads that did not train (the chapter's loss rule, loss_drop 0.5): {failed_text}"
                           + ("; where one arm's heads failed, the raw verdict is confounded with optimisation — the "
                              "chapter reads it only on heads that trained in both arms"
                              if any(n for n, _ in failed.values()) else ""),
                           "book/personas/persona_basis"))
    return out


def _collab(root: Path) -> list[Finding]:
    from ..studies.collab import analysis as A

    data = root / "data"
    pub = json.loads((data / "collab" / "published.json").read_text())
    audit = json.loads((data / "collab" / "study_audit.json").read_text())
    out = [Finding("collab", f"The study's table ({', '.join(pub['benchmarks'])}): CL above Qwen3-14B", "published only",
                   "accuracy only; the cost formula it states has no numbers beside the rows", "book/collab/audit")]
    src, h = audit["answer_source_counts"], audit["header"]
    n_rows = sum(v["rows"] for v in src.values())
    n_correct = sum(v["correct"] for v in src.values())
    acc = 100 * n_correct / n_rows
    first = src["first_tentative_overlong"]["correct"]
    d = acc - h["em_percent"]
    out.append(Finding("collab", f"MATH headline {h['em_percent']:.2f}% exact match",
                       "reproduced" if abs(d) <= PP_TOL and n_rows == h["problems"] else "differs",
                       f"recounted from the log's rows: {n_correct} of {n_rows} = {acc:.2f}% (Δ {d:+.3f} points, "
                       f"tolerance {PP_TOL} points); but {first} of the {n_correct} correct rows were scored from the "
                       "first tentative answer", "book/collab/audit"))
    run_dir, models_dir = data / "runs" / "collab-h200", data / "models" / "collab-h200"
    runs = A.load(run_dir / "eval")
    systems = {k: v for k, v in {**runs, **A.derived_systems(runs)}.items() if not k.startswith("sample-")}
    sc = A.scores(systems, A.cost_weights(models_dir))
    singles = [k for k in ("solo-small", "solo-mid", "solo-big") if k in sc]
    best = max(singles, key=lambda k: sc[k].correct.mean())
    t = A.paired(sc, "cl", best)
    out.append(Finding("collab", "A collaborating pool beats a single model", "miniature only",
                       f"CL against the most accurate single agent (`{best}`): {t['diff (points)']:+.1f} points at "
                       f"{t['cost ratio A/B']:.2f}× the weighted cost, exact McNemar p = {t['p']:.3f} at α = "
                       f"{A.ALPHA}: {t['verdict']}", "book/collab/miniature"))
    return out


def _side(lo: float, hi: float, up: str, down: str, neither: str) -> str:
    return up if lo > 0 else down if hi < 0 else neither


def _world(root: Path) -> list[Finding]:
    """Part IV's two comparisons, from the recorded runs: the systems at each seed's largest cap, and
    the hill-climb gain per arm; intervals are t-intervals across RL seeds (the chapter's rule)."""
    from .. import metrics, runs
    from ..records import read_jsonl

    w = root / "data" / "runs" / "world"
    seeds = sorted(int(d.name.split("-")[1]) for d in w.glob("seed-*"))
    diffs, caps = [], set()
    for k in seeds:
        cap = max(int(d.name.split("-")[1]) for d in (w / f"seed-{k}" / "eval").glob("cap-*"))
        caps.add(cap)
        acc = {sy: runs.graded_samples(w / f"seed-{k}" / "eval" / f"cap-{cap}" / sy).groupby("problem_id").correct.mean()
               for sy in ("tiny-panel", "tiny-think")}
        diffs.append(float((acc["tiny-think"] - acc["tiny-panel"]).dropna().mean()))
    m, lo, hi = metrics.t_interval(diffs)
    out = [Finding("world", "The panel format against a thinking model under matched training (the study's "
                   "comparison confounded format with post-training)", "miniature only",
                   f"at the largest cap ({'/'.join(map(str, sorted(caps)))} tokens), think − panel {100 * m:+.1f} points "
                   f"(95% t-interval over {len(seeds)} seeds {100 * lo:+.1f} to {100 * hi:+.1f}; per seed "
                   + ", ".join(f"{100 * d:+.1f}" for d in diffs) + "): "
                   + _side(lo, hi, "tiny-think higher", "tiny-panel higher", "no difference distinguishable across seeds"),
                   "book/world/replication")]
    parts = []
    for arm in ("panel", "think"):
        gains, collapsed = [], 0
        for k in seeds:
            traj = [r for r in read_jsonl(w / f"seed-{k}" / f"hillclimb-{arm}" / "heldout_trajectory.jsonl") if "note" not in r]
            log = [r for r in read_jsonl(w / f"seed-{k}" / f"hillclimb-{arm}" / "train_log.jsonl") if "note" not in r]
            gains.append(traj[-1]["heldout_mean"] - traj[0]["heldout_mean"])
            collapsed += len(log) >= 3 and all(r.get("format_valid") == 0 for r in log[-3:])
        gm, glo, ghi = metrics.t_interval(gains)
        parts.append(f"{'thinking' if arm == 'think' else 'panel'} arm {100 * gm:+.1f} points (95% t-interval "
                     f"{100 * glo:+.1f} to {100 * ghi:+.1f}): " + _side(glo, ghi, "a gain", "a loss", "no clear change")
                     + (f", {collapsed} of {len(seeds)} runs collapsed" if collapsed else ""))
    out.append(Finding("world", "RL on each arm's own variance band (the study ran the panel arm only)", "miniature only",
                       "held-out gain over " + f"{len(seeds)} seeds: " + "; ".join(parts), "book/world/replication"))
    return out


def findings(root: Path) -> list[Finding]:
    """Every finding, Part I to IV; a part whose records cannot be read gives one 'not computed' line."""
    out: list[Finding] = []
    for study, fn, chapter in (("panel", _panel, "book/panel/accuracy"), ("panel", _withdrawn, "book/corrections"),
                               ("personas", _personas, "book/personas/persona_basis"),
                               ("collab", _collab, "book/collab/miniature"), ("world", _world, "book/world/replication")):
        try:
            out += fn(root)
        except Exception as exc:  # noqa: BLE001 - the page says which part failed and why, the build goes on
            out.append(Finding(study, f"{fn.__name__.strip('_')} findings", "not computed",
                               f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}", chapter))
    return out


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def findings_markdown(items: list[Finding]) -> str:
    """The summary: one table per study, claim / status / what the records say / chapter."""
    lines = ["Each claim of each study and what the records say about it, computed when this page was built. "
             f"**Reproduced** means every recomputed value is within the stated tolerance of the published one (the "
             f"chapters' print precision, |Δ| ≤ {TOL:g}, unless stated); **withdrawn** claims are from "
             "{doc}`the authors' corrections </book/corrections>`.", ""]
    for study, title in STUDIES.items():
        mine = [f for f in items if f.study == study]
        if not mine:
            continue
        lines += [f"**{title}**", "", "| claim | status | what the records say | chapter |", "|---|---|---|---|"]
        for f in mine:
            lines.append(f"| {_cell(f.claim)} | {f.label()} | {_cell(f.detail)} | {{doc}}`/{f.chapter}` |")
        lines.append("")
    counts = {s: sum(f.status == s for f in items) for s in STATUSES}
    lines.append("In all: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + ".")
    return "\n".join(lines) + "\n"
