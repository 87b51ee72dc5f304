"""The vLLM backend: vLLM's offline ``LLM`` engine, an adapter as a ``LoRARequest``.

Imported lazily (GPU hosts install it from requirements-gpu.txt); ``max_lora_rank``
is read from the adapter's config; each request carries its own seed, which vLLM
honours per request.
"""
from __future__ import annotations

import time

from .base import Completion, LocalBackend, Request, SamplingParams, register_backend
from .hf import adapter_rank


def vllm_sampling_kwargs(params: SamplingParams, seed: int) -> dict:
    """Translate polyvox parameters to vllm.SamplingParams keyword arguments."""
    return {"n": 1, "temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens,
            "stop": list(params.stop) or None, "seed": seed, "include_stop_str_in_output": False}


@register_backend("vllm")
class VLLMBackend(LocalBackend):
    name = "vllm"

    def __init__(self, model: str, adapter: str | None = None, tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.9):
        try:
            from vllm import LLM
            from vllm.lora.request import LoRARequest
        except ImportError as exc:
            raise ImportError("the vllm backend needs vLLM (GPU hosts: pip install -r requirements-gpu.txt); "
                              f"import failed: {exc}") from None
        self.model_name, self.adapter = model, adapter
        self.options = {"tensor_parallel_size": tensor_parallel_size, "max_model_len": max_model_len}
        kwargs = dict(model=model, tensor_parallel_size=tensor_parallel_size, trust_remote_code=False,
                      gpu_memory_utilization=gpu_memory_utilization)
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if adapter:
            kwargs.update(enable_lora=True, max_lora_rank=adapter_rank(adapter))
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.lora = LoRARequest("adapter", 1, adapter) if adapter else None

    @classmethod
    def identity_options(cls, options: dict) -> dict:
        return {"sampler": "vllm-per-request-seed", "max_model_len": options.get("max_model_len")}

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]:
        from vllm import SamplingParams as VSP

        sps = [VSP(**vllm_sampling_kwargs(params, r.seed)) for r in requests]
        t0 = time.perf_counter()
        outs = self.llm.generate([r.prompt for r in requests], sps, lora_request=self.lora, use_tqdm=False)
        latency = (time.perf_counter() - t0) / max(1, len(requests))
        res = []
        for o in outs:
            c = o.outputs[0]
            res.append(Completion(c.text, len(o.prompt_token_ids), len(c.token_ids),
                                  "length" if c.finish_reason == "length" else "stop", latency))
        return res
