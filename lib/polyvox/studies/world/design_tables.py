"""What a run of the matched design (issue 21) did, read from its records for the chapter to print:

- :func:`recipe_differences`: every field in which the two arms' RL runs differ, seed by seed, from the RL
  manifests the runs wrote (not from the scale: what ran), and whether the arms are matched — the same
  recipe in every field but the format and its reward (:data:`FORMAT_FIELDS`);
- :func:`pilot_table`: the pilot's answer lengths, cap hits, format-valid rates and starting accuracies
  per arm and level, the cap it derives and the caps the stages used;
- :func:`cap_hits`: the share of answers cut by the cap in every stage, the RL runs' and climbs' held-out
  evaluations included, against :data:`CAP_HIT_LIMIT`;
- :func:`climb_design`: each hill-climb's band (both draws, the problems in both, Jaccard), its held-out
  levels, the reasons the others were dropped, and the levels' accuracy at step 0 on the held-out set;
- :func:`commits`, :func:`dirty`: the code commits every stage record of the run was made at, and which ran with
  uncommitted changes; :func:`scale_differences`: the arms' differences as the scale builds them, problem ids
  included (the manifests record counts only);
- :func:`spread` and :func:`power_table`: the between-seed spread of the run's own seeds and the designs
  (seeds, held-out problems) :mod:`.power` derives from it, with each comparison's minimum detectable effect
  at the run's size.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ...jsonl import read_json
from ...stages import STAGE_RECORD
from . import layout, power
from .pilot import logged_cap_hits
from .logs import read_log
from .run_tables import ARMS

FORMAT_FIELDS = ("arm", "reward")  # the fields that name the format and its format reward
PER_RUN_FIELDS = ("out", "init_adapter", "seed")  # differ by construction (each run its folder), not recipe
CAP_HIT_LIMIT = 0.01  # issue 21: cap-hit rates stay below 1 % in every stage


def _json(path: Path) -> dict:
    return read_json(path)  # strict: a damaged record is one line naming the file


def stage_record(root: str | Path, stage: str, seed: int | None = None) -> dict:
    """A stage's record: ``stage.json`` where the folder hosts a GRPO run (its manifest.json is GRPO's), else
    ``manifest.json``."""
    folder = Path(root) / (f"seed-{seed}/{stage}" if seed is not None else stage)
    return _json(folder / STAGE_RECORD) if (folder / STAGE_RECORD).is_file() else _json(folder / "manifest.json")


def recipe_differences(root: str | Path, seed_list) -> tuple[pd.DataFrame, bool]:
    """(every differing field per seed: seed, field, panel, think; matched) from the two arms' RL manifests.
    ``matched``: in every seed the arms differ in :data:`FORMAT_FIELDS` only."""
    rows = []
    for k in seed_list:
        cfg = {a: _json(f / "manifest.json")["config"] for a, f in layout.rl_folders(root, k).items()}
        for key in sorted(set(cfg["panel"]) | set(cfg["think"])):
            if key in PER_RUN_FIELDS:
                continue
            a, b = cfg["panel"].get(key), cfg["think"].get(key)
            if key == "stages":  # the manifests record each stage's problem count; ids: scale_differences
                a = [(s["name"], s["steps"], s.get("problems")) for s in a]
                b = [(s["name"], s["steps"], s.get("problems")) for s in b]
            if a != b:
                rows.append({"seed": k, "field": key, "panel": str(a), "think": str(b)})
    df = pd.DataFrame(rows, columns=["seed", "field", "panel", "think"])
    return df, set(df.field) <= set(FORMAT_FIELDS)


def matched(root: str | Path, seed_list) -> bool:
    """Whether the run is of the matched design and its arms' RL manifests differ in the format and its reward
    alone (:func:`recipe_differences`): the one rule by which the chapter, the findings and the intro say
    "matched"."""
    return layout.of(root) == layout.MATCHED and recipe_differences(root, seed_list)[1]


def scale_differences(root: str | Path) -> list[str]:
    """What differs between the two arms' RL configs as the pipeline builds them from the run's scale (its root
    manifest), problem ids included (:func:`.arms.arm_differences`): the manifests record problem counts only,
    so this is where "same data" is checked."""
    from .arms import arm_differences

    m = _json(Path(root) / "manifest.json")
    s = {**m["settings"], "name": m["settings"].get("name") or m.get("scale")}
    return arm_differences(s)


def recipe(root: str | Path, seed: int) -> dict:
    """The panel arm's RL config of one seed (the shared recipe, when :func:`recipe_differences` says matched)."""
    return _json(layout.rl_folders(root, seed)["panel"] / "manifest.json")["config"]


