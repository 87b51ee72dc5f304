"""What the Part II chapter computes from a recorded personas run beyond the judge's tallies.

- :func:`head_training`: per arm, seed and head, the training loss (first and last steps) and
  the validation score of the selected checkpoint, from ``heads/<arm>-s<seed>/``;
- :func:`convergence`: a stated loss-only rule marking which heads trained (validation is reported
  beside it, never used: it would select on the outcome the arms are compared by), and
  :func:`comparable_types` (preference types whose heads trained, and whose tuned mix behaved, in both arms of a seed);
- :func:`truncation`: per system, arm, seed and prompt, whether the answer hit the generation
  cap (``finish_reason == "length"`` in the ``gen/<unit>/rollouts.jsonl`` the system's answer came
  from);
- :func:`outcomes` / :func:`summarize`: per-prompt judge outcomes of a recorded comparison (from
  the judge's cache, no new calls; the rubric's ``judge/`` or a recorded judge's own folder, e.g. the judge
  model's ``judge-by-model/``) so that win rates can be recomputed on subsets of prompts, with
  a bootstrap CI over prompts or over users (``groups="user"``: a test user writes several prompts);
- :func:`with_correctness`: those outcomes with whether each side's answer has the right number;
- :func:`verdict`: the forward-vs-reverse verdict with a tolerance, as a category and a sentence;
  a seed whose comparison is all ties is reported as uninformative, not counted as "no difference".
Issue 22's records: :mod:`.issue22`; the family, Holm, power and the answer: :mod:`.verdicts`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ... import jsonl, judge, runs, tasks
from ...records import read_jsonl
from . import world as pw

SYSTEMS = ("base", "head_warm", "head_impersonal", "head_concise", "head_thorough",
           "router_head", "router_persona", "oracle_head", "oracle_persona")


# ---------------------------------------------------------------- heads

def head_training(run: str | Path, arms, seeds, window: int = 5) -> pd.DataFrame:
    """One row per (arm, seed, head): selected step and its validation score, loss over the first and
    last ``window`` steps, the final step's loss, mean step seconds."""
    run = Path(run)
    rows = []
    for arm in arms:
        for seed in seeds:
            folder = run / "heads" / f"{arm}-s{seed}"
            m = json.loads((folder / "manifest.json").read_text())
            for pole in pw.POLES:
                h = m["heads"][pole]
                log = pd.DataFrame(read_jsonl(folder / pole / "train_log.jsonl"))
                rows.append({"arm": arm, "seed": seed, "head": pole, "selected step": h["selected_step"],
                             "validation": h["validation"][str(h["selected_step"])],
                             "loss, first steps": float(log["loss"].head(window).mean()),
                             "loss, last steps": float(log["loss"].tail(window).mean()),
                             "final loss": float(log["loss"].iloc[-1]),
                             "top-k mass": float(log["topk_mass"].mean()),
                             "step s": h["step_seconds_mean"]})
    return pd.DataFrame(rows)


def convergence(heads: pd.DataFrame, *, loss_drop: float) -> pd.DataFrame:
    """Mark a head ``trained`` when its loss over the last steps is at most ``1 - loss_drop`` of its
    loss over the first steps. The rule reads the head's own training loss only: its validation
    score is reported (``validation gap to best arm``: the better arm's score for the same pole and
    seed minus this head's) but not used, since a rule that drops the arm with the worse validation
    would select on the outcome the two arms are then compared by."""
    h = heads.copy()
    h["loss ratio (last/first)"] = h["loss, last steps"] / h["loss, first steps"]
    best = h.groupby(["seed", "head"])["validation"].transform("max")
    h["validation gap to best arm"] = best - h["validation"]
    h["trained"] = h["loss ratio (last/first)"] <= 1 - loss_drop + 1e-12
    return h


