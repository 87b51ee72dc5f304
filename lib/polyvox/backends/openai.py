"""Any OpenAI-compatible server (``vllm serve``, ``transformers serve``, a hosted API).

Formats map to endpoints: ``panel`` is a raw prompt for a base model and goes to
``/v1/completions``; ``think`` and ``plain`` go to ``/v1/chat/completions`` with the
server's chat template and ``chat_template_kwargs = {"enable_thinking": …}``, the
per-request switch both vLLM and ``transformers serve`` honour — so the two formats
send different requests. Bounded concurrency (a thread pool over one client).

Requests go through the official ``openai`` client: its time-outs, its retries (408, 409,
429, 5xx, time-outs and refused connections; a server's ``Retry-After`` is honoured, up to
two minutes, otherwise exponential backoff from ``backoff_s``) and its typed errors, which
become one scrubbed line (:class:`OpenAIServerError`) after the last attempt. The request
cache stays polyvox's (:mod:`polyvox.cache`): the client keeps nothing.

Secrets. The API key is read from the environment variable named by ``api_key_env`` at
each request (an ``httpx`` auth hook owns the ``Authorization`` header: the client's own Bearer
header is left out, and neither ``OPENAI_API_KEY`` nor an Authorization line of
``OPENAI_CUSTOM_HEADERS`` reaches the server) and is never stored; credentials in the base URL (``http://user:pass@host``) are taken out of it when the
backend is made and sent as a Basic ``Authorization`` header — the URL the backend keeps,
names in its identity (manifests, cache keys) and prints in errors has none. What comes back
is scrubbed of both (:func:`polyvox.records.scrub_text`: the value whole, escaped or encoded,
and any piece of six or more of its characters) before anyone sees it: completions (so
``rollouts.jsonl``, the request cache and judges' raw replies), and error bodies, which are
scrubbed before they are cut short. A key must be six or more printable ASCII characters
without spaces — a shorter one could not be taken out of a text without cutting ordinary
words out of it too. A base URL whose query string names a credential (``?api_key=…``,
``?token=…``) is refused: the key goes through ``api_key_env``, never through the address.

Replies are checked before they are used: the text must be a string, ``usage``'s token counts
non-negative integers (a reply without ``usage``, or without one of its counts, counts 0) and
``finish_reason`` a non-empty string, recorded as the server gave it (``stop``, ``length``,
``content_filter``, …); only a reply that names none is recorded as ``stop``. A reply that fails
a check is refused in one line naming the field and its type, never its value.
"""
from __future__ import annotations

import base64
import functools
import json
import os
import re
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from ..formats import PANEL_STOP, FORMATS, Prompt, panel_prompt
from ..records import scrub_text
from .base import Completion, Request, SamplingParams, refuse_request_adapters, register_backend

MIN_KEY_CHARS = 6
_KEY_SHAPE = re.compile(r"[\x21-\x7e]+")  # what an HTTP header carries safely: printable ASCII, no spaces


class OpenAIServerError(RuntimeError):
    """A request that failed after the client's last attempt: one line, scrubbed of every secret.

    ``status`` is the HTTP status (None when no reply came: a time-out or a refused connection).
    """

    def __init__(self, message: str, status: int | None = None):
        super().__init__(" ".join(message.split()))
        self.status = status


def split_credentials(base_url: str) -> tuple[str, str | None]:
    """(the base URL without ``user:pass@``, the ``user:pass`` part percent-decoded or None).

    Refuses what is not an http(s) URL with a host; the message never shows the credentials.
    """
    parts = urllib.parse.urlsplit(str(base_url).strip())
    userinfo, at, host = parts.netloc.rpartition("@")
    clean = urllib.parse.urlunsplit(parts._replace(netloc=host)).rstrip("/")
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError(f"--base-url must be an http(s) address with a host, such as http://127.0.0.1:8000; "
                         f"got {scrub_text(parts._replace(netloc=host, query='', fragment='').geturl())!r}")
    named = [name for name, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if _credential_name(name)]
    if named:
        # a key in the query string would be kept in the backend's identity (manifests, cache keys) and
        # printed in errors: refused, never sent, never stored
        raise ValueError(f"--base-url carries a credential in its query string (parameter "
                         f"{', '.join(sorted(set(named)))[:80]!r}): leave it out of the address and give the key "
                         "through --api-key-env (the name of an environment variable holding it)")
    return clean, (urllib.parse.unquote(userinfo) if at else None)


