"""Mixing recipes tuned on validation (issue 22, item 3): stage ``mixes`` of a scale with a ``mixes`` section.

The study mixes two persona heads by fixed weights on (warm, impersonal, concise, thorough) —
:data:`.steps.RECIPES`, fixed on validation for the study's own heads. Heads trained here are other
heads, and with the study's weights a mix may show neither of its styles (the recorded run's
impersonal+concise mixes showed both on 1-3 % of answers; persona prompting on ~100 %). So, per arm and
seed, each pair's recipe is tuned on the validation users' prompts — never the test users':

1. the candidates, in a declared order: the study's recipe first, then every point of the grid
   ``pole × pole × opposite × opposite`` — weight ``w_a`` on the pair's first pole, ``w_b`` on its second,
   ``-o_a`` on the first pole's opposite and ``-o_b`` on the second's — ordered by their total absolute
   weight (the smallest change first), then by the grid's own order;
2. each candidate mixed exactly (:func:`polyvox.adapters.mix`, rank concatenation) and asked the first
   ``distill.validation_prompts`` validation prompts greedily at the scale's cap, as the heads were selected;
   its rate is the share of replies that show *both* poles (:func:`.world.shows_pole`, the detectors behind
   the trained-head rule; a reply that loops shows none, :func:`.world.loops`), and its cap hits the share of
   replies cut at the cap;
3. the target: persona prompting's rate on the same prompts (the base model with the pair's cards) minus
   ``margin`` (issue 22: 10 points), with cap hits at most ``max_cap_hits`` (issue 22: under 1 %);
4. the rule: the first candidate in that order that meets the target; when none does, among the candidates
   within the cap-hit bound the one with the highest rate, else the one with the fewest cap hits (the earliest
   of equals), recorded as not reached — the chapter leaves a type whose mix misses in either arm out of the
   comparison restricted to behaving heads, and says which mixes miss.

A scale without ``max_cap_hits`` (the run recorded before 2026-12-03) applies the rule without the cap-hit bound;
its candidates were asked before loops were read as no style, so its recorded rates count looping replies.

The stage writes ``mixes/<arm>-s<seed>/mix_<pair>/`` (the chosen mix, saved as
:func:`polyvox.adapters.save_mix` saves one) and ``tuning.json`` (every candidate's weights and rates, the
persona-prompting rates, the target, the choice and whether it reached the target). Generation then answers the test
prompts with both the study's recipe (unit ``<arm>-s<seed>-<pair>``) and the tuned one
(``<arm>-s<seed>-tuned-<pair>``); a system that needs a two-pole head uses the tuned mix.
Departure from the textbook: there is none to follow — PEFT's mixing is linear in ΔW, and whether a linear
mix of two style heads shows both styles is measured, not assumed.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

from ... import adapters, runs
from ...backends import SamplingParams
from . import world as pw

OPPOSITE = {"warm": "impersonal", "impersonal": "warm", "concise": "thorough", "thorough": "concise"}
TUNED = "tuned"  # the tuned mixes' generation units: <arm>-s<seed>-tuned-<pair>


def tuned(s: dict) -> bool:
    """Whether the scale tunes its mixing recipes (a ``mixes`` section)."""
    return s.get("mixes") is not None


def folder(out: Path, arm: str, seed: int) -> Path:
    return Path(out) / "mixes" / f"{arm}-s{seed}"


def candidates(pair: str, m: dict) -> list[dict[str, float]]:
    """The pair's candidate recipes in the rule's order (see the module docstring): weights by pole."""
    from .steps import RECIPES

    a, b = pair.split("+")
    study = dict(zip(pw.POLES, RECIPES[pair]))
    grid = []
    for wa, wb, oa, ob in itertools.product(m["pole"], m["pole"], m["opposite"], m["opposite"]):
        w = {a: float(wa), b: float(wb), OPPOSITE[a]: -float(oa), OPPOSITE[b]: -float(ob)}
        grid.append({p: w[p] for p in pw.POLES})
    order = sorted(range(len(grid)), key=lambda i: (sum(abs(v) for v in grid[i].values()), i))
    out, seen = [study], {tuple(study.values())}
    for i in order:
        key = tuple(grid[i].values())
        if key not in seen:
            seen.add(key)
            out.append(grid[i])
    return out


def both_rate(pair: str, texts, n_steps, cut=None) -> dict[str, float]:
    """Shares of replies that show the pair's first pole, its second, and both; with ``cut`` (per reply, whether
    it stopped at the cap) also ``cap``, the share cut at the cap."""
    a, b = pair.split("+")
    shows = [(pw.shows_pole(a, t, n), pw.shows_pole(b, t, n)) for t, n in zip(texts, n_steps, strict=True)]
    n = len(shows)
    out = {"a": sum(x for x, _ in shows) / n, "b": sum(y for _, y in shows) / n,
           "both": sum(x and y for x, y in shows) / n}
    if cut is not None:
        cut = list(cut)
        if len(cut) != n:
            raise ValueError(f"both_rate: {n} replies, {len(cut)} cut flags")
        out["cap"] = sum(map(bool, cut)) / n
    return out


def meets(rate: float, cap: float | None, target: float, max_cap: float | None) -> bool:
    """Whether a candidate meets the rule's target: its rate at least ``target`` and, with ``max_cap``, its cap
    hits at most ``max_cap``."""
    return rate >= target and (max_cap is None or (cap is not None and cap <= max_cap))


def choose(rates: list[float], target: float, caps: list[float] | None = None,
           max_cap: float | None = None) -> tuple[int, bool]:
    """The rule: (index of the first candidate meeting the target (:func:`meets`), True); else (index of the
    highest rate among those within the cap bound, or without one within it of the fewest cap hits, False)."""
    caps = [None] * len(rates) if caps is None else list(caps)
    if len(caps) != len(rates):
        raise ValueError(f"choose: {len(rates)} rates, {len(caps)} cap shares")
    for i, (r, c) in enumerate(zip(rates, caps)):
        if meets(r, c, target, max_cap):
            return i, True
    within = [i for i, c in enumerate(caps) if max_cap is None or (c is not None and c <= max_cap)]
    if within:
        return max(within, key=lambda i: (rates[i], -i)), False
    return min(range(len(caps)), key=lambda i: (caps[i], i)), False


def _replies(backend, val, max_tokens: int) -> tuple[list[str], list[bool]]:
    """Greedy replies to ``val`` at the cap, and whether each was cut there."""
    got = runs.sample_texts(backend, "plain", val, SamplingParams(max_tokens, 0.0))
    return [x.completion for x in got], [x.finish_reason == "length" for x in got]


def card_rates(s: dict, model, tok, val, n_steps) -> dict[str, dict[str, float]]:
    """Persona prompting's rates on the validation prompts: the base model with each pair's cards."""
    from .steps import PAIRS, ChatBackend, TrainingModel

    max_tokens = s["generate"]["max_tokens"]
    with model.disable_adapter():
        return {pair: both_rate(pair, *_with_steps(_replies(ChatBackend(TrainingModel(model, tok), pw.card_for(pair)),
                                                            val, max_tokens), n_steps)) for pair in PAIRS}


def _with_steps(replies, n_steps):
    texts, cut = replies
    return texts, n_steps, cut


def stage_mixes(out: Path, s: dict, arm: str, seed: int) -> dict:
    """Tune, choose and save each pair's mix of one arm and seed's heads (the module docstring's rule)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ...records import read_json
    from .steps import PAIRS, ChatBackend, TrainingModel, _model, _prompts

    m = s["mixes"]
    heads = Path(out) / "heads" / f"{arm}-s{seed}"
    missing = [p for p in pw.POLES if not (heads / p / "adapter" / "adapter_model.safetensors").is_file()]
    if missing or read_json(heads / "manifest.json").get("status") != "complete":
        raise ValueError(f"{heads}: the heads stage is not complete (missing adapters: {', '.join(missing) or 'none'})")
    model_path = _model(s)
    tok = AutoTokenizer.from_pretrained(model_path)
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, use_safetensors=True)
    model = adapters.load_adapters(base, {p: heads / p / "adapter" for p in pw.POLES})
    model.eval()
    val = _prompts(s, "validation")[: s["distill"]["validation_prompts"]]
    n_steps = [len(p.problem.steps) for p in val]
    max_tokens = s["generate"]["max_tokens"]
    cards = card_rates(s, model, tok, val, n_steps)
    dest = folder(out, arm, seed)
    max_cap = m.get("max_cap_hits")
    record = {"arm": arm, "seed": seed, "validation_prompts": len(val), "margin": m["margin"],
              "max_cap_hits": max_cap, "loops_show_no_style": True, "pairs": {}}
    k = 0
    for pair in PAIRS:
        target = round(cards[pair]["both"] - m["margin"], 6)
        tried = []
        for w in candidates(pair, m):
            k += 1
            adapters.mix(model, w, f"candidate-{k}")
            rate = both_rate(pair, *_with_steps(_replies(ChatBackend(TrainingModel(model, tok)), val, max_tokens),
                                                n_steps))
            model.delete_adapter(f"candidate-{k}")
            tried.append({"weights": w, **{f"rate_{'cap_hits' if x == 'cap' else x}": round(v, 6)
                                           for x, v in rate.items()}})
            if meets(tried[-1]["rate_both"], tried[-1]["rate_cap_hits"], target, max_cap):
                break  # the rule takes the first candidate that meets the target: the rest are not asked
        i, reached = choose([t["rate_both"] for t in tried], target, [t["rate_cap_hits"] for t in tried], max_cap)
        adapters.save_mix(model_path, {p: heads / p / "adapter" for p in pw.POLES}, tried[i]["weights"],
                          dest / f"mix_{pair}")
        record["pairs"][pair] = {"persona_prompting": {x: round(v, 6) for x, v in cards[pair].items()},
                                 "target": round(target, 6), "chosen": i, "reached": reached,
                                 "study_recipe_rate": tried[0]["rate_both"], "weights": tried[i]["weights"],
                                 "rate_both": tried[i]["rate_both"], "cap_hits": tried[i]["rate_cap_hits"],
                                 "candidates": tried}
    tmp = dest / "tuning.json.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(dest / "tuning.json")
    return {p: {k2: v for k2, v in r.items() if k2 != "candidates"} for p, r in record["pairs"].items()}