def pilot_table(root: str | Path) -> tuple[pd.DataFrame, dict]:
    """Per arm and level: samples, starting accuracy with its Wilson interval, format-valid rate, lengths
    (p50/p99/max) and cap-hit rate at the pilot's cap; and the summary (cap, derived cap, levels in range)."""
    summary = _json(Path(root) / "pilot" / "summary.json")
    rows = [{"arm": ARMS[arm], "level": lv, "samples": x["samples"], "accuracy": x["accuracy"],
             "Wilson low": x["wilson"][0], "Wilson high": x["wilson"][1], "format valid": x["format_valid"],
             "p50 tokens": x["lengths"]["p50"], "p99 tokens": x["lengths"]["p99"], "max tokens": x["lengths"]["max"],
             "cap-hit rate": x["cap_hit_rate"]}
            for arm, a in summary["arms"].items() for lv, x in a["levels"].items()]
    return pd.DataFrame(rows), summary


def _sampling_cap(rec: dict) -> int | None:
    """The cap an RL, band or hill-climb stage sampled with (the first of its record's stage caps)."""
    caps = rec.get("stage_caps") or {}
    return next(iter(caps.values()), None)


def cap_hits(root: str | Path, seed_list) -> pd.DataFrame:
    """One row per stage run and arm: its cap, the share of answers cut and whether it is below
    :data:`CAP_HIT_LIMIT` — for RL runs and hill-climbs their training completions and, as rows of their own,
    their held-out evaluations (counted by GRPO in every logged step; an older log: the share of steps whose
    longest completion reached the cap, an upper bound), for the evaluation and the band draws their samples."""
    root = Path(root)
    rows = []

    def add(stage, seed, arm, cap, rate, kind, n):
        rows.append({"stage": stage, "seed": seed, "arm": ARMS.get(arm, arm), "cap": cap, "cap-hit rate": rate,
                     "measured as": kind, "cut": None if rate is None or n is None else int(round(rate * n)), "of": n,
                     "below 1 %": None if rate is None else bool(rate < CAP_HIT_LIMIT)})

    for k in seed_list:
        for st in ("rl-panel", "rl-think", "hillclimb-panel", "hillclimb-think"):
            rec, folder = stage_record(root, st, k), root / f"seed-{k}" / st
            cfg = _json(folder / "manifest.json")["config"]
            kind, arm = st.split("-")
            logged = logged_cap_hits(folder / "train_log.jsonl", cfg["group_size"] * cfg["prompts_per_step"])
            if logged is not None:
                add(kind, k, arm, _sampling_cap(rec), logged[0], "training completions", logged[1])
            else:  # a log from before GRPO counted its cut completions: the bound its longest completions allow
                h = rec["cap_hits"]
                add(kind, k, arm, _sampling_cap(rec), h["cap_hit_rate_upper_bound"],
                    "steps with a completion at the cap (an upper bound)", h["steps"])
            held = logged_cap_hits(folder / "heldout_trajectory.jsonl", cfg["heldout_problems"] * cfg["heldout_samples"])
            if held is not None:
                add(f"{kind} held-out", k, arm, _sampling_cap(rec), held[0], "held-out completions", held[1])
        rec = stage_record(root, "eval", k)
        for key, h in rec["cap_hits"].items():
            cap, arm = key.split("/")
            add("eval", k, arm, int(cap.split("-")[1]), h["cap_hit_rate"], "samples", h["samples"])
    for st in ("bands", "bands-redraw"):
        if (root / st).is_dir():
            rec = stage_record(root, st)
            for arm, h in rec["cap_hits"].items():
                add(st, None, arm, _sampling_cap(rec), h["cap_hit_rate"],
                    "samples", h["samples"])
    return pd.DataFrame(rows).astype({"seed": "Int64", "cut": "Int64"})