_CREDENTIAL_WORDS = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "credential", "signature",
                     "session")


def _credential_name(name: str) -> bool:
    """Whether a query parameter's name says it holds a credential (``api_key``, ``access_token``, ``sig``, …)."""
    flat = re.sub(r"[^a-z0-9]", "", name.lower())
    return flat in ("sig", "pass", "pw") or any(word in flat for word in _CREDENTIAL_WORDS)


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


@functools.cache
def _client_class():
    """``openai.OpenAI`` whose backoff (when the server names no delay) starts at the backend's ``backoff_s``.

    Imported on first use: ``import polyvox.backends`` stays light.
    """
    import httpx
    import openai
    from openai._constants import INITIAL_RETRY_DELAY

    class Auth(httpx.Auth):
        """Sets (or removes) ``Authorization`` on every request, from what the backend reads at that moment."""

        def __init__(self, authorization):
            self.authorization = authorization

        def auth_flow(self, request):
            request.headers.pop("Authorization", None)
            value = self.authorization()
            if value:
                request.headers["Authorization"] = value
            yield request

    class Client(openai.OpenAI):
        backoff_s: float | None = None

        def _calculate_retry_timeout(self, remaining_retries, options, response_headers=None):
            wait = super()._calculate_retry_timeout(remaining_retries, options, response_headers)
            named = response_headers is not None and ("retry-after" in response_headers
                                                      or "retry-after-ms" in response_headers)
            if self.backoff_s is None or named:
                return wait  # the client's own schedule, or the server's stated delay
            return wait * self.backoff_s / INITIAL_RETRY_DELAY

    return Client, Auth


