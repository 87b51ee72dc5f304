"""Part III in miniature, stage by stage: models → pd → rl → eval.

``polyvox collab run --scale SCALE --out DIR`` (or :func:`run`) takes the stages in
order; each writes ``<out>/<stage>/manifest.json`` with its settings, status and seconds,
and a stage whose manifest says complete under the same settings is skipped (a folder
holding another scale's stage is refused). Every folder the run would write is checked first —
the root's kind (``collab pipeline``, in ``<out>/manifest.json``) and scale, each stage's kind and
settings — so a refused run writes nothing; the run holds ``<out>``'s one-writer lock throughout. Within ``eval`` every system is a resumable
trajectory run (:func:`.scheduler.run`), so a killed evaluation resumes question by question.
Scales: ``configs/collab/<scale>.yaml`` (``smoke``: seconds, plumbing only; ``h200``: the
recorded runs, one H200; ``cpu``: that recipe with a smaller test set, for a CPU; ``full``:
the study's scale, documented, not run here). A scale with an
``endpoints`` section evaluates OpenAI-compatible servers (``vllm serve`` of the Qwen3
agents with their PD/SLS LoRA adapters) instead of the miniature pool; its training
stages are then recorded as external (the adapters were trained elsewhere; the
miniature PD/RL functions take Hugging Face model paths unchanged).

Stages
- ``models``: tokenizer and the four base models (:mod:`.models`);
- ``pd``: protocol distillation per agent plus ``homo`` (:mod:`.models`): a LoRA adapter
  (``pd.mode: lora``, the default) or a full fine-tune (``pd.mode: full``, the recorded cpu run);
- ``rl``: pyramid supervision, GRPO (:func:`polyvox.train.grpo.train`) with a LoRA adapter —
  continuing the PD adapter, or fresh on the fully fine-tuned PD model — on the states each
  agent meets in the traces, reward 0.35 × correct + 0.65 × step judge
  (:func:`.judge.pyramid_reward` as ``RLConfig.reward_fn``);
- ``eval``: on the test questions of both tasks, greedy: each single model alone
  (``solo-<m>``), small and mid sampled once more for the cascade's agreement check
  (``sample-<m>``), and the collaborations ``cl-base`` (no training stage), ``cl-pd``
  (PD only), ``cl`` (PD + RL) and ``homo`` (three copies of mid, PD adapter ``homo``).
Majority vote and the cascade are computed from the solo and sample records
(:mod:`.analysis`): their answers and costs are those of the calls they would make.
"""
from __future__ import annotations

import json
import time
from pathlib import Path


from ... import stages
from ... import stages as _stages  # run() takes a parameter named stages
from ...backends import SamplingParams, make_backend
from ...records import Problem, RunLock, append_jsonl, now_iso, read_manifest, write_manifest
from . import scheduler as sched
from .tasks import collab_qa, collab_world

STAGES = ("models", "pd", "rl", "eval")
AGENTS = ("small", "mid", "big")
SCALE_DIR = Path(__file__).resolve().parents[4] / "configs" / "collab"


def load_scale(scale: str | Path) -> dict:
    """configs/collab/<scale>.yaml, or a YAML path."""
    return stages.load_scale("collab", scale, {"data", "models", "pd", "rl", "eval"}, {"threads", "endpoints"})


def problems(s: dict, split: str) -> list[Problem]:
    d = s["data"] if split == "train" else s["eval"]
    seed = s["data"]["seed"] + (0 if split == "train" else 100)
    return (collab_world(levels=s["data"]["world_levels"], per_level=d["world_per_level"], seed=seed, split=split)
            + collab_qa(n=d["qa_n"], seed=seed + 1, split=split))


def _settings(s: dict, *sections) -> dict:
    return json.loads(json.dumps({"scale": s["name"], "data": s["data"], **{k: s[k] for k in sections}}))


_begin = stages.stage_done


