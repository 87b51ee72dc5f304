"""The transformers backend: ``from_pretrained`` on a path or hub id, an optional PEFT adapter.

bf16 on GPU, fp32 on CPU. Requests are sorted by prompt length and batched (less padding,
same results); prompts are tokenised in one batched call (each distinct prompt once) and
completions decoded in one. On CUDA, generation runs polyvox's own decode loop
(:mod:`polyvox.backends.decode`: packed prefill, a KV cache packed per row, FlashAttention
over each row's own tokens with the query heads folded onto their KV head, each decode step
compiled and replayed as one CUDA graph; ``bench/sampling.py`` measures it against
``generate``). On CPU, ``generate`` with the dynamic cache and left padding; stop strings go
to ``generate(stop_strings=…)`` there and to the loop's own check on CUDA, and are cut from
the text. A model whose generation config asks for a logits processor the loop does not
apply (repetition penalty, banned words, …) goes through ``generate`` on CUDA too.

Seeds: every request is sampled with its own seed, whatever batch it lands in.
``generate``'s own sampler draws from one global generator for the whole batch, so a
request's text would depend on its batch-mates; instead :class:`SeededSampler` picks
each token by the Gumbel-max trick with *counter-based* noise — the noise for
(request seed, step, token id) is a fixed hash (splitmix64) — after temperature and
top-p, and ``generate`` then runs greedy on the picked token. The decode loop calls the same
:func:`seeded_choice`. The draw is exactly a sample from the softmax (Gumbel-max), and it is
a function of the request alone: a rerun with another ``--batch-size`` or ``--chunk`` gives
the same completions (up to floating-point differences between batch shapes, which flip a
token only at a near tie); the decode loop gives the eager path's texts in fp32 (tested on CPU).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from .base import (Completion, LocalBackend, Request, SamplingParams, local_prompt, refuse_request_adapters,
                   register_backend)

SAMPLER = "gumbel-counter-splitmix64-v1"  # part of the backend's identity: another sampler, other outputs

_M64 = (1 << 64) - 1


def _i64(x: int) -> int:
    """An unsigned 64-bit constant as the signed int64 torch stores (multiplication wraps the same way)."""
    x &= _M64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN, _MIX1, _MIX2 = _i64(0x9E3779B97F4A7C15), _i64(0xBF58476D1CE4E5B9), _i64(0x94D049BB133111EB)


def _shr(x, k: int):
    """Logical right shift of int64 tensors (torch's >> is arithmetic on signed values)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def counter_uniform(seeds, step: int, vocab: int):
    """U(0, 1) noise of shape (len(seeds), vocab), a pure function of (seed, step, token id)."""
    import torch

    v = torch.arange(vocab, dtype=torch.int64, device=seeds.device)
    x = seeds[:, None] * _GOLDEN + (step * vocab + v)[None, :] * _MIX1
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    x = x ^ _shr(x, 31)
    return (_shr(x, 11).to(torch.float64) + 0.5) / float(1 << 53)


def seeded_choice(scores, seeds, step, temperature: float, top_p: float):
    """Each row's token: argmax of logits/temperature (top-p filtered) + Gumbel noise of (seed, step, token).

    ``step`` is the index of the token being sampled (an int, or a 0-d int64 tensor inside the
    decode loop's graph); the result is a function of the row's own logits and seed alone.
    """
    import torch

    logits = scores.float() / temperature
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop = cum - torch.softmax(sorted_logits, dim=-1) >= top_p  # keep the smallest set reaching top_p
        logits = logits.scatter(1, order, sorted_logits.masked_fill(drop, float("-inf")))
    gumbel = -torch.log(-torch.log(counter_uniform(seeds, step, logits.shape[1]))).to(logits.dtype)
    return torch.argmax(logits + gumbel, dim=-1)


class SeededSampler:
    """A logits processor that samples each row with its request's seed (see the module docstring)."""

    def __init__(self, seeds: list[int], temperature: float, top_p: float, prompt_len: int, device):
        import torch

        self.seeds = torch.tensor(seeds, dtype=torch.int64, device=device)
        self.temperature, self.top_p, self.prompt_len = temperature, top_p, prompt_len

    def __call__(self, input_ids, scores):
        import torch

        step = input_ids.shape[1] - self.prompt_len
        choice = seeded_choice(scores, self.seeds, step, self.temperature, self.top_p)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, choice[:, None], 0.0)