def comparable_types(conv: pd.DataFrame, seed: int, arms=("forward", "reverse"), strict: bool = False,
                     reached: set[str] | None = None) -> list[str]:
    """Preference types of ``seed`` whose heads trained in every arm. A type's heads are its poles; with
    ``strict`` a mix (which holds all four heads at non-zero weight) needs all four heads trained; with
    ``reached`` (the pairs whose tuned mix met its target in every arm: :func:`.mixes.reached_pairs`) a two-pole
    type also needs its pair in it — a mix that does not show its styles is not that type's head."""
    ok = conv[(conv["seed"] == seed) & conv["arm"].isin(arms)].groupby("head")["trained"].all()
    out = []
    for t in pw.TYPES:
        poles = pw.poles_of(t)
        need = pw.POLES if (strict and len(poles) > 1) else poles
        if all(ok.get(p, False) for p in need) and (reached is None or len(poles) < 2 or t in reached):
            out.append(t)
    return out


# ---------------------------------------------------------------- truncation

def _unit_records(run: Path, unit: str, cache: dict) -> dict:
    """A generation unit's records (:class:`~polyvox.records.Sample`) by prompt id (:func:`polyvox.runs.load`)."""
    if unit not in cache:
        cache[unit] = {r.problem_id: r for r in runs.load(run / "gen" / unit).samples}
    return cache[unit]


def system_units(row: dict, arm: str, seed: int, tuned: bool = False) -> dict[str, str]:
    """The generation unit each system's answer to a systems row came from (as the pipeline assembles them:
    :func:`.steps.systems_rows`); ``tuned``: the run's scale tunes its mixes (:mod:`.mixes`), so a two-pole head is
    the tuned mix's unit ``<arm>-s<seed>-tuned-<pair>``."""
    from .steps import head_unit_name

    prefix = f"{arm}-s{seed}"
    pick, true = row["router_pick"], row["preference"]
    u = {"base": "base"}
    for p in pw.POLES:
        u[f"head_{p}"] = f"{prefix}-{p}"
    u["router_head"] = head_unit_name(prefix, pick, tuned)
    u["router_persona"] = f"card-{pick}" if pick != "none" else "base"
    u["oracle_head"] = head_unit_name(prefix, true, tuned)
    u["oracle_persona"] = f"card-{true}"
    return u


def truncation(run: str | Path, arms, seeds) -> pd.DataFrame:
    """One row per (arm, seed, prompt, system): the unit, its finish reason and ``truncated``
    (finish_reason == "length"). Checks that the unit's text is the systems row's answer."""
    run = Path(run)
    tuned = (yaml.safe_load((run / "scale.yaml").read_text()) or {}).get("mixes") is not None
    cache: dict = {}
    rows = []
    for arm in arms:
        for seed in seeds:
            for r in read_jsonl(run / "systems" / f"{arm}-s{seed}.jsonl"):
                for system, unit in system_units(r, arm, seed, tuned).items():
                    rec = _unit_records(run, unit, cache)[r["prompt_id"]]
                    if rec.completion != r["responses"][system]:
                        raise ValueError(f"{arm}-s{seed} {r['prompt_id']} {system}: answer is not unit {unit}'s")
                    rows.append({"arm": arm, "seed": seed, "prompt_id": r["prompt_id"], "preference": r["preference"],
                                 "router_pick": r["router_pick"], "system": system, "unit": unit,
                                 "finish_reason": rec.finish_reason,
                                 "truncated": rec.finish_reason == "length"})
    return pd.DataFrame(rows)


def unit_cap_hits(run: str | Path) -> pd.DataFrame:
    """Per generation unit: prompts answered and how many hit the token cap."""
    run = Path(run)
    rows = []
    for folder in sorted(p for p in (run / "gen").iterdir() if jsonl.exists(p / runs.ROLLOUTS)):  # plain or shipped .gz
        recs = runs.load(folder).samples
        rows.append({"unit": folder.name, "n": len(recs),
                     "cap hits": sum(r.finish_reason == "length" for r in recs)})
    if not rows:
        raise ValueError(f"{run / 'gen'}: no generation unit (no {runs.ROLLOUTS} or {runs.ROLLOUTS}.gz in any folder)")
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- per-prompt outcomes