def stage_models(out: Path, s: dict) -> None:
    from .models import build_tokenizer, solo_pairs, train_base
    from .traces import sft_examples

    m = s["models"]
    train = problems(s, "train")
    pairs = solo_pairs(train)
    texts = [u + " " + a for u, a in pairs] + [u + " " + a for ex in sft_examples(train[:400]).values()
                                                for u, a in ex]
    tok = build_tokenizer(out, texts, m["vocab"])
    cards = {}
    for i, name in enumerate(("small", "mid", "big", "large")):
        spec = dict(m["sizes"][name])
        steps = spec.pop("steps")
        cards[name] = train_base(out, name, spec, tok, pairs, m["seq_len"], m["batch"], steps, m["lr"],
                                 s["data"]["seed"] + i)
    (out / "params.json").write_text(json.dumps({k: c["parameters"] for k, c in cards.items()}, indent=1) + "\n")


def stage_pd(out: Path, s: dict, models: Path) -> None:
    from .models import train_pd
    from .traces import sft_examples

    p = s["pd"]
    ex = sft_examples(problems(s, "train"), seed=s["data"]["seed"], slip=p["slip"])
    for i, a in enumerate(AGENTS):
        train_pd(models / a, out / a, ex[a], s["models"]["seq_len"], p["batch"], p["steps"], p["lr"], p["rank"],
                 s["data"]["seed"] + i, mode=p.get("mode", "lora"))
    every = [pair for a in AGENTS for pair in ex[a]]
    train_pd(models / "mid", out / "homo", every, s["models"]["seq_len"], p["batch"], p["steps"], p["lr"],
             p["rank"], s["data"]["seed"] + 7, mode=p.get("mode", "lora"))


def rl_problems(s: dict, agent: str, n: int) -> list[Problem]:
    """The states ``agent`` meets in the traces of training questions, as Problems for GRPO."""
    import random

    from .traces import coordination_trace

    rng = random.Random(s["data"]["seed"] + 5)
    out = []
    for p in problems(s, "train"):
        for t in coordination_trace(p, rng, s["pd"]["slip"]):
            if t["agent"] == agent and not t["slipped"]:
                out.append(Problem(f"{p.id}-{agent}-{len(out)}", t["prompt"], p.gold, dict(p.metadata)))
    rng.shuffle(out)
    return out[:n]


def stage_rl(out: Path, s: dict, models: Path, pd: Path) -> None:
    from ...train import grpo
    from .judge import pyramid_reward

    r = s["rl"]
    full = s["pd"].get("mode", "lora") == "full"
    for a in AGENTS:
        # from the PD adapter on the base model, or a fresh LoRA on the fully fine-tuned PD model
        cfg = grpo.RLConfig(model=str(pd / a if full else models / a), arm="think", out=str(out / a),
                            init_adapter=None if full else str(pd / a),
                            stages=[grpo.Stage("pyramid", rl_problems(s, a, r["problems"]), r["steps"])],
                            lora_rank=s["pd"]["rank"], lora_alpha=2 * s["pd"]["rank"], group_size=r["group"],
                            prompts_per_step=r["prompts"], max_completion_length=r["max_tokens"],
                            learning_rate=r["lr"], eval_every=10 ** 6, save_every=10 ** 6, seed=s["data"]["seed"],
                            reward_fn=pyramid_reward)
        grpo.train(cfg, progress=False)


def _backend(model: Path, adapter: Path | None, e: dict):
    return make_backend("transformers", str(model), str(adapter) if adapter else None,
                        batch_size=e["batch_size"], dtype="float32")