def climb_design(root: str | Path, seed_list, low: float = 0.20, high: float = 0.80) -> pd.DataFrame:
    """Per hill-climb run: its band (first draw, second draw, in both, Jaccard), the problems it trained on, its
    held-out levels (chosen on the pool's first draw) and their accuracy at step 0 on the held-out set itself,
    with the levels that fell outside [``low``, ``high``] there, from the stage records and trajectories."""
    from .logs import read_log

    rows = []
    for k in seed_list:
        for arm in ARMS:
            rec = stage_record(root, f"hillclimb-{arm}", k)
            start = read_log(Path(root) / f"seed-{k}" / f"hillclimb-{arm}", "heldout_trajectory.jsonl")[0].iloc[0]
            at0 = {str(lv): float(v) for lv, v in (start.get("per_level") or {}).items()}
            b = rec.get("band") or {}
            rows.append({"arm": ARMS[arm], "seed": k, "band, first draw": b.get("first_draw"),
                         "band, second draw": b.get("second_draw"), "in both": b.get("both"),
                         "Jaccard": b.get("jaccard"), "trained on": rec.get("band_problems"),
                         "held-out levels": ", ".join(rec.get("heldout_levels", [])),
                         "held-out at step 0": ", ".join(f"{lv}: {v:.0%}" for lv, v in at0.items()),
                         "outside [20 %, 80 %] at step 0": ", ".join(lv for lv, v in at0.items()
                                                                    if not low <= v <= high),
                         "levels dropped": "; ".join(f"{lv}: {why}" for lv, why in
                                                     (rec.get("heldout_levels_dropped") or {}).items())})
    return pd.DataFrame(rows)


def commits(root: str | Path) -> dict[str, list[str]]:
    """Each code commit the run's stage records were made at → the records (folders) made at it. The run
    folder's own manifest is left out: it is rewritten by every invocation of the pipeline, also one that
    skips every stage. A commit ending in ``-dirty`` ran with uncommitted changes (:func:`dirty`)."""
    root = Path(root)
    out: dict[str, list[str]] = {}
    for f in sorted(root.rglob("*.json")):
        if f.name not in ("manifest.json", STAGE_RECORD) or f.parent == root:
            continue
        c = _json(f).get("git_commit")
        if c:
            out.setdefault(c, []).append(str(f.parent.relative_to(root)))
    return out


def dirty(made: dict[str, list[str]]) -> list[str]:
    """The commits of :func:`commits` that ran with uncommitted changes."""
    return [c for c in made if c.endswith("-dirty")]


def spread(root: str | Path, seed_list, cap: int) -> dict:
    """The run's own between-seed spread (:func:`.power.between_sd`): each arm's evaluation accuracy at ``cap``,
    the per-seed paired difference think − panel at ``cap`` (the quantity the chapter tests: its values, the
    variance of one problem's difference and the problems per seed) and each arm's hill-climb gain, with p and
    the samples each value rests on."""
    from .analysis import load_eval, read_log

    root = Path(root)
    out = {}
    evs = {k: load_eval(root, k, cap) for k in seed_list}
    for sys_ in layout.SYSTEMS:
        acc = {k: float(evs[k][sys_].correct.mean()) for k in seed_list}
        n = min(len(evs[k][sys_]) for k in seed_list)
        p = sum(acc.values()) / len(acc)
        out[f"{sys_} accuracy"] = {"values": acc, "p": p, "samples": n,
                                   "between_sd": power.between_sd(acc.values(), p * (1 - p) / n)
                                   if len(acc) > 1 else None}
    out["think − panel"] = paired_spread(evs, seed_list)
    from .analysis import climb_endpoint_evals, endpoint_gain

    ends = climb_endpoint_evals(root, seed_list)  # the run's declared endpoint: the mean of the last k evaluations
    for arm in ARMS:
        gains, starts = {}, []
        cfg = _json(root / f"seed-{seed_list[0]}" / f"hillclimb-{arm}" / "manifest.json")["config"]
        m = cfg["heldout_problems"] * cfg["heldout_samples"]
        for k in seed_list:
            t = read_log(root / f"seed-{k}" / f"hillclimb-{arm}", "heldout_trajectory.jsonl")[0]
            gains[k] = endpoint_gain(t, ends)
            starts.append(float(t.heldout_mean.iloc[0]))
        p = sum(starts) / len(starts)
        out[f"{arm} climb gain"] = {"values": gains, "p": p, "samples": m,
                                    "between_sd": power.between_sd(gains.values(), 2 * p * (1 - p) / m)
                                    if len(gains) > 1 else None}
    out["gain gap"] = gain_gap_spread(root, seed_list, ends)
    return out


