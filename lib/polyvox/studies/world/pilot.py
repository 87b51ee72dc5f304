"""The pilot (issue 21, items 2–3): answer lengths and accuracies of each arm's starting point, the cap
they imply, and the held-out levels that can move.

The pilot samples both arms' starting point — tiny-base under the panel prompt and under the thinking
chat template, the models RL starts from — at a large cap (the scale's largest evaluation cap) on every
level, and records per arm and level: answer lengths (p50/p90/p99/max completion tokens), the share cut
by the cap, the format-valid rate and the accuracy with its Wilson interval (:func:`summarize`).

Caps. :func:`derive_cap` is the 99th percentile of both arms' answer lengths over every level, rounded
up to a multiple of :data:`CAP_STEP`; :func:`check_caps` refuses, in one line, a scale whose sampling
cap (RL, bands, hill-climbs) or first evaluation cap is below it. When more than 1 % of a pilot's
answers were cut, its lengths are censored and the derived cap is a lower bound: the check says so.

Held-out levels. :func:`choose_levels` keeps the levels on which every arm's starting accuracy lies in
[:data:`LOW`, :data:`HIGH`] and gives each dropped level's reason. Applied to the pilot it describes the
untrained start (tiny-base has not learnt the panel format, so its panel accuracy is near 0); the
hill-climbs apply it to the first band draw, which samples exactly their starting points.

Cap hits per stage (:func:`sample_cap_hits` for sampled runs; :func:`rl_cap_hits` for an RL run: the share
of its completions cut, from the counts GRPO logs in every step and held-out evaluation, :func:`logged_cap_hits`;
for a log from before those counts, the share of steps whose longest completion reached the cap, an upper bound).
"""
from __future__ import annotations

import math

import numpy as np

from ... import formats
from ...jsonl import exists as jsonl_exists
from ...metrics import wilson_interval
from ...records import read_jsonl

LOW, HIGH = 0.20, 0.80  # starting accuracies of a held-out level that can move
CAP_STEP = 64  # caps are rounded up to a multiple of this
CENSORED = 0.01  # more than this share of a pilot's answers cut: its lengths are a lower bound


def level_of(row: dict) -> str:
    meta = row.get("metadata") or {}
    return str(meta.get("level", row["problem_id"].split("-")[0].lstrip("w")))


def _quantiles(lengths) -> dict:
    x = np.asarray(lengths, dtype=float)
    return {"p50": float(np.percentile(x, 50)), "p90": float(np.percentile(x, 90)),
            "p99": float(np.percentile(x, 99)), "max": int(x.max())}


def summarize_rows(rows: list[dict], fmt: str) -> dict:
    """Per level and overall: samples, correct, accuracy and its Wilson interval, lengths, cap hits, format valid."""
    by_level: dict[str, list[dict]] = {}
    for r in rows:
        by_level.setdefault(level_of(r), []).append(r)

    def one(rs: list[dict]) -> dict:
        n, c = len(rs), sum(bool(r["correct"]) for r in rs)
        lo, hi = wilson_interval(c, n)
        return {"samples": n, "correct": c, "accuracy": c / n, "wilson": [lo, hi],
                "lengths": _quantiles([r["completion_tokens"] for r in rs]),
                "cap_hit_rate": sum(r.get("finish_reason") == "length" for r in rs) / n,
                "format_valid": sum(formats.format_valid(fmt, r["completion"]) for r in rs) / n}

    return {"levels": {lv: one(rs) for lv, rs in by_level.items()}, "all": one(rows)}


def summarize(folders: dict, cap: int) -> dict:
    """The pilot's summary from each arm's graded sample folder (``{arm: folder}``) sampled at ``cap``."""
    arms = {arm: summarize_rows(read_jsonl(folder / "graded.jsonl"), arm) for arm, folder in folders.items()}
    return {"cap": cap, "arms": arms, "derived_cap": derive_cap({"cap": cap, "arms": arms})}


def derive_cap(summary: dict, step: int = CAP_STEP) -> int:
    """The 99th percentile of both arms' answer lengths (the largest over arms and levels), rounded up to
    a multiple of ``step``."""
    p99 = max(lv["lengths"]["p99"] for arm in summary["arms"].values() for lv in arm["levels"].values())
    return max(step, int(math.ceil(p99 / step)) * step)


def censored(summary: dict) -> list[str]:
    """The arms and levels whose pilot answers were cut more than :data:`CENSORED` of the time."""
    return [f"{arm} level {lv} ({x['cap_hit_rate']:.1%} cut)" for arm, a in summary["arms"].items()
            for lv, x in a["levels"].items() if x["cap_hit_rate"] > CENSORED]


def stage_caps(s: dict) -> dict:
    """The cap each kind of stage samples with: RL, bands and hill-climbs the sampling cap, the evaluation its
    first cap (the other caps of ``eval.caps`` are a sweep, below or above it on purpose)."""
    return {"sampling.max_tokens (RL, bands, hill-climbs)": s["sampling"]["max_tokens"],
            "eval.caps[0] (evaluation)": s["eval"]["caps"][0]}


