"""GRPO with a LoRA adapter (TRL ``GRPOTrainer`` + ``peft``), the panel study's recipe in miniature.

Algorithm (per step): take ``prompts_per_step`` problems, sample ``group_size``
completions each at temperature 1, score each with the arm's reward, normalise
rewards within the group (advantage = (r − mean) / std), and take a clipped
policy-gradient step on the LoRA weights only.

Rewards
- panel arm (raw panel prompt on the base model): correct + tag_coef × (tags_valid − 1),
  tags valid = both blocks non-empty, debate before answer (the study's reward);
- think arm (chat template, thinking on): correct + tag_coef × (think_valid − 1),
  think valid = a non-empty closed ``<think>`` block followed by a boxed answer.
Correctness is the integer rule (last integer in ``<answer>``, else in the last
``\\boxed{}``) against the world's integer answers.

Departures from textbook GRPO (Shao et al. 2024), all TRL 1.16 defaults stated
here so the run is readable: no KL penalty (``beta = 0``), the DAPO token-level
loss normalisation (``loss_type = "dapo"``), one policy update per generation
batch (``num_iterations = 1``, so the ratio is 1 and clipping is inactive), and
groups whose rewards are all equal contribute no gradient — which is why RL is
run on each model's *variance band*.

Stages run in sequence (an easy stage then a harder one, as the study's GSM8K
then MATH stages); each continues the previous stage's adapter. Per step, a JSONL
line (reward mean and spread, format-valid rate, accuracy, completion lengths);
every ``eval_every`` steps a held-out evaluation line; the adapter is saved (safetensors) every
``save_every`` steps into ``<stage>/step-<n>/`` and at the end of each stage into ``<stage>/adapter/``.
TRL's own checkpoints are off (``save_strategy="no"``): they pickle the optimizer, scheduler and RNG
state, and a run is not resumed mid-way, so nothing would read them.

Data-parallel under ``accelerate launch`` or ``torchrun`` (:mod:`polyvox.train.parallel`): the
global batch stays ``prompts_per_step × group_size`` completions per step, each of N processes
generating and scoring ``prompts_per_step × group_size / N`` of them (a contiguous slice of the
batch, whole groups when N divides ``prompts_per_step``); TRL gathers all rewards before
normalising within each group. The main process alone locks the folder and writes the manifest
(with ``world_size``), the step log (statistics of the gathered batch, ``completions`` = the
global batch; the ``fastgen_*`` timings are the main process's own), the held-out lines and the
adapters; the held-out evaluation is sharded by problem across the processes and gathered (each
sample keeps its own seed, so the result is the one-process result).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .. import formats, grading
from ..adapters import save_adapter
from ..records import KIND_RL, append_jsonl, check_folder_kind, now_iso, portable_path, write_manifest
from ..statuses import RunStatus
from . import parallel
from .logs import finite_or_null



@dataclass
class Stage:
    name: str
    problems: list  # polyvox.records.Problem
    steps: int
    grading: str = "integer"  # a polyvox.grading grader: integer (the world), gsm8k, math


@dataclass
class RLConfig:
    model: str
    arm: str  # "panel" | "think"
    out: str
    stages: list[Stage] = field(default_factory=list)
    init_adapter: str | None = None
    lora_rank: int = 32
    lora_alpha: int = 64
    learning_rate: float = 2e-4
    group_size: int = 8
    prompts_per_step: int = 16
    max_completion_length: int = 384
    temperature: float = 1.0
    tag_coef: float = 0.2
    beta: float = 0.0
    eval_every: int = 10
    save_every: int = 50
    heldout: list = field(default_factory=list)  # Problems evaluated every eval_every steps
    heldout_samples: int = 4
    heldout_grading: str = "integer"  # the held-out task's grader
    seed: int = 0
    # full scale: vLLM generation inside the trainer's process ("colocate") and LoRA on MoE
    # experts, which transformers 5.x stores as fused 3-D parameters (PEFT target_parameters)
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    target_parameters: list | None = None
    gradient_accumulation_steps: int = 1
    # another reward than the study's: (completion, problem) -> (reward, correct, format_valid);
    # e.g. Part III's 0.35 × final correctness + 0.65 × step judge. None: :func:`reward`.
    reward_fn: Callable | None = None
    # generation through a refreshed inference copy on the static-cache, compiled path
    # (polyvox.train.fastgen); None: on CUDA only. False: TRL's own generation (the baseline).
    fast_generation: bool | None = None


def reward(arm: str, completion: str, gold: str, tag_coef: float = 0.2, grader: str = "integer") -> tuple[float, bool, bool]:
    """(reward, correct, format_valid): correct + tag_coef × (format_valid − 1), the study's reward."""
    correct = grading.grade(grader, completion, gold).correct
    valid = formats.format_valid("panel" if arm == "panel" else "think", completion)
    return float(correct) + tag_coef * (float(valid) - 1.0), correct, valid


