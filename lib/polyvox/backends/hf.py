"""The transformers backend: ``from_pretrained`` on a path or hub id, an optional PEFT adapter.

bf16 on GPU, fp32 on CPU. Requests are sorted by prompt length and batched with
left padding (less padding, same greedy results); stop strings go to
``generate(stop_strings=…)`` and are cut from the text. Sampling is seeded once
per batch, from the batch's first request.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from .base import Completion, LocalBackend, Request, SamplingParams, register_backend


def _cut_at_stop(text: str, stops) -> tuple[str, bool]:
    cut = min((text.find(s) for s in stops if s in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


@register_backend("transformers")
class TransformersBackend(LocalBackend):
    name = "transformers"

    def __init__(self, model: str, adapter: str | None = None, device: str | None = None,
                 batch_size: int = 16, dtype: str | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_name, self.adapter = model, adapter
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if self.device == "cuda" else torch.float32)
        self.tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=False)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype, trust_remote_code=False,
                                                          use_safetensors=True).to(self.device)
        if adapter:
            from peft import PeftModel

            check_adapter_fits(adapter, self.model)
            self.model = PeftModel.from_pretrained(self.model, adapter)
        self.model.eval()
        self.batch_size = batch_size

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]:
        return generate_batched(self.model, self.tokenizer, requests, params, self.batch_size, self.device)


def generate_batched(model, tokenizer, requests: list[Request], params: SamplingParams, batch_size: int,
                     device: str) -> list[Completion]:
    """Length-sorted, left-padded batched generation with a loaded model (also used inside RL)."""
    import torch

    texts = [r.prompt for r in requests]
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    out: list[Completion | None] = [None] * len(texts)
    eos = tokenizer.eos_token_id
    pad_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        for b in range(0, len(order), batch_size):
            idx = order[b:b + batch_size]
            enc = tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True,
                            add_special_tokens=False).to(device)
            torch.manual_seed(requests[idx[0]].seed)
            t0 = time.perf_counter()
            with torch.no_grad():
                gen = model.generate(
                    **enc, max_new_tokens=params.max_tokens, do_sample=params.temperature > 0,
                    temperature=params.temperature if params.temperature > 0 else None,
                    top_p=params.top_p if params.temperature > 0 else None,
                    pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
                    stop_strings=list(params.stop) or None, tokenizer=tokenizer if params.stop else None)
            latency = (time.perf_counter() - t0) / len(idx)
            new = gen[:, enc["input_ids"].shape[1]:]
            for row, i in zip(new.tolist(), idx):
                # generated tokens up to and including the first eos (padding after it is filler)
                n_tok = row.index(eos) + 1 if eos in row else len(row)
                text = tokenizer.decode(row[:n_tok], skip_special_tokens=True)
                text, stopped = _cut_at_stop(text, params.stop)
                finish = "stop" if (stopped or eos in row[:n_tok] or n_tok < params.max_tokens) else "length"
                out[i] = Completion(text, lengths[i], n_tok, finish, latency)
    finally:
        tokenizer.padding_side = pad_side
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