def cap_problems(s: dict, summary: dict) -> list[str]:
    """Why the scale's caps do not fit the pilot: one line each (empty when they do)."""
    need = summary["derived_cap"]
    worst = max(((lv["lengths"]["p99"], arm, name) for arm, a in summary["arms"].items()
                 for name, lv in a["levels"].items()))
    out = [f"scale {s['name']!r}: {key} = {cap} is below the pilot's 99th-percentile answer length "
           f"{worst[0]:.0f} tokens ({worst[1]}, level {worst[2]}); set it to {need} or more"
           for key, cap in stage_caps(s).items() if cap < need]
    cut = censored(summary)
    if cut:
        out.append(f"scale {s['name']!r}: the pilot's answers were cut at its cap {summary['cap']} "
                   f"({', '.join(cut[:3])}{' …' if len(cut) > 3 else ''}): its lengths are a lower bound; "
                   "run the pilot at a larger cap")
    return out


def check_caps(s: dict, summary: dict) -> None:
    """Refuse, in one line, a scale whose caps are below the pilot's 99th percentile (see :func:`cap_problems`)."""
    problems = cap_problems(s, summary)
    if problems:
        raise ValueError(problems[0])


def choose_levels(accuracy: dict, low: float = LOW, high: float = HIGH) -> tuple[list[str], dict[str, str]]:
    """The levels on which every arm's starting accuracy lies in [low, high], and each other level's reason.

    ``accuracy``: ``{arm: {level: accuracy}}``; a level missing for an arm is dropped."""
    levels = sorted({lv for acc in accuracy.values() for lv in acc}, key=lambda x: (not str(x).isdigit(), str(x)))
    chosen, dropped = [], {}
    for lv in levels:
        why = []
        for arm, acc in accuracy.items():
            a = acc.get(lv)
            if a is None:
                why.append(f"{arm}: not measured")
            elif a < low:
                why.append(f"{arm} starts at {a:.0%} < {low:.0%}")
            elif a > high:
                why.append(f"{arm} starts at {a:.0%} > {high:.0%}")
        if why:
            dropped[str(lv)] = "; ".join(why)
        else:
            chosen.append(str(lv))
    return chosen, dropped


def pilot_levels(summary: dict, low: float = LOW, high: float = HIGH) -> tuple[list[str], dict[str, str]]:
    """:func:`choose_levels` on the pilot's per-level accuracies."""
    return choose_levels({arm: {lv: x["accuracy"] for lv, x in a["levels"].items()}
                          for arm, a in summary["arms"].items()}, low, high)


def sample_cap_hits(folder) -> dict:
    """The share of a graded sample folder's answers cut by the cap, and their lengths."""
    rows = read_jsonl(folder / "graded.jsonl")
    return {"samples": len(rows), "cap_hit_rate": sum(r.get("finish_reason") == "length" for r in rows) / len(rows),
            "lengths": _quantiles([r["completion_tokens"] for r in rows])}


def logged_cap_hits(log, per_row: int) -> tuple[float, int] | None:
    """(share cut, completions) over a GRPO log's rows that count their cut completions (``cap_hits``: the
    train log's steps, the held-out trajectory's evaluations), ``per_row`` completions each; None when the log
    (plain or stored gzipped) counts none."""
    rows = [r for r in read_jsonl(log) if "cap_hits" in r] if jsonl_exists(log) else []
    if not rows:
        return None
    n = per_row * len(rows)
    return sum(int(r["cap_hits"]) for r in rows) / n, n


def rl_cap_hits(folder, cap: int, per_step: int | None = None) -> dict:
    """An RL run's cap hits from its step log: the share of its completions the cap cut, counted (GRPO logs
    ``cap_hits`` per step; ``per_step`` completions each), and the share of steps whose longest completion
    reached ``cap`` (an upper bound, all a log from before that count allows), with the longest completion."""
    log = folder / "train_log.jsonl"
    steps = [r for r in read_jsonl(log) if "step" in r and "completion_tokens_max" in r] if jsonl_exists(log) else []
    counted = logged_cap_hits(log, per_step) if per_step else None
    exact = {"cap_hit_rate": counted[0], "completions": counted[1]} if counted else {}
    if not steps:
        return {"steps": 0, "steps_at_cap": None, "cap_hit_rate_upper_bound": None, "longest": None, **exact}
    at_cap = sum(int(r["completion_tokens_max"]) >= cap for r in steps)
    return {"steps": len(steps), "steps_at_cap": at_cap, "cap_hit_rate_upper_bound": at_cap / len(steps),
            "longest": max(int(r["completion_tokens_max"]) for r in steps), **exact}


def band_accuracy(rows: list[dict]) -> dict[str, float]:
    """Per-level accuracy of a band draw's per_problem.jsonl rows (source ``level-<L>``)."""
    acc: dict[str, list[int]] = {}
    for r in rows:
        lv = r["source"].removeprefix("level-")
        acc.setdefault(lv, [0, 0])
        acc[lv][0] += int(r["n_correct"])
        acc[lv][1] += int(r["n_samples"])
    return {lv: c / n for lv, (c, n) in acc.items() if n}
