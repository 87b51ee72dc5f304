"""Time per GRPO step (TRL + LoRA), split into generation and training, against its floor.

The floor for one step is pure generation time (model.generate on the same prompts, same
group size and completion length) plus pure forward/backward time of the LoRA model on the
same sequences. step_over_floor = steady-state step time ÷ floor (target <= 1.3).
Steady state: the first --warmup steps are dropped.

Usage (GPU): python bench/rl_step.py [--model DIR] --out bench/results/rl-h200.json
"""
import argparse
import json
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
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
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
    from polyvox.studies.world import problems as world
    from polyvox.testing import build_tiny_model

    model_dir = args.model or build_tiny_model(Path(tempfile.mkdtemp()) / "m", seed=0, hidden=512, layers=8)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    probs = world.generate(args.prompts * (args.steps + 2), seed=0, levels=[3])
    rows = [{"prompt": formats.panel_prompt(p.text), "gold": str(p.answer)} for p in probs]
    gen_times, step_times = [], []

    class Timed(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            sync(); t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            sync(); gen_times.append(time.perf_counter() - t0)
            return out

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            sync(); self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            sync(); step_times.append(time.perf_counter() - self.t0)

    def reward_fn(prompts, completions, gold, **kw):
        return [float(formats.tags_valid(c)) for c in completions]

    lora = LoraConfig(r=32, lora_alpha=64, target_modules="all-linear", task_type="CAUSAL_LM")
    cfg = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=args.steps, learning_rate=1e-4,
                     per_device_train_batch_size=args.group * args.prompts, num_generations=args.group,
                     max_completion_length=args.max_tokens, logging_steps=1, save_strategy="no", report_to=[],
                     bf16=device == "cuda", use_cpu=device == "cpu", disable_tqdm=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    trainer = Timed(model=model, reward_funcs=reward_fn, args=cfg, train_dataset=Dataset.from_list(rows),
                    processing_class=tok, peft_config=lora, callbacks=[StepTimer()])
    trainer.train()
    n_params = sum(p.numel() for p in model.parameters())

    # the floor, on the same shapes: pure generation, then pure forward/backward
    pm = trainer.model
    prompts = [r["prompt"] for r in rows[: args.prompts] for _ in range(args.group)]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    gen_floor = []
    for _ in range(3):
        sync(); t0 = time.perf_counter()
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            seqs = pm.generate(**enc, max_new_tokens=args.max_tokens, do_sample=True, temperature=1.0,
                               pad_token_id=tok.pad_token_id)
        sync(); gen_floor.append(time.perf_counter() - t0)
    fb_floor = []
    for _ in range(3):
        sync(); t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = pm(input_ids=seqs, labels=seqs).loss
        loss.backward()
        pm.zero_grad(set_to_none=True)
        sync(); fb_floor.append(time.perf_counter() - t0)
    steady = step_times[args.warmup:]
    gen_steady = gen_times[args.warmup:]
    step = sum(steady) / len(steady)
    gen = sum(gen_steady) / len(gen_steady)
    floor = min(gen_floor) + min(fb_floor)
    new_tokens = int((seqs[:, enc["input_ids"].shape[1]:] != tok.pad_token_id).sum())
    result = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "model_parameters": n_params,
              "completions_per_step": args.group * args.prompts, "max_completion_tokens": args.max_tokens,
              "steps": args.steps, "warmup_dropped": args.warmup, "step_times_s": step_times,
              "step_s": step, "generation_s": gen, "training_s": step - gen,
              "floor_generation_s": min(gen_floor), "floor_forward_backward_s": min(fb_floor), "floor_s": floor,
              "step_over_floor": step / floor, "generated_tokens_per_s": new_tokens / gen,
              "target_step_over_floor": 1.3}
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
