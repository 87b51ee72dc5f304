"""The persona pipeline's judging: the scale's judge (the rubric, or an LLM) over every comparison, and — for a
scale with ``judge_model`` (issue 22, item 4) — the tiny judge model trained, calibrated and asked the same
comparisons beside it.

- ``judge/`` (stage ``judge``): a judge run (:mod:`polyvox.judge`) of the ``judge`` section's judge; its
  manifest.json is the judge run's alone, the stage's record ``judge/stage.json``; ``tallies.json``.
- ``judge-model/<size>-<digest>/`` (stage ``judge-model``, :func:`stage_judge_model`): the judge model
  (:mod:`.judge_model`) in ``model/`` — weights, tokenizer, its own manifest.json (kind ``judge model``) and
  ``calibration.json`` (:mod:`.judge_calibration`: agreement with the rubric and the truth, flip rate, length
  bias on held-out pairs); the stage's record is the folder's manifest.json, with the calibration's headline
  rates. ``<digest>`` is :func:`settings_digest` of the resolved :class:`.judge_model.JudgeSettings`, so a
  changed ``judge_model`` setting is a new folder beside the old one (the root accepts the change:
  :data:`.pipeline.ROOT_IGNORE`), and what reads it is stale.
- ``judge-by-model/`` (stage ``judge`` too, :func:`stage_judge_by_model`): the judge model asked every
  comparison in both orders through the same machinery (:func:`polyvox.judge.run`, :func:`polyvox.judge.tally`),
  as an :class:`polyvox.judge.LLMJudge` over the local ``transformers`` backend in this process (the chat
  request rendered by the model's chat template as a server renders it: the served path is
  tests/test_judge_model.py's); ``tallies.json``; its record ``stage.json`` holds both judges' overall
  tallies side by side (``side_by_side``). It reads ``systems/``, the judge model's folder and ``judge/``.

The judge model's training users and problems are never the scale's test users and problems: training pairs
come from the world's training users (split by index, whatever ``n_users``) with problems of the world's train
split, and the verdicts are on test users' prompts, whose problems are of its test split (tested).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

from ... import judge
from ...records import RecordError, RunLock, read_json
from . import world as pw

BY = ("pick_size", "preference")  # the row labels tallies break down by


def rubric_judge() -> judge.RubricJudge:
    return judge.RubricJudge(lambda text, row: pw.rubric_score(text, row["preference"], row["gold"], row["n_steps"]),
                             version="personas-rubric-1")


def comparisons(s: dict, systems_dir: str | Path) -> list[tuple[str, str, str]]:
    """(name, A spec, B spec): run21's tables for every arm and seed, and forward vs reverse head to head."""
    d = Path(systems_dir)
    out = []
    for arm in s["arms"]["losses"]:
        for seed in s["arms"]["seeds"]:
            f = d / f"{arm}-s{seed}.jsonl"
            for a, b in (("router_head", "router_persona"), ("router_head", "base"),
                         ("oracle_head", "oracle_persona"), ("oracle_head", "base"),
                         ("router_persona", "base"), ("oracle_persona", "base")) + tuple(
                             ("router_head", f"head_{p}") for p in pw.POLES):
                out.append((f"{arm}-s{seed}: {a} vs {b}", f"{f}:{a}", f"{f}:{b}"))
    losses = s["arms"]["losses"]
    if "forward" in losses and "reverse" in losses:
        for seed in s["arms"]["seeds"]:
            for system in ("router_head", "oracle_head"):
                out.append((f"s{seed}: reverse {system} vs forward {system}",
                            f"{d / f'reverse-s{seed}.jsonl'}:{system}", f"{d / f'forward-s{seed}.jsonl'}:{system}"))
    return out


def make_judge(spec: dict):
    """The judge a scale names: ``rubric`` (free, exact) or ``openai`` (an LLM behind an OpenAI-compatible endpoint)."""
    if spec.get("kind", "rubric") == "rubric":
        return rubric_judge()
    from ...backends.openai import OpenAIBackend

    backend = OpenAIBackend(spec["model"], base_url=spec["base_url"], api_key_env=spec.get("api_key_env"),
                            concurrency=spec.get("concurrency", 8))
    return judge.LLMJudge(backend, max_tokens=spec.get("max_tokens", 16))