def solo_run(out: Path, probs: list[Problem], name: str, backend, params: SamplingParams, settings: dict,
             seed: int = 0) -> Path:
    """One call per question (a single model alone), written as one-turn trajectories (resumable)."""
    from ...backends.base import Request
    from .protocol import parse_turn

    settings = json.loads(json.dumps({**settings, "agent": name, "temperature": params.temperature,
                                      "max_tokens": params.max_tokens, "seed": seed,
                                      "questions": sorted(p.id for p in probs)}))
    sched.check_settings(out, settings)  # validate first: a refused run writes nothing
    with RunLock(out):
        sched.check_settings(out, settings)
        done = sched._existing(out / sched.TRAJECTORIES)
        started = now_iso()
        write_manifest(out, kind=stages.KIND_TRAJECTORIES, settings=settings, started=started, status="running")
        todo = [p for p in probs if p.id not in done]
        t0 = time.time()
        for b in range(0, len(todo), 64):
            batch = todo[b:b + 64]
            reqs = [Request.of(backend.prompt("think", p.text), sched.turn_seed(seed, p.id, 0)) for p in batch]
            comps = backend.generate(reqs, params)
            recs = []
            for p, c in zip(batch, comps):
                turn = parse_turn(c.text, (name,))
                recs.append({"id": p.id, "question": p.text, "gold": p.gold, "first": name,
                             "status": "confirmed" if turn.answer else "no_answer", "final": turn.answer,
                             "n_turns": 1, "metadata": p.metadata,
                             "turns": [{"agent": name, "attempt": 0, "prompt_tokens": c.prompt_tokens,
                                        "completion_tokens": c.completion_tokens, "answer": turn.answer,
                                        "action": None, "target": None, "note": "", "violation": None,
                                        "forced_handoff": None, "latency_s": round(c.latency_s, 4),
                                        "text": c.text}]})
            append_jsonl(out / sched.TRAJECTORIES, recs)
        write_manifest(out, kind=stages.KIND_TRAJECTORIES, settings=settings, started=started, finished=now_iso(),
                       status="complete", records=len(probs), seconds=round(time.time() - t0, 2))
    return out


def eval_systems(models: Path, pd: Path, rl: Path, full: bool = False) -> dict:
    """CL systems: agent name → (model folder, adapter folder or None)."""
    if full:  # PD fine-tuned whole models; RL adapters on top of them
        return {"cl-base": {a: (models / a, None) for a in AGENTS},
                "cl-pd": {a: (pd / a, None) for a in AGENTS},
                "cl": {a: (pd / a, rl / a / "pyramid" / "adapter") for a in AGENTS},
                "homo": {a: (pd / "homo", None) for a in AGENTS}}
    return {"cl-base": {a: (models / a, None) for a in AGENTS},
            "cl-pd": {a: (models / a, pd / a) for a in AGENTS},
            "cl": {a: (models / a, rl / a / "pyramid" / "adapter") for a in AGENTS},
            "homo": {a: (models / "mid", pd / "homo") for a in AGENTS}}


def _endpoint(spec: dict):
    """An OpenAI-compatible agent (full scale): served name, base URL, optional key variable."""
    return make_backend("openai", spec["model"], base_url=spec["base_url"], api_key_env=spec.get("api_key_env"),
                        concurrency=spec.get("concurrency", 16))


def stage_eval(out: Path, s: dict, models: Path, pd: Path, rl: Path, only: list[str] | None = None) -> None:
    e = s["eval"]
    test = problems(s, "test")
    settings = _settings(s, "eval")
    greedy = SamplingParams(e["max_tokens"], 0.0)
    served = s.get("endpoints") or {}

    def solo_backend(m):
        return _endpoint(served["solo"][m]) if served else _backend(models / m, None, e)

    for m in ("small", "mid", "big", "large"):
        if only and f"solo-{m}" not in only:
            continue
        solo_run(out / f"solo-{m}", test, m, solo_backend(m), greedy, settings)
    for m in ("small", "mid"):
        if only and f"sample-{m}" not in only:
            continue
        solo_run(out / f"sample-{m}", test, m, solo_backend(m),
                 SamplingParams(e["max_tokens"], e["cascade_temperature"]), settings, seed=1)
    systems = ({k: v for k, v in served.items() if k != "solo"} if served
               else eval_systems(models, pd, rl, s["pd"].get("mode", "lora") == "full"))
    for system, spec in systems.items():
        if only and system not in only:
            continue
        agents = ({a: _endpoint(x) for a, x in spec.items()} if served
                  else {a: _backend(mdl, ad, e) for a, (mdl, ad) in spec.items()})
        sc = sched.Scheduler(agents, "small", t_max=e["t_max"], max_retries=e["max_retries"], params=greedy,
                             seed=s["data"]["seed"])
        sched.run(out / system, test, sc, {**settings, "system": system})


