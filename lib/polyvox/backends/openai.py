"""Any OpenAI-compatible server (``vllm serve``, ``transformers serve``, a hosted API).

Formats map to endpoints: ``panel`` is a raw prompt for a base model and goes to
``/v1/completions``; ``think`` and ``plain`` go to ``/v1/chat/completions`` with the
server's chat template and ``chat_template_kwargs = {"enable_thinking": …}``, the
per-request switch both vLLM and ``transformers serve`` honour — so the two formats
send different requests. The API key is read from the environment variable named
by ``api_key_env`` at each call and is never stored. Bounded concurrency; retries
with exponential backoff on 408/409/429/5xx, time-outs and refused connections.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from ..formats import PANEL_STOP, FORMATS, Prompt, panel_prompt
from .base import Completion, Request, SamplingParams, register_backend


@register_backend("openai")
class OpenAIBackend:
    """Any OpenAI-compatible server. The API key is read from the environment, never stored."""

    name = "openai"
    RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}

    def __init__(self, model: str, adapter: str | None = None, base_url: str = "http://127.0.0.1:8000",
                 api_key_env: str | None = "OPENAI_API_KEY", concurrency: int = 8, max_retries: int = 5,
                 timeout_s: float = 600.0, backoff_s: float = 1.0):
        if adapter:
            raise ValueError("the openai backend serves what the server loaded; pass the adapter to the server")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.concurrency, self.max_retries, self.timeout_s, self.backoff_s = concurrency, max_retries, timeout_s, backoff_s

    def prompt(self, fmt: str, text: str) -> Prompt:
        if fmt == "panel":
            return Prompt(panel_prompt(text), tuple(PANEL_STOP), False)
        if fmt in ("think", "plain"):
            return Prompt(text, (), True, {"enable_thinking": fmt == "think"})
        raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")

    @classmethod
    def describe(cls, model: str, adapter: str | None = None, base_url: str = "http://127.0.0.1:8000", **_) -> dict:
        # what the server loaded is not visible from here: the served name and address stand for it
        if adapter:
            raise ValueError("the openai backend serves what the server loaded; pass the adapter to the server")
        return {"backend": cls.name, "model": model, "base_url": base_url.rstrip("/"), "adapter_sha256": None}

    def identity(self) -> dict:
        return self.describe(self.model, None, base_url=self.base_url)

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
                    from ..records import scrub_text

                    detail = scrub_text(exc.read()[:300].decode(errors="replace"), key)
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
            payload = {**common, "messages": [{"role": "user", "content": r.prompt}]}
            if r.template_kwargs:
                payload["chat_template_kwargs"] = dict(r.template_kwargs)
            data = self._post("/v1/chat/completions", payload)
            choice = data.get("choices") or [{}]
            text = (choice[0].get("message") or {}).get("content") or ""
        else:
            data = self._post("/v1/completions", {**common, "prompt": r.prompt})
            choice = data.get("choices") or [{}]
            text = choice[0].get("text", "")
        if not data.get("choices"):
            raise RuntimeError(f"{self.base_url}: a reply without choices")
        usage = data.get("usage") or {}
        finish = choice[0].get("finish_reason") or "stop"
        return Completion(text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                          "length" if finish == "length" else "stop", time.perf_counter() - t0)

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda r: self._one(r, params), requests))