def verdicts_folder(judge_) -> str:
    """The run's folder holding ``judge_``'s verdicts: its ``verdicts_folder`` (a recorded judge, e.g. the judge
    model's ``judge-by-model``, :func:`.issue22.model_judge`), else ``judge`` (the scale's judge)."""
    return getattr(judge_, "verdicts_folder", "judge")


_OUTCOMES: dict[tuple, pd.DataFrame] = {}  # outcomes already read in this process, by what they were read from
_OUTCOMES_MAX = 512


def _digest(path: Path) -> str | None:
    """sha256 of a file's bytes; None when there is no such file."""
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def outcomes(run: str | Path, a: str, b: str, judge_) -> pd.DataFrame:
    """Per-prompt outcomes of A (``systems/<file>.jsonl:<system>``, relative to ``run``) against B,
    read from the run's cache of ``judge_``'s verdicts (no new calls): ``judge/`` for the scale's judge, the
    judge's own ``verdicts_folder`` for a recorded one (:func:`verdicts_folder`).

    Read once per process for the same inputs (the chapter reads a comparison up to four times, and each read
    parses the whole verdicts file): remembered by the bytes of both systems files and of the verdicts file
    (their sha256), the specs and the judge's identity, so a changed file is read again; a new frame each call."""
    run = Path(run)
    a_spec, b_spec, folder = str(run / a), str(run / b), run / verdicts_folder(judge_)
    files = [_digest(Path(spec.rpartition(":")[0])) for spec in (a_spec, b_spec)]
    if None in files:  # not a readable FILE:SYSTEM: read as given (polyvox.judge says why it fails)
        return judge.outcomes(a_spec, b_spec, folder, judge_)
    key = (a_spec, b_spec, str(folder), folder.is_dir(), _digest(folder / judge.VERDICTS), *files,
           json.dumps(judge_.identity(), sort_keys=True, default=str))
    if key not in _OUTCOMES:
        if len(_OUTCOMES) >= _OUTCOMES_MAX:
            _OUTCOMES.pop(next(iter(_OUTCOMES)))
        _OUTCOMES[key] = judge.outcomes(a_spec, b_spec, folder, judge_)
    return _OUTCOMES[key].copy()


def summarize(df: pd.DataFrame, n_boot: int = 1000, groups: str | None = None) -> dict:
    """Win rate of A with a bootstrap CI (``polyvox.judge.summarize``): over prompts, or with
    ``groups="user"`` over test users (each user's prompts drawn together); empty subsets give None."""
    if len(df) == 0:
        return {"n": 0, "W": 0, "T": 0, "L": 0, "win_rate": None, "ci_low": None, "ci_high": None,
                **({"clusters": 0} if groups is not None else {})}
    return judge.summarize(df, n_boot=n_boot, groups=groups)


def correct(texts, golds) -> list[bool]:
    """Whether each reply has the right number: graded by the ``personas`` task's grader through
    :func:`polyvox.runs.grade_completions`, the reply read whole as its answer (``bare``: its last
    integer, the rubric's correctness point :func:`polyvox.studies.personas.world.final_integer`; the two
    agree on every answer of the recorded run, ``tests/test_personas_analysis.py``)."""
    task = tasks.get("personas")
    return [g.correct for g in runs.grade_completions(task.grader, texts, [str(g) for g in golds],
                                                      task.grade_options, bare=True)]


def calls_used(run: str | Path, tallies: list[dict], judge_) -> tuple[int, int]:
    """(distinct judge calls the comparisons of ``tallies`` read, calls the verdicts cache holds): a cache may also
    hold calls on answers no comparison reads any more (an earlier generation's), which a count of the cache
    alone would pass off as this page's."""
    from ...judge.records import _calls, call_key, load_cache

    run = Path(run)
    ident, cache = judge_.identity(), load_cache(run / verdicts_folder(judge_), repair=False)
    used = set()
    for t in tallies:
        for p in judge.pairs(str(run / t["a"]), str(run / t["b"])):
            if p.a != p.b:
                used.update(k for k in (call_key(ident, c) for c in _calls(p)) if k in cache)
    return len(used), len(cache)