def gain_gap_spread(root: str | Path, seed_list, ends: int) -> dict | None:
    """think − panel hill-climb gain as the chapter tests it when the climbs logged each problem's outcome (paired
    over problems, the declared endpoint): each seed's mean per-problem difference of the arms' gains, the variance
    of one problem's difference (mean over seeds), the problems per seed, p (the arms' mean step-0 accuracy) and the
    between-seed spread beyond sampling. None for climbs without per-problem records."""
    from .analysis import per_problem_gain

    diffs, starts = {}, []
    for k in seed_list:
        g = {}
        for arm in ARMS:
            t = read_log(Path(root) / f"seed-{k}" / f"hillclimb-{arm}", "heldout_trajectory.jsonl")[0]
            g[arm] = per_problem_gain(t, ends)
            starts.append(float(t.heldout_mean.iloc[0]))
        if g["panel"] is None or g["think"] is None or list(g["panel"].index) != list(g["think"].index):
            return None
        diffs[k] = g["think"] - g["panel"]
    unit_var = sum(float(d.var(ddof=1)) for d in diffs.values()) / len(diffs)
    problems = min(len(d) for d in diffs.values())
    return {"values": {k: float(d.mean()) for k, d in diffs.items()}, "p": sum(starts) / len(starts),
            "problems": problems, "unit_var": unit_var,
            "between_sd": power.between_sd([float(d.mean()) for d in diffs.values()], unit_var / problems)
            if len(diffs) > 1 else None}


def paired_spread(evs: dict, seed_list, levels=None) -> dict:
    """think − panel as the chapter tests it, on ``levels`` (None: every level): each seed's mean per-problem
    difference, the variance of one problem's difference (mean over seeds), the problems per seed, p and the
    between-seed spread beyond sampling (:func:`.power.between_sd`). ``evs``: seed → :func:`.analysis.load_eval`."""
    from .analysis import problem_differences

    pick = (lambda df: df) if levels is None else (lambda df: df[df.level.isin([str(x) for x in levels])])  # noqa: E731
    diffs = {k: problem_differences(*(pick(evs[k][s]) for s in layout.SYSTEMS)) for k in seed_list}
    unit_var = (sum(float(d.var(ddof=1)) for d in diffs.values()) / len(diffs)
                if all(len(d) > 1 for d in diffs.values()) else 0.0)
    problems = min(len(d) for d in diffs.values())
    p = sum(float(pick(evs[k][s]).correct.mean()) for k in seed_list for s in layout.SYSTEMS) / (2 * len(seed_list))
    return {"values": {k: float(d.mean()) for k, d in diffs.items()}, "p": p,
            "samples": min(len(pick(evs[k][layout.SYSTEMS[0]])) for k in seed_list), "problems": problems,
            "unit_var": unit_var,
            "between_sd": power.between_sd([float(d.mean()) for d in diffs.values()], unit_var / problems)
            if len(diffs) > 1 else None}


def verdicts_mde(values) -> float | None:
    """The minimum detectable effect the chapter's verdicts state for a comparison with these per-seed values
    (:func:`.inference.mde`: (z_{1−α/2} + z_{power}) · (t_{k−1}/z) · s/√k, s their sample sd; at most 1); None with
    fewer than two values or no spread."""
    import math

    from scipy import stats

    from .inference import z_sum

    x = pd.Series(list(values), dtype=float)
    s_values = float(x.std(ddof=1)) if len(x) > 1 else float("nan")
    if not len(x) > 1 or not s_values > 0:
        return None
    return min(z_sum() * float(stats.t.ppf(0.975, len(x) - 1)) / float(stats.norm.ppf(0.975)) * s_values
               / math.sqrt(len(x)), 1.0)


