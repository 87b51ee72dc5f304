"""The vLLM backend: vLLM's offline ``LLM`` engine, adapters as ``LoRARequest``s, one per request.

Imported lazily (GPU hosts install it from requirements-gpu.txt). What the backend sets by itself:

- ``VLLM_USE_FLASHINFER_SAMPLER=0`` in the environment (unless the caller set it) before vLLM is
  imported: the GPU host runs without FlashInfer (its wheels are left out of the verified
  install, see requirements-gpu.txt), and vLLM would otherwise try FlashInfer's top-p/top-k
  sampler; with it off vLLM samples with its own PyTorch sampler (the engine process it spawns
  inherits the variable).
- Prompts go in as token ids, tokenised without special tokens, as the transformers backend does
  (vLLM's own tokenising adds them: a doubled BOS for a model whose chat template writes one).

Adapters: the backend's ``adapter`` serves every request that names none; a request may carry
its own (``Request.adapter``). Each distinct adapter folder (resolved path) gets one
``LoRARequest(name=path, id)``, ids 1, 2, … in order of first use, stable for the engine's life,
so Part II's many systems and mixes are sampled by one engine. LoRA is enabled when the backend
is given an adapter, ``adapters`` (every folder it may see) or ``max_lora_rank``;
``max_lora_rank`` is the largest rank among them, rounded up to a rank vLLM accepts;
``max_loras`` (adapters in one batch on the GPU) defaults to their number, at most 16, and every
known adapter stays in vLLM's CPU cache. Each request carries its own seed, which vLLM honours per
request; stop strings are cut from the text; token counts are vLLM's own (prompt and generated
token ids); finish reasons are ``length`` (the token cap) or ``stop`` (end of sequence or a stop
string), anything else (an aborted request) is an error.

A driving script needs an ``if __name__ == "__main__":`` guard: vLLM spawns its engine process.
"""
from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path

from .base import (Completion, LocalBackend, Request, SamplingParams, check_adapter_path, local_prompt,
                   register_backend)
from .hf import adapter_rank

FLASHINFER_SAMPLER_ENV = "VLLM_USE_FLASHINFER_SAMPLER"
# the ranks vLLM 0.24's LoRAConfig accepts (vllm.config.lora.MaxLoRARanks); read from vLLM when it is there
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
MAX_LORAS_DEFAULT_CAP = 16


def apply_vllm_env(environ=None) -> dict:
    """Set the environment the backend needs before vLLM is imported; returns what it set (caller's values win)."""
    environ = os.environ if environ is None else environ
    if FLASHINFER_SAMPLER_ENV in environ:
        return {}
    environ[FLASHINFER_SAMPLER_ENV] = "0"
    return {FLASHINFER_SAMPLER_ENV: "0"}


def import_vllm():
    """(LLM, SamplingParams, LoRARequest) from vLLM, with the environment applied; a one-line error without it."""
    apply_vllm_env()
    try:
        from vllm import LLM, SamplingParams as VSP
        from vllm.lora.request import LoRARequest
    except ImportError as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ImportError("the vllm backend needs vLLM (GPU hosts: pip install -r requirements-gpu.txt); "
                          f"import failed: {why}") from None
    return LLM, VSP, LoRARequest


def lora_ranks() -> tuple[int, ...]:
    try:
        from typing import get_args

        from vllm.config.lora import MaxLoRARanks

        ranks = tuple(sorted(int(r) for r in get_args(MaxLoRARanks)))
        return ranks or LORA_RANKS
    except Exception:  # an older or newer layout: the 0.24 list
        return LORA_RANKS


def lora_rank_slot(rank: int, ranks=LORA_RANKS) -> int:
    """The smallest rank vLLM accepts as ``max_lora_rank`` that holds ``rank``."""
    for r in sorted(ranks):
        if r >= rank:
            return r
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({max(ranks)})")


def adapter_key(path: str | os.PathLike) -> str:
    """One adapter folder, one key: its resolved path (``a/../a`` and ``a`` are the same adapter)."""
    return str(Path(path).expanduser().resolve())


def vllm_sampling_kwargs(params: SamplingParams, seed: int) -> dict:
    """Translate polyvox parameters to vllm.SamplingParams keyword arguments (one sample, its own seed)."""
    return {"n": 1, "temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens,
            "stop": list(params.stop) or None, "seed": seed, "include_stop_str_in_output": False,
            "skip_special_tokens": True}