def with_correctness(run: str | Path, a: str, b: str, judge_) -> pd.DataFrame:
    """:func:`outcomes` plus ``correct_a`` / ``correct_b``: whether each side's answer has the right
    number (:func:`correct`)."""
    run = Path(run)
    o = outcomes(run, a, b, judge_)
    texts = {p.prompt_id: (p.a, p.b, str(p.row.get("gold"))) for p in judge.pairs(str(run / a), str(run / b))}
    ids = list(o["prompt_id"])
    golds = [texts[i][2] for i in ids]
    o["correct_a"] = correct([texts[i][0] for i in ids], golds)
    o["correct_b"] = correct([texts[i][1] for i in ids], golds)
    return o


# ---------------------------------------------------------------- verdict

def verdict(wr, lo, hi, tolerance: float, decisive=None, seeds=None) -> tuple[str, str]:
    """(category, sentence) for reverse-vs-forward win rates of several seeds (reverse's side).

    ``decisive``: per seed, the number of prompts that are not ties (W + L); the sentence states how
    many of them the verdict rests on. A seed with prompts but
    no decisive one (all ties: win rate 50%, CI [50, 50]) says nothing about which arm is better; it
    is named *uninformative (all ties)* and left out of the verdict, never counted as "no
    difference". A seed with no prompts is left out too. On the seeds left:

    ``none``: the mean is within ``tolerance`` of 50% and every CI covers 50%; ``reverse`` /
    ``forward``: every seed on one side of 50% and the mean at least ``tolerance`` from it;
    ``mixed`` otherwise; ``uninformative`` when every seed with prompts is all ties; ``empty`` when
    no seed has prompts. ``seeds``: the seeds' names for the sentence (default 0, 1, …)."""
    seeds = list(seeds) if seeds is not None else list(range(len(wr)))
    missing = lambda w: w is None or (isinstance(w, float) and np.isnan(w))  # noqa: E731
    empty = [i for i, w in enumerate(wr) if missing(w)]
    ties = [i for i, w in enumerate(wr) if not missing(w) and decisive is not None and decisive[i] == 0]
    keep = [i for i in range(len(wr)) if i not in empty and i not in ties]
    names = lambda ix: ", ".join(str(seeds[i]) for i in ix)  # noqa: E731
    notes = ([f"seed{'s' if len(ties) > 1 else ''} {names(ties)} uninformative (all ties)"] if ties else []) + \
            ([f"seed{'s' if len(empty) > 1 else ''} {names(empty)} without prompts"] if empty else [])
    if not keep:
        if ties:
            return "uninformative", "uninformative (all ties)" + (f"; {notes[1]}" if empty else "")
        return "empty", "no prompts left to compare"
    extra = list(notes) + ([f"{len(keep)} of {len(wr)} seeds counted"] if notes else [])
    if decisive is not None:
        d = int(sum(decisive[i] for i in keep))
        extra.insert(0, f"{d} non-tie prompt{'' if d == 1 else 's'} counted")
    note = f" ({'; '.join(extra)})" if extra else ""
    every = "every counted seed" if notes else "every seed"
    wr = np.asarray([wr[i] for i in keep], float)
    lo = np.asarray([lo[i] for i in keep], float)
    hi = np.asarray([hi[i] for i in keep], float)
    mean = wr.mean()
    tol = f"±{100 * tolerance:.0f} points"
    if abs(mean - 0.5) < tolerance and all(a <= 0.5 <= b for a, b in zip(lo, hi)):
        return "none", (f"no difference at this scale: mean {100 * mean:.1f}% is within {tol} of 50% and {every}'s "
                        f"CI includes 50%{note}")
    if (wr > 0.5).all() and mean - 0.5 >= tolerance:
        return "reverse", f"reverse KL better: {every} above 50%, mean {100 * mean:.1f}%{note}"
    if (wr < 0.5).all() and 0.5 - mean >= tolerance:
        return "forward", f"forward KL better: {every} below 50%, mean {100 * mean:.1f}% for reverse{note}"
    return "mixed", (f"no consistent winner: mean {100 * mean:.1f}%, seeds from {100 * wr.min():.1f}% to "
                     f"{100 * wr.max():.1f}% (tolerance {tol}){note}")


