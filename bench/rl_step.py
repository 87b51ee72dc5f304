"""Time per GRPO step (TRL + LoRA): polyvox's fast generation against TRL's own, and against a floor.

Two trainers on the same model, prompts, group size and completion length, in one run:
- ``fast``: polyvox.train.fastgen's trainer (a refreshed inference copy of the policy,
  static KV cache, compiled decode step on CUDA);
- ``baseline``: TRL's GRPOTrainer with its default generation (the recipe of the recorded runs).
They alternate in rounds of --steps-per-round steps (order rotated each round, ≥ 3 rounds);
each round's first step is dropped (warm-up, and compilation for ``fast``), the rest are
kept in the JSON. Generation time per step is measured around TRL's
``_generate_and_score_completions``; training = step − generation.

The floor of a step is a real lower bound measured in the same run: the step's generated
tokens ÷ the fast path's own generation rate (generate_rows on the same prompts and
lengths, best of 3), plus one forward/backward of the LoRA policy on the step's sequences
(best of 3). step_over_floor = fast step ÷ floor (target ≤ 1.3); speedup_vs_baseline =
baseline step ÷ fast step (target ≥ 2.5). A random model never emits EOS, so every step
generates exactly --max-tokens per completion.

Usage (GPU): python bench/rl_step.py --out bench/results/rl-h200.json
"""
import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps-per-round", type=int, default=3)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", default=str(ROOT / "bench/results/rl.json"))
    args = ap.parse_args()

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from polyvox import formats
    from polyvox.backends import SamplingParams
    from polyvox.backends.hf import generate_rows
    from polyvox.studies.world import problems as world
    from polyvox.testing import build_tiny_model
    from polyvox.train.fastgen import fast_trainer_class, refresh

    model_dir = args.model or build_tiny_model(Path(tempfile.mkdtemp()) / "m", seed=0, hidden=512, layers=8)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    probs = world.generate(args.prompts * 200, seed=0, levels=[3])
    rows = [{"prompt": formats.panel_prompt(p.text), "gold": str(p.answer)} for p in probs]

    def reward_fn(prompts, completions, gold, **kw):
        return [float(formats.tags_valid(c)) for c in completions]

    timings = {"fast": {"gen": [], "step": []}, "baseline": {"gen": [], "step": []}}

    def timed_class(base, arm):
        class Timed(base):
            def _generate_and_score_completions(self, inputs):
                sync()
                t0 = time.perf_counter()
                out = super()._generate_and_score_completions(inputs)
                sync()
                timings[arm]["gen"].append(time.perf_counter() - t0)
                return out
        return Timed

    class StepTimer(TrainerCallback):
        def __init__(self, arm):
            self.arm = arm

        def on_step_begin(self, *a, **k):
            sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            sync()
            timings[self.arm]["step"].append(time.perf_counter() - self.t0)

    fast_base = fast_trainer_class()
    fast_base.polyvox_model_path, fast_base.polyvox_seed = str(model_dir), 0
    trainers = {}
    for arm, base in (("fast", fast_base), ("baseline", GRPOTrainer)):
        cfg = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=args.steps_per_round, learning_rate=1e-4,
                         per_device_train_batch_size=args.group * args.prompts, num_generations=args.group,
                         max_completion_length=args.max_tokens, logging_steps=1, save_strategy="no", report_to=[],
                         bf16=device == "cuda", use_cpu=device == "cpu", disable_tqdm=True, seed=0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        lora = LoraConfig(r=32, lora_alpha=64, target_modules="all-linear", task_type="CAUSAL_LM")
        trainers[arm] = timed_class(base, arm)(model=model, reward_funcs=reward_fn, args=cfg,
                                               train_dataset=Dataset.from_list(rows), processing_class=tok,
                                               peft_config=lora, callbacks=[StepTimer(arm)])
    rounds = []
    arms = list(trainers)
    for r in range(args.rounds):
        for arm in (arms if r % 2 == 0 else arms[::-1]):
            n0 = len(timings[arm]["step"])
            trainers[arm].train()
            steps, gens = timings[arm]["step"][n0:], timings[arm]["gen"][n0:]
            rounds.append({"round": r, "arm": arm, "step_s": [round(x, 4) for x in steps],
                           "generation_s": [round(x, 4) for x in gens]})
            print(f"round {r} {arm:9s} steps {[round(x, 2) for x in steps]}", flush=True)

    def steady(arm, key):
        return [x for rd in rounds if rd["arm"] == arm for x in rd[key][1:]]  # each round's first step dropped

    med = {arm: {"step_s": statistics.median(steady(arm, "step_s")),
                 "generation_s": statistics.median(steady(arm, "generation_s"))} for arm in arms}
    for arm in arms:
        med[arm]["training_s"] = med[arm]["step_s"] - med[arm]["generation_s"]

    # the floor on the same shapes: the fast path's generation rate, then one forward/backward
    policy = trainers["fast"].model
    copy = trainers["fast"]._polyvox_copy()
    refresh(policy, copy)
    prompt_ids = [tok(x["prompt"], add_special_tokens=False)["input_ids"] for x in rows[:args.prompts]
                  for _ in range(args.group)]
    params = SamplingParams(args.max_tokens, 1.0)
    gen_floor, seqs = [], None
    for k in range(4):
        sync()
        t0 = time.perf_counter()
        out = generate_rows(copy, prompt_ids, list(range(k * 1000, k * 1000 + len(prompt_ids))), params,
                            tok.pad_token_id, tok.eos_token_id, device, static=device == "cuda",
                            batch_size=len(prompt_ids))
        sync()
        if k:  # the first call compiles
            gen_floor.append(time.perf_counter() - t0)
        seqs = torch.tensor([p + o for p, o in zip(prompt_ids, out)], device=device) \
            if len({len(p) for p in prompt_ids}) == 1 else None
    step_tokens = sum(len(o) for o in out)
    if seqs is None:  # ragged prompts: left-pad for the forward/backward
        width = max(len(p) + len(o) for p, o in zip(prompt_ids, out))
        seqs = torch.full((len(out), width), tok.pad_token_id, device=device)
        for i, (p, o) in enumerate(zip(prompt_ids, out)):
            seqs[i, width - len(p) - len(o):] = torch.tensor(p + o)
    fb_floor = []
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = policy(input_ids=seqs, labels=seqs).loss
        loss.backward()
        policy.zero_grad(set_to_none=True)
        sync()
        fb_floor.append(time.perf_counter() - t0)
    fast_rate = step_tokens / min(gen_floor)
    floor = step_tokens / fast_rate + min(fb_floor)
    result = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "versions": {"torch": torch.__version__, "trl": __import__("trl").__version__},
        "model_parameters": sum(p.numel() for p in copy.parameters()),
        "completions_per_step": args.group * args.prompts, "max_completion_tokens": args.max_tokens,
        "step_s": med["fast"]["step_s"], "baseline_step_s": med["baseline"]["step_s"],
        "speedup_vs_baseline": med["baseline"]["step_s"] / med["fast"]["step_s"],
        "generation_s": {a: med[a]["generation_s"] for a in arms}, "training_s": {a: med[a]["training_s"] for a in arms},
        "floor": {"generated_tokens": step_tokens, "fast_path_tokens_per_s": fast_rate,
                  "generation_s": step_tokens / fast_rate, "forward_backward_s": min(fb_floor), "total_s": floor},
        "step_over_floor": med["fast"]["step_s"] / floor,
        "targets": {"speedup_vs_baseline": 2.5, "step_over_floor": 1.3},
        "rounds": rounds,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