def tuning_table(run: str | Path, arms, seeds):
    """Per arm, seed and pair: persona prompting's validation rate, the target, the study recipe's rate, the
    chosen recipe's rate and weights, how many candidates were asked, and whether the target was reached."""
    import pandas as pd

    rows = []
    for arm in arms:
        for seed in seeds:
            rec = json.loads((folder(run, arm, seed) / "tuning.json").read_text())
            for pair, r in rec["pairs"].items():
                rows.append({"arm": arm, "seed": seed, "pair": pair,
                             "persona prompting": r["persona_prompting"]["both"], "target": r["target"],
                             "study recipe": r["study_recipe_rate"], "tuned": r["rate_both"],
                             "weights (w, i, c, t)": ", ".join(f"{r['weights'][p] + 0.0:+g}" for p in pw.POLES),
                             "cap hits": r.get("cap_hits"),  # None: a run recorded without the cap-hit bound
                             "asked": len(r["candidates"]), "reached": r["reached"]})
    return pd.DataFrame(rows)


def reached_pairs(run: str | Path, arms, seed: int) -> set[str] | None:
    """The pairs whose tuned mix met the rule's target on validation in every arm of ``seed`` (their tuning.json);
    None for a run that does not tune its mixes (no ``mixes/``)."""
    if not (Path(run) / "mixes").is_dir():
        return None
    ok = None
    for arm in arms:
        rec = json.loads((folder(run, arm, seed) / "tuning.json").read_text())
        got = {p for p, r in rec["pairs"].items() if r["reached"]}
        ok = got if ok is None else ok & got
    return ok or set()