# ---------------------------------------------------------------- what the chapter reads per comparison

def tally_index(tallies: list[dict]) -> dict[tuple[str, str], dict]:
    """The run's ``tallies.json`` keyed by (heads, comparison): ``"forward-s0: router_head vs base"`` →
    ``("forward-s0", "router_head vs base")``."""
    return {tuple(t["name"].split(": ", 1)): t for t in tallies}


def seed_stats(run: str | Path, arm: str, comparison: str, seeds, judge_, n_boot: int) -> list[dict]:
    """Per seed, a comparison within one arm (``"router_head vs base"``): counts, win rate and a 95% CI over
    test users, from the judge's cache."""
    a, b = comparison.split(" vs ")
    return [summarize(outcomes(run, f"systems/{arm}-s{sd}.jsonl:{a}", f"systems/{arm}-s{sd}.jsonl:{b}", judge_),
                      n_boot, groups="user") for sd in seeds]


def cut_prompts(trunc: pd.DataFrame, arm: str, seed: int, system: str) -> set:
    """Prompts whose ``system`` answer (``arm``, ``seed``) hit the generation cap (from :func:`truncation`)."""
    t = trunc[(trunc["arm"] == arm) & (trunc["seed"] == seed) & (trunc["system"] == system)]
    return set(t.loc[t["truncated"], "prompt_id"])


def split_rates(run: str | Path, a_spec: str, b_spec: str, cut_a: set, cut_b: set, judge_,
                n_boot: int = 1000) -> tuple[dict, dict, dict]:
    """A comparison's win rate on all prompts, on those where neither side was cut, and on those where
    either was (bootstrap over prompts)."""
    o = outcomes(run, a_spec, b_spec, judge_)
    keep = ~o["prompt_id"].isin(cut_a | cut_b)
    return summarize(o, n_boot), summarize(o[keep], n_boot), summarize(o[~keep], n_boot)


def row_verdict(df: pd.DataFrame, tolerance: float) -> tuple[str, str]:
    """:func:`verdict` of a per-seed table with hidden columns ``_wr``, ``_lo``, ``_hi``, ``_dec`` and ``seed``."""
    return verdict(list(df["_wr"]), list(df["_lo"]), list(df["_hi"]), tolerance, decisive=list(df["_dec"]),
                   seeds=list(df["seed"]))


def head_to_head(run: str | Path, tallies: dict, seeds, judge_, n_boot: int,
                 systems=("router_head", "oracle_head")) -> pd.DataFrame:
    """Reverse-KL systems against forward-KL systems of the same seed, per system and seed: outcomes, win
    rate of reverse with its CI over users and the tally's CI over prompts, the length-controlled rate;
    hidden ``_wr``/``_lo``/``_hi``/``_dec`` for :func:`row_verdict`."""
    rows = []
    for system in systems:
        for sd in seeds:
            t = tallies.get((f"s{sd}", f"reverse {system} vs forward {system}"))
            if t is None:
                continue
            o = summarize(outcomes(run, t["a"], t["b"], judge_), n_boot, groups="user")
            lc = t["length_controlled"]["win_rate"]
            rows.append({"system": system, "seed": sd, "n": o["n"], "users": o["clusters"], "W": o["W"], "T": o["T"],
                         "L": o["L"], "reverse wins %": round(100 * o["win_rate"], 1),
                         "95% CI (users)": f"[{100 * o['ci_low']:.0f}, {100 * o['ci_high']:.0f}]",
                         "per-prompt CI (tallies.json)": f"[{100 * t['overall']['ci_low']:.0f}, {100 * t['overall']['ci_high']:.0f}]",
                         "length-controlled %": round(100 * lc, 1) if lc is not None else None,
                         "_lo": o["ci_low"], "_hi": o["ci_high"], "_wr": o["win_rate"], "_dec": o["W"] + o["L"]})
    return pd.DataFrame(rows)


