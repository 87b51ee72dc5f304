"""Part II in miniature, stage by stage: router → heads (forward and reverse, seeds) → generate → systems → judge.

``polyvox personas run --scale SCALE --out DIR`` runs every stage in order; each stage writes
``<out>/<stage>/…`` with a ``manifest.json`` of its settings and is skipped when complete
under the same settings (a folder holding another scale's stage is refused). Every folder the
run would write is checked before anything is written — the root's kind (``personas pipeline``,
in ``<out>/manifest.json``) and scale (against ``<out>/scale.yaml`` for runs recorded before the
root manifest), every stage's kind and settings — and the run holds ``<out>``'s one-writer lock
throughout, so a refused or concurrent run changes nothing. Scales are
``configs/personas/<scale>.yaml`` (``smoke``: seconds, plumbing only; ``h200``: the recorded
runs, one H200; ``cpu``: the same recipe on a CPU; ``full``: the study's scale, documented, not
run here), read by
:func:`load_scale` for the command and the chapters.

- ``router/``: features of the base model (:func:`.router.features`), the MLP, its test picks
  (``test_pred.jsonl``: prob, selected, label) and ``metrics.json`` (per-axis accuracy, confusion).
- ``heads/<arm>-s<seed>/<pole>/``: :func:`polyvox.train.distill.train` (teacher = base with the
  pole's card as system prompt, student = base + LoRA on the user prompt alone), the
  checkpoint selected on validation (greedy answers of validation users' prompts scored by the
  rubric for the pole); ``mix_<pair>/``: the study's recipes mixed exactly
  (:func:`polyvox.adapters.save_mix`). A head whose own manifest is complete under the same
  settings is kept when an interrupted arm-seed is resumed; a head cut off mid-training is
  retrained whole.
- ``gen/<unit>/``: greedy answers to the test prompts through the one run path
  (:func:`polyvox.runs.sample`, task ``personas``), one unit per adapter or card: ``base``,
  ``card-<type>`` (persona prompting), ``<arm>-s<seed>-<head or mix>``. Every system is an
  assembly of units: router_head for a prompt is the unit of the router's pick.
- ``systems/<arm>-s<seed>.jsonl``: one row per test prompt with every system's answer (the
  shape of the study's ``systems_test.jsonl``), the router's pick and the true type.
- ``judge/``: the rubric judge's verdicts (:mod:`polyvox.judge`, both orders, cached) for each
  comparison of :func:`comparisons`, and ``tallies.json``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from ... import adapters, judge, runs
from ...backends import SamplingParams, accepted_options, make_backend
from ...backends.base import Backend
from ... import stages
from ... import stages as _stages  # run() takes a parameter named stages
from ...formats import Prompt
from ...records import KIND_JUDGE, RunLock, append_jsonl, now_iso, read_json, read_jsonl, write_manifest
from . import router as R
from . import world as pw

REPO = Path(__file__).resolve().parents[4]
STAGES = ("router", "heads", "generate", "systems", "judge")
PAIRS = ("warm+concise", "impersonal+concise", "warm+thorough", "impersonal+thorough")
RECIPES = {  # seed 002: weights on (warm, impersonal, concise, thorough), fixed on validation for run21
    "warm+concise": (0.75, -0.25, 0.75, -0.25),
    "impersonal+concise": (-0.25, 0.75, 0.75, -0.25),
    "warm+thorough": (0.375, 0.125, -0.25, 0.75),
    "impersonal+thorough": (0.125, 0.375, -0.25, 0.75),
}
SYSTEMS = ("base", "head_warm", "head_impersonal", "head_concise", "head_thorough",
           "router_head", "router_persona", "oracle_head", "oracle_persona")


def load_scale(scale: str | Path) -> dict:
    """configs/personas/<scale>.yaml, or a YAML path (a run folder's scale.yaml keeps its name)."""
    return stages.load_scale("personas", scale, {"model", "world", "router", "distill", "arms", "generate", "judge"})


def _model(s: dict) -> str:
    p = Path(s["model"]["path"])
    return str(p if p.is_absolute() or not (REPO / p).exists() else REPO / p)


_settings = stages.settings_of
_done = stages.stage_done


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _prompts(s: dict, split: str) -> list[pw.PersonaPrompt]:
    w = s["world"]
    return pw.prompts(w["n_users"], w["per_user"], w["seed"], split)


def _task_options(s: dict) -> dict:
    w = s["world"]
    return {"split": "test", "n_users": w["n_users"], "per_user": w["per_user"], "seed": w["seed"]}


# ---------------------------------------------------------------- router

def stage_router(out: Path, s: dict) -> None:
    folder = out / "router"
    settings = _settings(s, "model", "world", "router")
    if _done(folder, settings):
        return
    t0 = time.time()
    model = _model(s)
    data = {split: _prompts(s, split) for split in ("train", "validation", "test")}
    x = {k: R.features(model, [p.text for p in v], device=_device()) for k, v in data.items()}
    y = {k: R.labels([p.preference for p in v]) for k, v in data.items()}
    r = s["router"]
    router = R.train(x["train"], y["train"], x["validation"], y["validation"], h=r["h"], epochs=r["epochs"],
                     lr=r["lr"], seed=r["seed"])
    router.save(folder)
    probs = router.probs(x["test"])
    picks = [R.pick(p) for p in probs]
    (folder / "test_pred.jsonl").unlink(missing_ok=True)
    append_jsonl(folder / "test_pred.jsonl",
                 [{"prompt_id": p.id, "prob": dict(zip(pw.POLES, map(lambda v: round(float(v), 4), pr))),
                   "selected": list(pk), "label": list(pw.poles_of(p.preference))}
                  for p, pr, pk in zip(data["test"], probs, picks)])
    metrics = R.evaluate(picks, [p.preference for p in data["test"]])
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    write_manifest(folder, kind=stages.KIND_STAGE, settings=settings, status="complete", finished=now_iso(),
                   seconds=round(time.time() - t0, 1))


# ---------------------------------------------------------------- heads

def _validation_scorer(tok, pole: str, val: list[pw.PersonaPrompt], max_tokens: int):
    from ...backends import Request
    from ...backends.hf import generate_batched

    reqs = [Request(R.chat_prompt(tok, p.text)) for p in val]

    def score(model, step):
        comps = generate_batched(model, tok, reqs, SamplingParams(max_tokens, 0.0), 64, str(model.device))
        return sum(pw.pole_match(pole, c.text, len(p.problem.steps)) + (pw.final_integer(c.text) == str(p.problem.answer))
                   for p, c in zip(val, comps)) / len(val)
    return score


def stage_heads(out: Path, s: dict, arm: str, seed: int) -> None:
    from transformers import AutoTokenizer

    from ...train import distill

    folder = out / "heads" / f"{arm}-s{seed}"
    settings = _settings(s, "model", "world", "distill", arm=arm, seed=seed)
    if _done(folder, settings):
        return
    t0 = time.time()
    model = _model(s)
    tok = AutoTokenizer.from_pretrained(model)
    train = _prompts(s, "train")
    val = _prompts(s, "validation")[: s["distill"]["validation_prompts"]]
    d = s["distill"]
    summaries = {}
    for pole in pw.POLES:
        cfg = distill.DistillConfig(model=model, out=str(folder / pole), loss=arm, top_k=d["top_k"],
                                    lora_rank=d["lora_rank"], lora_alpha=d["lora_alpha"],
                                    learning_rate=d["lr"], steps=d["steps"], batch=d["batch"],
                                    max_new_tokens=s["generate"]["max_tokens"], save_every=d["save_every"],
                                    seed=seed, teacher_temperature=d["teacher_temperature"], device=_device())
        done = read_json(folder / pole / "manifest.json") if (folder / pole / "manifest.json").is_file() else {}
        if done.get("status") == "complete" and done.get("settings") == distill.manifest_settings(cfg):
            summaries[pole] = {k: done[k] for k in ("selected_step", "validation", "step_seconds_mean",
                                                    "step_seconds_median", "teacher_sequence_seconds",
                                                    "mean_sequence_tokens", "examples")}
            continue  # a head finished before an interruption is kept
        summaries[pole] = distill.train(cfg, [R.chat_prompt(tok, p.text) for p in train],
                                        [R.chat_prompt(tok, p.text, pw.CARDS[pole]) for p in train],
                                        select_fn=_validation_scorer(tok, pole, val, s["generate"]["max_tokens"]),
                                        progress=False)
    heads = {p: folder / p / "adapter" for p in pw.POLES}
    for pair in PAIRS:
        adapters.save_mix(model, heads, dict(zip(pw.POLES, RECIPES[pair])), folder / f"mix_{pair}")
    write_manifest(folder, kind=stages.KIND_STAGE, settings=settings, status="complete", finished=now_iso(),
                   seconds=round(time.time() - t0, 1), heads=summaries)


# ---------------------------------------------------------------- generation

class ChatBackend:
    """A local backend whose prompts are tiny-chat's chat format, with an optional fixed system card.

    ``Backend.prompt("plain", …)`` would add Qwen3's empty think block (``enable_thinking=False``),
    which tiny-chat never saw; this wrapper templates exactly as tiny-chat was trained (and as the
    distillation and the router read prompts). The card is part of the identity (the cache key).
    """

    def __init__(self, inner, system: str | None = None):
        self.inner, self.system, self.name = inner, system, inner.name

    def prompt(self, fmt: str, text: str) -> Prompt:
        if fmt != "plain":
            raise ValueError(f"the persona systems use the plain chat format, not {fmt!r}")
        return Prompt(R.chat_prompt(self.inner.tokenizer, text, self.system), (), True)

    def identity(self) -> dict:
        return {**self.inner.identity(), "system_prompt": self.system, "template": "tiny-chat, no thinking switch"}

    def generate(self, requests, params):
        return self.inner.generate(requests, params)


def units(out: Path, s: dict) -> dict[str, tuple[str | None, str | None]]:
    """Generation units: name → (adapter folder or None, system card or None)."""
    u: dict = {"base": (None, None)}
    for t in pw.TYPES:
        u[f"card-{t}"] = (None, pw.card_for(t))
    for arm in s["arms"]["losses"]:
        for seed in s["arms"]["seeds"]:
            folder = out / "heads" / f"{arm}-s{seed}"
            for pole in pw.POLES:
                u[f"{arm}-s{seed}-{pole}"] = (str(folder / pole / "adapter"), None)
            for pair in PAIRS:
                u[f"{arm}-s{seed}-{pair}"] = (str(folder / f"mix_{pair}"), None)
    return u


def stage_generate(out: Path, s: dict) -> None:
    g = s["generate"]
    model = _model(s)
    for name, (adapter, card) in units(out, s).items():
        kind = g.get("backend", "transformers")
        options = accepted_options(kind, batch_size=g["batch_size"], dtype=g.get("dtype"),
                                   max_lora_rank=g.get("max_lora_rank"), max_model_len=g.get("max_model_len"))
        backend: Backend = ChatBackend(make_backend(kind, model, adapter, **options), card)
        runs.sample(out / "gen" / name, "personas", "plain", backend, 1, SamplingParams(g["max_tokens"], 0.0),
                    seed=0, task_options=_task_options(s), chunk=g["batch_size"], progress=False,
                    cache=out / "gen" / "cache.jsonl")


# ---------------------------------------------------------------- systems

def _unit_texts(out: Path, name: str) -> dict[str, str]:
    from ...records import Sample

    return {x.problem_id: x.completion for x in read_jsonl(out / "gen" / name / "rollouts.jsonl", Sample)}


def systems_rows(out: Path, s: dict, arm: str, seed: int) -> list[dict]:
    picks = {r["prompt_id"]: tuple(r["selected"]) for r in read_jsonl(out / "router" / "test_pred.jsonl")}
    prefix = f"{arm}-s{seed}"
    cache: dict = {}

    def text(unit, pid):
        if unit not in cache:
            cache[unit] = _unit_texts(out, unit)
        return cache[unit][pid]

    def head_unit(poles):
        t = pw.type_of(poles)
        return f"{prefix}-{t}" if t else "base"

    def card_unit(poles):
        t = pw.type_of(poles)
        return f"card-{t}" if t else "base"

    rows = []
    for p in _prompts(s, "test"):
        pk, true = picks[p.id], pw.poles_of(p.preference)
        responses = {"base": text("base", p.id)}
        for pole in pw.POLES:
            responses[f"head_{pole}"] = text(f"{prefix}-{pole}", p.id)
        responses["router_head"] = text(head_unit(pk), p.id)
        responses["router_persona"] = text(card_unit(pk), p.id)
        responses["oracle_head"] = text(head_unit(true), p.id)
        responses["oracle_persona"] = text(card_unit(true), p.id)
        rows.append({"prompt_id": p.id, "prompt": p.text, "preference": p.preference, "gold": str(p.problem.answer),
                     "n_steps": len(p.problem.steps), "user": p.user, "router_pick": pw.type_of(pk) or "none",
                     "pick_size": {0: "none", 1: "one pole", 2: "two poles"}[len(pk)], "arm": arm, "seed": seed,
                     "responses": responses})
    return rows


def stage_systems(out: Path, s: dict) -> None:
    folder = out / "systems"
    folder.mkdir(parents=True, exist_ok=True)
    for arm in s["arms"]["losses"]:
        for seed in s["arms"]["seeds"]:
            path = folder / f"{arm}-s{seed}.jsonl"
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.unlink(missing_ok=True)
            append_jsonl(tmp, systems_rows(out, s, arm, seed))
            tmp.replace(path)
    write_manifest(folder, kind=stages.KIND_STAGE, settings=_settings(s, "world", "arms"), status="complete",
                   finished=now_iso())


# ---------------------------------------------------------------- judge

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


BY = ("pick_size", "preference")


def make_judge(spec: dict):
    """The judge a scale names: ``rubric`` (free, exact) or ``openai`` (an LLM behind an OpenAI-compatible endpoint)."""
    if spec.get("kind", "rubric") == "rubric":
        return rubric_judge()
    from ...backends.openai import OpenAIBackend

    backend = OpenAIBackend(spec["model"], base_url=spec["base_url"], api_key_env=spec.get("api_key_env"),
                            concurrency=spec.get("concurrency", 8))
    return judge.LLMJudge(backend, max_tokens=spec.get("max_tokens", 16))


def stage_judge(out: Path, s: dict) -> None:
    folder = out / "judge"
    j = make_judge(s["judge"])
    tallies = []
    t0, calls = time.time(), 0
    specs = comparisons(s, out / "systems")
    for name, a, b in specs:
        calls += judge.run(a, b, folder, j, chunk=s["judge"]["chunk"])["calls_made"]
        t = judge.tally(a, b, folder, j, by=BY, n_boot=s["judge"]["n_boot"])
        tallies.append({"name": name, **t})

    def rel(spec: str) -> str:  # FILE:SYSTEM with the file relative to the run folder (systems/…)
        path, system = judge.parse_side(spec)
        return f"{path.relative_to(out).as_posix()}:{system}"

    for t in tallies:
        t["a"], t["b"] = rel(t["a"]), rel(t["b"])
    (folder / "tallies.json").write_text(json.dumps(tallies, indent=1) + "\n")
    m = read_json(folder / "manifest.json")
    m.pop("versions", None)
    m["comparisons"] = sorted([rel(a), rel(b)] for _name, a, b in specs)
    write_manifest(folder, **{**m, "settings": _settings(s, "judge"), "calls_made_last_run": calls,
                              "seconds_last_run": round(time.time() - t0, 1)})


# ---------------------------------------------------------------- all

RUN_ONLY = ("generate.threads",)  # scale keys that change no output: a rerun may change them


def _recognise(out: Path) -> bool:
    """A personas run recorded before the root manifest: its copy of the scale, scale.yaml."""
    return (out / "scale.yaml").is_file()


def _stage_checks(out: Path, s: dict, todo) -> list[tuple[Path, dict, tuple[str, ...]]]:
    """(folder, settings, kinds) of every stage folder with a manifest that the stages ``todo`` write."""
    out_checks = []
    if "router" in todo:
        out_checks.append((out / "router", _settings(s, "model", "world", "router"), (stages.KIND_STAGE,)))
    if "heads" in todo:
        out_checks += [(out / "heads" / f"{arm}-s{seed}", _settings(s, "model", "world", "distill", arm=arm, seed=seed),
                        (stages.KIND_STAGE,)) for arm in s["arms"]["losses"] for seed in s["arms"]["seeds"]]
    if "systems" in todo:
        out_checks.append((out / "systems", _settings(s, "world", "arms"), (stages.KIND_STAGE,)))
    if "judge" in todo:
        out_checks.append((out / "judge", _settings(s, "judge"), (KIND_JUDGE,)))
    return out_checks


def check(out: Path, s: dict, todo=STAGES) -> None:
    """Read-only: ``out`` may take a run of scale ``s`` over the stages ``todo`` (see the module docstring)."""
    stages.check_root(out, stages.KIND_PERSONAS, s, _recognise, ignore=RUN_ONLY)
    if not (out / "manifest.json").is_file() and (out / "scale.yaml").is_file():
        old = load_scale(out / "scale.yaml")
        changed = stages.changed_keys(stages.scale_settings(old), stages.scale_settings(s), RUN_ONLY)
        if changed:
            raise ValueError(f"{out}: holds a run of the scale {old['name']!r} (its scale.yaml); the scale "
                             f"{s['name']!r} differs in {', '.join(changed)}; use a new --out")
    for folder, settings, kinds in _stage_checks(out, s, todo):
        stages.check_stage(folder, settings, kinds)
    if "judge" in todo:
        judge.check_out(out / "judge")
    for name in ("gen", "heads", "systems"):
        if (out / name).exists() and not (out / name).is_dir():
            raise ValueError(f"{out / name}: a file, not a folder")


def run(out: str | Path, scale: str | Path = "cpu", stages=STAGES) -> Path:
    """Every stage for a scale into ``out``, skipping what is complete (resumable).

    Validate first, write second: the stage names, the scale, the root and every stage folder are
    checked before ``out`` is created or its ``scale.yaml`` written; the run holds ``out``'s lock.
    """
    import torch

    todo = tuple(stages)
    unknown = [st for st in todo if st not in STAGES]
    if unknown:
        raise ValueError(f"unknown stage {unknown[0]!r}; stages: {', '.join(STAGES)}")
    s = load_scale(scale)
    out = Path(out)
    check(out, s, todo)
    with RunLock(out):
        check(out, s, todo)  # again under the lock: another writer may have finished meanwhile
        root = {"kind": _stages.KIND_PERSONAS, "scale": s["name"], "settings": _stages.scale_settings(s)}
        write_manifest(out, **root, status="running", stages=list(todo), updated=now_iso())
        torch.set_num_threads(int(s["generate"].get("threads", 1)))
        tmp = out / "scale.yaml.tmp"
        tmp.write_text(yaml.safe_dump(s, sort_keys=False))
        tmp.replace(out / "scale.yaml")
        for stage in todo:
            t0 = time.time()
            if stage == "router":
                stage_router(out, s)
            elif stage == "heads":
                for arm in s["arms"]["losses"]:
                    for seed in s["arms"]["seeds"]:
                        stage_heads(out, s, arm, seed)
            elif stage == "generate":
                stage_generate(out, s)
            elif stage == "systems":
                stage_systems(out, s)
            else:
                stage_judge(out, s)
            print(f"personas: {stage} done in {time.time() - t0:.1f}s", flush=True)
        write_manifest(out, **root, status="stages complete", stages=list(todo), updated=now_iso())
    return out
