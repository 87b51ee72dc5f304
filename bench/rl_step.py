"""Time per GRPO step (TRL + LoRA): polyvox's fast generation against TRL's own, and against a floor.

For each --sizes (completions per step; --group completions per prompt), trainers on the same
model, LoRA, group size and completion length, in one run:
- ``fast``: polyvox.train.fastgen's trainer (a refreshed inference copy of the policy,
  polyvox's decode loop: packed prefill, FlashAttention over each row's tokens, the decode
  step compiled once and replayed as a CUDA graph; cuDNN attention off);
- ``baseline``: TRL's GRPOTrainer with its default generation (the recipe of the recorded
  runs), at the sizes in --baseline-sizes (it is slow: the device budget decides).

Batches: every step gets a fresh batch. World problems of all levels are pooled; each step's
prompts are drawn so that the step's longest prompt has a token width no earlier step of that
size had (new padded shapes for generation and training), the other prompts shorter. TRL's
shuffling is off so a round's steps take their batches in order. Rounds: first an untimed
warm-up round per arm (compilation, graph capture, first touches), then --rounds timed rounds
of --steps-per-round fresh steps, arms alternating in order, and last a ``seen`` round per arm
that replays the first timed round's batches (shapes seen before). Every step is kept.

Per step, measured directly (device synchronised at each mark): ``step_s`` from the step's
begin to its end callback; ``generation_s`` around the trainer's ``_generate_single_turn``
(for ``fast``: refreshing the copy and the decode loop); ``scoring_s`` the rest of TRL's
``_generate_and_score_completions`` (decoding texts, rewards, padding, advantages);
``training_s`` from the end of that to the step's end (loss forward/backward, optimizer).

The floor of a step is a lower bound measured in the same run on a fresh batch's prompts: its
generated tokens ÷ the fast path's own generation rate (generate_rows on those prompts, best of
3) plus one forward/backward of the LoRA policy on the step's sequences (best of 3).
step_over_floor = median fresh ``fast`` step ÷ floor (target ≤ 1.2); new_over_seen = median
fresh ``fast`` step ÷ median seen-shape ``fast`` step (target ≤ 1.3); speedup_vs_baseline =
baseline step ÷ fast step where both ran. A random model almost never emits EOS, so steps
generate about --max-tokens per completion.

Usage (GPU): python bench/rl_step.py --out bench/results/rl-h200.json
"""
import argparse
import json
import random
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
    ap.add_argument("--sizes", default="128,512", help="completions per step")
    ap.add_argument("--baseline-sizes", default="128", help="sizes at which TRL's own generation also runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps-per-round", type=int, default=3)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", default=str(ROOT / "bench/results/rl.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU check of this script (tiny model, short steps)")
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

    t_run = time.perf_counter()
    model_dir = args.model or build_tiny_model(Path(tempfile.mkdtemp()) / "m", seed=0,
                                               hidden=64 if args.smoke else 512, layers=2 if args.smoke else 8)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    pool = world.generate(300, seed=0)
    texts = [formats.panel_prompt(p.text) for p in pool]
    widths = [len(x) for x in tok(texts, add_special_tokens=False)["input_ids"]]
    by_width: dict[int, list[int]] = {}
    for i, w in enumerate(widths):
        by_width.setdefault(w, []).append(i)
    rng = random.Random(0)

    def reward_fn(prompts, completions, **kw):
        return [float(formats.tags_valid(c)) for c in completions]

    sizes = [int(x) for x in args.sizes.split(",")]
    with_baseline = {int(x) for x in args.baseline_sizes.split(",") if x}
    fast_base = fast_trainer_class()
    fast_base.polyvox_model_path, fast_base.polyvox_seed = str(model_dir), 0
    results, all_rounds = {}, []
    for size in sizes:
        prompts = size // args.group
        steps_total = (args.rounds + 1) * args.steps_per_round
        # the step's longest prompt: a width no earlier step of this size had (largest widths first,
        # so enough shorter prompts remain); the other prompts drawn from the shorter ones
        candidates = sorted((w for w in by_width if sum(len(by_width[v]) for v in by_width if v < w)
                             >= steps_total * prompts), reverse=True)
        if len(candidates) < steps_total:
            raise SystemExit(f"only {len(candidates)} distinct widths for {steps_total} fresh steps")
        step_widths = candidates[:steps_total]
        rng.shuffle(step_widths)
        leads = [by_width[w][0] for w in step_widths]  # reserved first: no batch takes another's lead
        used: set[int] = set(leads)

        def batch_for(width, lead):
            shorter = [i for i, w in enumerate(widths) if w < width and i not in used]
            rest = rng.sample(shorter, prompts - 1)
            used.update(rest)
            return [lead, *rest]

        batches = [batch_for(w, i) for w, i in zip(step_widths, leads)]  # warm-up round's, then each timed round's
        rounds_batches = [batches[k * args.steps_per_round:(k + 1) * args.steps_per_round]
                          for k in range(args.rounds + 1)]

        timings: dict = {}

        def timed_class(base, arm):
            class Timed(base):
                def _generate_single_turn(self, *a, **k):
                    sync()
                    t0 = time.perf_counter()
                    out = super()._generate_single_turn(*a, **k)
                    sync()
                    timings[arm]["gen"].append(time.perf_counter() - t0)
                    return out

                def _generate_and_score_completions(self, inputs):
                    sync()
                    t0 = time.perf_counter()
                    out = super()._generate_and_score_completions(inputs)
                    sync()
                    timings[arm]["gs_end"].append(time.perf_counter())
                    timings[arm]["gs"].append(timings[arm]["gs_end"][-1] - t0)
                    timings[arm]["width"].append(int(out["prompt_mask"].sum(dim=1).max()))
                    timings[arm]["completion_tokens"].append(int(out["completion_mask"].sum()))
                    return out
            return Timed

        class StepTimer(TrainerCallback):
            def __init__(self, arm):
                self.arm = arm

            def on_step_begin(self, *a, **k):
                sync()
                timings[self.arm]["begin"].append(time.perf_counter())

            def on_step_end(self, *a, **k):
                sync()
                timings[self.arm]["end"].append(time.perf_counter())

        arms = ["fast"] + (["baseline"] if size in with_baseline else [])
        trainers = {}
        for arm in arms:
            timings[arm] = {k: [] for k in ("gen", "gs", "gs_end", "begin", "end", "width", "completion_tokens")}
            base = fast_base if arm == "fast" else GRPOTrainer
            cfg = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=args.steps_per_round, learning_rate=1e-4,
                             per_device_train_batch_size=size, num_generations=args.group,
                             max_completion_length=args.max_tokens, logging_steps=1, save_strategy="no",
                             report_to=[], bf16=device == "cuda", use_cpu=device == "cpu", disable_tqdm=True,
                             seed=0, shuffle_dataset=False)
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            lora = LoraConfig(r=32, lora_alpha=64, target_modules="all-linear", task_type="CAUSAL_LM")
            first = [{"prompt": texts[i]} for b in rounds_batches[0] for i in b]
            trainers[arm] = timed_class(base, arm)(model=model, reward_funcs=reward_fn, args=cfg,
                                                   train_dataset=Dataset.from_list(first), processing_class=tok,
                                                   peft_config=lora, callbacks=[StepTimer(arm)])

        def run_round(arm, kind, r, batches_):
            t = timings[arm]
            n0 = len(t["end"])
            trainers[arm].train_dataset = Dataset.from_list([{"prompt": texts[i]} for b in batches_ for i in b])
            trainers[arm].train()
            sl = slice(n0, len(t["end"]))
            steps = [e - b for b, e in zip(t["begin"][sl], t["end"][sl])]
            training = [e - g for g, e in zip(t["gs_end"][sl], t["end"][sl])]
            rec = {"size": size, "round": r, "kind": kind, "arm": arm,
                   "step_s": [round(x, 4) for x in steps],
                   "generation_s": [round(x, 4) for x in t["gen"][sl]],
                   "scoring_s": [round(g - x, 4) for g, x in zip(t["gs"][sl], t["gen"][sl])],
                   "training_s": [round(x, 4) for x in training],
                   "prompt_width": t["width"][sl], "completion_tokens": t["completion_tokens"][sl]}
            all_rounds.append(rec)
            print(f"size {size} {kind:7s} round {r} {arm:8s} steps {[round(x, 3) for x in steps]} "
                  f"gen {[round(x, 3) for x in t['gen'][sl]]} train {[round(x, 3) for x in training]} "
                  f"widths {rec['prompt_width']}", flush=True)
            return rec

        for arm in arms:  # untimed warm-up round (kept in the JSON, never in the medians)
            run_round(arm, "warmup", 0, rounds_batches[0])
        for r in range(1, args.rounds + 1):
            for arm in (arms if r % 2 else arms[::-1]):
                run_round(arm, "fresh", r, rounds_batches[r])
        for arm in arms:  # the first timed round's batches again: shapes seen before
            run_round(arm, "seen", args.rounds + 1, rounds_batches[1])

        def steps_of(arm, kind, key="step_s"):
            return [x for rd in all_rounds if rd["size"] == size and rd["arm"] == arm and rd["kind"] == kind
                    for x in rd[key]]

        med = {arm: {k: statistics.median(steps_of(arm, "fresh", k))
                     for k in ("step_s", "generation_s", "scoring_s", "training_s")} for arm in arms}
        seen_fast = statistics.median(steps_of("fast", "seen"))

        # the floor on a fresh batch's prompts: the fast path's generation rate, then one forward/backward
        trainer = trainers["fast"]
        policy, copy = trainer.model, trainer._polyvox_copy()
        refresh(policy, copy)
        floor_batch = rounds_batches[args.rounds][0]
        prompt_ids = [tok(texts[i], add_special_tokens=False)["input_ids"] for i in floor_batch
                      for _ in range(args.group)]
        params = SamplingParams(args.max_tokens, 1.0)
        gen_floor, out = [], None
        for k in range(4):
            sync()
            t0 = time.perf_counter()
            out = generate_rows(copy, prompt_ids, list(range(k * 1000, k * 1000 + len(prompt_ids))), params,
                                tok.pad_token_id, tok.eos_token_id, device, static=device == "cuda",
                                batch_size=len(prompt_ids))
            sync()
            if k:  # the first call may capture a graph for a new capacity
                gen_floor.append(time.perf_counter() - t0)
        step_tokens = sum(len(o) for o in out)
        width = max(len(p) + len(o) for p, o in zip(prompt_ids, out))
        seqs = torch.full((len(out), width), tok.pad_token_id, device=device)
        mask = torch.zeros((len(out), width), dtype=torch.long, device=device)
        for i, (p, o) in enumerate(zip(prompt_ids, out)):
            seqs[i, width - len(p) - len(o):] = torch.tensor(p + o)
            mask[i, width - len(p) - len(o):] = 1
        fb_floor = []
        for _ in range(3):
            sync()
            t0 = time.perf_counter()
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                loss = policy(input_ids=seqs, attention_mask=mask, labels=seqs).loss
            loss.backward()
            policy.zero_grad(set_to_none=True)
            sync()
            fb_floor.append(time.perf_counter() - t0)
        fast_rate = step_tokens / min(gen_floor)
        floor = step_tokens / fast_rate + min(fb_floor)
        results[size] = {
            "completions_per_step": size, "prompts_per_step": prompts,
            "step_s": med["fast"]["step_s"], "seen_shape_step_s": seen_fast,
            "new_over_seen": med["fast"]["step_s"] / seen_fast,
            "medians_fresh": med,
            "baseline_step_s": med["baseline"]["step_s"] if "baseline" in med else None,
            "speedup_vs_baseline": med["baseline"]["step_s"] / med["fast"]["step_s"] if "baseline" in med else None,
            "floor": {"prompt_width": max(len(p) for p in prompt_ids), "generated_tokens": step_tokens,
                      "fast_path_tokens_per_s": fast_rate, "generation_s": step_tokens / fast_rate,
                      "forward_backward_s": min(fb_floor), "total_s": floor},
            "step_over_floor": med["fast"]["step_s"] / floor,
            "decode_engine": copy.__dict__.get("_polyvox_engines", {}).get(size).info
            if copy.__dict__.get("_polyvox_engines", {}).get(size) else None,
        }
        print(json.dumps(results[size], indent=1, default=str), flush=True)
        del trainers
        if device == "cuda":
            torch.cuda.empty_cache()

    result = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "versions": {"torch": torch.__version__, "trl": __import__("trl").__version__,
                     "transformers": __import__("transformers").__version__},
        "model_parameters": sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters()),
        "setup": {"sizes": sizes, "baseline_sizes": sorted(with_baseline), "group": args.group,
                  "max_completion_tokens": args.max_tokens, "rounds": args.rounds,
                  "steps_per_round": args.steps_per_round, "lora": "r=32, alpha=64, all-linear",
                  "batches": "fresh per step, each step's longest prompt a width not seen before at that size; "
                             "'seen' replays the first timed round"},
        "per_size": results,
        "targets": {"step_over_floor": 1.2, "new_over_seen": 1.3},
        "run_s": round(time.perf_counter() - t_run, 1),
        "rounds": all_rounds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps({s: {k: v for k, v in r.items() if k in ("step_s", "seen_shape_step_s", "new_over_seen",
                                                              "step_over_floor", "speedup_vs_baseline")}
                      for s, r in results.items()}, indent=1))


if __name__ == "__main__":
    main()