def cut_by_cap(ids, cap: int, eos_token_id) -> bool:
    """Whether a completion's token ids were cut by the cap: as long as the cap and not closed by the
    end token (TRL keeps the end token in the ids it hands to reward functions)."""
    return len(ids) >= cap and (len(ids) == 0 or ids[-1] != eos_token_id)


def prompt_for(arm: str, text: str, tokenizer) -> str:
    return formats.build_prompt("panel" if arm == "panel" else "think", text, tokenizer).text


@contextlib.contextmanager
def plain_forward(model):
    """``model`` without the autocast wrapper that accelerate's ``prepare`` puts on its ``forward`` under
    mixed precision (kept by ``unwrap_model``): held-out sampling runs in the weights' dtype, whose KV cache
    the decode loop allocates. The trainer's own forward is put back afterwards (``unwrap_model(...,
    keep_fp32_wrapper=False)`` would remove it for the rest of training)."""
    attrs = getattr(model, "__dict__", {})
    wrapped, original = attrs.get("forward"), attrs.get("_original_forward")
    if wrapped is None or original is None:
        yield model
        return
    model.forward = original
    try:
        yield model
    finally:
        model.forward = wrapped


def evaluate(model, tokenizer, arm: str, problems, samples: int = 4, max_tokens: int = 384, seed: int = 0,
             batch_size: int = 256, device: str = "cpu", grader: str = "integer", rank: int = 0,
             processes: int = 1) -> dict:
    """Mean accuracy over problems × samples at temperature 1 (per level, and each problem's correct samples).

    Sample ``i`` of problem ``p`` is seeded as :func:`polyvox.runs.sample` seeds it
    (``runs.sample_seed(seed, p.id, i)``), so two problems never share a noise stream, and
    graded as :func:`polyvox.runs.grade` grades (:func:`polyvox.runs.grade_completions` with
    the held-out task's ``grader``), in memory. With ``processes`` > 1 (every rank of a
    data-parallel run calls it) rank ``r`` evaluates problems ``r, r + processes, …`` and the
    per-problem results are gathered: every rank returns the same dict, the one-process one.
    """
    from ..backends.hf import Request, SamplingParams, generate_batched
    from ..runs import grade_completions, sample_seed

    mine = list(range(rank, len(problems), processes))
    reqs = [Request(prompt_for(arm, problems[j].text, tokenizer), seed=sample_seed(seed, problems[j].id, i))
            for j in mine for i in range(samples)]
    with plain_forward(model):
        outs = generate_batched(model, tokenizer, reqs, SamplingParams(max_tokens, 1.0), batch_size, device) if reqs else []
    grades = grade_completions(grader, [o.text for o in outs], [problems[j].gold for j in mine for _ in range(samples)])
    correct = np.array([g.correct for g in grades], dtype=float).reshape(len(mine), samples)
    tokens = np.array([o.completion_tokens for o in outs], dtype=float).reshape(len(mine), samples)
    cut = np.array([o.finish_reason == "length" for o in outs], dtype=float).reshape(len(mine), samples)
    rows = [(j, float(c.mean()), t.tolist(), float(h.sum())) for j, c, t, h in zip(mine, correct, tokens, cut)]
    if processes > 1:
        rows = sorted(parallel.gather(rows))
    per_problem = np.array([acc for _, acc, *_ in rows])
    levels = {}
    for (j, acc, _, _) in rows:
        levels.setdefault(str(problems[j].metadata.get("level")), []).append(acc)
    # each problem's correct samples (of ``samples``), so that two evaluations of one run pair problem by problem
    # (sample i of a problem draws the same seed at every step: the held-out points of a run are paired)
    correct_by_id = {str(problems[j].id): int(round(acc * samples)) for j, acc, *_ in rows}
    return {"heldout_mean": float(per_problem.mean()), "per_level": {k: float(np.mean(v)) for k, v in levels.items()},
            "samples": samples, "per_problem_correct": correct_by_id,
            "mean_completion_tokens": float(np.mean([t for _, _, ts, _ in rows for t in ts])),
            # samples that stopped at max_tokens without their end token: what the cap cut
            "cap_hits": int(sum(h for *_, h in rows)), "cap_hit_rate": float(sum(h for *_, h in rows) / (len(rows) * samples))}


