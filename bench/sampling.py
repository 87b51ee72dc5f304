"""Sampling throughput: polyvox's transformers backend against a naive loop and raw batched generate.

Same prompts for all three: --prompts problems (GSM8K questions in the panel format) × --n
samples, temperature 1.0, --max-tokens new tokens, on a ~25M-parameter Qwen3-architecture
model (random weights, seeded; --model to use another).

(runs c, then b, then a: the first timed run does not pay for any warm-up the others get)
(a) naive: one model.generate call per sample (timed on a --naive-subset of samples; its
    rate in tokens/s is what is compared);
(b) polyvox: TransformersBackend.generate on all requests (length-sorted, left-padded
    batches of --batch-size);
(c) raw: model.generate on the same requests in batches of --batch-size, in input order.

Tokens are generated tokens up to each sequence's end-of-sequence. Prints tokens/s and the
ratios ratio_vs_batched = b/c (target >= 0.9) and ratio_vs_naive = b/a (target >= 10).

Usage (GPU): python bench/sampling.py --out bench/results/sampling-h200.json
"""
import argparse
import json
import platform
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
    total = 0
    for row in rows:
        total += row.index(eos) + 1 if eos in row else len(row)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--naive-subset", type=int, default=48)
    ap.add_argument("--out", default=str(ROOT / "bench/results/sampling.json"))
    args = ap.parse_args()

    model_dir = args.model or build_tiny_model(Path(tempfile.mkdtemp()) / "m", seed=0, hidden=512, layers=8)
    backend = TransformersBackend(str(model_dir), batch_size=args.batch_size)
    model, tok = backend.model, backend.tokenizer
    tok.padding_side = "left"  # the raw baselines pad as polyvox does
    n_params = sum(p.numel() for p in model.parameters())
    problems = tasks.load("gsm8k", ROOT / "data", limit=args.prompts)
    prompts = [formats.panel_prompt(p.text) for p in problems]
    requests = [Request(p, seed=i) for p in prompts for i in range(args.n)]
    params = SamplingParams(max_tokens=args.max_tokens, temperature=1.0)
    eos = tok.eos_token_id
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    gen_kwargs = dict(max_new_tokens=args.max_tokens, do_sample=True, temperature=1.0, top_p=1.0,
                      pad_token_id=tok.pad_token_id, eos_token_id=eos)

    backend.generate(requests[: args.batch_size], params)  # warm-up (kernels, allocator)

    # (c) raw batched generate, same batch size, input order
    texts = [r.prompt for r in requests]
    c_tokens = 0
    sync(); t0 = time.perf_counter()
    for i in range(0, len(texts), args.batch_size):
        enc = tok(texts[i:i + args.batch_size], return_tensors="pt", padding=True, add_special_tokens=False).to(backend.device)
        with torch.no_grad():
            gen = model.generate(**enc, **gen_kwargs)
        c_tokens += count_tokens(gen[:, enc["input_ids"].shape[1]:].tolist(), eos)
    sync(); c_s = time.perf_counter() - t0

    # (b) polyvox backend
    sync(); t0 = time.perf_counter()
    outs = backend.generate(requests, params)
    sync(); b_s = time.perf_counter() - t0
    b_tokens = sum(c.completion_tokens for c in outs)

    # (a) naive: one sample per generate call
    a_tokens = 0
    sync(); t0 = time.perf_counter()
    for text in texts[: args.naive_subset]:
        enc = tok([text], return_tensors="pt", add_special_tokens=False).to(backend.device)
        with torch.no_grad():
            gen = model.generate(**enc, **gen_kwargs)
        a_tokens += count_tokens(gen[:, enc["input_ids"].shape[1]:].tolist(), eos)
    sync(); a_s = time.perf_counter() - t0

    rate = {"naive": a_tokens / a_s, "polyvox": b_tokens / b_s, "raw_batched": c_tokens / c_s}
    result = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu",
        "model_parameters": n_params, "prompts": args.prompts, "n": args.n, "samples": len(requests),
        "max_tokens": args.max_tokens, "batch_size": args.batch_size, "naive_subset": args.naive_subset,
        "tokens": {"naive": a_tokens, "polyvox": b_tokens, "raw_batched": c_tokens},
        "seconds": {"naive": a_s, "polyvox": b_s, "raw_batched": c_s},
        "tokens_per_s": rate,
        "ratio_vs_batched": rate["polyvox"] / rate["raw_batched"],
        "ratio_vs_naive": rate["polyvox"] / rate["naive"],
        "targets": {"ratio_vs_batched": 0.9, "ratio_vs_naive": 10},
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
    }
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
