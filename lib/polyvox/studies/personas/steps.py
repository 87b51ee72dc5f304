"""The work of the persona pipeline's stages (router, heads, generate, systems); :mod:`.pipeline` runs them.

Each function does one stage's work into its folder and returns the fields its record adds (or
None); the stage's record (settings, inputs, status, seconds) is the pipeline's to write
(:class:`polyvox.stages.Pipeline`). See :mod:`.pipeline` for the layout; the cap and sweep stages
(issue 22) are in :mod:`.sweep`.

A head's recipe (:func:`recipe`, :func:`grid`): learning rate, steps and the remedy for the reverse
KL's vanishing first-token gradient (:mod:`polyvox.train.distill_losses`): the loss temperature τ,
GKD's generalized JSD(β) (:func:`loss_of`: the reverse arm at β, the forward arm at its mirror
1 − β) and GKD's student-sample fraction λ (Agarwal et al., 2024, "On-Policy Distillation of Language
Models: Learning from Self-Generated Mistakes", arXiv:2306.13649). Both arms take the same remedy
fields, so a scale's arms differ only in direction; the sweep then tunes each arm on validation.
"""
from __future__ import annotations

import json
from pathlib import Path

from ... import adapters, runs
from ...backends import SamplingParams, accepted_options, make_backend
from ...backends.base import Backend
from ...formats import Prompt
from ...records import append_jsonl, read_json, read_jsonl
from . import router as R
from . import world as pw

REPO = Path(__file__).resolve().parents[4]
PAIRS = ("warm+concise", "impersonal+concise", "warm+thorough", "impersonal+thorough")
RECIPES = {  # seed 002: weights on (warm, impersonal, concise, thorough), fixed on validation for run21
    "warm+concise": (0.75, -0.25, 0.75, -0.25),
    "impersonal+concise": (-0.25, 0.75, 0.75, -0.25),
    "warm+thorough": (0.375, 0.125, -0.25, 0.75),
    "impersonal+thorough": (0.125, 0.375, -0.25, 0.75),
}
SYSTEMS = ("base", "head_warm", "head_impersonal", "head_concise", "head_thorough",
           "router_head", "router_persona", "oracle_head", "oracle_persona")
VALIDATION_BATCH = 64  # validation users' prompts answered per generate call while a head is selected


def _model(s: dict) -> str:
    p = Path(s["model"]["path"])
    return str(p if p.is_absolute() or not (REPO / p).exists() else REPO / p)


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


# ---------------------------------------------------------------- heads

class TrainingModel:
    """The model being distilled, as a local backend of the sampling layer: its tokenizer, and
    :func:`polyvox.backends.hf.generate_batched` (the transformers backend's generation) in batches of
    :data:`VALIDATION_BATCH`; wrapped in :class:`ChatBackend` for tiny-chat's prompts."""

    name = "transformers"

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer

    def generate(self, requests, params):
        from ...backends.hf import generate_batched

        return generate_batched(self.model, self.tokenizer, requests, params, VALIDATION_BATCH, str(self.model.device))


def _validation_scorer(tok, pole: str, val: list[pw.PersonaPrompt], max_tokens: int):
    """A head's validation score at a checkpoint: greedy replies sampled in memory as
    :func:`polyvox.runs.sample` samples (:func:`polyvox.runs.sample_texts`), each scored by its pole's
    match plus its right number (:func:`.analysis.correct`, the task's grader); logged beside it, the
    share of replies that show the pole (``style``: :func:`.world.style_rate`)."""
    from .analysis import correct

    golds = [str(p.problem.answer) for p in val]
    n_steps = [len(p.problem.steps) for p in val]

    def score(model, step):
        texts = [x.completion for x in runs.sample_texts(ChatBackend(TrainingModel(model, tok)), "plain", val,
                                                         SamplingParams(max_tokens, 0.0))]
        return {"score": sum(pw.pole_match(pole, t, n) + ok for t, n, ok in zip(texts, n_steps, correct(texts, golds)))
                / len(val), "style": pw.style_rate(pole, texts, n_steps)}
    return score


SUMMARY = ("selected_step", "validation", "step_seconds_mean", "step_seconds_median", "teacher_sequence_seconds",
           "mean_sequence_tokens", "examples")  # what a head's record gives its arm-seed's record
# issue 22's distill keys; absent, the recorded recipe's values (configs without them keep their stage settings)
REMEDY = {"temperature": 1.0, "jsd_beta": None, "student_sample_fraction": 0.0}
SWEPT = ("lr", "steps", *REMEDY)  # a recipe's keys; distill.sweep may give a list of values for each
TRAINED_AT = 0.9  # issue 22: a head is trained when its loss falls and it shows its style on ≥ 90 % of validation