def _rel(out: Path, spec: str) -> str:
    """FILE:SYSTEM with the file relative to the run folder (systems/…)."""
    path, system = judge.parse_side(spec)
    return f"{path.relative_to(out).as_posix()}:{system}"


def _judge_all(out: Path, s: dict, folder: Path, j, max_attempts: int = 3) -> tuple[list, list, int, int]:
    """Every comparison judged by ``j`` into ``folder`` (cached), its tallies written to ``tallies.json``:
    (specs, tallies, calls made, unparseable verdicts recorded by this run)."""
    tallies, calls, unparseable = [], 0, 0
    specs = comparisons(s, out / "systems")
    for name, a, b in specs:
        done = judge.run(a, b, folder, j, chunk=s["judge"]["chunk"], max_attempts=max_attempts)
        calls, unparseable = calls + done["calls_made"], unparseable + done["unparseable"]
        t = judge.tally(a, b, folder, j, by=BY, n_boot=s["judge"]["n_boot"])
        tallies.append({"name": name, **t})
    for t in tallies:
        t["a"], t["b"] = _rel(out, t["a"]), _rel(out, t["b"])
    with RunLock(folder):
        (folder / "tallies.json").write_text(json.dumps(tallies, indent=1) + "\n")
    return specs, tallies, calls, unparseable


def stage_judge(out: Path, s: dict) -> dict:
    """Judge every comparison (cached: a rerun pays nothing twice), write ``tallies.json``; returns the
    stage record's fields: the comparisons (files relative to the run folder) and the calls made."""
    specs, _tallies, calls, _bad = _judge_all(out, s, out / "judge", make_judge(s["judge"]))
    return {"comparisons": sorted([_rel(out, a), _rel(out, b)] for _name, a, b in specs), "calls_made": calls}


# ---------------------------------------------------------------- the judge model (issue 22, item 4)

MODEL_VERDICTS = "judge-by-model"  # the judge model's verdicts, beside judge/
# the keys of the scale's judge_model section besides size: each overrides JudgeSettings' field of that name
JUDGE_KEYS = ("steps", "lr", "seed", "batch", "n_users", "per_user", "pairs_per_prompt", "held_split",
              "held_n_users", "held_per_user", "held_pairs_per_prompt", "device")
# the transformers backend's batch while the judge model judges (recorded in its identity), by device: on a GPU a
# batch of 64 short replies is launch overhead; greedy decoding gives the same verdicts at any batch
JUDGE_BATCHES = {"cpu": 64, "cuda": 512}


def judge_batch(device: str | None) -> int:
    return JUDGE_BATCHES["cuda" if str(device or "cpu").startswith("cuda") else "cpu"]
JUDGE_MAX_TOKENS = 16  # the judge model's reply budget (LLMJudge's default, recorded in its identity)
HEADLINE = ("agreement_rubric", "agreement_truth", "call_agreement_truth", "rubric_agreement_truth",
            "true_tie_share", "flip_rate", "first_pick", "longer_pick", "longer_pick_truth")


def judge_settings(s: dict):
    """The scale's :class:`.judge_model.JudgeSettings` (its ``judge_model`` preset, overridden by the section's
    keys; the world's seed is the scale's), or None for a scale without ``judge_model``."""
    if s.get("judge_model") is None:
        return None
    from .judge_model import settings_for

    jm = s["judge_model"]
    return settings_for(jm["size"], **{k: jm[k] for k in JUDGE_KEYS if k in jm}, world_seed=s["world"]["seed"])