def uncertainty(values, effect: float) -> dict:
    """What the spread of ``values`` (one per seed) leaves uncertain: their sample sd with its chi-square 95 %
    interval (:func:`.inference.sd_interval`), the minimum detectable effect (:func:`verdicts_mde`) and that at the
    sd's upper limit (it scales with the sd; at most 1), the t-test's power for ``effect`` at the sd and at its
    upper limit (:func:`.power.t_power`)."""
    from .inference import sd_interval

    x = [float(v) for v in values]
    k = len(x)
    sd = float(pd.Series(x).std(ddof=1)) if k > 1 else float("nan")
    lo, hi = sd_interval(sd, k)
    m = verdicts_mde(x)
    return {"sd": sd, "sd low": lo, "sd high": hi, "MDE": m,
            "MDE, σ's lower limit": None if m is None else min(m * lo / sd, 1.0),
            "MDE, σ's upper limit": None if m is None else min(m * hi / sd, 1.0),
            "power": power.t_power(sd, k, effect), "power, σ's upper limit": power.t_power(hi, k, effect)}


def level_power(root: str | Path, seed_list, cap: int, levels, effect: float = power.ARM_DIFFERENCE) -> dict:
    """think − panel on ``levels`` alone (the levels with room, :func:`.analysis.level_room`): the per-seed values
    and :func:`uncertainty` for ``effect`` — the minimum detectable effect and power the all-level average does not
    show where most levels sit at a ceiling."""
    from .analysis import load_eval

    sp = paired_spread({k: load_eval(root, k, cap) for k in seed_list}, seed_list, levels)
    return {"values": sp["values"], "problems": sp["problems"], "effect": effect,
            **uncertainty(sp["values"].values(), effect)}


def sampling_differences(root: str | Path, seed_list, cap: int) -> pd.DataFrame:
    """Every setting in which the two arms' evaluation manifests at ``cap`` differ (sampling, model, adapter,
    format, grading: the manifests' ``settings`` and grader, flattened to dotted keys), with the seeds it differs
    in; the records, not the code, say what the two arms were sampled with."""
    def flat(d, pre=""):
        out = {}
        for key, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{pre}{key}."))
            else:
                out[f"{pre}{key}"] = v
        return out

    found: dict[str, dict] = {}  # setting → seed → (panel, thinking)
    for k in seed_list:
        man = {s: _json(layout.eval_folder(root, k, cap, s) / "manifest.json") for s in layout.SYSTEMS}
        both = {s: flat({"settings": m.get("settings", {}), "grading": {"grader": m.get("grading", {}).get("grader"),
                                                                        "options": m.get("grading", {}).get("options")}})
                for s, m in man.items()}
        a, b = (both[s] for s in layout.SYSTEMS)
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                found.setdefault(key.removeprefix("settings."), {})[k] = (str(a.get(key)), str(b.get(key)))
    rows = []
    for key, per_seed in found.items():
        pairs = set(per_seed.values())
        pa, th = next(iter(pairs)) if len(pairs) == 1 else ("each seed's own", "each seed's own")
        rows.append({"setting": key, "panel": pa, "thinking": th, "seeds": len(per_seed)})
    return pd.DataFrame(rows, columns=["setting", "panel", "thinking", "seeds"])


