"""Issue 22's checks before the test heads: the generation cap's measurement and the validation sweep.

Stages (run by :mod:`.pipeline` when the scale's ``distill`` section has ``cap`` / ``sweep``):

- ``cap/`` (:func:`stage_cap`): the teacher — the base model with each preference type's card, the
  cards of persona prompting — samples ``distill.cap.prompts`` train prompts per type (temperature
  ``distill.teacher_temperature``, seeded) up to ``distill.cap.ceiling`` tokens. ``lengths.jsonl``:
  one row per answer (tokens, eos included; whether it ended). ``cap.json``: per type the
  nearest-rank 99th percentile (the ⌈0.99 n⌉-th smallest length), max, mean and cap-hit rate at the
  scale's ``generate.max_tokens`` (an answer is cut when it has not ended within the cap); the
  longest type (largest 99th percentile), its percentile, the overall hit rate, and the share that
  reached the measurement's own ceiling. A scale whose ``generate.max_tokens`` is below the longest
  type's 99th percentile — or whose measurement was itself cut (≥ 1 % at the ceiling) — is refused in
  one line (:func:`cap_refusal`) before any stage that generates with the cap runs.
- ``sweep/<arm>-<i>/`` (:func:`stage_point`): point ``i`` of :func:`.steps.grid` (learning rate ×
  steps × the remedy's parameters) for one arm: the four pole heads trained on the train users'
  prompts with seed ``distill.sweep.seed`` (never a test seed; default: one past the largest), each selected and
  scored on the validation users' prompts only (never the test split): style rate, validation score
  and issue 22's trained rule (:func:`.steps.head_record`).
- ``sweep/chosen/`` (:func:`stage_chosen`): per arm, the point picked on validation (:func:`pick`);
  ``chosen.json`` (the arm's recipe, which the test heads of ``heads/`` use) and ``sweep.jsonl`` (one
  row per arm, point and pole: the sweep table).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ...records import append_jsonl, read_json, read_manifest
from . import router as R
from . import world as pw
from .steps import SWEPT, _device, _model, _prompts, grid, sweep_seed, train_poles

CEILING_HITS_AT_MOST = 0.01  # a measurement with more answers cut at its own ceiling has not measured the tail


def nearest_rank(values, q: float = 0.99) -> int:
    """The nearest-rank ``q`` quantile: the ⌈q · n⌉-th smallest value (never below the data's own values)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("nearest_rank: no values")
    return xs[max(1, math.ceil(q * len(xs))) - 1]


def cap_summary(lengths: dict[str, list[tuple[int, bool]]], cap: int, ceiling: int) -> dict:
    """``cap.json`` from each type's (tokens, ended) answers: see the module docstring."""
    per = {}
    for t, rows in lengths.items():
        toks = [n for n, _ in rows]
        per[t] = {"n": len(rows), "p99": nearest_rank(toks), "max": max(toks), "mean": round(sum(toks) / len(toks), 2),
                  "cap_hit_rate": round(sum((not e) or n > cap for n, e in rows) / len(rows), 4)}
    longest = max(per, key=lambda t: (per[t]["p99"], per[t]["max"]))
    every = [r for rows in lengths.values() for r in rows]
    return {"cap": cap, "ceiling": ceiling, "longest": longest, "p99": per[longest]["p99"],
            "cap_hit_rate": round(sum((not e) or n > cap for n, e in every) / len(every), 4),
            "ceiling_hit_rate": round(sum(not e for _, e in every) / len(every), 4), "types": per}


def cap_refusal(out: Path, s: dict) -> str | None:
    """One line refusing the scale's generation cap against ``cap/cap.json`` (None: it fits, or not measured)."""
    path = Path(out) / "cap" / "cap.json"
    if "cap" not in s["distill"] or not path.is_file():
        return None
    c, cap = read_json(path), s["generate"]["max_tokens"]
    if c["ceiling_hit_rate"] >= CEILING_HITS_AT_MOST:
        return (f"{path}: {c['ceiling_hit_rate']:.1%} of the teacher's answers reached the measurement's ceiling "
                f"({c['ceiling']} tokens), so their 99th percentile is not measured: raise distill.cap.ceiling")
    if cap < c["p99"]:
        return (f"scale {s['name']!r}: generate.max_tokens {cap} is below the 99th percentile ({c['p99']} tokens) of "
                f"the longest persona's answers ({c['longest']}; {path}): set generate.max_tokens ≥ {c['p99']}")
    return None


def refuse_cap(out: Path, s: dict) -> None:
    line = cap_refusal(out, s)
    if line:
        raise ValueError(line)


def stage_cap(out: Path, s: dict) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ...train.distill import sample_continuations

    folder, c = out / "cap", s["distill"]["cap"]
    model, device = _model(s), _device()
    tok = AutoTokenizer.from_pretrained(model)
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, use_safetensors=True).to(device).eval()
    train = _prompts(s, "train")[: c["prompts"]]
    lengths, rows = {}, []
    for i, t in enumerate(pw.TYPES):
        seqs = sample_continuations(base, tok, [R.chat_prompt(tok, p.text, pw.card_for(t)) for p in train],
                                    c["ceiling"], s["distill"]["teacher_temperature"], s["world"]["seed"] * 1009 + i,
                                    device)
        lengths[t] = [(len(x), bool(x) and x[-1] == tok.eos_token_id) for x in seqs]
        rows += [{"type": t, "prompt_id": p.id, "tokens": n, "ended": e} for p, (n, e) in zip(train, lengths[t])]
    (folder / "lengths.jsonl").unlink(missing_ok=True)
    append_jsonl(folder / "lengths.jsonl", rows)
    summary = cap_summary(lengths, s["generate"]["max_tokens"], c["ceiling"])
    summary["fits"] = summary["cap"] >= summary["p99"] and summary["ceiling_hit_rate"] < CEILING_HITS_AT_MOST
    tmp = folder / "cap.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(folder / "cap.json")
    return {k: summary[k] for k in ("cap", "ceiling", "longest", "p99", "cap_hit_rate", "ceiling_hit_rate", "fits")}


