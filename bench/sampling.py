"""Sampling throughput: polyvox's transformers backend against raw ``generate`` (dynamic and static
cache) and a naive one-at-a-time loop, arms interleaved over rounds.

Same requests for every arm: --prompts GSM8K questions in the panel format × --n samples,
temperature 1.0, --max-tokens new tokens, on a ~19M-parameter Qwen3-architecture model
(random weights, seeded; --model for another). Arms:
- ``polyvox``: TransformersBackend.generate (length-sorted batches of --batch-size, static KV
  cache with transformers' compiled decode step on CUDA, per-request seeded sampling);
- ``raw_dynamic``: model.generate(do_sample=True) in input-order batches, the default cache;
- ``raw_static``: the same with ``cache_implementation="static"`` (transformers compiles the
  decode step): the fastest plain-transformers path we know, i.e. the floor to match;
- ``naive``: one model.generate call per sample, on --naive-subset samples (tokens/s compared).

Each arm first runs once untimed (compilation and warm-up; its time is kept as
``warmup_s``). Then --rounds rounds, the arms' order rotated each round so no arm is
always first; every round is kept in the JSON; the ratios compare medians of tokens/s:
ratio_vs_dynamic = polyvox ÷ raw_dynamic (target ≥ 2.5), ratio_vs_static = polyvox ÷
raw_static (target ≥ 0.9), ratio_vs_naive = polyvox ÷ naive (target ≥ 10).
Tokens are generated tokens up to each sequence's end-of-sequence.

Usage (GPU): python bench/sampling.py --out bench/results/sampling-h200.json
"""
import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import torch  # noqa: E402

from polyvox import formats, tasks  # noqa: E402
from polyvox.backends import Request, SamplingParams  # noqa: E402
from polyvox.backends.hf import TransformersBackend  # noqa: E402
from polyvox.testing import build_tiny_model  # noqa: E402


def count_tokens(rows, eos):
    return sum(row.index(eos) + 1 if eos in row else len(row) for row in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--naive-subset", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench/results/sampling.json"))
    args = ap.parse_args()

    model_dir = args.model or build_tiny_model(Path(tempfile.mkdtemp()) / "m", seed=0, hidden=512, layers=8)
    backend = TransformersBackend(str(model_dir), batch_size=args.batch_size)
    model, tok = backend.model, backend.tokenizer
    tok.padding_side = "left"  # the raw arms pad as polyvox does
    device = backend.device
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    n_params = sum(p.numel() for p in model.parameters())
    problems = tasks.load("gsm8k", ROOT / "data", limit=args.prompts)
    prompts = [formats.panel_prompt(p.text) for p in problems]
    reqs = [Request(t, seed=1000 * i + j) for i, t in enumerate(prompts) for j in range(args.n)]
    params = SamplingParams(max_tokens=args.max_tokens, temperature=1.0)
    eos = tok.eos_token_id

    def raw(batch_texts, static: bool):
        enc = tok(batch_texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        extra = {"cache_implementation": "static"} if static else {}
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=args.max_tokens, do_sample=True, temperature=1.0,
                                 pad_token_id=tok.pad_token_id, eos_token_id=eos, **extra)
        return out[:, enc["input_ids"].shape[1]:].tolist()

    def arm_raw(static):
        def run():
            texts = [r.prompt for r in reqs]
            toks = 0
            for b in range(0, len(texts), args.batch_size):
                toks += count_tokens(raw(texts[b:b + args.batch_size], static), eos)
            return toks
        return run

    def arm_polyvox():
        return sum(c.completion_tokens for c in backend.generate(reqs, params))

    def arm_naive():
        return sum(count_tokens(raw([r.prompt], False), eos) for r in reqs[:args.naive_subset])

    arms = {"polyvox": arm_polyvox, "raw_dynamic": arm_raw(False), "raw_static": arm_raw(True), "naive": arm_naive}

    def timed(fn):
        sync()
        t0 = time.perf_counter()
        toks = fn()
        sync()
        return toks, time.perf_counter() - t0

    warmup = {}
    for name, fn in arms.items():  # compilation and first-touch costs, kept but not compared
        warmup[name] = round(timed(fn)[1], 3)
    names = list(arms)
    rounds = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            toks, secs = timed(arms[name])
            rounds.append({"round": r, "arm": name, "tokens": toks, "seconds": round(secs, 4),
                           "tokens_per_s": round(toks / secs, 1)})
            print(f"round {r} {name:12s} {toks:8d} tokens {secs:8.2f} s {toks / secs:10.0f} tok/s", flush=True)
    median = {n: statistics.median(x["tokens_per_s"] for x in rounds if x["arm"] == n) for n in names}
    result = {
        "model": {"parameters": n_params, "path": Path(model_dir).name},
        "device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "setup": {"prompts": args.prompts, "n": args.n, "max_tokens": args.max_tokens,
                  "batch_size": args.batch_size, "naive_subset": args.naive_subset, "rounds": args.rounds},
        "warmup_s": warmup, "median_tokens_per_s": median,
        "ratio_vs_dynamic": median["polyvox"] / median["raw_dynamic"],
        "ratio_vs_static": median["polyvox"] / median["raw_static"],
        "ratio_vs_naive": median["polyvox"] / median["naive"],
        "rounds": rounds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_tokens_per_s", "ratio_vs_dynamic", "ratio_vs_static",
                                             "ratio_vs_naive", "warmup_s")}, indent=2))


if __name__ == "__main__":
    main()