def lora_engine_kwargs(adapters: list[str], max_lora_rank: int | None = None, max_loras: int | None = None,
                       ranks=LORA_RANKS) -> dict:
    """The engine's LoRA settings for the adapters it may see (empty: LoRA off)."""
    if not adapters and max_lora_rank is None:
        return {}
    need = max([adapter_rank(a) for a in adapters], default=1)
    if max_lora_rank is not None and max_lora_rank < need:
        raise ValueError(f"max_lora_rank {max_lora_rank} is below the rank of an adapter given ({need})")
    rank = lora_rank_slot(max(need, max_lora_rank or 0), ranks)
    n = len(adapters)
    if max_loras is None:  # every known adapter in one batch, up to the cap; unknown ones: the cap
        max_loras = min(n, MAX_LORAS_DEFAULT_CAP) if n else MAX_LORAS_DEFAULT_CAP
    return {"enable_lora": True, "max_lora_rank": rank, "max_loras": max_loras,
            "max_cpu_loras": max(max_loras, n)}


class LoRARequests:
    """One LoRARequest per distinct adapter folder: name = resolved path, ids 1, 2, … in order of first use."""

    def __init__(self, factory, max_rank: int | None):
        self.factory, self.max_rank = factory, max_rank
        self.ids: dict[str, int] = {}
        self.requests: dict[str, object] = {}

    def get(self, adapter: str | None):
        if adapter is None:
            return None
        key = adapter_key(adapter)
        if key not in self.requests:
            if self.max_rank is None:
                raise ValueError(f"a request asks for adapter {adapter}, but this vllm engine was started without "
                                 f"LoRA: give the backend adapter=, adapters= or max_lora_rank=")
            check_adapter_path(key)
            rank = adapter_rank(key)
            if rank > self.max_rank:
                raise ValueError(f"{adapter}: LoRA rank {rank} is above the engine's max_lora_rank {self.max_rank}: "
                                 f"list it in adapters= when the backend is made")
            self.ids[key] = len(self.ids) + 1
            self.requests[key] = self.factory(key, self.ids[key], key)
        return self.requests[key]


@register_backend("vllm")
class VLLMBackend(LocalBackend):
    name = "vllm"

    def __init__(self, model: str, adapter: str | None = None, tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.9,
                 adapters: list[str] | tuple[str, ...] | None = None, max_lora_rank: int | None = None,
                 max_loras: int | None = None, enforce_eager: bool = False):
        LLM, _, LoRARequest = import_vllm()
        self.model_name, self.adapter = model, adapter
        self.options = {"tensor_parallel_size": tensor_parallel_size, "max_model_len": max_model_len}
        self.describe(model, adapter)  # a clear error before any weights load
        known = list(dict.fromkeys(adapter_key(a) for a in ([adapter] if adapter else []) + list(adapters or ())))
        for a in known:
            check_adapter_path(a)
        kwargs = dict(model=model, tensor_parallel_size=tensor_parallel_size, trust_remote_code=False,
                      gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager)
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        lora = lora_engine_kwargs(known, max_lora_rank, max_loras, lora_ranks())
        kwargs.update(lora)
        self.engine_kwargs = kwargs
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.loras = LoRARequests(LoRARequest, lora.get("max_lora_rank"))
        for a in known:  # ids in the order given: the default adapter is 1
            self.loras.get(a)

    @classmethod
    def identity_options(cls, options: dict) -> dict:
        return {"sampler": "vllm-per-request-seed", "max_model_len": options.get("max_model_len")}

    def lora_request(self, request: Request):
        return self.loras.get(request.adapter or self.adapter)

    def token_ids(self, prompts: list[str]) -> list[list[int]]:
        """Each prompt's token ids without special tokens (each distinct prompt tokenised once)."""
        ids = {p: list(self.tokenizer.encode(p, add_special_tokens=False)) for p in dict.fromkeys(prompts)}
        return [ids[p] for p in prompts]

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]:
        _, VSP, _ = import_vllm()
        if not requests:
            return []
        loras = [self.lora_request(r) for r in requests]  # refused (unknown rank, no LoRA) before any work
        sps = [VSP(**vllm_sampling_kwargs(params, r.seed)) for r in requests]
        prompts = [{"prompt_token_ids": ids} for ids in self.token_ids([local_prompt(self.tokenizer, r) for r in requests])]
        t0 = time.perf_counter()
        outs = self.llm.generate(prompts, sps, lora_request=loras if any(x is not None for x in loras) else None,
                                  use_tqdm=False)
        latency = (time.perf_counter() - t0) / len(requests)
        return [completion(o, latency) for o in outs]

    def close(self) -> None:
        """Shut the engine down and free its GPU memory (a bench loads many engines in one process)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        for path in (("shutdown",), ("llm_engine", "engine_core", "shutdown")):
            obj = llm
            try:
                for name in path:
                    obj = getattr(obj, name)
            except AttributeError:
                continue
            obj()
            break
        del llm
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()


def completion(output, latency: float) -> Completion:
    """A polyvox Completion from one vLLM RequestOutput (its first and only sample)."""
    c = output.outputs[0]
    if c.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM finished a request with {c.finish_reason!r} (not stop or length)")
    return Completion(c.text, len(output.prompt_token_ids), len(c.token_ids), c.finish_reason, latency)