@register_backend("openai")
class OpenAIBackend:
    """Any OpenAI-compatible server. The API key is read from the environment, never stored."""

    name = "openai"
    ERROR_BODY_CHARS = 300

    def __init__(self, model: str, adapter: str | None = None, base_url: str = "http://127.0.0.1:8000",
                 api_key_env: str | None = "OPENAI_API_KEY", concurrency: int = 8, max_retries: int = 5,
                 timeout_s: float = 600.0, backoff_s: float | None = None):
        if adapter:
            raise ValueError("the openai backend serves what the server loaded; pass the adapter to the server")
        self.base_url, self._userinfo = split_credentials(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self._check_auth(read_key(api_key_env))
        self.concurrency, self.max_retries, self.timeout_s, self.backoff_s = concurrency, max_retries, timeout_s, backoff_s
        self._client = None

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

    def _authorization(self) -> str | None:
        """The ``Authorization`` header's value now: the key from the environment, else the URL's credentials."""
        key = read_key(self.api_key_env)
        self._check_auth(key)
        if key:
            return f"Bearer {key}"
        if self._userinfo:
            return "Basic " + base64.b64encode(self._userinfo.encode()).decode()
        return None

    def client(self):
        """The ``openai.OpenAI`` client (made on first use, shared by the worker threads); it holds no key."""
        if self._client is None:
            import openai

            cls, auth = _client_class()
            client = cls(base_url=f"{self.base_url}/v1", api_key=lambda: "", max_retries=self.max_retries,
                         timeout=self.timeout_s, http_client=openai.DefaultHttpxClient(auth=auth(self._authorization)))
            client.backoff_s = self.backoff_s
            self._client = client
        return self._client

    def _create(self, path: str, **kwargs):
        """One request through the client (its retries included); failures as :class:`OpenAIServerError`."""
        import openai

        self._authorization()  # a key of the wrong shape, or a key and URL credentials: refused before sending
        client, url = self.client(), f"{self.base_url}{path}"
        endpoint = client.chat.completions if path.endswith("/chat/completions") else client.completions
        try:
            # the client's own Authorization header is left out: the auth hook sets it
            reply = endpoint.create(model=self.model, extra_headers={"Authorization": openai.omit}, **kwargs)
        except openai.APIStatusError as exc:
            # scrubbed whole, then cut: a cut never leaves a piece of a key behind
            text = scrub_text(exc.response.text, *self.secrets())
            detail = " ".join(text.split())[:self.ERROR_BODY_CHARS]
            raise OpenAIServerError(f"{url}: HTTP {exc.status_code}: {detail}", exc.status_code) from None
        except openai.APITimeoutError:
            raise OpenAIServerError(f"{url}: no reply within {self.timeout_s:g} s "
                                    f"({self.max_retries + 1} attempts)") from None
        except openai.APIConnectionError as exc:
            raise OpenAIServerError(scrub_text(f"{url}: {exc.__cause__ or exc}", *self.secrets())) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # declared JSON, and it is not
            raise RuntimeError(f"{url}: a reply that is not JSON ({exc.__class__.__name__} at byte "
                               f"{getattr(exc, 'pos', getattr(exc, 'start', '?'))})") from None
        if isinstance(reply, str):  # the client hands back a body it could not read as JSON as its text
            raise RuntimeError(f"{url}: a reply that is not JSON ({len(reply)} characters)")
        return reply

    def _one(self, r: Request, params: SamplingParams) -> Completion:
        common = {"max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p,
                  "seed": r.seed}
        if params.stop:
            common["stop"] = list(params.stop)
        t0 = time.perf_counter()
        if r.chat:
            extra = {"chat_template_kwargs": dict(r.template_kwargs)} if r.template_kwargs else None
            data = self._create("/v1/chat/completions", messages=[{"role": "user", "content": r.prompt}],
                                extra_body=extra, **common)
        else:
            data = self._create("/v1/completions", prompt=r.prompt, **common)
        choices = _get(data, "choices")
        if not isinstance(choices, list) or not choices:
            raise RuntimeError(f"{self.base_url}: a reply without choices")
        choice = choices[0]
        where = "choices[0].message.content" if r.chat else "choices[0].text"
        text = _get(_get(choice, "message"), "content") if r.chat else _get(choice, "text")
        usage = _get(data, "usage")
        finish = _get(choice, "finish_reason")
        # every field is checked before it is used; a message names the field and the type it has, never its
        # value (a server may echo what it was sent, the key among it)
        if not isinstance(text, str):
            raise self._bad_reply(f"{self.base_url}: a reply whose {where} is {_kind(text)}, not a string")
        if finish is None:
            finish = "stop"  # a server that names no finish reason: read as a normal stop
        elif not isinstance(finish, str) or not finish:
            raise self._bad_reply(f"{self.base_url}: a reply whose choices[0].finish_reason is {_kind(finish)}, "
                                  "not a non-empty string")
        tokens = []
        for field in ("prompt_tokens", "completion_tokens"):
            value = _get(usage, field)
            if value is None:
                value = 0  # a server that reports no usage: counted as 0
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                negative = isinstance(value, int) and not isinstance(value, bool)
                raise self._bad_reply(f"{self.base_url}: a reply whose usage.{field} is "
                                      f"{'a negative integer' if negative else _kind(value)}, "
                                      "not a non-negative integer")
            tokens.append(value)
        # a server may echo what it was sent (the Authorization header among it): never pass it on
        text = scrub_text(text, *self.secrets())
        finish = scrub_text(finish, *self.secrets())
        return Completion(text, tokens[0], tokens[1], finish, time.perf_counter() - t0)

    def _bad_reply(self, message: str) -> RuntimeError:
        """A reply that failed a check: one line naming the field and its type (scrubbed anyway)."""
        return RuntimeError(" ".join(scrub_text(message, *self.secrets()).split()))

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]:
        # a served model applies its own adapter (if any): a request's adapter would be silently ignored
        refuse_request_adapters("openai", requests, None)
        self.client()
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda r: self._one(r, params), requests))


def _kind(value) -> str:
    """What a reply's field is, by type only (never its value)."""
    if value is None:
        return "missing or null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), f"a {type(value).__name__}")


def _get(obj, name: str):
    """A field of a reply the client built without validating it (a model, or a dict it kept as one), or None."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
