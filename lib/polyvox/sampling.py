"""Sampling backends behind one protocol: requests in, completions with token counts out.

    backend.generate(requests: list[Request], params: SamplingParams) -> list[Completion]

One completion per request; n samples of a prompt are n requests (each with its
own seed), so a resumed run can ask for exactly the samples it is missing.

- ``TransformersBackend``: ``from_pretrained`` on a path or hub id, optional PEFT
  adapter on top, bf16 on GPU / fp32 on CPU; requests sorted by prompt length
  and batched with left padding (less padding, same results); stop strings via
  ``generate(stop_strings=…)``; per-batch seed.
- ``VLLMBackend``: vLLM's offline ``LLM`` with ``LoRARequest`` for an adapter
  (``max_lora_rank`` read from the adapter's config); imported lazily.
- ``OpenAIBackend``: any OpenAI-compatible server (``vllm serve``,
  ``transformers serve``, hosted), completions or chat endpoint, key read from
  the environment variable named by ``api_key_env``, bounded concurrency,
  retries with exponential backoff on 429/5xx/timeouts.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

BACKENDS = ("transformers", "vllm", "openai")


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    prompt: str  # templated text (completions) or the user message (chat endpoints)
    seed: int = 0
    chat: bool = False


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" | "length"
    latency_s: float


class Backend(Protocol):
    name: str

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]: ...


def _cut_at_stop(text: str, stops) -> tuple[str, bool]:
    cut = min((text.find(s) for s in stops if s in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class TransformersBackend:
    name = "transformers"

    def __init__(self, model: str, adapter: str | None = None, device: str | None = None,
                 batch_size: int = 16, dtype: str | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

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


def vllm_sampling_kwargs(params: SamplingParams, seed: int) -> dict:
    """Translate polyvox parameters to vllm.SamplingParams keyword arguments."""
    return {"n": 1, "temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens,
            "stop": list(params.stop) or None, "seed": seed, "include_stop_str_in_output": False}


class VLLMBackend:
    name = "vllm"

    def __init__(self, model: str, adapter: str | None = None, tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.9):
        try:
            from vllm import LLM
            from vllm.lora.request import LoRARequest
        except ImportError as exc:
            raise ImportError("the vllm backend needs vLLM (GPU hosts: pip install -r requirements-gpu.txt); "
                              f"import failed: {exc}") from None
        kwargs = dict(model=model, tensor_parallel_size=tensor_parallel_size, trust_remote_code=False,
                      gpu_memory_utilization=gpu_memory_utilization)
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if adapter:
            kwargs.update(enable_lora=True, max_lora_rank=adapter_rank(adapter))
        self.llm = LLM(**kwargs)
        self.lora = LoRARequest("adapter", 1, adapter) if adapter else None

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


class OpenAIBackend:
    """Any OpenAI-compatible server. The API key is read from the environment, never stored."""

    name = "openai"
    RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}

    def __init__(self, base_url: str, model: str, api_key_env: str | None = "OPENAI_API_KEY",
                 concurrency: int = 8, max_retries: int = 5, timeout_s: float = 600.0, backoff_s: float = 1.0):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.concurrency, self.max_retries, self.timeout_s, self.backoff_s = concurrency, max_retries, timeout_s, backoff_s

    def _post(self, path: str, payload: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = json.dumps(payload).encode()
        for attempt in range(self.max_retries + 1):
            req = urllib.request.Request(f"{self.base_url}{path}", data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                if exc.code not in self.RETRY_STATUS or attempt == self.max_retries:
                    detail = exc.read()[:300].decode(errors="replace")
                    raise RuntimeError(f"{self.base_url}{path}: HTTP {exc.code}: {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt == self.max_retries:
                    raise RuntimeError(f"{self.base_url}{path}: {exc}") from None
            time.sleep(self.backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    def _one(self, r: Request, params: SamplingParams) -> Completion:
        common = {"model": self.model, "max_tokens": params.max_tokens, "temperature": params.temperature,
                  "top_p": params.top_p, "seed": r.seed}
        if params.stop:
            common["stop"] = list(params.stop)
        t0 = time.perf_counter()
        if r.chat:
            data = self._post("/v1/chat/completions", {**common, "messages": [{"role": "user", "content": r.prompt}]})
            text = data["choices"][0]["message"].get("content") or ""
        else:
            data = self._post("/v1/completions", {**common, "prompt": r.prompt})
            text = data["choices"][0].get("text", "")
        usage = data.get("usage") or {}
        finish = data["choices"][0].get("finish_reason") or "stop"
        return Completion(text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                          "length" if finish == "length" else "stop", time.perf_counter() - t0)

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda r: self._one(r, params), requests))


def make_backend(kind: str, model: str, adapter: str | None = None, **kwargs) -> Backend:
    if kind == "transformers":
        return TransformersBackend(model, adapter, **kwargs)
    if kind == "vllm":
        return VLLMBackend(model, adapter, **kwargs)
    if kind == "openai":
        if adapter:
            raise ValueError("the openai backend serves what the server loaded; pass the adapter to the server")
        return OpenAIBackend(model=model, **kwargs)
    raise ValueError(f"unknown backend {kind!r}; backends: {', '.join(BACKENDS)}")
