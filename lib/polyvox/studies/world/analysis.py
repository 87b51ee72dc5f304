"""What the Part IV chapter (the miniature replication) computes from a recorded world run, shared with the
findings summary on the intro page, so that both state one verdict by one rule.

- :func:`read_log`: a trainer log (``train_log.jsonl`` / ``heldout_trajectory.jsonl``) as its last
  attempt, in both layouts a run folder can hold: GRPO now keeps an interrupted attempt's logs beside
  the new one (``<name>.attempt-<n>.jsonl``); older recordings appended a restarted attempt to the same
  file (a step that goes back marks it);
- :func:`collapse`: the collapse rules (a final run of steps with no readable answer, or far below the
  accuracy before it);
- :func:`sign_verdict`, :func:`points`: the verdict an interval allows and its sentence;
- :func:`problem_differences`, :func:`paired_diff`, :func:`level_verdicts`: think − panel per problem,
  with a bootstrap over problems, per level and overall (one seed);
- :func:`across_seeds`, :func:`gain_across_seeds`, :func:`heldout_units`: across-seed intervals, a
  percentile bootstrap over seeds, then problems (or held-out samples within their level, where only
  per-level rates were logged), within the quantity's range by construction (:mod:`.inference`);
- :func:`think_minus_panel`, :func:`rl_runs`, :func:`hillclimb`: the chapter's comparisons across seeds,
  each a :class:`~.inference.Comparison` (interval, per-seed and pooled tests, sign test, minimum
  detectable effect); :func:`tests`: all of them with one Holm correction, for the chapter and findings;
- :func:`sweep`, :func:`first_cap_table`, :func:`band_stability`: the chapter's tables.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from ... import metrics
from . import inference as I
from . import layout
from .logs import COLLAPSE_WINDOW, collapse, collapse_step, read_log  # noqa: F401 - for the chapter
from .inference import ALPHA, POWER, Comparison, Interval, Units, family_table  # noqa: F401 - for the chapter
from .run_tables import (ARMS, VERSION_KEYS, band_stability, bands, dead_levels, environment,  # noqa: F401
                         launch_sessions, records, rerun_jobs, session_label)

SYSTEMS = ("tiny-panel", "tiny-think")
LEVEL = 0.95
# hill-climb settings that must match between the arms for the comparison to be matched
RECIPE_KEYS = ("group_size", "prompts_per_step", "lora_rank", "learning_rate", "max_completion_length", "heldout_problems",
               "heldout_samples", "eval_every", "beta", "temperature")


# ---------------------------------------------------------------- run folder

def manifest(folder: str | Path) -> dict:
    return json.loads((Path(folder) / "manifest.json").read_text())


def _number(p: Path) -> int:
    return int(p.name.split("-", 1)[1])  # seed-3 -> 3, cap-512 -> 512


def seeds(root: str | Path) -> list[int]:
    """The RL seeds of a world run (its ``seed-<k>`` folders)."""
    return sorted(_number(p) for p in Path(root).glob("seed-*"))


def caps(root: str | Path, seed: int) -> list[int]:
    """The token caps a seed was evaluated at (its ``eval/cap-<n>`` folders)."""
    return sorted(_number(p) for p in (Path(root) / f"seed-{seed}" / "eval").glob("cap-*"))


def sweep_seed(caps_by_seed: dict[int, list[int]]) -> int:
    """The seed evaluated at the most caps (the cap sweep's seed)."""
    return max(caps_by_seed, key=lambda k: len(caps_by_seed[k]))


_EVALS: dict[tuple, pd.DataFrame] = {}  # graded evaluations read in this process, by file and its stat


def _graded(folder: Path) -> pd.DataFrame:
    """One graded evaluation as a frame, read once per process while its file (plain or gzipped) is unchanged:
    the chapter reads each seed's evaluation in five places (the family, the first-cap table, the sweep, the
    room per level, the power table); a new frame each call."""
    from ... import runs
    from ...jsonl import stored

    path = stored(folder / runs.GRADED)
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:  # missing: the reader says so in one line
        key = None
    if key is None or key not in _EVALS:
        df = runs.graded_samples(folder)
        df["level"] = df.level.astype(str)
        if key is None:
            return df
        if len(_EVALS) >= 256:
            _EVALS.pop(next(iter(_EVALS)))
        _EVALS[key] = df
    return _EVALS[key].copy()


def load_eval(root: str | Path, seed: int, cap: int) -> dict[str, pd.DataFrame]:
    """Graded samples of both systems at one seed and cap; ``level`` as text (1 … 5 and "olympiad")."""
    return {s: _graded(layout.eval_folder(root, seed, cap, s)) for s in SYSTEMS}


# ---------------------------------------------------------------- verdicts

def sign_verdict(lo: float, hi: float, up: str, down: str, neither: str) -> str:
    """The verdict an interval allows: ``up`` if it lies above 0, ``down`` if below, ``neither`` if it holds 0."""
    return up if lo > 0 else down if hi < 0 else neither


def points(m: float, lo: float, hi: float, what: str = "95% interval") -> str:
    """A difference of rates in points with its interval: ``+5.3 points (95% interval +2.8 to +7.9)``."""
    return f"{100 * m:+.1f} points ({what} {100 * lo:+.1f} to {100 * hi:+.1f})"


def problem_differences(a: pd.DataFrame, b: pd.DataFrame) -> np.ndarray:
    """Per-problem accuracy b − a on the problems both systems saw."""
    pa, pb = (df.groupby("problem_id").correct.mean() for df in (a, b))
    return (pb - pa).dropna().to_numpy()


def paired_diff(a: pd.DataFrame, b: pd.DataFrame, n_boot: int = 2000) -> tuple[float, float, float]:
    """Per-problem accuracy b − a: mean and percentile bootstrap interval over problems."""
    return metrics.bootstrap_ci(problem_differences(a, b), n_boot=n_boot, seed=0)


VERDICT_WORDS = ("tiny-think higher", "tiny-panel higher", "no detectable difference")
# the words of a verdict across seeds (Comparison.verdict adds "not detectable across seeds" and the MDE to a null)
ACROSS_WORDS = ("tiny-think higher", "tiny-panel higher", "no difference established")


def level_verdicts(ev: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per level and overall ("all"): think − panel, its bootstrap interval over problems, its verdict and
    its minimum detectable effect (80% power, α = 0.05, from the standard error of the mean per-problem
    difference; nan where no problem's difference varies). One seed, not corrected for multiplicity."""
    out = []
    for lv in [*sorted(ev["tiny-panel"].level.unique()), "all"]:
        pick = [df if lv == "all" else df[df.level == lv] for df in (ev["tiny-panel"], ev["tiny-think"])]
        m, lo, hi = paired_diff(*pick)
        d = problem_differences(*pick)
        se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else 0.0
        out.append({"level": lv, "think − panel": m, "low": lo, "high": hi, "verdict": sign_verdict(lo, hi, *VERDICT_WORDS),
                    "MDE (80% power)": min(I.z_sum() * se, 1.0) if se > 0 else np.nan})
    return pd.DataFrame(out).set_index("level")


from .pilot import HIGH as _HIGH, LOW as _LOW  # noqa: E402 - issue 21's rule: levels outside [20 %, 80 %]

ROOM = (_LOW, _HIGH)  # a level whose accuracy lies outside this for both systems, on one side, leaves little room


def level_room(root: str | Path, seed_list, cap: int, room=ROOM) -> pd.DataFrame:
    """Per level (and "all"): each system's accuracy over every seed's samples at ``cap`` and whether the level can
    show a difference — not when both systems lie above ``room[1]`` (a ceiling) or both below ``room[0]`` (a
    floor); ``why`` says which. Issue 21's rule: a level outside [20 %, 80 %] is dropped or redesigned, with its
    reason (:data:`ROOM`, the pilot's bounds)."""
    frames = {s: pd.concat([load_eval(root, k, cap)[s] for k in seed_list]) for s in layout.SYSTEMS}
    rows = []
    for lv in [*sorted(frames[layout.SYSTEMS[0]].level.unique()), "all"]:
        acc = {s: float((df if lv == "all" else df[df.level == lv]).correct.mean()) for s, df in frames.items()}
        hi, lo = all(a > room[1] for a in acc.values()), all(a < room[0] for a in acc.values())
        why = (f"both above {room[1]:.0%}" if hi else f"both below {room[0]:.0%}" if lo else "")
        rows.append({"level": lv, **acc, "can move": not (hi or lo), "why": why})
    return pd.DataFrame(rows).set_index("level")


def across_seeds(groups, combine=None, n_boot: int = I.N_BOOT, bounds=(-1.0, 1.0)) -> Interval:
    """The chapter's across-seed interval: percentile bootstrap over seeds, then problems (95%);
    unpacks as (mean, low, high)."""
    return I.seeds_problems(groups, combine=combine, n_boot=n_boot, level=LEVEL, bounds=bounds)


def _gain(s, e):
    return e - s


def gain_across_seeds(starts, ends, n: int | None = None, n_boot: int = I.N_BOOT) -> Interval:
    """end − start across seeds: ``starts``/``ends`` are each seed's :class:`Units` (held-out outcomes) or,
    where only overall rates were logged, rates of ``n`` samples (the bootstrap redraws each seed's
    samples at both evaluations)."""
    as_u = (lambda x: x) if n is None else (lambda x: metrics.outcomes_of(x, n))
    return across_seeds([(as_u(s), as_u(e)) for s, e in zip(starts, ends)], combine=_gain, n_boot=n_boot)


def heldout_units(row, cfg: dict) -> Units:
    """One held-out evaluation of a trainer log as outcomes: each level's samples (problems × samples
    split equally over the logged levels), 0/1 from the level's rate, stratified by level."""
    n = cfg["heldout_problems"] * cfg["heldout_samples"]
    levels = row.get("per_level")
    try:
        if not levels or n % len(levels):
            raise ValueError(f"{n} held-out samples do not split equally over the levels")
        return I.level_units(levels, n // len(levels))
    except ValueError:  # levels of unequal sizes (not the pipeline's held-out sets): the overall rate, unstratified
        return Units(metrics.outcomes_of(row["heldout_mean"], n))


def gain_comparison(name: str, seed_list, starts, ends, n_boot: int = I.N_BOOT, n_perm: int = I.N_PERM) -> Comparison:
    """end − start across seeds from each seed's held-out :class:`Units`: the bootstrap interval, each
    seed's and the pooled stratified permutation test (labels permuted within seed and level)."""
    pairs = list(zip(starts, ends))
    return Comparison(name, across_seeds(pairs, combine=_gain, n_boot=n_boot), list(seed_list),
                      [I.permutation_test([p], n_perm=n_perm, seed=i) for i, p in enumerate(pairs)],
                      I.permutation_test(pairs, n_perm=n_perm), PERMUTATION, n_perm)


def difference_comparison(name: str, seed_list, diffs, n_boot: int = I.N_BOOT, n_perm: int = I.N_PERM) -> Comparison:
    """A paired per-problem difference across seeds: the bootstrap interval, each seed's and the pooled
    sign-flip test over problems."""
    return Comparison(name, across_seeds(diffs, n_boot=n_boot), list(seed_list),
                      [I.sign_flip_test([d], n_perm=n_perm, seed=i) for i, d in enumerate(diffs)],
                      I.sign_flip_test(diffs, n_perm=n_perm), SIGN_FLIP, n_perm)


# how the chapter names the interval in prose (seeds_problems: the percentile interval, widened to the t interval's
# half-width over the seeds' values, then clipped to the range the quantity can take)
ACROSS = "bootstrap over seeds and problems, widened to the t interval over seeds"
ACROSS_SAMPLES = "bootstrap over seeds and held-out samples within their level, widened to the t interval over seeds"
PERMUTATION = "pooled permutation test (labels permuted within seed and level)"  # how the tests are named in prose
SIGN_FLIP = "pooled paired test (sign flips of every seed's per-problem differences)"


# ---------------------------------------------------------------- the chapter's comparisons

def first_cap_table(root: str | Path, seed_list, cap: int) -> tuple[pd.DataFrame, dict[str, list[np.ndarray]]]:
    """Per seed and system at one cap: accuracy with Wilson and bootstrap intervals and the cap-hit rate,
    and a row ``think − panel`` (per-problem difference, bootstrap over problems); and, per system and
    for ``think − panel``, each seed's per-problem values (for :func:`across_seeds`)."""
    rows, groups = [], {s: [] for s in (*SYSTEMS, "think − panel")}
    for k in seed_list:
        ev = load_eval(root, k, cap)
        for s, df in ev.items():
            n, c = len(df), int(df.correct.sum())
            lo, hi = metrics.wilson_interval(c, n)
            per_problem = df.groupby("problem_id").correct.mean().to_numpy()
            groups[s].append(per_problem)
            _, blo, bhi = metrics.bootstrap_ci(per_problem, n_boot=2000, seed=0)
            rows.append({"seed": k, "system": s, "problems": df.problem_id.nunique(), "samples": n, "accuracy": c / n,
                         "Wilson low": lo, "Wilson high": hi, "bootstrap low": blo, "bootstrap high": bhi,
                         "cap-hit rate": metrics.cap_hit_rate(df.finish_reason)})
        d = problem_differences(ev["tiny-panel"], ev["tiny-think"])
        groups["think − panel"].append(d)
        m, lo, hi = metrics.bootstrap_ci(d, n_boot=2000, seed=0)
        rows.append({"seed": k, "system": "think − panel", "accuracy": m, "bootstrap low": lo, "bootstrap high": hi})
    return pd.DataFrame(rows).astype({"problems": "Int64", "samples": "Int64"}), groups


def think_minus_panel(root: str | Path, seed_list, cap: int, n_boot: int = I.N_BOOT,
                      n_perm: int = I.N_PERM) -> tuple[pd.DataFrame, Comparison]:
    """Per seed at ``cap``: think − panel (per-problem accuracy) with its bootstrap interval over problems
    and its sign-flip p (unadjusted); and the comparison across seeds (:func:`difference_comparison`)."""
    rows, groups = [], []
    for k in seed_list:
        d = problem_differences(*load_eval(root, k, cap).values())
        groups.append(d)
        rows.append({"seed": k, **dict(zip(("think − panel", "low", "high"), metrics.bootstrap_ci(d, n_boot=2000, seed=0)))})
    comp = difference_comparison(f"think − panel at {cap} tokens", seed_list, groups, n_boot, n_perm)
    return pd.DataFrame(rows).assign(p=comp.p_seed), comp


def sweep(root: str | Path, seed: int, cap_list) -> tuple[pd.DataFrame, dict[int, dict[str, pd.DataFrame]]]:
    """Accuracy, accuracy on uncut samples and cap-hit rate per cap, system and level (and "all"), one seed."""
    evs = {c: load_eval(root, seed, c) for c in cap_list}
    rows = []
    for c, ev in evs.items():
        for s, df in ev.items():
            for lv, g in [*df.groupby("level"), ("all", df)]:
                uncut = g[g.finish_reason != "length"]
                rows.append({"cap": c, "system": s, "level": lv, "accuracy": g.correct.mean(),
                             "accuracy uncut": uncut.correct.mean() if len(uncut) else np.nan,
                             "cap-hit rate": metrics.cap_hit_rate(g.finish_reason)})
    return pd.DataFrame(rows), evs


def rl_run(root: str | Path, seed_list, arm: str = "panel", n_boot: int = I.N_BOOT, n_perm: int = I.N_PERM) -> dict:
    """One arm's RL (easy then hard stage) over every seed: held-out trajectories and training logs (last
    attempts), the number of attempts, the RL config, held-out accuracy at the start and the end across seeds,
    the gain (a :class:`Comparison`; outcomes per level from the logged rates) and the collapsed runs
    (seed → (step, rule), :func:`collapse`). The folders are the design's (:mod:`.layout`): ``panel-rl`` in
    the panel-only design, ``rl-<arm>`` in the matched one."""
    root = Path(root)
    traj, logs, attempts = {}, {}, {}
    for k in seed_list:
        folder = layout.rl_folders(root, k)[arm]
        traj[k], attempts[k] = read_log(folder, "heldout_trajectory.jsonl")
        logs[k] = read_log(folder, "train_log.jsonl")[0]
    cfg = manifest(layout.rl_folders(root, seed_list[0])[arm])["config"]
    n = cfg["heldout_problems"] * cfg["heldout_samples"]
    ends = pd.DataFrame({"seed": list(seed_list), "start": [traj[k].heldout_mean.iloc[0] for k in seed_list],
                         "end": [traj[k].heldout_mean.iloc[-1] for k in seed_list],
                         "end step": [int(traj[k].step.iloc[-1]) for k in seed_list]})
    start = [heldout_units(traj[k].iloc[0], cfg) for k in seed_list]
    end = [heldout_units(traj[k].iloc[-1], cfg) for k in seed_list]
    return {"arm": arm, "traj": traj, "logs": logs, "attempts": attempts, "config": cfg, "heldout_n": n, "ends": ends,
            "start": across_seeds(start, n_boot=n_boot, bounds=(0, 1)), "end": across_seeds(end, n_boot=n_boot, bounds=(0, 1)),
            "gain": gain_comparison(rl_key(arm), seed_list, start, end, n_boot, n_perm),
            "restarted": [k for k in seed_list if attempts[k] > 1],
            "collapsed": {k: c for k in seed_list if (c := collapse(logs[k])) is not None}}


def panel_rl(root: str | Path, seed_list, n_boot: int = I.N_BOOT, n_perm: int = I.N_PERM) -> dict:
    """The panel-format RL of every seed (:func:`rl_run` of the panel arm)."""
    return rl_run(root, seed_list, "panel", n_boot, n_perm)


def rl_runs(root: str | Path, seed_list, n_boot: int = I.N_BOOT, n_perm: int = I.N_PERM) -> dict[str, dict]:
    """:func:`rl_run` of every arm the run trained by RL from tiny-base: the panel arm alone in the panel-only
    design, both arms in the matched one."""
    arms = layout.rl_folders(root, seed_list[0])
    return {arm: rl_run(root, seed_list, arm, n_boot, n_perm) for arm in arms}


GAIN_GAP = "think − panel hill-climb gain"  # the family's name of the difference between the arms' gains
# the family's name of the step-0 gap: every seed's climb starts from the first seed's adapter of its arm, so its
# "seeds" are held-out samplings of one pair of adapters, not replications of the RL that made them
START_GAP = "step-0 gap (one adapter pair)"
LATE = 3  # evaluations at the end of a climb whose mean gives the gain less sensitive to one noisy endpoint
T_OVER_SEEDS = "t-test over seeds (each seed's difference of gains)"
PAIRED_GAIN = ("paired over problems: each held-out problem's share of correct samples at the endpoint minus at "
               "step 0 (sample i of a problem draws the same seed at every evaluation)")


def _gain_gap(panel_start, panel_end, think_start, think_end):
    return (think_end - think_start) - (panel_end - panel_start)


def climb_endpoint_evals(root: str | Path, seed_list) -> int:
    """The climbs' endpoint as the run declared it before it ran: the mean of the last k held-out evaluations (the
    ``climb`` section's ``endpoint_evals`` in every climb stage's settings); 1 (the last evaluation) for a run
    whose scale has no such section. Refuses climbs that declared different endpoints."""
    found = set()
    for a in ARMS:
        for k in seed_list:
            f = Path(root) / f"seed-{k}" / f"hillclimb-{a}" / "stage.json"
            settings = json.loads(f.read_text()).get("settings", {}) if f.is_file() else {}
            found.add(int((settings.get("climb") or {}).get("endpoint_evals", 1)))
    if len(found) != 1:
        raise ValueError(f"{root}: the climbs declared different endpoints {sorted(found)}")
    return found.pop()


def endpoint_gain(t: pd.DataFrame, k: int) -> float:
    """The mean held-out accuracy of the last ``k`` evaluations after step 0 minus step 0's."""
    if len(t) < 2 or int(t.step.iloc[0]) != 0:
        raise ValueError("a climb's held-out trajectory must start at step 0 and hold a later evaluation")
    return float(t.heldout_mean.iloc[1:].iloc[-k:].mean() - t.heldout_mean.iloc[0])


def per_problem_gain(t: pd.DataFrame, k: int) -> pd.Series | None:
    """Each held-out problem's share of correct samples, mean of the last ``k`` evaluations after step 0, minus its
    share at step 0 (indexed by problem id, sorted); None where an evaluation did not log each problem's correct
    samples (recordings before commit 02ca956) or the evaluations differ in their problems."""
    if "per_problem_correct" not in t or t.per_problem_correct.isna().any():
        return None
    rows = [pd.Series(r.per_problem_correct, dtype=float) / float(r.samples) for r in t.itertuples()]
    ids = set(rows[0].index)
    if any(set(r.index) != ids for r in rows):
        return None
    later = pd.concat(rows[1:][-k:], axis=1).mean(axis=1)
    return (later - rows[0]).sort_index()


def step0_shares(t: pd.DataFrame) -> pd.Series | None:
    """Each held-out problem's share of correct samples at step 0 (None without per-problem records)."""
    if "per_problem_correct" not in t or not isinstance(t.per_problem_correct.iloc[0], dict):
        return None
    r = t.iloc[0]
    return (pd.Series(r.per_problem_correct, dtype=float) / float(r.samples)).sort_index()


def hillclimb(root: str | Path, seed_list, n_boot: int = I.N_BOOT, n_perm: int = I.N_PERM) -> dict:
    """RL of each arm on its own band, every seed: trajectories, logs, configs, the gains table, collapsed runs by
    the collapse rule, per arm the gain across seeds as recorded (a :class:`Comparison`, collapsed runs included)
    and without the collapsed runs (an :class:`Interval`; an arm every run of which collapsed has none), the
    panel − thinking gap at step 0 and the difference between the arms' gains, think − panel (:data:`GAIN_GAP`).

    The gain is the run's declared endpoint (:func:`climb_endpoint_evals`: the mean of the last k evaluations)
    minus step 0. Where every evaluation logged each problem's correct samples (``paired``), every comparison is
    paired over problems (:data:`PAIRED_GAIN`): a seed's value is the mean of its per-problem gains (for the gap,
    of the per-problem differences between the arms' gains, the arms sharing the held-out problems), tested by sign
    flips in each seed and pooled (:data:`SIGN_FLIP`) — the evaluations of one climb share their problems and
    sampling seeds, so treating them as independent samples would overstate a gain's noise. Otherwise (older
    recordings: per-level rates only) the endpoint is the last evaluation, each evaluation's samples are treated
    as independent outcomes, and the tests are the label permutation and, for the gap, a t-test over seeds.

    The gains table: start (step 0), last (the last evaluation), end (the endpoint), gain (end − start, the
    comparison's), gain at the last evaluation, the share of all-equal training groups."""
    root = Path(root)
    traj, logs = {a: {} for a in ARMS}, {a: {} for a in ARMS}
    for a in ARMS:
        for k in seed_list:
            folder = root / f"seed-{k}" / f"hillclimb-{a}"
            traj[a][k] = read_log(folder, "heldout_trajectory.jsonl")[0]
            logs[a][k] = read_log(folder, "train_log.jsonl")[0]
    cfg = {a: manifest(root / f"seed-{seed_list[0]}" / f"hillclimb-{a}")["config"] for a in ARMS}
    n = cfg["panel"]["heldout_problems"] * cfg["panel"]["heldout_samples"]
    declared = climb_endpoint_evals(root, seed_list)
    per_problem = {a: {k: per_problem_gain(t, declared) for k, t in traj[a].items()} for a in ARMS}
    starts = {a: {k: step0_shares(t) for k, t in traj[a].items()} for a in ARMS}
    paired = (all(v is not None for a in ARMS for v in per_problem[a].values())
              and len({tuple(v.index) for a in ARMS for v in per_problem[a].values()}) == 1)
    k_end = declared if paired else 1
    gains = pd.DataFrame([{"arm": a, "seed": k, "start": t.heldout_mean.iloc[0], "last": t.heldout_mean.iloc[-1],
                           "end": t.heldout_mean.iloc[0] + endpoint_gain(t, k_end), "gain": endpoint_gain(t, k_end),
                           "gain, last evaluation": endpoint_gain(t, 1),
                           "groups with equal rewards": logs[a][k].frac_groups_all_equal.mean()}
                          for a in ARMS for k, t in traj[a].items()])
    collapsed = {(a, k): c for a in ARMS for k in seed_list if (c := collapse(logs[a][k])) is not None}  # (step, rule)
    kept = gains[[(r.arm, r.seed) not in collapsed for r in gains.itertuples()]]
    if paired:
        units = {a: {k: Units(per_problem[a][k].to_numpy()) for k in seed_list} for a in ARMS}
        across = {a: difference_comparison(gain_key(a), seed_list, [units[a][k] for k in seed_list], n_boot, n_perm)
                  for a in ARMS}
        across_kept = {a: across_seeds([units[a][k] for k in g.seed], n_boot=n_boot) for a, g in kept.groupby("arm")}
        gap_units = [Units((per_problem["think"][k] - per_problem["panel"][k]).to_numpy()) for k in seed_list]
        gain_gap = difference_comparison(GAIN_GAP, seed_list, gap_units, n_boot, n_perm)
        start_units = [Units((starts["panel"][k] - starts["think"][k]).to_numpy()) for k in seed_list]
        start_gap = difference_comparison(START_GAP, seed_list, start_units, n_boot, n_perm)
    else:
        units = {a: {k: (heldout_units(t.iloc[0], cfg[a]), heldout_units(t.iloc[-1], cfg[a])) for k, t in traj[a].items()}
                 for a in ARMS}
        across = {a: gain_comparison(gain_key(a), seed_list, *zip(*units[a].values()), n_boot, n_perm)
                  for a in ARMS}
        across_kept = {a: gain_across_seeds(*zip(*[units[a][k] for k in g.seed]), n_boot=n_boot)
                       for a, g in kept.groupby("arm")}
        gap = [(units["think"][k][0], units["panel"][k][0]) for k in seed_list]  # panel − think at step 0
        quads = [(*units["panel"][k], *units["think"][k]) for k in seed_list]  # the arms' gains side by side
        gap_iv = across_seeds(quads, combine=_gain_gap, n_boot=n_boot)
        gain_gap = Comparison(GAIN_GAP, gap_iv, list(seed_list),
                              [I.bootstrap_z_test(q, _gain_gap, n_boot, seed=i) for i, q in enumerate(quads)],
                              I.t_test_over_seeds(gap_iv.per_seed), T_OVER_SEEDS, n_perm, monte_carlo=False)
        start_gap = Comparison(START_GAP, across_seeds(gap, combine=_gain, n_boot=n_boot), list(seed_list),
                               [I.permutation_test([p], n_perm=n_perm, seed=i) for i, p in enumerate(gap)],
                               I.permutation_test(gap, n_perm=n_perm), PERMUTATION, n_perm)
    return {"traj": traj, "logs": logs, "config": cfg, "heldout_n": n, "gains": gains, "kept": kept,
            "collapsed": collapsed, "gain": across, "gain_kept": across_kept, "gain_gap": gain_gap,
            "start_gap": start_gap, "endpoint_evals": k_end, "endpoint_declared": declared, "paired": paired,
            "per_problem": per_problem if paired else None,
            "smoke_fallback": [f"{a} seed {k}" for a in ARMS for k in seed_list
                               if (root / f"seed-{k}" / f"hillclimb-{a}" / "SMOKE_BAND_WAS_EMPTY").exists()]}


def start_adjusted_gap(climb: dict, level: float = LEVEL) -> dict | None:
    """think − panel hill-climb gain with the arms' starting points made alike (descriptive, outside the family).

    A gain is bounded by the room above its start, and the arms' climbs start from different accuracies, so the raw
    difference of their gains mixes the format with the room. Each held-out problem's step-0 share (correct samples
    of m at step 0: m + 1 strata) sets its stratum; per seed, the adjusted gap is Σ_s w_s (mean think gain in s −
    mean panel gain in s) over the strata both arms hold in that seed, w_s the pooled share of problems (both arms,
    every seed) in stratum s, renormalised over those strata — direct standardisation to one mix of starts. Also per
    seed think − panel at the endpoint itself. Each is summarised across seeds by a t interval clipped to
    [−1, 1] and a t-test over the seeds' values (both descriptive). Returns {"per_seed": seed → adjusted gap,
    "mean", "low", "high", "p", "mde" (the verdicts' formula; None without spread), "endpoint": {per_seed, interval, p}, "strata": a table per stratum and arm (problems over
    every seed, mean gain)}; None unless the climbs are paired (:func:`hillclimb`)."""
    if not climb.get("paired"):
        return None
    seeds_ = list(climb["traj"]["panel"])
    m = int(climb["config"]["panel"]["heldout_samples"])
    start = {a: {k: step0_shares(climb["traj"][a][k]) for k in seeds_} for a in ARMS}
    gains = climb["per_problem"]
    pooled = pd.concat([start[a][k] for a in ARMS for k in seeds_])
    weight = (pooled * m).round().astype(int).value_counts(normalize=True)
    adjusted, rows = {}, []
    for k in seeds_:
        by = {a: pd.DataFrame({"s": (start[a][k] * m).round().astype(int), "g": gains[a][k]}).groupby("s").g.mean()
              for a in ARMS}
        common = sorted(set(by["panel"].index) & set(by["think"].index))
        w = weight.reindex(common).fillna(0.0)
        adjusted[k] = float(((by["think"].reindex(common) - by["panel"].reindex(common)) * w).sum() / w.sum())
    for a in ARMS:
        frame = pd.concat([pd.DataFrame({"s": (start[a][k] * m).round().astype(int), "g": gains[a][k]}) for k in seeds_])
        for s, g in frame.groupby("s"):
            rows.append({"start (correct of m)": f"{s}/{m}", "arm": ARMS[a], "problems (all seeds)": len(g),
                         "mean gain": float(g.g.mean())})
    end = {k: float(climb["gains"].set_index(["arm", "seed"]).loc[("think", k), "end"]
                    - climb["gains"].set_index(["arm", "seed"]).loc[("panel", k), "end"]) for k in seeds_}

    def summary(values: dict) -> dict:
        v = np.array(list(values.values()), dtype=float)
        mean = float(v.mean())
        half = float(stats.t.ppf((1 + level) / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan")
        return {"per_seed": values, "mean": mean, "low": max(-1.0, mean - half), "high": min(1.0, mean + half),
                "p": I.t_test_over_seeds(v) if len(v) > 1 else float("nan")}

    from .design_tables import verdicts_mde

    return {**summary(adjusted), "mde": verdicts_mde(adjusted.values()), "endpoint": summary(end),
            "strata": pd.DataFrame(rows).pivot(index="start (correct of m)", columns="arm",
                                               values=["problems (all seeds)", "mean gain"])}


# ---------------------------------------------------------------- the family of tests

def common_caps(root: str | Path, seed_list) -> list[int]:
    """The token caps every seed was evaluated at."""
    out = sorted(set.intersection(*(set(caps(root, k)) for k in seed_list)))
    if not out:
        raise ValueError("no token cap is shared by every seed")
    return out


def cap_key(cap: int) -> str:
    """The family's name of think − panel at ``cap`` tokens."""
    return f"think − panel at {cap:,} tokens"


def rl_key(arm: str) -> str:
    """The family's name of an arm's RL gain from tiny-base (``panel`` / ``think``)."""
    return "panel RL gain" if arm == "panel" else f"{ARMS[arm]} RL gain"


def bold_verdict(c, said: str) -> str:
    """A verdict's sentence in bold on the page — a direction established across seeds or in every seed, or a null
    with its MDE — and plain for a direction on the pooled test alone or an undecided interval."""
    return said if c.kind() in ("pooled only", "interval only") else f"**{said}**"


def gain_key(arm: str) -> str:
    """The family's name of an arm's hill-climb gain (``panel`` / ``think``)."""
    return f"hill-climb gain, {ARMS[arm]} arm"


def tests(root: str | Path, seed_list, n_boot: int = I.N_BOOT, n_perm: int = I.N_PERM) -> dict:
    """Every comparison the chapter and the findings summary state. ``tests``, the Holm family (one correction over
    every seed's and the pooled test of each): think − panel at the smallest and the largest cap every seed shares
    (:func:`cap_key`), each arm's hill-climb gain as recorded (:func:`gain_key`) and the difference between the
    arms' gains (:data:`GAIN_GAP`) — the comparisons the design was built to answer. ``descriptive`` (outside the
    family, p values unadjusted): each arm's RL gain from the untrained tiny-base (:func:`rl_key`: it monitors
    training, from a start outside the issue's 20–80 % on most levels, and compares nothing) and the step-0 gap
    (:data:`START_GAP`: five samplings of one adapter pair, so it measures sampling alone); putting them in the
    family would multiply every p of the comparisons that matter by the number of tests they add. Also ``caps``
    (the caps compared), ``per_seed`` (cap → :func:`think_minus_panel`'s table, with each seed's Holm-adjusted p),
    ``rl`` (arm → :func:`rl_run`), ``panel_rl``, ``hillclimb`` (their dicts) and ``design`` (:func:`.layout.of`)."""
    shared = common_caps(root, seed_list)
    compared = sorted({shared[0], shared[-1]})
    rls, climb = rl_runs(root, seed_list, n_boot, n_perm), hillclimb(root, seed_list, n_boot, n_perm)
    fam, per_seed = {}, {}
    for cap in compared:
        per_seed[cap], fam[cap_key(cap)] = think_minus_panel(root, seed_list, cap, n_boot, n_perm)
    fam.update({gain_key(a): climb["gain"][a] for a in ARMS})
    fam[GAIN_GAP] = climb["gain_gap"]
    I.holm_family(fam)
    for cap in compared:
        per_seed[cap]["p (Holm)"] = fam[cap_key(cap)].p_seed_holm
    descriptive = {**{rl_key(a): r["gain"] for a, r in rls.items()}, START_GAP: climb["start_gap"]}
    return {"tests": fam, "descriptive": descriptive, "caps": compared, "per_seed": per_seed, "panel_rl": rls["panel"],
            "rl": rls, "hillclimb": climb, "design": layout.of(root)}


# the words a descriptive comparison's row carries instead of a verdict of the family
DESCRIPTIVE_LABELS = {START_GAP: "one adapter pair: sampling only"}
RL_LABEL = "monitors training (from an untrained start)"


def descriptive_labels(descriptive: dict) -> dict[str, str]:
    """Each descriptive comparison's label in the chapter's table: the step-0 gap's, and every RL gain's."""
    return {name: DESCRIPTIVE_LABELS.get(name, RL_LABEL) for name in descriptive}


# ---------------------------------------------------------------- descriptive views (outside the family)

def movable_difference(root: str | Path, seed_list, cap: int, levels, n_boot: int = I.N_BOOT) -> Interval | None:
    """think − panel at ``cap`` on ``levels`` alone (the levels :func:`level_room` says can move), per seed the
    mean per-problem difference on those levels, across seeds by the chapter's interval. Descriptive: not a test
    of the Holm family (the levels are chosen on the same samples). None when no level is given."""
    levels = [str(lv) for lv in levels]
    if not levels:
        return None
    diffs = []
    for k in seed_list:
        ev = load_eval(root, k, cap)
        diffs.append(problem_differences(*(df[df.level.isin(levels)] for df in ev.values())))
    return across_seeds(diffs, n_boot=n_boot)


LOSS_FLAG = 0.20  # a held-out fall this far below the start is flagged: twice the 10-point climb gain the design
# was to detect (power.CLIMB_GAIN), and about three times the 95 % band of a difference of two 400-sample held-out
# points (±6.9 points at 50 %), so that a flagged fall is not sampling noise
BREAKDOWN = 0.5  # a training step whose batch accuracy falls below this share of the step before is a breakdown


def point_difference_se(p: float, n: int) -> float:
    """The binomial standard error of the difference of two independent held-out points of ``n`` samples each at
    accuracy ``p``: √(2 p (1 − p) / n) — the sampling noise of a gain (end − start) or of a change between two
    evaluations."""
    return math.sqrt(2 * p * (1 - p) / n)


def heldout_dips(traj: dict, frac: float = 0.5, drop: float = LOSS_FLAG, n: int | None = None) -> pd.DataFrame:
    """Falls on the held-out set: per seed (``traj``: seed → held-out trajectory), the lowest held-out accuracy at
    any evaluated step after step 0, its step, the start and the end, and three flags: ``dip`` (below ``frac`` of
    the start: a near-collapse), ``large loss`` (at least ``drop`` below the start, :data:`LOSS_FLAG`) and, given the
    ``n`` samples of one evaluation, ``below start`` (below the start by more than the 95 % band of a difference of
    two points, :func:`point_difference_se`: for a run from an untrained start, which should only rise). The
    collapse rules (:func:`collapse`) read training batches only; this reads the held-out points."""
    rows = []
    z = float(stats.norm.ppf(0.975))
    for k, t in traj.items():
        later = t.iloc[1:]
        if later.empty:
            continue
        i = later.heldout_mean.to_numpy().argmin()
        start, low = float(t.heldout_mean.iloc[0]), float(later.heldout_mean.iloc[i])
        band = z * point_difference_se(start, n) if n else float("nan")
        rows.append({"seed": k, "start": start, "lowest": low, "at step": int(later.step.iloc[i]),
                     "end": float(t.heldout_mean.iloc[-1]), "dip": bool(low < frac * start),
                     "large loss": bool(start - low >= drop - 1e-12), "below start": bool(start - low > band)})
    return pd.DataFrame(rows, columns=["seed", "start", "lowest", "at step", "end", "dip", "large loss", "below start"])


def batch_breakdowns(log: pd.DataFrame, frac: float = BREAKDOWN) -> pd.DataFrame:
    """Transient breakdowns in a training log: every step whose batch accuracy fell below ``frac`` of the step
    before it (step, accuracy before, accuracy at the step)."""
    acc, steps = log.accuracy.to_numpy(dtype=float), log.step.to_numpy()
    hit = np.flatnonzero(acc[1:] < frac * acc[:-1]) + 1
    return pd.DataFrame({"step": steps[hit].astype(int), "before": acc[hit - 1], "after": acc[hit]},
                        columns=["step", "before", "after"])


def climb_stability(climb: dict) -> pd.DataFrame:
    """Per arm of :func:`hillclimb`: how much the held-out accuracy moves between consecutive evaluations against
    what sampling alone would move it — the sd of the changes between consecutive evaluations (every seed, pooled;
    sample sd) and of those after each run's first change (the rise from step 0 is the climb's trend: an sd over it
    measures the rise, not an oscillation), the largest change, the evaluations' spacing in steps, the arm's mean held-out accuracy p, the
    binomial sd of a difference of two points at p (:func:`point_difference_se`) and their ratio; the range over
    seeds of the within-run sd of the evaluations after step 0; and the climbs with a transient breakdown in their
    training batches (:func:`batch_breakdowns`), with the deepest one."""
    rows = []
    n = climb["heldout_n"]
    for a, runs in climb["traj"].items():
        changes = np.concatenate([np.diff(t.heldout_mean.to_numpy(dtype=float)) for t in runs.values()])
        # without each run's first change: the rise from step 0 is the climb's trend, not an oscillation
        later = np.concatenate([np.diff(t.heldout_mean.to_numpy(dtype=float))[1:] for t in runs.values()])
        spacing = sorted({int(x) for t in runs.values() for x in np.diff(t.step.to_numpy())})
        p = float(np.mean([t.heldout_mean.mean() for t in runs.values()]))
        within = [float(t.heldout_mean.iloc[1:].std(ddof=1)) for t in runs.values() if len(t) > 2]
        broke = {k: batch_breakdowns(climb["logs"][a][k]) for k in runs}
        broke = {k: b for k, b in broke.items() if len(b)}
        deepest = min(((k, r) for k, b in broke.items() for r in b.itertuples()), key=lambda x: x[1].after / x[1].before,
                      default=None)
        sd = float(changes.std(ddof=1)) if len(changes) > 1 else float("nan")
        binom = point_difference_se(p, n)
        rows.append({"arm": a, "evaluations": len(next(iter(runs.values()))), "every (steps)": spacing[0] if spacing else None,
                     "sd of consecutive changes": sd, "largest change": float(np.abs(changes).max()) if len(changes) else float("nan"),
                     "p": p, "binomial sd of a difference": binom, "ratio": sd / binom if binom > 0 else float("nan"),
                     "sd after the first change": float(later.std(ddof=1)) if len(later) > 1 else float("nan"),
                     "ratio after the first change": (float(later.std(ddof=1)) / binom
                                                      if len(later) > 1 and binom > 0 else float("nan")),
                     "within-run sd, lowest": min(within) if within else float("nan"),
                     "within-run sd, highest": max(within) if within else float("nan"),
                     "climbs with a breakdown": len(broke), "climbs": len(runs),
                     "deepest breakdown": None if deepest is None else
                     {"seed": deepest[0], "step": int(deepest[1].step), "before": float(deepest[1].before),
                      "after": float(deepest[1].after)}})
    return pd.DataFrame(rows).set_index("arm")


def gain_noise(climb: dict, level: float = 0.95) -> pd.DataFrame:
    """Per arm: the yardstick of a climb gain's sampling noise — a gain is the difference of two held-out points of
    ``heldout_n`` samples, so its standard error at the arm's step-0 accuracy p is :func:`point_difference_se`, its
    95 % band ± z · se — and how many seeds' gains lie outside that band (the climb moved the policy beyond
    sampling), with the smallest and largest |gain| among them and their signs."""
    z = float(stats.norm.ppf((1 + level) / 2))
    rows = []
    for a, g in climb["gains"].groupby("arm", sort=False):
        p = float(g.start.mean())
        band = z * point_difference_se(p, climb["heldout_n"])
        out = g[g.gain.abs() > band]
        rows.append({"arm": a, "p": p, "se": band / z, "band": band, "seeds": len(g), "outside": len(out),
                     "smallest outside": float(out.gain.abs().min()) if len(out) else float("nan"),
                     "largest outside": float(out.gain.abs().max()) if len(out) else float("nan"),
                     "up": int((out.gain > 0).sum()), "down": int((out.gain < 0).sum())})
    return pd.DataFrame(rows).set_index("arm")


def end_troughs(climb: dict, arm: str, level: float = 0.95) -> pd.DataFrame:
    """The climbs of ``arm`` whose last held-out evaluation fell below the one before it by more than the 95 % band
    of a difference of two points (:func:`point_difference_se` at the earlier point): a last evaluation read in a
    trough. Per such seed: the two evaluations with their steps, the gain at the last evaluation and the gain at the
    run's endpoint (:func:`hillclimb`'s ``gain``; the same when the endpoint is the last evaluation)."""
    z = float(stats.norm.ppf((1 + level) / 2))
    g = climb["gains"][climb["gains"].arm == arm].set_index("seed")
    rows = []
    for k, t in climb["traj"][arm].items():
        if len(t) < 3:
            continue
        before, last = float(t.heldout_mean.iloc[-2]), float(t.heldout_mean.iloc[-1])
        if before - last > z * point_difference_se(before, climb["heldout_n"]):
            rows.append({"seed": k, "step before": int(t.step.iloc[-2]), "before": before,
                         "last step": int(t.step.iloc[-1]), "last": last,
                         "gain, last evaluation": float(g.loc[k, "gain, last evaluation"]),
                         "gain (endpoint)": float(g.loc[k, "gain"])})
    return pd.DataFrame(rows, columns=["seed", "step before", "before", "last step", "last", "gain, last evaluation",
                                       "gain (endpoint)"])


def first_batches(root: str | Path, climb: dict, seed_list, steps: int = 5) -> pd.DataFrame | None:
    """The band against what the climbs' trainer saw, per arm: the problems in the band in both draws (what every
    climb trains on), their mean success rate over both draws and the share of all-equal groups of the climb's group
    size expected on them (:func:`.inference.all_equal_expected`: the posterior given both draws' counts, a beta prior
    fitted per level, so that the selection of these problems on the same draws does not bias it); then, from the
    climbs' training logs (every seed), the all-equal groups at climb step 1 — sampled before any update, so from
    the policy the band was drawn on — as counts with a Wilson interval, the batch accuracy at step 1 with a t
    interval over seeds, and the mean all-equal share and accuracy at each of the first ``steps`` steps and over the
    whole climb. ``agree``: the expected share lies in step 1's interval and the band's mean rate in the batch
    accuracy's. None without a second draw."""
    root = Path(root)
    if not (root / "bands-redraw").exists():
        return None
    rows = []
    for a in ARMS:
        one, two = (pd.DataFrame(records(root / d / a / "per_problem.jsonl")) for d in ("bands", "bands-redraw"))
        j = one.merge(two[["uid", "n_correct", "n_samples"]], on="uid", suffixes=("", " redraw"))
        g1, g2 = j.n_samples.to_numpy(), j["n_samples redraw"].to_numpy()
        both = ((j.n_correct > 0) & (j.n_correct < g1) & (j["n_correct redraw"] > 0) & (j["n_correct redraw"] < g2)).to_numpy()
        k, n = (j.n_correct + j["n_correct redraw"]).to_numpy(), int(g1[0] + g2[0])
        group = int(climb["config"][a]["group_size"])
        expected = I.all_equal_expected(k, n, group, j.get("source")) if len(j) else np.array([])
        logs = [climb["logs"][a][s] for s in seed_list]
        first = [lg[lg.step == lg.step.min()].iloc[0] for lg in logs]
        groups = int(climb["config"][a]["prompts_per_step"])
        equal = int(round(sum(float(r.frac_groups_all_equal) * groups for r in first)))
        lo, hi = metrics.wilson_interval(equal, groups * len(first))
        acc = np.array([float(r.accuracy) for r in first])
        half = (float(stats.t.ppf(0.975, len(acc) - 1) * acc.std(ddof=1) / math.sqrt(len(acc)))
                if len(acc) > 1 else float("nan"))
        row = {"arm": ARMS[a], "in both draws": int(both.sum()),
               "mean p, both draws": float((k[both] / n).mean()) if both.any() else float("nan"),
               "all-equal expected": float(expected[both].mean()) if both.any() else float("nan"),
               "all-equal at step 1": equal / (groups * len(first)), "groups at step 1": groups * len(first),
               "all-equal low": lo, "all-equal high": hi,
               "batch accuracy at step 1": float(acc.mean()), "accuracy low": max(0.0, acc.mean() - half),
               "accuracy high": min(1.0, acc.mean() + half)}
        for st in range(2, steps + 1):
            at = [lg[lg.step == st] for lg in logs]
            row[f"all-equal at step {st}"] = float(np.mean([x.frac_groups_all_equal.iloc[0] for x in at if len(x)])) \
                if any(len(x) for x in at) else float("nan")
        row["all-equal, whole climb"] = float(np.mean([lg.frac_groups_all_equal.mean() for lg in logs]))
        row["agree"] = bool(lo <= row["all-equal expected"] <= hi
                            and row["accuracy low"] <= row["mean p, both draws"] <= row["accuracy high"])
        rows.append(row)
    return pd.DataFrame(rows).set_index("arm")


def study_climb(data_dir: str | Path) -> dict | None:
    """The study's own climb (Part I's RL follow-up on its variance band, ``multipersona/reports/
    olympiad_panel_only``): its held-out gain (last − first evaluation), last evaluated step, evaluation spacing,
    learning rate, steps and starting model as its records give them; None when the records are not there."""
    from ..panel import published

    try:
        traj = published.heldout_trajectory(data_dir)
    except (OSError, ValueError):
        return None
    cfg = traj.attrs.get("summary", {}).get("config", {})
    steps = traj.step.to_numpy()
    return {"gain": float(traj.heldout_mean.iloc[-1] - traj.heldout_mean.iloc[0]), "last step": int(steps[-1]),
            "every (steps)": int(np.diff(steps).min()) if len(steps) > 1 else None,
            "learning_rate": cfg.get("learning_rate"), "max_steps": cfg.get("max_steps"), "model": cfg.get("model")}


def identical_completions(root: str | Path, seed: int, cap_a: int, cap_b: int) -> dict[str, tuple[int, int]]:
    """Per system: how many of one seed's samples are the same text at two caps (same problem and sample index),
    and how many samples there are. Samples drawn with the same sampler seed are identical until the smaller cap
    cuts one: the larger cap's evaluation then reproduces the smaller's."""
    a, b = load_eval(root, seed, cap_a), load_eval(root, seed, cap_b)
    out = {}
    for s in SYSTEMS:
        m = a[s][["problem_id", "sample_index", "completion"]].merge(
            b[s][["problem_id", "sample_index", "completion"]], on=["problem_id", "sample_index"])
        out[s] = (int((m.completion_x == m.completion_y).sum()), len(m))
    return out


def past_position(root: str | Path, seed_list, cap: int, position: int) -> pd.DataFrame:
    """Per level (and "all") and system: the share of the evaluation's answers, every seed, whose prompt plus
    completion runs past token ``position`` (tiny-base's pretraining row length: positions beyond it were never
    trained on before RL)."""
    frames = {s: pd.concat([load_eval(root, k, cap)[s] for k in seed_list]) for s in SYSTEMS}
    rows = {}
    for s, df in frames.items():
        past = (df.prompt_tokens + df.completion_tokens) > position
        rows[s] = {**past.groupby(df.level).mean().to_dict(), "all": float(past.mean())}
    return pd.DataFrame(rows).rename_axis("level")


def join_and(items) -> str:
    """``0``, ``0 and 4``, ``0, 3 and 4``."""
    items = [str(x) for x in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""


def level_name(lv) -> str:
    """A level in prose: ``level 3``, or a named level as it is (``olympiad``)."""
    return f"level {lv}" if str(lv).isdigit() else str(lv)


def level_list(levels) -> str:
    """Levels in prose: ``levels 1–5``, ``levels 1, 3 and olympiad``, ``level 2``, ``olympiad``."""
    nums = sorted(int(x) for x in map(str, levels) if x.isdigit())
    named = [str(x) for x in levels if not str(x).isdigit()]
    if len(nums) > 2 and nums == list(range(nums[0], nums[-1] + 1)):
        head = [f"{nums[0]}–{nums[-1]}"]
    else:
        head = [str(x) for x in nums]
    parts = head + named
    said = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return (f"level{'s' if len(nums) > 1 or (nums and named) or len(head) == 1 and '–' in head[0] else ''} " if nums else "") + said


def start_levels(rls: dict, low: float | None = None, high: float | None = None) -> pd.DataFrame:
    """Each RL arm's held-out accuracy at step 0 per level, the mean over seeds (``rls``: arm → :func:`rl_run`),
    and whether it lies outside [``low``, ``high``] (default :data:`ROOM`, the issue's 20–80 % rule)."""
    low, high = ROOM[0] if low is None else low, ROOM[1] if high is None else high
    rows = []
    for a, r in rls.items():
        per = pd.DataFrame([t.iloc[0].per_level for t in r["traj"].values() if isinstance(t.iloc[0].get("per_level"), dict)])
        for lv, v in per.mean().items():
            rows.append({"arm": a, "level": str(lv), "at step 0": float(v), "outside": not low <= v <= high})
    return pd.DataFrame(rows, columns=["arm", "level", "at step 0", "outside"])