def power_display(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`power_table` as the chapter shows it, narrow enough for the page's column: the model's inputs (σ
    between seeds beyond sampling, p, samples per problem) and its own MDE left out, each chi-square range as one
    column of points ("0.9–4.3"), the under-powered flag left to the text (power at the run's size says it)."""
    def span(lo, hi):  # a smoke run's spread may be missing (None) or undefined (NaN): no range
        if lo is None or hi is None or not (lo == lo and hi == hi):
            return "—"
        return f"{100 * lo:.1f}–{100 * hi:.1f}"

    out = table.drop(columns=["σ between seeds", "p", "samples per problem", "MDE at the run's size", "under-powered",
                              "sd low", "sd high", "MDE, σ's lower limit", "MDE, σ's upper limit"])
    out.insert(out.columns.get_loc("sd of per-seed values") + 1, "sd 95% range (points)",
               [span(a, b) for a, b in zip(table["sd low"], table["sd high"])])
    out = out.rename(columns={"MDE, verdicts' formula": "MDE (80% power)"})
    out["MDE range (points)"] = [span(a, b) for a, b in zip(table["MDE, σ's lower limit"], table["MDE, σ's upper limit"])]
    return out


def power_table(root: str | Path, seed_list, cap: int) -> pd.DataFrame:
    """Per comparison of the design (:mod:`.power`): the effect to detect, the spread and p measured on the
    run's own seeds (post hoc: the seeds the chapter then tests), the seeds and held-out problems (at the run's
    samples per problem) 80 % power needs, what the run has, its power there and its minimum detectable effect;
    and, beside it, the minimum detectable effect by the verdicts' formula (:func:`.inference.mde`: (z_{1−α/2} +
    z_{power}) · (t_{k−1}/z) · s/√k, s the sample sd of the per-seed values), so that the two can be compared.
    think − panel is modelled as the chapter tests it: paired per seed (:func:`.power.paired_difference`, the
    spread of the per-seed differences, S − 1 degrees of freedom). The model is conditional on the problem set.
    What the spread of few seeds leaves uncertain (:func:`uncertainty`): the per-seed sd's chi-square 95 % interval,
    the verdicts' minimum detectable effect at its lower and upper limit, and the power at its upper limit."""
    root = Path(root)
    sp = spread(root, seed_list, cap)
    rows = []
    d = sp["think − panel"]
    per_problem_eval = int(_json(layout.eval_folder(root, seed_list[0], cap, layout.SYSTEMS[0]) / "manifest.json")
                           ["settings"]["n"])
    items = [("think − panel", power.paired_difference(d["p"], d["between_sd"] or 0.0, per_problem_eval,
                                                        unit_var=d.get("unit_var")),
              d["between_sd"] or 0.0, d["p"], d.get("problems", d["samples"] // per_problem_eval), per_problem_eval,
              list(d["values"].values()))]
    for arm in ARMS:
        v = sp[f"{arm} climb gain"]
        m = int(_json(root / f"seed-{seed_list[0]}" / f"hillclimb-{arm}" / "manifest.json")["config"]["heldout_samples"])
        items.append((f"hill-climb gain, {ARMS[arm]} arm", power.climb_gain(v["p"], v["between_sd"] or 0.0, samples=m),
                      v["between_sd"] or 0.0, v["p"], v["samples"] // m, m, list(v.get("values", {}).values())))
    gap = sp.get("gain gap")
    if gap is not None:  # the difference between the arms' climb gains, against the climbs' 10-point effect
        m = int(_json(root / f"seed-{seed_list[0]}" / "hillclimb-panel" / "manifest.json")["config"]["heldout_samples"])
        c = power.Comparison("think − panel hill-climb gain", power.CLIMB_GAIN, 1, gap["p"], gap["between_sd"] or 0.0,
                             m, within=2, unit_var=gap["unit_var"])
        items.append(("think − panel hill-climb gain", c, gap["between_sd"] or 0.0, gap["p"], gap["problems"], m,
                      list(gap["values"].values())))
    have = len(seed_list)
    for name, c, sd, p, problems, m, values in items:
        dsg = power.design(c)
        # no variance at all (every outcome 0 or 1 and no spread between seeds): power and MDE say nothing
        estimable = have > 1 and (sd > 0 or 0 < p < 1)
        s_values = float(pd.Series(values, dtype=float).std(ddof=1)) if len(values) > 1 else float("nan")
        verdict_mde = verdicts_mde(values)
        u = uncertainty(values, c.effect) if len(values) > 1 else {}
        pw = power.power(c, have, problems) if estimable else None
        rows.append({"comparison": name, "effect to detect": c.effect, "σ between seeds": sd,
                     "sd of per-seed values": s_values if len(values) > 1 else None,
                     "sd low": u.get("sd low"), "sd high": u.get("sd high"), "p": p,
                     "samples per problem": m, "seeds needed": dsg.seeds if estimable else None,
                     "problems needed": dsg.problems if estimable else None, "seeds run": have, "problems run": problems,
                     "power at the run's size": pw,
                     "power, σ's upper limit": u.get("power, σ's upper limit") if estimable else None,
                     "MDE at the run's size": power.mde(c, have, problems) if estimable else None,
                     "MDE, verdicts' formula": verdict_mde,
                     "MDE, σ's lower limit": u.get("MDE, σ's lower limit") if estimable else None,
                     "MDE, σ's upper limit": u.get("MDE, σ's upper limit") if estimable else None,
                     "under-powered": None if pw is None else bool(pw < power.POWER)})
    return pd.DataFrame(rows)


REPLACED = "replaced-climbs"  # climbs a later recording replaced, kept whole (seed-<k>/hillclimb-<arm>/)
STEP0_FIELDS = ("heldout_mean", "per_level", "mean_completion_tokens", "cap_hits", "per_problem_correct")


def replaced_step0(root: str | Path) -> pd.DataFrame | None:
    """The cross-commit check of re-recorded climbs: each arm's and seed's step-0 held-out evaluation as the replaced
    recording logged it (``replaced-climbs/seed-<k>/hillclimb-<arm>/``, kept whole) beside the one the run holds
    now. Step 0 evaluates the same adapter (the first seed's easy-stage adapter) on the same problems with the same
    sampling seeds, so code that samples and grades alike at both commits gives identical records: ``identical`` is
    True when every field of :data:`STEP0_FIELDS` that both records hold is equal (``fields compared`` says how
    many: the replaced trainer logged no per-problem counts). None when the run has no replaced climbs."""
    old_root = Path(root) / REPLACED
    if not old_root.is_dir():
        return None
    rows = []
    for folder in sorted(old_root.glob("seed-*/hillclimb-*")):
        arm, seed = folder.name.removeprefix("hillclimb-"), int(folder.parent.name.removeprefix("seed-"))
        then = read_log(folder, "heldout_trajectory.jsonl")[0].iloc[0]
        now = read_log(Path(root) / f"seed-{seed}" / f"hillclimb-{arm}", "heldout_trajectory.jsonl")[0].iloc[0]
        shared = [k for k in STEP0_FIELDS if k in then.index and k in now.index and not _missing(then[k])
                  and not _missing(now[k])]
        rows.append({"arm": arm, "seed": seed, "replaced at": str(stage_record(old_root, f"hillclimb-{arm}", seed)
                                                                      .get("git_commit", ""))[:7],
                     "now at": str(stage_record(root, f"hillclimb-{arm}", seed).get("git_commit", ""))[:7],
                     "held-out then": float(then["heldout_mean"]), "held-out now": float(now["heldout_mean"]),
                     "fields compared": len(shared),
                     "identical": bool(shared) and all(then[k] == now[k] for k in shared)})
    return pd.DataFrame(rows)


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and x != x)


def climb_cap_hits(folders) -> dict:
    """Cap hits of hill-climbs from their stage records (``stage.json`` ``cap_hits``: training completions, longest)
    and held-out logs (``heldout_trajectory.jsonl`` ``cap_hits``): climbs, training completions cut / of, held-out
    completions cut / of, the longest training completion and the cap."""
    out = {"climbs": 0, "training cut": 0, "training of": 0, "held-out cut": 0, "held-out of": 0, "longest": 0,
           "cap": None}
    for f in folders:
        rec = _json(Path(f) / STAGE_RECORD)
        hits = rec.get("cap_hits") or {}
        traj = read_log(f, "heldout_trajectory.jsonl")[0]
        cfg = _json(Path(f) / "manifest.json")["config"]
        out["climbs"] += 1
        out["training of"] += int(hits.get("completions", 0))
        out["training cut"] += int(round(hits.get("cap_hit_rate", 0.0) * hits.get("completions", 0)))
        out["longest"] = max(out["longest"], int(hits.get("longest", 0)))
        out["held-out cut"] += int(traj.cap_hits.sum()) if "cap_hits" in traj else 0
        out["held-out of"] += len(traj) * int(cfg["heldout_problems"]) * int(cfg["heldout_samples"])
        out["cap"] = int(cfg["max_completion_length"])
    return out


def commit_spans(root: str | Path, seed_list) -> dict[str, list[str]]:
    """Each stage kind of the run (``rl-panel``, ``eval``, ``hillclimb-think`` …; shared stages by their folder) →
    the code commits its records name, over every seed: a kind with one commit compares its seeds and arms within one
    version of the code."""
    root = Path(root)
    out: dict[str, set] = {}
    for k in seed_list:
        for st in ("rl-panel", "rl-think", "hillclimb-panel", "hillclimb-think"):
            if (root / f"seed-{k}" / st).is_dir():
                out.setdefault(st, set()).add(stage_record(root, st, k).get("git_commit"))
        for f in sorted((root / f"seed-{k}" / "eval").glob("cap-*/*/manifest.json")):
            out.setdefault("eval", set()).add(_json(f).get("git_commit"))
    for st in ("models", "pilot", "bands", "bands-redraw"):
        if (root / st / "manifest.json").is_file():
            out.setdefault(st, set()).add(_json(root / st / "manifest.json").get("git_commit"))
    return {st: sorted(c for c in cs if c) for st, cs in out.items()}