def _cut_at_stop(text: str, stops) -> tuple[str, bool]:
    cut = min((text.find(s) for s in stops if s in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


@register_backend("transformers")
class TransformersBackend(LocalBackend):
    name = "transformers"

    def __init__(self, model: str, adapter: str | None = None, device: str | None = None,
                 batch_size: int = 16, dtype: str | None = None, static_cache: bool | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_name, self.adapter = model, adapter
        self.options = {"batch_size": batch_size, "dtype": dtype}
        self.describe(model, adapter)  # a clear error before any weights load
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if self.device == "cuda" else torch.float32)
        self.tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=False)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype, trust_remote_code=False,
                                                          use_safetensors=True).to(self.device)
        self.adapter_path = adapter
        if adapter:
            from peft import PeftModel

            check_adapter_fits(adapter, self.model)
            self.model = PeftModel.from_pretrained(self.model, adapter)
        self.model.eval()
        self.batch_size = batch_size
        self.static = static_cache  # None: the decode loop on CUDA, generate with the dynamic cache on CPU
        self.stats: dict | None = None  # a dict here collects the decode loop's timings (benches)

    @classmethod
    def identity_options(cls, options: dict) -> dict:
        # batch shapes change floating-point sums, which can flip a token at a near tie: recorded
        return {"sampler": SAMPLER, "batch_size": options.get("batch_size", 16),
                "dtype": options.get("dtype") or "auto: bf16 on GPU, fp32 on CPU"}

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]:
        refuse_request_adapters("transformers", requests, self.adapter_path)
        return generate_batched(self.model, self.tokenizer, requests, params, self.batch_size, self.device,
                                self.static, self.stats)


def check_positions(model, ids: list[list[int]], max_tokens: int) -> None:
    """Refuse, before any sampling, a request whose prompt plus ``max_tokens`` would pass the model's
    positions (``max_position_embeddings``): past them a rotary model still runs, at positions it never
    saw, and its text degrades without any error."""
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not isinstance(positions, int) or not ids:
        return
    i = max(range(len(ids)), key=lambda k: len(ids[k]))
    if len(ids[i]) + max_tokens > positions:
        raise ValueError(f"request {i}: {len(ids[i])} prompt tokens + max_tokens {max_tokens} = "
                         f"{len(ids[i]) + max_tokens} pass the model's {positions} positions "
                         "(max_position_embeddings); lower max_tokens or shorten the prompt")


STATIC_PAD = 64  # prompts are left-padded to a multiple of this on generate's static-cache path: few compiles


def generate_rows(model, rows: list[list[int]], seeds: list[int], params: SamplingParams, pad_id: int,
                  eos_id, device: str, static: bool = False, batch_size: int | None = None,
                  tokenizer=None, cap_hint: int = 0, stats: dict | None = None) -> list[list[int]]:
    """Generate after each row of prompt token ids; returns the new token ids of each row.

    ``static``: polyvox's decode loop (:func:`polyvox.backends.decode.decode_rows`: static packed
    KV cache, compiled and graph-captured decode step on CUDA, eager on CPU), whose rows end after
    their first end-of-sequence token or stop string. A short batch is filled up to
    ``batch_size`` rows (one captured graph per batch size; each row samples with its own seed,
    so the filler changes no other row's text). A model the loop cannot reproduce
    (:func:`polyvox.backends.decode.unsupported`) goes through ``generate`` with its static cache.
    Otherwise ``generate`` with the dynamic cache and left padding: rows run to the batch's end,
    padded with ``pad_id`` after their end (callers count tokens up to the first eos).
    """
    import torch

    if static and all(rows):
        from . import decode

        reason = decode.unsupported(model)
        if reason is None:
            return decode.decode_rows(model, rows, seeds, params.max_tokens, params.temperature, params.top_p,
                                      pad_id, eos_id, device, batch_rows=batch_size, stops=tuple(params.stop),
                                      tokenizer=tokenizer, cap_hint=cap_hint, stats=stats)
    n = len(rows)
    width = max(len(r) for r in rows)
    extra = {}
    if static:  # generate's own static cache (compiled decode step on CUDA)
        extra = {"cache_implementation": "static"}
        width = -(-width // STATIC_PAD) * STATIC_PAD
        if batch_size and n < batch_size:
            rows, seeds = rows + [rows[-1]] * (batch_size - n), seeds + [seeds[-1]] * (batch_size - n)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for k, r in enumerate(rows):
        input_ids[k, width - len(r):] = torch.tensor(r)
        mask[k, width - len(r):] = 1
    sampler = [SeededSampler(seeds, params.temperature, params.top_p, width, device)] \
        if params.temperature > 0 else None
    with torch.no_grad():
        gen = model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                             max_new_tokens=params.max_tokens, do_sample=False, logits_processor=sampler,
                             pad_token_id=pad_id, eos_token_id=eos_id, stop_strings=list(params.stop) or None,
                             tokenizer=tokenizer if params.stop else None, **extra)
    return gen[:n, width:].tolist()


