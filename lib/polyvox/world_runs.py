"""The miniature replication, stage by stage: models → panel RL → evaluations → bands → hill-climbs.

Each stage writes into ``<out>/<stage>/`` (JSONL + manifest) and can be run alone
(``polyvox world STAGE --out DIR --scale SCALE``); ``all`` runs them in order and
skips a stage whose manifest says complete. Scales: ``smoke`` (CPU, a minute:
checks the plumbing, numbers mean nothing) and ``h200`` (the recorded runs).

Record shapes follow the published ones so Part I's code reads them:
- ``eval/<system>/rollouts.jsonl`` + ``graded.jsonl`` (polyvox Sample / GradedSample),
- ``bands/<arm>/per_problem.jsonl`` (uid, source, n_samples, n_correct, band) + summary.json,
- ``hillclimb-<arm>/heldout_trajectory.jsonl`` (step, heldout_mean, per_level).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path


from . import metrics, rl, world
from .records import GradedSample, Sample, append_jsonl, now_iso, read_json, write_manifest

SCALES = {
    "smoke": dict(n_per_level=150, hidden=64, layers=2, vocab=800, seq_len=256, batch=16, base_steps=20,
                  think_steps=10, lora_rank=4, group=4, prompts=2, stage_steps=(2, 2), climb_steps=2,
                  max_tokens=48, eval_per_level=3, eval_n=2, pool_per_level=3, heldout_per_level=2,
                  heldout_samples=1, eval_every=1, lr=2e-4),
    "h200": dict(n_per_level=6000, hidden=256, layers=6, vocab=2048, seq_len=512, batch=128, base_steps=1200,
                 think_steps=300, lora_rank=32, group=8, prompts=8, stage_steps=(25, 25), climb_steps=20,
                 max_tokens=256, eval_per_level=30, eval_n=8, pool_per_level=60, heldout_per_level=25,
                 heldout_samples=2, eval_every=5, lr=5e-4),
}
EVAL_LEVELS = (1, 2, 3, 4, 5, "olympiad")
POOL_LEVELS = (3, 4, 5, "olympiad")


def _done(folder: Path) -> bool:
    m = folder / "manifest.json"
    return m.exists() and read_json(m).get("status") == "complete"


def build_models(out: Path, scale: str, seed: int = 0) -> None:
    from .world_models import build

    s = SCALES[scale]
    build(out / "models", seed=seed, n_per_level=s["n_per_level"], hidden=s["hidden"], layers=s["layers"],
          vocab_size=s["vocab"], seq_len=s["seq_len"], batch=s["batch"], base_steps=s["base_steps"],
          think_steps=s["think_steps"])
    write_manifest(out / "models", status="complete", scale=scale, seed=seed, finished=now_iso())


def _problems(levels, per_level: int, seed: int, split: str):
    return [world.to_problem(p) for p in world.generate(per_level, seed=seed, levels=levels, split=split)]


def panel_rl(out: Path, scale: str, seed: int = 0) -> None:
    """tiny-panel: LoRA GRPO from tiny-base on the raw panel prompt, easy stage then hard stage."""
    s = SCALES[scale]
    easy = _problems((1, 2), s["n_per_level"] // 10, seed + 10, "train")
    hard = _problems((3, 4, 5), s["n_per_level"] // 10, seed + 11, "train")
    heldout = _problems((1, 2, 3, 4, 5), s["heldout_per_level"], seed + 12, "test")
    cfg = rl.RLConfig(model=str(out / "models/tiny-base"), arm="panel", out=str(out / "panel-rl"),
                      stages=[rl.Stage("easy", easy, s["stage_steps"][0]), rl.Stage("hard", hard, s["stage_steps"][1])],
                      lora_rank=s["lora_rank"], lora_alpha=2 * s["lora_rank"], group_size=s["group"],
                      prompts_per_step=s["prompts"], max_completion_length=s["max_tokens"], eval_every=s["eval_every"],
                      heldout=heldout, heldout_samples=s["heldout_samples"], learning_rate=s["lr"],
                      save_every=1000, seed=seed)
    rl.train(cfg)


def _sample_system(model_dir: Path, adapter: Path | None, arm: str, problems, n: int, max_tokens: int,
                   seed: int, out: Path) -> None:
    """Sample n per problem with a loaded model; write rollouts.jsonl and graded.jsonl in polyvox's schema."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .sampling import Request, SamplingParams, generate_batched

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).to(device)
    model.eval()
    reqs, keys = [], []
    for p in problems:
        prompt = rl.prompt_for(arm, p.text, tok)
        for i in range(n):
            reqs.append(Request(prompt, seed=seed + i))
            keys.append((p, i, prompt))
    outs = generate_batched(model, tok, reqs, SamplingParams(max_tokens, 1.0), 512, device)
    out.mkdir(parents=True, exist_ok=True)
    samples, graded = [], []
    for (p, i, prompt), c in zip(keys, outs):
        _, correct, valid = rl.reward(arm, c.text, p.gold)
        sm = Sample(p.id, i, hashlib.sha256(prompt.encode()).hexdigest()[:16], c.text, c.prompt_tokens,
                    c.completion_tokens, c.finish_reason, round(c.latency_s, 5),
                    {"level": str(p.metadata.get("level")), "format_valid": valid})
        samples.append(sm)
        graded.append(GradedSample(**asdict(sm), correct=bool(correct), extracted=None, grade_status="ok"))
    for name in ("rollouts.jsonl", "graded.jsonl"):
        (out / name).unlink(missing_ok=True)
    append_jsonl(out / "rollouts.jsonl", samples)
    append_jsonl(out / "graded.jsonl", graded)
    write_manifest(out, status="complete", model=str(model_dir.name), adapter=str(adapter) if adapter else None,
                   arm=arm, n=n, max_tokens=max_tokens, temperature=1.0, seed=seed, problems=len(problems),
                   finished=now_iso())


