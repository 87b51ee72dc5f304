"""The openai backend against real HTTP servers on 127.0.0.1.

- `transformers serve` with the tiny model, started by the test and stopped by its PID:
  completions and chat endpoints, token usage, a whole `polyvox sample` run.
- a small stdlib HTTP server that fails twice with 503/429 before answering, and records
  the Authorization header: retries with backoff, and the key read from the environment.
- one that answers 429 with ``Retry-After``: the client waits the stated delay, not its own
  backoff, and after the last attempt the error is typed and one line.
"""
import json
import subprocess
import sys
import time

import pytest
from _fixtures import QuietHandler, completion, local_server
from conftest import serve

from polyvox.records import Sample, read_jsonl
from polyvox.backends import Request, SamplingParams
from polyvox.backends.openai import OpenAIBackend, OpenAIServerError


@pytest.fixture(scope="module")
def server(tiny):
    with serve(tiny) as (url,):
        yield url, str(tiny)


@pytest.mark.slow
def test_completions_and_chat(server):
    url, model = server
    backend = OpenAIBackend(model, base_url=url, api_key_env=None, concurrency=2)
    params = SamplingParams(max_tokens=6, temperature=1.0)
    outs = backend.generate([Request("What is 2 plus 2?", seed=1), Request("What is 3 plus 3?", seed=2),
                             Request("hello", seed=3, chat=True)], params)
    assert len(outs) == 3
    for c in outs:
        assert c.prompt_tokens > 0 and 0 < c.completion_tokens <= 6
        assert c.finish_reason in ("stop", "length") and c.latency_s > 0


@pytest.mark.slow
def test_polyvox_sample_through_the_server(server, tmp_path, root):
    url, model = server
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "polyvox.cli", "sample", "--task", "gsm8k", "--format", "panel", "--backend", "openai",
           "--base-url", url, "--model", model, "--n", "2", "--limit", "2", "--max-tokens", "6", "--out", str(out)]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(read_jsonl(out / "rollouts.jsonl", Sample)) == 4


class Flaky(QuietHandler):
    failures = [503, 429]
    seen_auth: list = []

    def do_POST(self):  # noqa: N802
        self.body()
        Flaky.seen_auth.append(self.headers.get("Authorization"))
        if Flaky.failures:  # a server that echoes the key
            self.send(Flaky.failures.pop(0), f"rejected: {self.headers.get('Authorization')}".encode(), None)
            return
        self.send(200, completion())


class Recording(QuietHandler):
    """Answers every request and keeps each (path, payload) it was sent."""
    seen: list = []

    def do_POST(self):  # noqa: N802
        payload = json.loads(self.body())
        Recording.seen.append((self.path, payload))
        choice = {"message": {"content": "ok"}} if "messages" in payload else {"text": "ok"}
        self.send(200, {"choices": [{**choice, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1}}, None)


def test_formats_send_different_requests():
    with local_server(Recording) as url:
        backend = OpenAIBackend("m", base_url=url, api_key_env=None)
        prompts = {f: backend.prompt(f, "What is 2 plus 2?") for f in ("panel", "think", "plain")}
        for p in prompts.values():
            backend.generate([Request.of(p, 1)], SamplingParams(max_tokens=2, stop=p.stop))
        (p_path, p_body), (t_path, t_body), (n_path, n_body) = Recording.seen
        assert p_path == "/v1/completions" and "Multi-Persona Panel" in p_body["prompt"]
        assert p_body["stop"] == ["</answer>"]
        assert t_path == n_path == "/v1/chat/completions"
        assert t_body["chat_template_kwargs"] == {"enable_thinking": True}
        assert n_body["chat_template_kwargs"] == {"enable_thinking": False}
        assert Request.of(prompts["think"], 1).hash() != Request.of(prompts["plain"], 1).hash()


def test_retries_on_503_and_429_and_reads_key_from_env(monkeypatch):
    with local_server(Flaky) as url:
        monkeypatch.setenv("POLYVOX_TEST_KEY", "secret-value")
        backend = OpenAIBackend("m", base_url=url, api_key_env="POLYVOX_TEST_KEY", backoff_s=0.01, concurrency=1)
        [c] = backend.generate([Request("hi")], SamplingParams(max_tokens=2))
        assert c.text == "ok" and c.completion_tokens == 1
        assert Flaky.seen_auth == ["Bearer secret-value"] * 3
        Flaky.failures = [500] * 10
        with pytest.raises(RuntimeError, match="HTTP 500") as err:
            OpenAIBackend("m", base_url=url, api_key_env="POLYVOX_TEST_KEY",
                          backoff_s=0.001, max_retries=2).generate([Request("hi")], SamplingParams(max_tokens=2))
        assert "secret-value" not in str(err.value) and "rejected: Bearer <redacted>" in str(err.value)


class Throttled(QuietHandler):
    """Always 429 with ``Retry-After: 1`` and a body over several lines; keeps when each request came."""
    times: list = []

    def do_POST(self):  # noqa: N802
        self.body()
        Throttled.times.append(time.monotonic())
        self.send(429, b'{"error": {"message": "rate limited,\n   try again\r\n later"}}\n\n', Retry_After="1")


def test_429_waits_the_stated_retry_after_then_raises_one_typed_line():
    with local_server(Throttled) as url:
        # the backend's own backoff is a millisecond: only the server's Retry-After explains a 1 s wait
        backend = OpenAIBackend("m", base_url=url, api_key_env=None, max_retries=1, backoff_s=0.001)
        with pytest.raises(OpenAIServerError) as err:
            backend.generate([Request("hi")], SamplingParams(max_tokens=2))
        first, second = Throttled.times
        assert 0.95 <= second - first < 3
        assert isinstance(err.value, RuntimeError) and err.value.status == 429
        message = str(err.value)
        assert "\n" not in message and "\r" not in message
        assert message.startswith(f"{url}/v1/completions: HTTP 429: ") and "rate limited, try again later" in message


def test_a_refused_connection_is_retried_then_one_typed_line():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = OpenAIBackend("m", base_url=f"http://127.0.0.1:{port}", api_key_env=None, max_retries=2, backoff_s=0.001)
    with pytest.raises(OpenAIServerError) as err:
        backend.generate([Request("hi")], SamplingParams(max_tokens=2))
    assert err.value.status is None and "\n" not in str(err.value)
    assert str(err.value).startswith(f"http://127.0.0.1:{port}/v1/completions: ")


def test_no_key_but_the_named_variable_reaches_the_server(monkeypatch):
    """The openai client's own sources of a key (OPENAI_API_KEY, OPENAI_CUSTOM_HEADERS) send nothing."""
    class Auth(QuietHandler):
        auth: list = []

        def do_POST(self):  # noqa: N802
            Auth.auth.append(self.headers.get("Authorization"))
            self.body()
            self.send(200, completion(usage=False), None)

    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-this-server")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "Authorization: Bearer not-this-either")
    with local_server(Auth) as url:
        OpenAIBackend("m", base_url=url, api_key_env=None).generate([Request("hi")], SamplingParams(max_tokens=2))
        monkeypatch.setenv("POLYVOX_TEST_KEY", "the-named-key")
        OpenAIBackend("m", base_url=url, api_key_env="POLYVOX_TEST_KEY").generate([Request("hi")],
                                                                                   SamplingParams(max_tokens=2))
        assert Auth.auth == [None, "Bearer the-named-key"]