def view_keep(o: pd.DataFrame, heads: pd.DataFrame, trunc: pd.DataFrame, system: str, seed: int, arms,
              view: str, reached: set[str] | None = None) -> pd.Series:
    """Which prompts of a seed's reverse-vs-forward outcomes ``o`` a view keeps: ``raw`` — all; ``trained`` —
    types whose heads all trained in both arms (a mix needs all four heads and, with ``reached``, a tuned mix that
    met its target in both arms; ``router_head``: the router's pick must be such a type); ``uncut`` — neither
    side hit the cap; ``cut`` — either did."""
    if view == "raw":
        return pd.Series(True, index=o.index)
    if view == "trained":
        ok = comparable_types(heads, seed, arms=arms, strict=True, reached=reached)
        return o["preference" if system == "oracle_head" else "router_pick"].isin(ok)
    cut = cut_prompts(trunc, "reverse", seed, system) | cut_prompts(trunc, "forward", seed, system)
    return ~o["prompt_id"].isin(cut) if view == "uncut" else o["prompt_id"].isin(cut)


def view_frames(run: str | Path, heads: pd.DataFrame, trunc: pd.DataFrame, system: str, seeds, arms, judge_,
                view: str) -> list[pd.DataFrame]:
    """Per seed, the reverse-vs-forward outcomes of ``system`` that ``view`` keeps (:func:`view_keep`)."""
    from .mixes import reached_pairs

    out = []
    for sd in seeds:
        o = outcomes(run, f"systems/reverse-s{sd}.jsonl:{system}", f"systems/forward-s{sd}.jsonl:{system}", judge_)
        out.append(o[view_keep(o, heads, trunc, system, sd, arms, view, reached_pairs(run, arms, sd))])
    return out


def restricted_view(run: str | Path, heads: pd.DataFrame, trunc: pd.DataFrame, system: str, seeds, arms, judge_,
                    n_boot: int, view: str = "trained") -> pd.DataFrame:
    """Reverse against forward on a subset of prompts (:func:`view_keep`), per seed."""
    from .mixes import reached_pairs

    rows = []
    for sd, o in zip(seeds, view_frames(run, heads, trunc, system, seeds, arms, judge_, view)):
        ok = comparable_types(heads, sd, arms=arms, strict=True, reached=reached_pairs(run, arms, sd))
        sm = summarize(o, n_boot, groups="user")
        rows.append({"system": system, "seed": sd, "types": (", ".join(ok) or "none") if view == "trained" else "all",
                     "n": sm["n"], "users": sm["clusters"], "W": sm["W"], "T": sm["T"], "L": sm["L"],
                     "reverse wins %": None if sm["win_rate"] is None else round(100 * sm["win_rate"], 1),
                     "95% CI (users)": "" if sm["win_rate"] is None else
                     ("all ties" if sm["W"] + sm["L"] == 0 else f"[{100 * sm['ci_low']:.0f}, {100 * sm['ci_high']:.0f}]"),
                     "_wr": sm["win_rate"], "_lo": sm["ci_low"], "_hi": sm["ci_high"], "_dec": sm["W"] + sm["L"]})
    return pd.DataFrame(rows)


def rates_text(values) -> str:
    """Win rates in percent joined by '/', '—' for a seed without prompts (a view that kept none)."""
    return "/".join("—" if v is None or v != v else f"{v:.0f}" for v in values)