def remedy_scale(s: dict) -> bool:
    """Whether the scale names any of issue 22's distill keys (a remedy field, ``sweep`` or ``cap``)."""
    return any(k in s["distill"] for k in (*REMEDY, "sweep", "cap"))


def recipe(s: dict) -> dict:
    """The scale's own recipe: lr, steps and the remedy fields (absent: :data:`REMEDY`)."""
    d = s["distill"]
    return {"lr": d["lr"], "steps": d["steps"], **{k: d.get(k, v) for k, v in REMEDY.items()}}


def grid(s: dict) -> list[dict]:
    """The sweep's points in order: the product of ``distill.sweep``'s lists in :data:`SWEPT` order (the
    last varying fastest); an axis not given keeps the recipe's value."""
    import itertools

    base, sweep = recipe(s), s["distill"].get("sweep") or {}
    return [dict(zip(SWEPT, v)) for v in itertools.product(*[sweep.get(k, [base[k]]) for k in SWEPT])]


def sweep_seed(s: dict) -> int:
    """The sweep heads' seed: ``distill.sweep.seed``, by default one past the largest test seed. Never a test
    seed (:func:`check_recipe`): a test head is not the head its arm's recipe was picked on."""
    return (s["distill"].get("sweep") or {}).get("seed", max(s["arms"]["seeds"]) + 1)


def loss_of(arm: str, jsd_beta: float | None) -> tuple[str, float | None]:
    """An arm's loss and β: the plain KL (``arm``) when ``jsd_beta`` is None; else GKD's generalized JSD
    (Agarwal et al., 2024, arXiv:2306.13649, Eq. 1), the reverse arm at β and the forward arm at 1 − β.
    JSD_β(P, Q) = β KL(P‖M) + (1 − β) KL(Q‖M) with M = βP + (1 − β)Q equals JSD_{1−β}(Q, P), so the
    forward arm's loss is the reverse arm's with teacher and student exchanged: the arms still differ
    only in direction (β = 1: the reverse KL, and its mirror β = 0 the forward KL)."""
    if jsd_beta is None:
        return arm, None
    return "jsd", float(jsd_beta) if arm == "reverse" else round(1.0 - float(jsd_beta), 12)


def check_recipe(s: dict) -> None:
    """Refuse (one line) a sweep seed among the test seeds (:func:`sweep_seed`), and a loss temperature
    τ > 1 — the recipe's or the sweep's — with ``top_k`` below the model's vocabulary (read from its
    local config.json): the ``rest`` atom then lets a tempered student flatten its first token
    (:mod:`polyvox.train.distill_losses`)."""
    if "sweep" in s["distill"] and sweep_seed(s) in s["arms"]["seeds"]:
        raise ValueError(f"scale {s['name']!r}: distill.sweep.seed {sweep_seed(s)} is one of arms.seeds: the test "
                         "heads must not be the heads their recipe was picked on; choose another seed")
    taus = {p["temperature"] for p in grid(s)}
    config = Path(_model(s)) / "config.json"
    vocab = json.loads(config.read_text()).get("vocab_size") if config.is_file() else None
    k = s["distill"]["top_k"]
    if max(taus) > 1 and vocab and k < vocab:
        raise ValueError(f"scale {s['name']!r}: distill.top_k {k} with a loss temperature {max(taus):g} > 1: the "
                         f"rest atom lets a tempered student flatten (polyvox.train.distill_losses); set "
                         f"distill.top_k to the vocabulary ({vocab})")


def head_record(folder: Path) -> dict:
    """A trained head's summary (its manifest's :data:`SUMMARY`) and issue 22's facts from its step log:
    the first and last loss, the median gradient norms (LoRA total; first response token's logits), the
    style rate of the selected checkpoint's validation replies, whether the loss falls
    (:func:`.world.loss_falls`) and whether the head trained (:func:`.world.head_trained` at :data:`TRAINED_AT`)."""
    import statistics

    m = read_json(folder / "manifest.json")
    log = read_jsonl(folder / "train_log.jsonl")
    losses = [r.get("loss") for r in log]
    style = next((r.get("validation_style") for r in log if r["step"] == m.get("selected_step")), None)

    def median(key):
        xs = [r[key] for r in log if r.get(key) is not None]
        return round(statistics.median(xs), 6) if xs else None

    return {**{k: m.get(k) for k in SUMMARY}, "loss_first": losses[0], "loss_last": losses[-1],
            "grad_norm_median": median("grad_norm"), "first_token_grad_norm_median": median("first_token_grad_norm"),
            "style_rate": style, "loss_falls": pw.loss_falls(losses),
            "trained": style is not None and pw.head_trained(losses, style, TRAINED_AT)}