def point_folder(out: Path, arm: str, i: int) -> Path:
    return Path(out) / "sweep" / f"{arm}-{i}"


def stage_point(out: Path, s: dict, arm: str, i: int) -> dict:
    refuse_cap(out, s)
    point = grid(s)[i]
    heads = train_poles(point_folder(out, arm, i), s, arm, sweep_seed(s), point)
    return {"point": point, "seed": sweep_seed(s), "heads": heads, **score(heads)}


def score(heads: dict) -> dict:
    """A point's validation result over its pole heads: how many trained, the mean style rate and the mean
    selected validation score."""
    rates = [h["style_rate"] or 0.0 for h in heads.values()]
    vals = [h["validation"][str(h["selected_step"])] for h in heads.values()]
    return {"trained": sum(bool(h["trained"]) for h in heads.values()), "style_rate": round(sum(rates) / len(rates), 4),
            "validation_score": round(sum(vals) / len(vals), 4)}


def pick(results: list[dict]) -> int:
    """The point an arm takes: most heads trained, then the highest mean style rate, then the highest mean
    validation score; a tie goes to the earlier point of the grid."""
    if not results:
        raise ValueError("pick: no sweep results")
    return max(range(len(results)), key=lambda i: (results[i]["trained"], results[i]["style_rate"],
                                                   results[i]["validation_score"], -i))


def stage_chosen(out: Path, s: dict) -> dict:
    folder, points = out / "sweep" / "chosen", grid(s)
    chosen, rows = {}, []
    for arm in s["arms"]["losses"]:
        results = [read_manifest(point_folder(out, arm, i)) for i in range(len(points))]
        best = pick(results)
        chosen[arm] = {**points[best], "point": best, "seed": sweep_seed(s), "trained": results[best]["trained"],
                       "all_trained": results[best]["trained"] == len(pw.POLES),
                       "style_rate": results[best]["style_rate"], "validation_score": results[best]["validation_score"]}
        rows += [{"arm": arm, "point": i, **points[i], "pole": pole, "chosen": i == best,
                  **{k: h[k] for k in ("selected_step", "loss_first", "loss_last", "loss_falls", "grad_norm_median",
                                       "first_token_grad_norm_median", "style_rate", "trained")}}
                 for i, r in enumerate(results) for pole, h in r["heads"].items()]
    (folder / "sweep.jsonl").unlink(missing_ok=True)
    append_jsonl(folder / "sweep.jsonl", rows)
    tmp = folder / "chosen.json.tmp"
    tmp.write_text(json.dumps(chosen, indent=2) + "\n")
    tmp.replace(folder / "chosen.json")
    return {"chosen": chosen}


def chosen(out: Path) -> dict:
    """Per arm, the recipe the sweep picked (``sweep/chosen/chosen.json``)."""
    path = Path(out) / "sweep" / "chosen" / "chosen.json"
    if not path.is_file():
        raise ValueError(f"{path}: missing: run the sweep stage before the heads")
    return read_json(path)


def check_picked(out: Path, s: dict) -> None:
    """Read-only: every arm has a pick (the chosen file names each of the scale's arms)."""
    got = chosen(out)
    missing = [a for a in s["arms"]["losses"] if a not in got or any(k not in got[a] for k in SWEPT)]
    if missing:
        raise ValueError(f"{Path(out) / 'sweep' / 'chosen' / 'chosen.json'}: no pick for {', '.join(missing)}")