def evaluate(out: Path, scale: str, seed: int = 0) -> None:
    """tiny-panel (panel prompt) and tiny-think (chat, thinking) on the same test problems, n samples each."""
    s = SCALES[scale]
    problems = _problems(EVAL_LEVELS, s["eval_per_level"], seed + 20, "test")
    _sample_system(out / "models/tiny-base", out / "panel-rl/hard/adapter", "panel", problems, s["eval_n"],
                   s["max_tokens"], seed, out / "eval/tiny-panel")
    _sample_system(out / "models/tiny-think", None, "think", problems, s["eval_n"], s["max_tokens"], seed,
                   out / "eval/tiny-think")


def bands(out: Path, scale: str, seed: int = 0) -> None:
    """G = 8 samples per pool problem for both arms; per-problem bands in the published schema."""
    s = SCALES[scale]
    pool = _problems(POOL_LEVELS, s["pool_per_level"], seed + 30, "train")
    arms = {"panel": (out / "models/tiny-base", out / "panel-rl/easy/adapter"),
            "think": (out / "models/tiny-think", None)}
    for arm, (model_dir, adapter) in arms.items():
        folder = out / "bands" / arm
        _sample_system(model_dir, adapter, arm, pool, 8, s["max_tokens"], seed, folder / "samples")
        rows = {}
        for line in (folder / "samples/graded.jsonl").read_text().splitlines():
            r = json.loads(line)
            row = rows.setdefault(r["problem_id"], {"uid": r["problem_id"], "source": f"level-{r['metadata']['level']}",
                                                    "n_samples": 0, "n_correct": 0})
            row["n_samples"] += 1
            row["n_correct"] += int(r["correct"])
        for row in rows.values():
            row["band"] = metrics.variance_band(row["n_correct"], row["n_samples"])
        (folder / "per_problem.jsonl").unlink(missing_ok=True)
        append_jsonl(folder / "per_problem.jsonl", list(rows.values()))
        counts = {b: sum(r["band"] == b for r in rows.values()) for b in metrics.BANDS}
        (folder / "summary.json").write_text(json.dumps({"arm": arm, "n_problems": len(rows), "bands": counts,
                                                         "n_samples_per_problem": 8}, indent=2) + "\n")


def hillclimb(out: Path, scale: str, arm: str, seed: int = 0) -> None:
    """RL on the arm's own variance band; held-out hill-climb every eval_every steps."""
    s = SCALES[scale]
    pool = {p.id: p for p in _problems(POOL_LEVELS, s["pool_per_level"], seed + 30, "train")}
    band_ids = [json.loads(l)["uid"] for l in (out / "bands" / arm / "per_problem.jsonl").read_text().splitlines()
                if json.loads(l)["band"] == "variance_band"]
    fallback = False
    if not band_ids:
        if scale != "smoke":
            raise RuntimeError(f"{arm}: empty variance band; nothing to train on")
        band_ids, fallback = list(pool), True  # smoke runs check plumbing: random models have no band
    heldout = _problems(POOL_LEVELS, s["heldout_per_level"], seed + 40, "test")
    model, init = ((out / "models/tiny-base", out / "panel-rl/easy/adapter") if arm == "panel"
                   else (out / "models/tiny-think", None))
    cfg = rl.RLConfig(model=str(model), arm=arm, out=str(out / f"hillclimb-{arm}"), init_adapter=str(init) if init else None,
                      stages=[rl.Stage("band", [pool[i] for i in band_ids], s["climb_steps"])],
                      lora_rank=s["lora_rank"], lora_alpha=2 * s["lora_rank"], group_size=s["group"],
                      prompts_per_step=s["prompts"], max_completion_length=s["max_tokens"], eval_every=s["eval_every"],
                      heldout=heldout, heldout_samples=s["heldout_samples"], learning_rate=s["lr"], save_every=1000,
                      seed=seed)
    rl.train(cfg)
    if fallback:
        (out / f"hillclimb-{arm}" / "SMOKE_BAND_WAS_EMPTY").write_text("trained on the whole pool\n")


STAGES = ("models", "panel-rl", "eval", "bands", "hillclimb-panel", "hillclimb-think")


def run(out: str | Path, scale: str = "smoke", stages=STAGES, seed: int = 0) -> Path:
    out = Path(out)
    fns = {"models": build_models, "panel-rl": panel_rl, "eval": evaluate, "bands": bands,
           "hillclimb-panel": lambda o, sc, seed: hillclimb(o, sc, "panel", seed),
           "hillclimb-think": lambda o, sc, seed: hillclimb(o, sc, "think", seed)}
    for stage in stages:
        if _done(out / stage):
            continue
        fns[stage](out, scale, seed)
        if stage in ("eval", "bands"):  # the other stages write their own manifest
            write_manifest(out / stage, status="complete", scale=scale, seed=seed, finished=now_iso())
    return out