def tokenize_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Token ids of each prompt (no special tokens added): one batched call over the distinct prompts."""
    distinct = list(dict.fromkeys(prompts))
    ids = dict(zip(distinct, tokenizer(distinct, add_special_tokens=False)["input_ids"])) if distinct else {}
    return [ids[p] for p in prompts]


def generate_batched(model, tokenizer, requests: list[Request], params: SamplingParams, batch_size: int,
                     device: str, static: bool | None = None, stats: dict | None = None) -> list[Completion]:
    """Length-sorted batched generation with a loaded model (also used inside RL).

    ``static`` (default: on CUDA) takes the decode loop of :func:`generate_rows`; otherwise
    ``generate`` with left padding. ``stats`` collects the decode loop's timings (benches).
    """
    static = str(device).startswith("cuda") if static is None else static
    ids = tokenize_prompts(tokenizer, [local_prompt(tokenizer, r) for r in requests])
    check_positions(model, ids, params.max_tokens)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[Completion | None] = [None] * len(ids)
    eos = tokenizer.eos_token_id
    longest = max((len(x) for x in ids), default=0)
    for b in range(0, len(order), batch_size):
        idx = order[b:b + batch_size]
        t0 = time.perf_counter()
        new = generate_rows(model, [ids[i] for i in idx], [requests[i].seed for i in idx], params,
                            tokenizer.pad_token_id, eos, device, static, batch_size, tokenizer,
                            cap_hint=longest, stats=stats)
        latency = (time.perf_counter() - t0) / len(idx)
        # generated tokens up to and including the first eos (padding after it is filler)
        counts = [row.index(eos) + 1 if eos in row else len(row) for row in new]
        texts = tokenizer.batch_decode([row[:k] for row, k in zip(new, counts)], skip_special_tokens=True)
        for row, i, n_tok, text in zip(new, idx, counts, texts):
            text, stopped = _cut_at_stop(text, params.stop)
            finish = "stop" if (stopped or eos in row[:n_tok] or n_tok < params.max_tokens) else "length"
            out[i] = Completion(text, len(ids[i]), n_tok, finish, latency)
    return out  # type: ignore[return-value]


def adapter_rank(adapter: str) -> int:
    cfg = json.loads((Path(adapter) / "adapter_config.json").read_text())
    ranks = [cfg.get("r", 8)] + list((cfg.get("rank_pattern") or {}).values())
    return int(max(ranks))


def check_adapter_fits(adapter: str, model) -> None:
    """Fail clearly when an adapter was trained for another base (wrong modules or shapes)."""
    from safetensors import safe_open

    path = Path(adapter) / "adapter_model.safetensors"
    if not path.exists():
        raise ValueError(f"{adapter}: no adapter_model.safetensors (polyvox loads safetensors only)")
    params = dict(model.named_parameters())
    with safe_open(str(path), framework="pt") as fh:
        for key in fh.keys():
            if "lora_A" not in key:
                continue
            base_key = key.replace("base_model.model.", "").replace(".lora_A.weight", ".weight")
            target = params.get(base_key)
            if target is None:
                raise ValueError(f"{adapter}: adapter module {base_key!r} does not exist in the base model")
            in_features = fh.get_slice(key).get_shape()[1]
            if in_features != target.shape[1]:
                raise ValueError(f"{adapter}: {base_key} expects input size {in_features}, "
                                 f"the base model has {target.shape[1]}: adapter does not fit this base")
