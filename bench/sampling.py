"""Sampling throughput: polyvox's transformers backend (its decode loop on CUDA) against raw
``generate`` (dynamic and static cache) and a naive one-at-a-time loop, arms interleaved over rounds.

Same requests for every arm: --prompts GSM8K questions in the panel format × --n samples,
temperature 1.0, --max-tokens new tokens, on a ~19M-parameter Qwen3-architecture model
(random weights, seeded; --model for another). Every arm samples the same distribution, the
full softmax at temperature 1: the raw arms pass ``top_k=0`` (``generate`` would otherwise
apply its default ``top_k=50``). Arms:
- ``polyvox_b{B}`` for each of --batch-sizes: TransformersBackend.generate (length-sorted
  batches of B, polyvox.backends.decode on CUDA, per-request seeded sampling);
- ``raw_dynamic``: model.generate(do_sample=True, top_k=0) in input-order batches of
  --batch-size, the default cache;
- ``raw_static``: the same with ``cache_implementation="static"`` (transformers compiles the
  decode step);
- ``naive``: one model.generate call per sample, on --naive-subset samples.

Each arm first runs once untimed (compilation, graph capture, warm-up; its time is kept as
``warmup_s``). Then --rounds rounds, the arms' order rotated each round; every round is kept
in the JSON. Each round records tokens (generated tokens up to each sequence's end-of-sequence)
and rows×steps (for each batch: its rows × the positions it sampled, finished rows included),
both per second. Ratios compare medians over rounds: ``ratio_vs_static`` = polyvox at
--batch-size ÷ raw_static at the same batch size (tokens/s and rows×steps/s), ``ratio_vs_dynamic``,
``ratio_vs_naive``; ``best`` names polyvox's best batch size by tokens/s.

Decode steps against the bandwidth bound (polyvox arms, from the decode loop's own CUDA-event
timings): ``decode_step_ms`` per batch size is the decode loop's time ÷ its steps. The bytes a
step must read are the model's weights once (bf16: every parameter, the tied embedding once)
plus every row's KV cache up to its current length (layers × 2 × kv_heads × head_dim × 2
bytes per token; all rows of the batch, finished ones included, since a static batch computes
them); the bound is those bytes ÷ the device-to-device copy bandwidth measured in the same run
(bytes read + written ÷ time), and ``step_over_bandwidth`` = decode time ÷ bound time.

Agreement in bf16 (``bf16_agreement``): the first --agree-requests requests through the decode
loop and through the eager path (``generate`` with per-request seeded sampling, the dynamic
cache), compared token by token. Where a row's tokens first differ, both paths had the same
context, so the difference is one sampling decision made on logits that differ by bf16
rounding; the bench recomputes that step's logits in fp32 and reports the margin between the
two tokens' perturbed scores (logit/T + Gumbel noise), beside the median gap between the best
and second-best perturbed scores over ordinary steps. Tokens after a row's first difference
follow a different context and are counted as unequal.

Targets (issue 20): end to end ≥ 100k tok/s at the best batch; decode step ≤ 1.2 ms at batch
256; step_over_bandwidth ≤ 4 at batch ≥ 1024; ≥ 99 % of tokens equal in bf16.

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
from polyvox.backends.hf import TransformersBackend, counter_uniform, generate_batched  # noqa: E402
from polyvox.testing import build_tiny_model  # noqa: E402


def count_tokens(rows, eos):
    return sum(row.index(eos) + 1 if eos in row else len(row) for row in rows)


def copy_bandwidth(device, gib=2, reps=10):
    """Device-to-device copy: (bytes read + bytes written) ÷ time, median of reps."""
    if device != "cuda":
        return None
    x = torch.empty(gib << 30, dtype=torch.uint8, device=device).random_(0, 255)
    y = torch.empty_like(x)
    times = []
    for _ in range(reps + 2):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del x, y
    torch.cuda.empty_cache()
    return 2 * (gib << 30) / statistics.median(times[2:])


def agreement(backend, model_dir, reqs, params, batch_size):
    """Decode loop vs eager path in bf16, token by token, with fp32 margins at first differences."""
    model, tok = backend.model, backend.tokenizer
    eos = tok.eos_token_id
    ids = [tok(r.prompt, add_special_tokens=False)["input_ids"] for r in reqs]

    def tokens(static):
        # the token ids themselves: re-tokenising texts would not round-trip a random model's output
        from polyvox.backends.hf import generate_rows

        order = sorted(range(len(reqs)), key=lambda i: len(ids[i]))
        out = [None] * len(reqs)
        for b in range(0, len(order), batch_size):
            idx = order[b:b + batch_size]
            rows = generate_rows(model, [ids[i] for i in idx], [reqs[i].seed for i in idx], params,
                                 tok.pad_token_id, eos, backend.device, static, batch_size, tok)
            for i, row in zip(idx, rows):
                out[i] = row[:row.index(eos) + 1] if eos in row else row
        return out

    fast, eager = tokens(True), tokens(False)
    equal = total = 0
    diverged = []
    for i, (f, e) in enumerate(zip(fast, eager)):
        total += max(len(f), len(e))
        k = next((t for t, (x, y) in enumerate(zip(f, e)) if x != y), None)
        equal += sum(x == y for x, y in zip(f, e)) if k is None else k
        if k is None and len(f) != len(e):
            k = min(len(f), len(e))
        if k is not None:
            diverged.append((i, k))
    # fp32 logits at each first difference (same context in both paths) and at ordinary steps
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(backend.device).eval()

    def perturbed(i, t, prefix):
        seq = torch.tensor([ids[i] + prefix], device=backend.device)
        with torch.no_grad():
            logits = ref(seq).logits[0, -1].float() / params.temperature
        seeds = torch.tensor([reqs[i].seed], dtype=torch.int64, device=backend.device)
        return logits + (-torch.log(-torch.log(counter_uniform(seeds, t, logits.shape[0]))))[0].float()

    margins = []
    for i, k in diverged[:64]:
        if k >= min(len(fast[i]), len(eager[i])):
            continue  # one row ended (eos) where the other went on: not a choice between two tokens
        z = perturbed(i, k, eager[i][:k])
        a, b = eager[i][k], fast[i][k]
        top2 = torch.topk(z, 2).values
        margins.append({"request": i, "step": k, "eager_token": a, "loop_token": b,
                        "fp32_margin": round(float(z[a] - z[b]), 5), "fp32_choice": int(z.argmax()),
                        "fp32_top2_gap": round(float(top2[0] - top2[1]), 5)})
    ordinary = []
    for i in range(min(32, len(reqs))):
        t = min(len(eager[i]) - 1, 40)
        if t > 0:
            top2 = torch.topk(perturbed(i, t, eager[i][:t]), 2).values
            ordinary.append(float(top2[0] - top2[1]))
    del ref
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"requests": len(reqs), "batch_size": batch_size, "tokens_compared": total, "tokens_equal": equal,
            "fraction_equal": equal / max(total, 1), "rows_identical": len(reqs) - len(diverged),
            # sampling decisions taken on the same context in both paths (every position up to and
            # including each row's first difference), and the fraction of them that agree
            "same_context_decisions": equal + len(diverged),
            "same_context_agreement": equal / max(equal + len(diverged), 1),
            "rows_diverged": len(diverged),
            "first_differences": margins,
            "median_abs_margin_at_first_difference": statistics.median(abs(m["fp32_margin"]) for m in margins)
            if margins else None,
            "median_top2_gap_ordinary_steps": statistics.median(ordinary) if ordinary else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256, help="the raw arms' batch size (and the ratio's)")
    ap.add_argument("--batch-sizes", default="256,512,1024", help="polyvox's batch sizes")
    ap.add_argument("--naive-subset", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--agree-requests", type=int, default=512)
    ap.add_argument("--out", default=str(ROOT / "bench/results/sampling.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU check of this script: tiny model, the loop forced")
    args = ap.parse_args()

    t_run = time.perf_counter()
    model_dir = args.model or build_tiny_model(Path(tempfile.mkdtemp()) / "m", seed=0,
                                               hidden=64 if args.smoke else 512, layers=2 if args.smoke else 8)
    backend = TransformersBackend(str(model_dir), batch_size=args.batch_size, static_cache=True if args.smoke else None)
    model, tok = backend.model, backend.tokenizer
    tok.padding_side = "left"  # the raw arms pad as generate expects
    device = backend.device
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    cfg = model.config
    params_unique = {p.data_ptr(): p for p in model.parameters()}.values()
    weight_bytes = sum(p.numel() * p.element_size() for p in params_unique)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_bytes_per_token = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head_dim * \
        next(model.parameters()).element_size()
    bandwidth = copy_bandwidth(device) or 50e9  # --smoke on CPU: a nominal figure
    problems = tasks.load("gsm8k", ROOT / "data", limit=args.prompts)
    prompts = [formats.panel_prompt(p.text) for p in problems]
    reqs = [Request(t, seed=1000 * i + j) for i, t in enumerate(prompts) for j in range(args.n)]
    params = SamplingParams(max_tokens=args.max_tokens, temperature=1.0)
    eos = tok.eos_token_id
    sizes = [int(x) for x in args.batch_sizes.split(",")]

    def raw(batch_texts, static):
        enc = tok(batch_texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        extra = {"cache_implementation": "static"} if static else {}
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=args.max_tokens, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, pad_token_id=tok.pad_token_id, eos_token_id=eos, **extra)
        return out[:, enc["input_ids"].shape[1]:].tolist()

    def arm_raw(static):
        def run():
            texts = [r.prompt for r in reqs]
            toks = row_pos = 0
            for b in range(0, len(texts), args.batch_size):
                rows = raw(texts[b:b + args.batch_size], static)
                toks += count_tokens(rows, eos)
                row_pos += len(rows) * len(rows[0])
            return toks, row_pos, None
        return run

    def arm_polyvox(batch):
        def run():
            backend.batch_size, backend.stats = batch, {}
            toks = sum(c.completion_tokens for c in backend.generate(reqs, params))
            stats, backend.stats = backend.stats, None
            return toks, stats.get("row_positions"), stats
        return run

    def arm_naive():
        rows = [raw([r.prompt], False)[0] for r in reqs[:args.naive_subset]]
        return count_tokens(rows, eos), sum(len(r) for r in rows), None

    arms = {f"polyvox_b{b}": arm_polyvox(b) for b in sizes}
    arms.update({"raw_dynamic": arm_raw(False), "raw_static": arm_raw(True), "naive": arm_naive})

    def timed(fn):
        sync()
        t0 = time.perf_counter()
        toks, row_pos, stats = fn()
        sync()
        return toks, row_pos, stats, time.perf_counter() - t0

    warmup = {}
    for name, fn in arms.items():  # compilation, graph capture and first-touch costs, kept but not compared
        warmup[name] = round(timed(fn)[3], 3)
        print(f"warm-up {name:14s} {warmup[name]:8.2f} s", flush=True)
    names = list(arms)
    rounds = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            toks, row_pos, stats, secs = timed(arms[name])
            rec = {"round": r, "arm": name, "tokens": toks, "row_steps": row_pos, "seconds": round(secs, 4),
                   "tokens_per_s": round(toks / secs, 1), "row_steps_per_s": round(row_pos / secs, 1)}
            if stats and "decode_s" in stats:
                bound_s = (stats["decode_steps"] * weight_bytes + stats["kv_slot_reads"] * kv_bytes_per_token) \
                    / bandwidth
                rec.update({"decode_s": round(stats["decode_s"], 4), "prefill_s": round(stats["prefill_s"], 4),
                            "decode_steps": stats["decode_steps"], "batches": stats["batches"],
                            "kv_slot_reads": stats["kv_slot_reads"],
                            "decode_step_ms": round(1e3 * stats["decode_s"] / stats["decode_steps"], 4),
                            "bound_step_ms": round(1e3 * bound_s / stats["decode_steps"], 4),
                            "step_over_bandwidth": round(stats["decode_s"] / bound_s, 3),
                            "mean_context": round(stats["kv_slot_reads"] / stats["row_steps"], 1),
                            "engine": stats.get("engine")})
            rounds.append(rec)
            extra = f" step {rec['decode_step_ms']:.3f} ms ({rec['step_over_bandwidth']:.2f}x bound)" \
                if "decode_step_ms" in rec else ""
            print(f"round {r} {name:14s} {toks:8d} tok {secs:7.2f} s {toks / secs:10.0f} tok/s "
                  f"{row_pos / secs:10.0f} rows*steps/s{extra}", flush=True)

    def med(arm, key):
        vals = [x[key] for x in rounds if x["arm"] == arm and x.get(key) is not None]
        return statistics.median(vals) if vals else None

    median = {n: med(n, "tokens_per_s") for n in names}
    median_rs = {n: med(n, "row_steps_per_s") for n in names}
    best = max((f"polyvox_b{b}" for b in sizes), key=lambda n: median[n])
    same = f"polyvox_b{args.batch_size}" if f"polyvox_b{args.batch_size}" in arms else best
    per_batch = {b: {"decode_step_ms": med(f"polyvox_b{b}", "decode_step_ms"),
                     "bound_step_ms": med(f"polyvox_b{b}", "bound_step_ms"),
                     "step_over_bandwidth": med(f"polyvox_b{b}", "step_over_bandwidth"),
                     "mean_context": med(f"polyvox_b{b}", "mean_context"),
                     "tokens_per_s": median[f"polyvox_b{b}"]} for b in sizes}
    print("bf16 agreement ...", flush=True)
    agree = agreement(backend, model_dir, reqs[:args.agree_requests], params, args.batch_size) \
        if (device == "cuda" or args.smoke) and args.agree_requests else None
    engine_info = next((x["engine"] for x in reversed(rounds) if x.get("engine")), None)
    result = {
        "model": {"parameters": sum(p.numel() for p in params_unique), "path": Path(model_dir).name,
                  "weight_bytes": weight_bytes, "kv_bytes_per_token": kv_bytes_per_token},
        "device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "setup": {"prompts": args.prompts, "n": args.n, "max_tokens": args.max_tokens,
                  "batch_size": args.batch_size, "batch_sizes": sizes, "naive_subset": args.naive_subset,
                  "rounds": args.rounds, "raw_arms": "generate(do_sample=True, top_k=0, top_p=1, temperature=1)"},
        "copy_bandwidth_bytes_per_s": bandwidth,
        "decode_engine": engine_info,
        "warmup_s": warmup, "median_tokens_per_s": median, "median_row_steps_per_s": median_rs,
        "best": {"arm": best, "tokens_per_s": median[best]},
        "ratio_vs_static": {"tokens": median[same] / median["raw_static"],
                            "row_steps": median_rs[same] / median_rs["raw_static"], "polyvox_arm": same},
        "ratio_vs_static_best": median[best] / median["raw_static"],
        "ratio_vs_dynamic": median[same] / median["raw_dynamic"],
        "ratio_vs_naive": median[same] / median["naive"],
        "decode_step_ms": {b: v["decode_step_ms"] for b, v in per_batch.items()},
        "step_over_bandwidth": {b: v["step_over_bandwidth"] for b, v in per_batch.items()},
        "per_batch": per_batch,
        "bf16_agreement": agree,
        "targets": {"best_tokens_per_s": 100000, "decode_step_ms_at_256": 1.2,
                    "step_over_bandwidth_at_1024_and_above": 4.0, "bf16_fraction_equal": 0.99},
        "run_s": round(time.perf_counter() - t_run, 1),
        "rounds": rounds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_tokens_per_s", "best", "ratio_vs_static", "ratio_vs_dynamic",
                                             "ratio_vs_naive", "decode_step_ms", "step_over_bandwidth",
                                             "warmup_s", "decode_engine")}, indent=1))
    if agree:
        print(json.dumps({k: v for k, v in agree.items() if k != "first_differences"}, indent=1))


if __name__ == "__main__":
    main()