def train(cfg: RLConfig, progress: bool = True) -> Path:
    """Run every stage; returns the final adapter folder. One writer per output folder.

    The output folder is checked before anything is written: a folder holding another kind of run
    (a sample run, a judge run …) is refused, and its manifest is never replaced (``kind: rl``)."""
    if cfg.init_adapter is not None and not (Path(cfg.init_adapter) / "adapter_config.json").is_file():
        raise ValueError(f"init_adapter {cfg.init_adapter}: not an adapter folder (no adapter_config.json)")
    parallel.per_rank_completions(cfg.prompts_per_step, cfg.group_size, parallel.world_size())  # nothing written yet
    # the folder checked read-only first, then again under the lock (rank 0 alone, when several)
    with parallel.one_writer(cfg.out, _check_rl_folder) as writer:
        return _train(cfg, progress, writer)


def _check_rl_folder(out) -> None:
    """``out`` may hold this RL run: new, empty, or an RL run's folder (``kind: rl``, or an RL manifest
    written before kinds were recorded: no kind, a ``config`` naming stages)."""
    from ..records import read_manifest

    p = Path(out)
    if (p / "manifest.json").is_file():
        manifest = read_manifest(p)
        if not manifest.get("kind") and isinstance(manifest.get("config"), dict) and "stages" in manifest["config"]:
            return
    check_folder_kind(out, KIND_RL)


def _train(cfg: RLConfig, progress: bool = True, writer: bool = True) -> Path:
    """``writer``: this process writes the folder (the only process, or rank 0 of several)."""
    import torch
    from transformers import AutoTokenizer

    out = Path(cfg.out)
    if writer:
        out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(cfg.model)
    tok.padding_side = "left"
    summary = {k: v for k, v in asdict(cfg).items() if k not in ("stages", "heldout", "reward_fn")}
    summary["reward"] = getattr(cfg.reward_fn, "__qualname__", "grpo.reward") if cfg.reward_fn else "grpo.reward"
    summary["stages"] = [{"name": s.name, "steps": s.steps, "problems": len(s.problems), "grading": s.grading}
                         for s in cfg.stages]
    summary["heldout_problems"] = len(cfg.heldout)
    for key in ("model", "out", "init_adapter"):
        summary[key] = portable_path(summary[key])
    # a run is not resumable mid-way: an interrupted attempt's logs are kept beside, renamed, and the
    # run starts over, so its train_log/heldout_trajectory hold one attempt (nothing lost, nothing mixed)
    attempts = 0
    started = now_iso()
    processes = parallel.world_size()
    if writer:
        for name in ("train_log.jsonl", "heldout_trajectory.jsonl"):
            if (out / name).exists():
                attempts = max(attempts, len(list(out.glob(f"{Path(name).stem}.attempt-*.jsonl"))) + 1)
        for name in ("train_log.jsonl", "heldout_trajectory.jsonl"):
            if (out / name).exists():
                (out / name).rename(out / f"{Path(name).stem}.attempt-{attempts}.jsonl")
        write_manifest(out, kind=KIND_RL, config=summary, started=started, status=RunStatus.RUNNING, device=device,
                       earlier_attempts=attempts, **_ranks(processes))
    recorded: list = []  # set when a stage already recorded how it ended (no_steps / short)
    try:
        return _stages(cfg, out, tok, summary, device, attempts, recorded, progress, writer)
    except BaseException as exc:
        if writer and not recorded:  # the manifest says what happened, never a stale "running"
            write_manifest(out, kind=KIND_RL, config=summary, started=started, finished=now_iso(),
                           status=RunStatus.FAILED if isinstance(exc, Exception) else RunStatus.INTERRUPTED,
                           device=device, earlier_attempts=attempts, **_ranks(processes),
                           error=(f"{type(exc).__name__}: " + " ".join(str(exc).split()))[:500])
        raise