def train_poles(folder: Path, s: dict, arm: str, seed: int, point: dict) -> dict:
    """The four pole heads of one arm under one recipe ``point`` (:data:`SWEPT`), trained on the train
    users' prompts and selected on validation users' prompts; per pole, :func:`head_record`. A head
    complete under the same settings (its own manifest) is kept when an interrupted stage is resumed."""
    from transformers import AutoTokenizer

    from ...train import distill

    model = _model(s)
    tok = AutoTokenizer.from_pretrained(model)
    train = _prompts(s, "train")
    d = s["distill"]
    val = _prompts(s, "validation")[: d["validation_prompts"]]
    loss, beta = loss_of(arm, point["jsd_beta"])
    out = {}
    for pole in pw.POLES:
        cfg = distill.DistillConfig(model=model, out=str(folder / pole), loss=loss, beta=beta, top_k=d["top_k"],
                                    lora_rank=d["lora_rank"], lora_alpha=d["lora_alpha"],
                                    learning_rate=point["lr"], steps=point["steps"], batch=d["batch"],
                                    max_new_tokens=s["generate"]["max_tokens"], save_every=d["save_every"],
                                    seed=seed, teacher_temperature=d["teacher_temperature"], device=_device(),
                                    temperature=point["temperature"],
                                    student_sample_fraction=point["student_sample_fraction"])
        done = read_json(folder / pole / "manifest.json") if (folder / pole / "manifest.json").is_file() else {}
        if not (done.get("status") == "complete" and done.get("settings") == distill.manifest_settings(cfg)):
            distill.train(cfg, [R.chat_prompt(tok, p.text) for p in train],
                          [R.chat_prompt(tok, p.text, pw.CARDS[pole]) for p in train],
                          select_fn=_validation_scorer(tok, pole, val, s["generate"]["max_tokens"]), progress=False)
        out[pole] = head_record(folder / pole)
    return out


def stage_heads(out: Path, s: dict, arm: str, seed: int) -> dict:
    """The four pole heads of one arm and seed under the arm's recipe (the sweep's pick when the scale
    has ``distill.sweep``, else the scale's own), then the pairs' mixes."""
    from .sweep import check_picked, chosen, refuse_cap

    refuse_cap(out, s)
    if "sweep" in s["distill"]:
        check_picked(out, s)
    point = chosen(out)[arm] if "sweep" in s["distill"] else recipe(s)
    point = {k: point[k] for k in SWEPT}
    folder = out / "heads" / f"{arm}-s{seed}"
    heads = train_poles(folder, s, arm, seed, point)
    model = _model(s)
    for pair in PAIRS:
        adapters.save_mix(model, {p: folder / p / "adapter" for p in pw.POLES}, dict(zip(pw.POLES, RECIPES[pair])),
                          folder / f"mix_{pair}")
    return {"recipe": point, "heads": heads}


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


def head_unit_name(prefix: str, ptype: str | None, tuned: bool) -> str:
    """The generation unit that answers as the heads of ``prefix`` (``<arm>-s<seed>``) for a preference type: its
    head, its pair's mix (the mix tuned on validation when ``tuned``: :mod:`.mixes`), or ``base`` for no pole."""
    if not ptype or ptype == "none":
        return "base"
    return f"{prefix}-tuned-{ptype}" if tuned and ptype in PAIRS else f"{prefix}-{ptype}"


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
            if s.get("mixes") is not None:  # issue 22: the recipes tuned on validation (.mixes), beside the study's
                for pair in PAIRS:
                    u[f"{arm}-s{seed}-tuned-{pair}"] = (str(out / "mixes" / f"{arm}-s{seed}" / f"mix_{pair}"), None)
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
    """A generation unit's replies by prompt id, read by :func:`polyvox.runs.load`."""
    return {x.problem_id: x.completion for x in runs.load(out / "gen" / name).samples}


def systems_rows(out: Path, s: dict, arm: str, seed: int) -> list[dict]:
    picks = {r["prompt_id"]: tuple(r["selected"]) for r in read_jsonl(out / "router" / "test_pred.jsonl")}
    prefix = f"{arm}-s{seed}"
    cache: dict = {}

    def text(unit, pid):
        if unit not in cache:
            cache[unit] = _unit_texts(out, unit)
        return cache[unit][pid]

    tuned = s.get("mixes") is not None  # a two-pole head is the mix tuned on validation (.mixes)

    def head_unit(poles):
        return head_unit_name(prefix, pw.type_of(poles), tuned)

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
