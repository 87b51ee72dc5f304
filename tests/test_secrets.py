"""Issue 17 item 12: the API key and URL credentials never reach anything polyvox writes or prints.

A real HTTP server on 127.0.0.1 (stdlib ``http.server`` in a thread) plays a hostile endpoint:
it echoes the Authorization header, the key, pieces of the key and its JSON-escaped form in
every completion, and puts them in its error bodies with the key straddling the point where
an error message is cut. ``polyvox sample`` (panel and chat endpoints, with a request cache,
then again from the cache) and ``polyvox judge run`` go through it in this process, their
stdout and stderr captured; then every file under the run folder and both streams are searched
for each secret and for every piece of six or more of its characters, for keys of odd shapes.
"""
import base64
import http.server
import json
import threading

import pytest

pytestmark = pytest.mark.slow  # 4 s of the fast suite's test time: in make test, not test-fast (its 60 s)
from _hostile import run_cli

from polyvox.backends import Request, SamplingParams
from polyvox.backends.openai import OpenAIBackend
from polyvox.records import scrub_text

KEYS = {
    "short": "Zq9$x*",
    "no-prefix": "PLAINkey0x7Q2mZ9vW4tR8",
    "regex-metacharacters": r"a.b*c+d?e(f)g[h]i{j}k|l^m$n\o",
    "quotes-and-escapes": "q\"u'o<t>e&s%2F=;#\\u0041",
    "sk-shaped": "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2",
}
ENV = "POLYVOX_TEST_SECRET"
FRAGMENT = 6


