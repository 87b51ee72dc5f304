"""Any OpenAI-compatible server (``vllm serve``, ``transformers serve``, a hosted API).

Formats map to endpoints: ``panel`` is a raw prompt for a base model and goes to
``/v1/completions``; ``think`` and ``plain`` go to ``/v1/chat/completions`` with the
server's chat template and ``chat_template_kwargs = {"enable_thinking": …}``, the
per-request switch both vLLM and ``transformers serve`` honour — so the two formats
send different requests. Bounded concurrency; retries with exponential backoff on
408/409/429/5xx, time-outs and refused connections.

Secrets. The API key is read from the environment variable named by ``api_key_env`` at
each call and is never stored; credentials in the base URL (``http://user:pass@host``) are
taken out of it when the backend is made and sent as a Basic ``Authorization`` header — the
URL the backend keeps, names in its identity (manifests, cache keys) and prints in errors has
none. What comes back is scrubbed of both (:func:`polyvox.records.scrub_text`: the value
whole, escaped or encoded, and any piece of six or more of its characters) before anyone sees
it: completions (so ``rollouts.jsonl``, the request cache and judges' raw replies), and error
bodies, which are scrubbed before they are cut short. A key must be six or more printable
ASCII characters without spaces — a shorter one could not be taken out of a text without
cutting ordinary words out of it too.
"""
from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from ..formats import PANEL_STOP, FORMATS, Prompt, panel_prompt
from ..records import scrub_text
from .base import Completion, Request, SamplingParams, register_backend

MIN_KEY_CHARS = 6
_KEY_SHAPE = re.compile(r"[\x21-\x7e]+")  # what an HTTP header carries safely: printable ASCII, no spaces


def split_credentials(base_url: str) -> tuple[str, str | None]:
    """(the base URL without ``user:pass@``, the ``user:pass`` part percent-decoded or None).

    Refuses what is not an http(s) URL with a host; the message never shows the credentials.
    """
    parts = urllib.parse.urlsplit(str(base_url).strip())
    userinfo, at, host = parts.netloc.rpartition("@")
    clean = urllib.parse.urlunsplit(parts._replace(netloc=host)).rstrip("/")
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError(f"--base-url must be an http(s) address with a host, such as http://127.0.0.1:8000; "
                         f"got {scrub_text(clean)!r}")
    return clean, (urllib.parse.unquote(userinfo) if at else None)


def read_key(api_key_env: str | None) -> str | None:
    """The API key from the environment (None when the variable is unset or empty), checked for shape."""
    key = os.environ.get(api_key_env) if api_key_env else None
    if not key:
        return None
    if len(key) < MIN_KEY_CHARS or not _KEY_SHAPE.fullmatch(key):
        raise ValueError(f"the API key in ${api_key_env} must be {MIN_KEY_CHARS} or more printable ASCII characters "
                         f"without spaces (it has {len(key)} characters); polyvox removes the key from everything "
                         "it writes, which a shorter key would not allow")
    return key


@register_backend("openai")
class OpenAIBackend:
    """Any OpenAI-compatible server. The API key is read from the environment, never stored."""

    name = "openai"
    RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
    ERROR_BODY_CHARS = 300

    def __init__(self, model: str, adapter: str | None = None, base_url: str = "http://127.0.0.1:8000",
                 api_key_env: str | None = "OPENAI_API_KEY", concurrency: int = 8, max_retries: int = 5,
                 timeout_s: float = 600.0, backoff_s: float = 1.0):
        if adapter:
            raise ValueError("the openai backend serves what the server loaded; pass the adapter to the server")
        self.base_url, self._userinfo = split_credentials(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self._check_auth(read_key(api_key_env))
        self.concurrency, self.max_retries, self.timeout_s, self.backoff_s = concurrency, max_retries, timeout_s, backoff_s

    def _check_auth(self, key: str | None) -> None:
        if key and self._userinfo:
            raise ValueError(f"the base URL holds credentials and ${self.api_key_env} holds an API key: give the "
                             "server one of them")

    def prompt(self, fmt: str, text: str) -> Prompt:
        if fmt == "panel":
            return Prompt(panel_prompt(text), tuple(PANEL_STOP), False)
        if fmt in ("think", "plain"):
            return Prompt(text, (), True, {"enable_thinking": fmt == "think"})
        raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")

    @classmethod
    def describe(cls, model: str, adapter: str | None = None, base_url: str = "http://127.0.0.1:8000",
                 api_key_env: str | None = None, **_) -> dict:
        # what the server loaded is not visible from here: the served name and address stand for it
        if adapter:
            raise ValueError("the openai backend serves what the server loaded; pass the adapter to the server")
        clean, userinfo = split_credentials(base_url)
        if read_key(api_key_env) and userinfo:
            raise ValueError(f"the base URL holds credentials and ${api_key_env} holds an API key: give the "
                             "server one of them")
        return {"backend": cls.name, "model": model, "base_url": clean, "adapter_sha256": None}

    def identity(self) -> dict:
        return self.describe(self.model, None, base_url=self.base_url)

    def secrets(self) -> tuple[str, ...]:
        """The values to remove from whatever this backend returns or raises: the key, the URL's credentials."""
        out = [read_key(self.api_key_env) or ""]
        if self._userinfo:
            out += [self._userinfo, self._userinfo.partition(":")[2]]
        return tuple(s for s in out if s)

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        key = read_key(self.api_key_env)
        self._check_auth(key)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        elif self._userinfo:
            headers["Authorization"] = "Basic " + base64.b64encode(self._userinfo.encode()).decode()
        return headers

    def _post(self, path: str, payload: dict) -> dict:
        headers = self._headers()
        body = json.dumps(payload).encode()
        for attempt in range(self.max_retries + 1):
            req = urllib.request.Request(f"{self.base_url}{path}", data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise RuntimeError(f"{self.base_url}{path}: a reply that is not JSON ({exc.__class__.__name__} "
                                       f"at byte {getattr(exc, 'pos', getattr(exc, 'start', '?'))})") from None
            except urllib.error.HTTPError as exc:
                if exc.code not in self.RETRY_STATUS or attempt == self.max_retries:
                    # scrubbed whole, then cut: a cut never leaves a piece of a key behind
                    text = scrub_text(exc.read(1 << 16).decode(errors="replace"), *self.secrets())
                    detail = " ".join(text.split())[:self.ERROR_BODY_CHARS]
                    raise RuntimeError(f"{self.base_url}{path}: HTTP {exc.code}: {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt == self.max_retries:
                    raise RuntimeError(scrub_text(f"{self.base_url}{path}: {exc}", *self.secrets())) from None
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
            choice = data.get("choices") or [{}] if isinstance(data, dict) else [{}]
            text = (choice[0].get("message") or {}).get("content") or ""
        else:
            data = self._post("/v1/completions", {**common, "prompt": r.prompt})
            choice = data.get("choices") or [{}] if isinstance(data, dict) else [{}]
            text = choice[0].get("text", "")
        if not isinstance(data, dict) or not data.get("choices"):
            raise RuntimeError(f"{self.base_url}: a reply without choices")
        usage = data.get("usage") or {}
        finish = choice[0].get("finish_reason") or "stop"
        # a server may echo what it was sent (the Authorization header among it): never pass it on
        text = scrub_text(str(text), *self.secrets())
        return Completion(text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                          "length" if finish == "length" else "stop", time.perf_counter() - t0)

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda r: self._one(r, params), requests))