def settings_digest(js) -> str:
    """12 hex digits of sha256 over the resolved judge settings (JSON, sorted keys): the stage folder's name."""
    text = json.dumps(dataclasses.asdict(js), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def judge_model_folder(out: Path, s: dict) -> Path | None:
    """``judge-model/<size>-<digest>/`` of the scale's judge settings (None without ``judge_model``)."""
    js = judge_settings(s)
    return None if js is None else Path(out) / "judge-model" / f"{js.size}-{settings_digest(js)}"


def _rates(rec: dict) -> dict:
    return {m: {k: rec[m][k] for k in ("k", "n", "rate", "low", "high")} for m in HEADLINE}


def read_object(path: Path) -> dict:
    """A JSON object read from ``path`` ({} when it is missing, unreadable or not an object): a stage or
    calibration record that may not exist yet."""
    try:
        data = read_json(path) if path.is_file() else {}
    except RecordError:
        return {}
    return data if isinstance(data, dict) else {}


def stage_judge_model(out: Path, s: dict) -> dict:
    """Train the judge model into ``model/`` (kept when a resumed stage finds it complete under the same
    settings; a copy cut off mid-training is removed) and calibrate it on its held-out pairs
    (``model/calibration.json``, kept when it is of these weights). Returns the record's fields."""
    from . import judge_calibration as C
    from . import judge_model as M

    js, folder = judge_settings(s), judge_model_folder(out, s)
    model = folder / "model"
    settings = dataclasses.asdict(js)
    if not (M.is_complete(model) and M.read_manifest(model).get("settings") == settings):
        for p in folder.glob(".model.partial-*"):  # a training killed before its rename
            shutil.rmtree(p)
        if model.exists():
            shutil.rmtree(model)
        M.train(model, js, progress=False, threads=None)  # the pipeline set the process's thread count
    m = M.read_manifest(model)
    cal = model / C.FILE
    if read_object(cal).get("weights_sha256") != m["weights_sha256"]:  # none, unreadable or of other weights
        C.calibrate(model, batch_size=judge_batch(js.device), device=js.device)
    rec = read_json(cal)
    return {"model": "model", "parameters": m["parameters"], "final_loss": m["final_loss"],
            "train_seconds": m["seconds"], "weights_sha256": m["weights_sha256"],
            "calibration": {"split": rec["split"], "pairs": rec["pairs"], "users": rec["users"],
                            "calls": rec["calls"], "verdicts": rec["verdicts"], **_rates(rec)}}


def model_judge(out: Path, s: dict) -> judge.LLMJudge:
    """The scale's judge model as an :class:`polyvox.judge.LLMJudge` over the local ``transformers`` backend."""
    from ...backends import make_backend

    js = judge_settings(s)
    model = judge_model_folder(out, s) / "model"
    return judge.LLMJudge(make_backend("transformers", str(model), batch_size=judge_batch(js.device), device=js.device),
                          max_tokens=JUDGE_MAX_TOKENS)


# ---------------------------------------------------------------- the judge model's positions

def judge_prompt_tokens(tok, calls: list[judge.Call]) -> list[int]:
    """Token counts of the judge prompts of ``calls`` as the local backend renders them for the judge model
    (:data:`polyvox.judge.JUDGE_TEMPLATE` as the user turn of ``tok``'s chat template, generation prompt added:
    :func:`polyvox.backends.base.local_prompt`), one batched tokenizer call over the distinct texts."""
    from ...backends import Request
    from ...backends.base import local_prompt
    from ...backends.hf import tokenize_prompts

    texts = [local_prompt(tok, Request(judge.JUDGE_TEMPLATE.format(preference=c.preference, prompt=c.prompt,
                                                                   first=c.first, second=c.second), chat=True))
             for c in calls]
    return [len(ids) for ids in tokenize_prompts(tok, texts)]


def positions_refusal(prompt_tokens: int, positions: int, what: str) -> str | None:
    """The one-line refusal when the longest judge prompt plus the reply budget passes the judge model's
    positions (the transformers backend would refuse it: :func:`polyvox.backends.hf.check_positions`), else None."""
    need = prompt_tokens + JUDGE_MAX_TOKENS
    if need <= positions:
        return None
    return (f"judge model: {what}: the longest judge prompt is {prompt_tokens} tokens + {JUDGE_MAX_TOKENS} reply "
            f"tokens = {need}, past its max_positions {positions}; raise the preset's max_positions to at least "
            f"{-(-need // 64) * 64} (polyvox.studies.personas.judge_model.SIZES)")


def modelled_calls(s: dict) -> list[judge.Call]:
    """The longest judge calls a run of scale ``s`` can be expected to send, from its settings alone (before any
    answer exists): for each test prompt of its world, A and B both the world's reference answer
    (:func:`.world.respond`) in the style longest in tiny-chat tokens, looped to exactly the scale's
    ``generate.max_tokens`` tokens of the generating model's tokenizer (an answer that runs to the cap, as the
    cap stage saw the teacher's do). Not a bound: an answer of byte tokens costs the judge tokenizer more per
    token (measured: up to 1.6), which :func:`exact_refusal` sees once the answers exist."""
    import random

    from transformers import AutoTokenizer

    from .judge_data import STYLES
    from .steps import _model

    ctok = AutoTokenizer.from_pretrained(_model(s))
    cap = int(s["generate"]["max_tokens"])
    w = s["world"]
    calls = []
    for p in pw.prompts(w["n_users"], w["per_user"], w["seed"], split="test"):
        rng = random.Random(f"judge-positions/{p.id}")
        texts = [pw.respond(p.problem, style, rng) for style in STYLES]
        ids = max((ctok(x, add_special_tokens=False)["input_ids"] for x in texts), key=len)
        looped = (ids * (cap // max(1, len(ids)) + 1))[:cap]
        answer = ctok.decode(looped, skip_special_tokens=True)
        calls.append(judge.Call(p.id, p.text, p.preference, answer, answer))
    return calls


def judge_tokenizer(out: Path, s: dict):
    """The judge model's tokenizer: its folder's when the judge-model stage has saved it, else the same one
    trained from the settings (:func:`.judge_model.tokenizer_for`, a few seconds of CPU; nothing written)."""
    from . import judge_model as M

    model = judge_model_folder(out, s) / "model"
    if M.is_complete(model) and M.read_manifest(model).get("settings") == dataclasses.asdict(judge_settings(s)):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model))
    return M.tokenizer_for(judge_settings(s))


def modelled_refusal(out: Path, s: dict) -> str | None:
    """Read-only, for the pipeline's checks (before any stage runs): the refusal line when the longest modelled
    judge prompt (:func:`modelled_calls`) plus the reply budget passes the judge model's max_positions."""
    longest = max(judge_prompt_tokens(judge_tokenizer(out, s), modelled_calls(s)))
    return positions_refusal(longest, judge_settings(s).max_positions,
                             f"scale {s['name']!r}, answers of {s['generate']['max_tokens']} tokens (modelled)")


def exact_refusal(out: Path, s: dict, tok=None) -> str | None:
    """The refusal line when a judge prompt the judge-by-model stage will send — every comparison's answers in
    ``systems/``, both orders — plus the reply budget passes the judge model's max_positions, else None."""
    from ...judge.records import _calls

    tok = tok if tok is not None else judge_tokenizer(out, s)
    calls = [c for _name, a, b in comparisons(s, out / "systems") for p in judge.pairs(a, b)
             for c in _calls(p)]
    lengths = judge_prompt_tokens(tok, calls)
    i = max(range(len(lengths)), key=lengths.__getitem__)
    return positions_refusal(lengths[i], judge_settings(s).max_positions,
                             f"{len(calls)} judge calls of systems/ (longest: prompt {calls[i].prompt_id})")


def _overall(t: dict) -> dict:
    o = t["overall"]
    return {k: o.get(k) for k in ("n", "W", "T", "L", "unparseable", "missing", "win_rate", "ci_low", "ci_high")}


def stage_judge_by_model(out: Path, s: dict) -> dict:
    """The judge model over every comparison, both orders, into ``judge-by-model/`` (one attempt per call: its
    decoding is greedy, so another attempt would answer the same); ``tallies.json``; returns the record's
    fields, with each comparison's overall tally by both judges side by side."""
    line = exact_refusal(out, s)  # before the model is loaded: the backend would refuse the same mid-run
    if line:
        raise ValueError(line)
    j = model_judge(out, s)
    specs, tallies, calls, unparseable = _judge_all(out, s, out / MODEL_VERDICTS, j, max_attempts=1)
    scale_judge = {t["name"]: t for t in json.loads((out / "judge" / "tallies.json").read_text())}
    side = [{"name": t["name"], "a": t["a"], "b": t["b"], "judge": _overall(scale_judge[t["name"]]),
             MODEL_VERDICTS: _overall(t)} for t in tallies]
    return {"comparisons": sorted([_rel(out, a), _rel(out, b)] for _name, a, b in specs), "calls_made": calls,
            "unparseable": unparseable,
            "judges": {"judge": s["judge"].get("kind", "rubric"),
                       MODEL_VERDICTS: f"tiny-judge {judge_settings(s).size}, "
                                       f"{judge_model_folder(out, s).relative_to(out).as_posix()}/model"},
            "identity": j.identity(), "side_by_side": side}