class Hostile(http.server.BaseHTTPRequestHandler):
    """The path prefix picks the behaviour: /echo answers, /broken fails (401), /flaky fails twice (500) first."""

    key = ""
    flaky_left = 0

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        auth, key = self.headers.get("Authorization") or "", Hostile.key
        leak = (f"auth=[{auth}] key=[{key}] head=[{key[:FRAGMENT + 1]}] tail=[{key[-FRAGMENT - 1:]}] "
                f"json={json.dumps(key)} [[A]]")
        if self.path.startswith("/broken") or (self.path.startswith("/flaky") and Hostile.flaky_left > 0):
            Hostile.flaky_left -= 1
            # the key straddles character 300, where an error message is cut
            pad = "e" * (300 - len("denied: ") - len(key) // 2)
            self._send(401 if self.path.startswith("/broken") else 500,
                       f"denied: {pad}{key} header={auth} {json.dumps({'error': leak})}".encode())
            return
        if "messages" in payload:
            choice = {"message": {"role": "assistant", "content": leak}}
        else:
            choice = {"text": leak}
        self._send(200, json.dumps({"choices": [{**choice, "finish_reason": "stop"}],
                                    "usage": {"prompt_tokens": 3, "completion_tokens": 5}}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()  # fast shutdown
    yield f"127.0.0.1:{srv.server_port}"
    srv.shutdown()


def pieces(secret: str) -> set[str]:
    """The secret and each piece of it of FRAGMENT characters, raw and JSON-escaped (as a file may hold it)."""
    out = set()
    for form in {secret, json.dumps(secret)[1:-1]}:
        out.add(form)
        out |= {form[i:i + FRAGMENT] for i in range(len(form) - FRAGMENT + 1)}
    return out


def assert_nowhere(secrets: list[str], folder, *streams: str) -> None:
    texts = {f"stream {i}": s for i, s in enumerate(streams)}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            texts[str(p.relative_to(folder))] = p.read_bytes().decode("utf-8", errors="replace")
    assert len(texts) > len(streams)
    for secret in secrets:
        for where, text in texts.items():
            found = sorted(x for x in pieces(secret) if x in text)
            assert not found, f"{where} holds {found[:3]} of the secret {secret!r}"


def _systems(path) -> str:
    rows = [{"prompt_id": f"p{i}", "prompt": f"Question {i}?", "preference": "short",
             "responses": {"a": f"answer a{i}", "b": f"answer b{i}"}} for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _sample(url: str, out, root, fmt="panel", cache=None, extra=()) -> list[str]:
    argv = ["sample", "--task", "gsm8k", "--format", fmt, "--backend", "openai", "--model", "served",
            "--base-url", url, "--api-key-env", ENV, "--n", "2", "--limit", "2", "--max-tokens", "8",
            "--data-dir", str(root / "data"), "--out", str(out), *extra]
    return argv + (["--cache", str(cache)] if cache else [])


@pytest.mark.parametrize("name", list(KEYS))
def test_the_key_is_in_no_file_and_no_output(name, server, tmp_path, root, monkeypatch):
    key = KEYS[name]
    Hostile.key = key
    env = {ENV: key}
    run = tmp_path / "run"
    streams = []

    def cli(argv, ok=True):
        rc, out, err = run_cli(argv, env)
        streams.extend([out, err])
        assert (rc == 0) == ok, (argv, rc, err)
        return err

    cache = run / "cache.jsonl"
    cli(_sample(f"http://{server}/echo", run / "panel", root, cache=cache))
    cli(_sample(f"http://{server}/echo", run / "think", root, fmt="think", cache=cache))
    cli(_sample(f"http://{server}/echo", run / "again", root, cache=cache))  # every completion from the cache
    systems = _systems(tmp_path / "systems.jsonl")
    cli(["judge", "run", "--judge", "openai", "--model", "judge", "--base-url", f"http://{server}/echo",
         "--api-key-env", ENV, "--a", f"{systems}:a", "--b", f"{systems}:b", "--out", str(run / "judge")])
    err = cli(_sample(f"http://{server}/broken", run / "broken", root), ok=False)
    assert "HTTP 401" in err and "Traceback" not in err
    assert len([ln for ln in err.replace("\r", "\n").splitlines() if "polyvox:" in ln]) == 1, err

    assert (run / "panel/rollouts.jsonl").exists() and (run / "judge/verdicts.jsonl").exists()
    assert "<redacted>" in (run / "panel/rollouts.jsonl").read_text()
    assert "<redacted>" in cache.read_text() and "<redacted>" in (run / "judge/verdicts.jsonl").read_text()
    assert_nowhere([key], run, *streams)


def test_an_error_body_cut_short_shows_no_piece_of_the_key(server, monkeypatch):
    key = KEYS["no-prefix"]
    Hostile.key, Hostile.flaky_left = key, 10
    monkeypatch.setenv(ENV, key)
    backend = OpenAIBackend("m", base_url=f"http://{server}/flaky", api_key_env=ENV, backoff_s=0.001,
                            max_retries=2)
    with pytest.raises(RuntimeError, match="HTTP 500") as err:
        backend.generate([Request("hi")], SamplingParams(max_tokens=2))
    message = str(err.value)
    assert not [x for x in pieces(key) if x in message], message
    assert "denied: eee" in message  # the body is shown, only the key is gone
    # retried, then answered: the completion carries no piece of the key either
    Hostile.flaky_left = 2
    [c] = backend.generate([Request("hi")], SamplingParams(max_tokens=2))
    assert not [x for x in pieces(key) if x in c.text] and "[[A]]" in c.text


def test_credentials_in_the_base_url_are_never_stored_or_printed(server, tmp_path, root):
    user, password = "alice", "pw-Zk4$q9.Lm"
    secrets = [password, f"{user}:{password}", base64.b64encode(f"{user}:{password}".encode()).decode()]
    Hostile.key = "unused-key"
    run, streams = tmp_path / "run", []
    url = f"http://{user}:{password}@{server}"
    rc, out, err = run_cli(_sample(f"{url}/echo", run / "ok", root, cache=run / "cache.jsonl"), {ENV: ""})
    streams += [out, err]
    assert rc == 0, err
    manifest = json.loads((run / "ok/manifest.json").read_text())
    assert manifest["settings"]["base_url"] == f"http://{server}/echo"
    assert "Basic <redacted>" in (run / "ok/rollouts.jsonl").read_text()  # the server saw Basic credentials
    rc, out, err = run_cli(_sample(f"{url}/broken", run / "broken", root), {ENV: ""})
    streams += [out, err]
    assert rc == 1 and f"http://{server}/broken/v1/completions: HTTP 401" in err
    # credentials and a key at once: refused before anything is written, naming neither
    rc, out, err = run_cli(_sample(f"{url}/echo", run / "both", root), {ENV: "a-real-key-123"})
    streams += [out, err]
    assert rc == 1 and "holds credentials" in err and not (run / "both").exists()
    assert_nowhere(secrets + ["a-real-key-123"], run, *streams)


@pytest.mark.parametrize("bad", ["abc", "with space", "tab\there", "ünïcode-key"])
def test_a_key_that_cannot_be_removed_safely_is_refused_without_showing_it(bad, tmp_path, root, server):
    rc, out, err = run_cli(_sample(f"http://{server}/echo", tmp_path / "run", root), {ENV: bad})
    assert rc == 1 and f"${ENV} must be 6 or more printable ASCII" in err
    assert bad not in err + out and not (tmp_path / "run").exists()


def test_scrub_text_removes_every_form_and_piece_of_a_known_value():
    key = KEYS["regex-metacharacters"]
    text = (f"a {key} b {key[:9]} c {key[4:15]} d {json.dumps(key)} e Bearer {key} "
            f"f http://u:{key}@h/x g {base64.b64encode(key.encode()).decode()}")
    clean = scrub_text(text, key)
    assert not [x for x in pieces(key) if x in clean], clean
    assert clean.startswith("a <redacted> b <redacted> c <redacted> d ")
    assert scrub_text("basic arithmetic and a bearer of news", key) == "basic arithmetic and a bearer of news"