def test_behaviour(run: str | Path, arms, seeds, pairs=None):
    """On the test prompts (the generation units), each pair's share of answers that show both its styles:
    persona prompting, the study's recipe and the tuned recipe, per arm and seed."""
    import pandas as pd

    from .steps import PAIRS, _unit_texts

    run = Path(run)
    from ...records import read_jsonl

    rows = read_jsonl(run / "systems" / f"{arms[0]}-s{seeds[0]}.jsonl")  # plain or shipped gzipped
    steps = {r["prompt_id"]: r["n_steps"] for r in rows}

    def rate(unit, pair):
        t = _unit_texts(run, unit)
        ids = sorted(t)
        return both_rate(pair, [t[i] for i in ids], [steps.get(i) for i in ids])["both"]

    def cap_hits(unit):  # share of the unit's answers cut at the generation cap (a looping mix shows here)
        samples = runs.load(run / "gen" / unit).samples
        return sum(x.finish_reason == "length" for x in samples) / len(samples)

    out = []
    for pair in pairs or PAIRS:
        card = rate(f"card-{pair}", pair)
        for arm in arms:
            for seed in seeds:
                study = rate(f"{arm}-s{seed}-{pair}", pair)
                t_unit = f"{arm}-s{seed}-{TUNED}-{pair}"
                tuned_rate = rate(t_unit, pair) if (run / "gen" / t_unit).is_dir() else None
                out.append({"pair": pair, "arm": arm, "seed": seed, "persona prompting": card,
                            "study recipe": study, "tuned": tuned_rate,
                            "tuned cap hits": cap_hits(t_unit) if tuned_rate is not None else None})
    return pd.DataFrame(out)