SECTIONS = {"models": ("models",), "pd": ("models", "pd"), "rl": ("models", "pd", "rl"),
            "eval": ("models", "pd", "rl", "eval")}
RUN_ONLY = ("threads",)  # scale keys that change no output: a rerun may change them


def _recognise(out: Path) -> bool:
    """A collab run recorded before the root manifest: a stage manifest with the scale's data settings."""
    for stage in STAGES:
        settings = read_manifest(out / stage).get("settings") if (out / stage / "manifest.json").is_file() else None
        if isinstance(settings, dict) and "scale" in settings and "data" in settings:
            return True
    return False


def check(out: Path, s: dict, todo=STAGES, models_dir: str | Path | None = None) -> None:
    """Read-only: ``out`` may take a run of scale ``s`` over the stages ``todo`` (see the module docstring)."""
    stages.check_root(out, stages.KIND_COLLAB, s, _recognise, ignore=RUN_ONLY)
    for stage in todo:
        stages.check_stage(out / stage, _settings(s, *SECTIONS[stage]))
    if models_dir is not None and not Path(models_dir).is_dir():
        raise ValueError(f"{models_dir}: no such folder of trained base models (--models)")


def run(out: str | Path, scale: str | Path = "smoke", stages=STAGES, models_dir: str | Path | None = None) -> dict:
    """Run the stages in order into out/<stage>/ (skipping complete ones); returns seconds per stage.

    Validate first, write second: the stage names, the scale, the root and the stage folders are
    checked before anything is written; the run holds ``out``'s one-writer lock throughout.
    """
    todo = tuple(st for st in STAGES if st in stages)
    unknown = [st for st in stages if st not in STAGES]
    if unknown:
        raise ValueError(f"unknown stage {unknown[0]!r}; stages: {', '.join(STAGES)}")
    s = load_scale(scale)
    out = Path(out)
    check(out, s, todo, models_dir)
    with RunLock(out):
        check(out, s, todo, models_dir)  # again under the lock: another writer may have finished meanwhile
        root = {"kind": _stages.KIND_COLLAB, "scale": s["name"], "settings": _stages.scale_settings(s)}
        write_manifest(out, **root, status="running", stages=list(todo), updated=now_iso())
        times = _run(out, s, todo, models_dir)
        write_manifest(out, **root, status="stages complete", stages=list(todo), updated=now_iso())
    return times


def _run(out: Path, s: dict, todo: tuple[str, ...], models_dir) -> dict:
    if s.get("threads"):
        import torch

        # a small model on a shared CPU: more intra-op threads than free cores make each step
        # ~40× slower (OpenMP threads spin waiting for one another); the scale pins the count
        torch.set_num_threads(int(s["threads"]))
    models = Path(models_dir) if models_dir else out / "models"
    times = {}
    for stage in todo:
        folder = out / stage
        settings = _settings(s, *SECTIONS[stage])
        if _begin(folder, settings):
            times[stage] = read_manifest(folder).get("seconds")
            continue
        folder.mkdir(parents=True, exist_ok=True)
        started, t0 = now_iso(), time.time()
        write_manifest(folder, kind=_stages.KIND_STAGE, settings=settings, started=started, status="running")
        if s.get("endpoints") and stage != "eval":
            write_manifest(folder, kind=_stages.KIND_STAGE, settings=settings, started=started, finished=now_iso(),
                           status="complete", seconds=0.0,
                           note="full scale: this stage's models are served at the scale's endpoints")
            times[stage] = 0.0
            continue
        if stage == "models":
            stage_models(folder, s)
        elif stage == "pd":
            stage_pd(folder, s, models)
        elif stage == "rl":
            stage_rl(folder, s, models, out / "pd")
        else:
            stage_eval(folder, s, models, out / "pd", out / "rl")
        times[stage] = round(time.time() - t0, 1)
        write_manifest(folder, kind=_stages.KIND_STAGE, settings=settings, started=started, finished=now_iso(),
                       status="complete", seconds=times[stage])
        print(f"collab: stage {stage} done in {times[stage]} s", flush=True)
    return times