def _ranks(processes: int) -> dict:
    """The manifest's record of a data-parallel run (nothing for one process: its manifest as before)."""
    return {"world_size": processes} if processes > 1 else {}


def _stages(cfg: RLConfig, out: Path, tok, summary: dict, device: str, attempts: int, recorded: list,
            progress: bool, writer: bool = True) -> Path:
    import torch
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    adapter = cfg.init_adapter
    global_step = 0
    processes = parallel.world_size()
    t_start = time.time()
    for stage in cfg.stages:
        base = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32)
        peft_config = None
        if adapter:
            model = PeftModel.from_pretrained(base, adapter, is_trainable=True)
        else:
            model = base
            peft_config = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                                     target_modules="all-linear", target_parameters=cfg.target_parameters,
                                     task_type="CAUSAL_LM")
        rows = [{"prompt": prompt_for(cfg.arm, p.text, tok), "gold": p.gold, "pid": p.id} for p in stage.problems]
        by_id = {p.id: p for p in stage.problems}
        if not rows:
            raise ValueError(f"stage {stage.name}: no problems to train on")
        if len(rows) < cfg.prompts_per_step:
            # a band smaller than one step's prompts would give TRL no batch at all (zero steps):
            # cycle it, and say so in the log
            if writer:
                append_jsonl(out / "train_log.jsonl", [{"stage": stage.name, "note": f"{len(rows)} problems < "
                                                        f"{cfg.prompts_per_step} prompts per step: cycled"}])
            rows = (rows * (cfg.prompts_per_step // len(rows) + 1))[: cfg.prompts_per_step]
        dataset = Dataset.from_list(rows)
        stash: list[dict] = []

        def reward_fn(prompts, completions, gold, pid, completion_ids=None, **kw):
            if cfg.reward_fn is not None:
                rs = [cfg.reward_fn(c, by_id[i]) for c, i in zip(completions, pid)]
            else:
                rs = [reward(cfg.arm, c, g, cfg.tag_coef, stage.grading) for c, g in zip(completions, gold)]
            ids_of = completion_ids if completion_ids is not None else \
                [tok(c, add_special_tokens=False)["input_ids"] for c in completions]
            lengths = [len(ids) for ids in ids_of]
            cut = [cut_by_cap(ids, cfg.max_completion_length, tok.eos_token_id) for ids in ids_of]
            # the step's statistics over the whole batch: every rank's rows, in batch order
            batch = parallel.gather([(x[0], bool(x[1]), bool(x[2]), n, h) for x, n, h in zip(rs, lengths, cut)])
            r = np.array([x[0] for x in batch])
            lengths_all = [x[3] for x in batch]
            groups = r.reshape(-1, cfg.group_size) if len(r) % cfg.group_size == 0 else r[None]
            stash.append({"reward_mean": float(r.mean()), "reward_std": float(r.std()),
                          "within_group_std": float(groups.std(axis=1).mean()),
                          "accuracy": float(np.mean([x[1] for x in batch])),
                          "format_valid": float(np.mean([x[2] for x in batch])),
                          "frac_groups_all_equal": float(np.mean(groups.std(axis=1) == 0)),
                          "completion_tokens_mean": float(np.mean(lengths_all)),
                          "completion_tokens_max": int(np.max(lengths_all)),
                          "cap_hits": int(sum(x[4] for x in batch)), "cap_hit_rate": float(np.mean([x[4] for x in batch])),
                          **({"completions": len(batch)} if processes > 1 else {})})
            return [x[0] for x in rs]

        stage_dir = out / stage.name
        offset = global_step
        current: dict = {}  # the stage's trainer, for the step logger (built after it)

        class Logger(TrainerCallback):
            def on_step_end(self, args, state, control, model=None, **kw):
                step = offset + state.global_step
                rec = {"stage": stage.name, "step": step, "time_s": round(time.time() - t_start, 2)}
                if stash:
                    rec.update(stash[-1])
                timing = getattr(current.get("trainer"), "polyvox_timing", None)
                if timing:  # cumulative seconds in the fast path's refresh and generation (the main process's)
                    rec.update({f"fastgen_{k}": round(v, 3) if isinstance(v, float) else v for k, v in timing.items()})
                if writer:
                    append_jsonl(out / "train_log.jsonl", [finite_or_null(rec)])  # a NaN metric logs as null
                    if state.global_step % cfg.save_every == 0 and state.global_step < stage.steps:
                        save_adapter(current["trainer"].accelerator.unwrap_model(current["trainer"].model),
                                     stage_dir / f"step-{state.global_step}")
                if cfg.heldout and state.global_step % cfg.eval_every == 0:
                    _heldout(step)  # every rank: the evaluation is sharded

        def _heldout(step):
            trainer = current["trainer"]
            res = evaluate(trainer.accelerator.unwrap_model(trainer.model), tok, cfg.arm, cfg.heldout,
                           cfg.heldout_samples, cfg.max_completion_length, seed=cfg.seed,
                           device=device if processes == 1 else str(trainer.accelerator.device),
                           grader=cfg.heldout_grading, rank=trainer.accelerator.process_index, processes=processes)
            if writer:
                append_jsonl(out / "heldout_trajectory.jsonl",
                             [finite_or_null({"step": step, "stage": stage.name, **res})])

        args = GRPOConfig(
            output_dir=str(stage_dir), max_steps=stage.steps, learning_rate=cfg.learning_rate,
            # each step is prompts_per_step groups of group_size completions in all, shared by the processes
            per_device_train_batch_size=parallel.per_rank_completions(cfg.prompts_per_step, cfg.group_size, processes),
            num_generations=cfg.group_size, max_completion_length=cfg.max_completion_length,
            temperature=cfg.temperature, beta=cfg.beta, logging_steps=1, save_strategy="no",
            report_to=[], seed=cfg.seed, bf16=device == "cuda",
            disable_tqdm=not progress, lr_scheduler_type="constant", warmup_steps=0,
            gradient_checkpointing=False, use_cpu=device == "cpu",
            gradient_accumulation_steps=cfg.gradient_accumulation_steps, use_vllm=cfg.use_vllm,
            vllm_mode=cfg.vllm_mode, vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        )
        fast = cfg.fast_generation if cfg.fast_generation is not None else device == "cuda"
        trainer_class = GRPOTrainer
        if fast and not cfg.use_vllm:
            from .fastgen import fast_trainer_class

            trainer_class = fast_trainer_class()
            trainer_class.polyvox_model_path, trainer_class.polyvox_seed = cfg.model, cfg.seed
        trainer = trainer_class(model=model, reward_funcs=reward_fn, args=args, train_dataset=dataset,
                                processing_class=tok, peft_config=peft_config, callbacks=[Logger()])
        current["trainer"] = trainer
        if global_step == 0 and cfg.heldout:  # the first stage: the trajectory's step 0
            _heldout(0)
        trainer.train()
        if trainer.state.global_step < stage.steps:
            recorded.append(True)
            if writer:
                write_manifest(out, kind=KIND_RL, config=summary,
                               status=RunStatus.NO_STEPS if trainer.state.global_step == 0 else RunStatus.SHORT,
                               finished=now_iso(), device=device, **_ranks(processes),
                               detail=f"stage {stage.name}: {trainer.state.global_step} of {stage.steps} steps ran")
            raise RuntimeError(f"stage {stage.name}: TRL ran {trainer.state.global_step} of {stage.steps} steps")
        global_step += stage.steps
        adapter = str(stage_dir / "adapter")
        if writer:
            save_adapter(trainer.accelerator.unwrap_model(trainer.model), adapter)
        parallel.wait_for_everyone()  # the next stage loads this adapter on every rank
        del trainer, model, base
        if device == "cuda":
            torch.cuda.empty_cache()
    recorded.append(True)
    if writer:
        write_manifest(out, kind=KIND_RL, config=summary, status=RunStatus.COMPLETE, finished=now_iso(), device=device,
                       earlier_attempts=attempts, **_ranks(processes), final_adapter=portable_path(adapter),
                       seconds=round(time.time() - t_start, 1))
    return Path(adapter)


# the config file's reading lives in .rlconfig; its functions are named here, where callers look for them
from .rlconfig import check_config, load_config  # noqa: E402