def tuning_line(tuning) -> str:
    """One computed sentence: how many arm-seed mixes reached the target on validation, and which did not."""
    if not len(tuning):
        return "No mix was tuned."
    missed = tuning[~tuning["reached"]]
    bound = tuning["cap hits"].notna().all() if "cap hits" in tuning else False
    line = (f"On validation, {int(tuning['reached'].sum())} of {len(tuning)} tuned mixes (pairs × arms × seeds) show "
            f"both their styles at no less than persona prompting's rate minus the margin"
            + (" with cap hits within the bound" if bound else ""))
    if len(missed):
        def caps(g):
            return (f", cap hits {100 * g['cap hits'].min():.0f}–{100 * g['cap hits'].max():.0f}%" if bound else "")

        line += ("; short of it: " + "; ".join(
            f"{pair} ({arm}, {len(g)} of {int((tuning['pair'] == pair).sum() / tuning['arm'].nunique())} seeds: chosen "
            f"{100 * g['tuned'].min():.0f}–{100 * g['tuned'].max():.0f}%{caps(g)} against a target of "
            f"{100 * tuning[(tuning['pair'] == pair) & (tuning['arm'] == arm)]['target'].min():.0f}%)"
            for (pair, arm), g in missed.groupby(["pair", "arm"]))
            + " — no recipe in the grid makes those heads' linear mix show both styles"
            + (" within the cap-hit bound" if bound else ""))
    return line + "."


def behaviour_summary(beh):
    """Per pair and arm, over seeds: persona prompting's test rate, the study recipe's and the tuned recipe's
    (mean and range), and the range of the tuned mixes' shares of answers cut at the cap."""
    import pandas as pd

    rows = []
    for (pair, arm), g in beh.groupby(["pair", "arm"], sort=False):
        row = {"pair": pair, "arm": arm, "persona prompting %": 100 * g["persona prompting"].iloc[0]}
        for col in ("study recipe", "tuned"):
            v = g[col].dropna()
            row[f"{col} % (mean)"] = 100 * v.mean() if len(v) else None
            row[f"{col} % (seeds)"] = f"{100 * v.min():.0f}–{100 * v.max():.0f}" if len(v) else "—"
        hits = g["tuned cap hits"].dropna() if "tuned cap hits" in g else []
        row["tuned: answers at the cap % (seeds)"] = (f"{100 * min(hits):.1f}–{100 * max(hits):.1f}" if len(hits)
                                                      else "—")
        rows.append(row)
    return pd.DataFrame(rows)