HIDDEN = ["_wr", "_lo", "_hi", "_dec"]
VERDICT_NAMES = {"none": "no difference within the tolerance", "forward": "forward better", "reverse": "reverse better",
                 "mixed": "no consistent winner", "uninformative": "uninformative (all ties in every seed)",
                 "empty": "empty (no type left)"}


def left_out_rate(h2h: pd.DataFrame, trained: pd.DataFrame, system: str) -> tuple[float | None, int]:
    """Reverse's mean win rate over seeds on the prompts the ``trained`` view leaves out (raw − restricted,
    by counts), and how many prompts that is over all seeds."""
    raw = h2h[h2h["system"] == system].set_index("seed")
    tr = trained.set_index("seed")
    out_n = raw["n"] - tr["n"]
    out_wr = (raw["_wr"] * raw["n"] - tr["_wr"].fillna(0.5) * tr["n"]) / out_n
    return (float(out_wr[out_n > 0].mean()) if (out_n > 0).any() else None), int(out_n.sum())


def failed_heads_text(heads: pd.DataFrame) -> str:
    """``warm in seed(s) 0, 2; …`` for the heads in ``heads`` (e.g. those that did not train)."""
    return "; ".join(f"`{h}` in seed(s) {', '.join(map(str, sorted(g['seed'])))}" for h, g in heads.groupby("head"))


def value_range(x, digits: int = 2) -> str:
    """``0.12`` when min and max agree at ``digits`` decimals, else ``0.12–0.34``."""
    lo, hi = float(np.min(x)), float(np.max(x))
    return f"{lo:.{digits}f}" if round(lo, digits) == round(hi, digits) else f"{lo:.{digits}f}–{hi:.{digits}f}"


def pct_range(x) -> str:
    """``40%`` when min and max agree in whole percents, else ``40%–55%``."""
    lo, hi = float(np.min(x)), float(np.max(x))
    return f"{100 * lo:.0f}%" if round(100 * lo) == round(100 * hi) else f"{100 * lo:.0f}%–{100 * hi:.0f}%"


def mixing_check(run: str | Path, model_dir: str | Path, arms, seed: int, recipes: dict, texts: list[str],
                 chat_prompt, max_new_tokens: int = 24) -> pd.DataFrame:
    """Each recipe mix of one seed, per arm: the largest difference over adapted modules between the saved
    mix's ΔW and Σ wᵢ·sᵢ·BᵢAᵢ of its heads, and whether its greedy generation on ``texts`` (made prompts
    by ``chat_prompt(tokenizer, text)``) equals that of a model whose weights were merged by hand."""
    import torch
    import transformers
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ... import adapters

    transformers.logging.disable_progress_bar()
    load = lambda: AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()  # noqa: E731
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    tok.padding_side = "left"
    enc = tok([chat_prompt(tok, t) for t in texts], return_tensors="pt", padding=True, add_special_tokens=False)
    rows = []
    for arm in arms:
        folder = Path(run) / "heads" / f"{arm}-s{seed}"
        loaded = adapters.load_adapters(load(), {p: folder / p / "adapter" for p in pw.POLES})
        for pair, weights in recipes.items():
            want = adapters.expected_delta(loaded, dict(zip(pw.POLES, weights)))
            mixed = PeftModel.from_pretrained(load(), str(folder / f"mix_{pair}")).eval()
            got = adapters.delta_weights(mixed, "default")
            err = max(float((got[k] - want[k]).abs().max()) for k in want)
            merged = adapters.merged_copy(load(), want)
            with torch.no_grad():
                kw = dict(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
                same = torch.equal(mixed.generate(**enc, **kw), merged.generate(**enc, **kw))
            rows.append({"arm": arm, "recipe": pair, "weights": weights, "modules": len(want),
                         "rank": mixed.peft_config["default"].r, "max |ΔW_mix − Σ w s BA|": err, "greedy = merged": same})
    return pd.DataFrame(rows)
