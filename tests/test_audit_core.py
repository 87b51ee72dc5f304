"""The hostile audit's findings in records, folders and secrets (numbers are the audit's cases).

Each test reproduces one finding of /tmp/hostile-audit (results.json) at the level of the library:
planted symlinks (2, 3), key forms a hostile server can echo (7), credentials in URLs (8-10, 13,
15-17), JSON that Python accepts but a record must not hold (20-23, 30, 43-44, 50) and files that
are not regular files (38-42).
"""
import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest

from polyvox.folders import RunLock
from polyvox.records import RecordError, append_jsonl, iter_jsonl, read_json, read_jsonl, read_manifest, \
    write_manifest
from polyvox.secrets import scrub, scrub_text

KEY = "PLAINkey0x7Q2mZ9vW4tR8"
PASSWORD_PIECES = ("Zk4q9", "LmPw7xQ")

LINE = {"problem_id": "p1", "sample_index": 0, "prompt_hash": "h", "completion": "x", "prompt_tokens": 3,
        "completion_tokens": 5, "finish_reason": "stop", "latency_s": 0.1, "metadata": {}}


@contextmanager
def deadline(seconds: int):
    """A call that would hang (a FIFO opened for reading) fails the test instead."""
    def expired(*_):
        raise TimeoutError(f"still running after {seconds}s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def one_line(exc: Exception) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


# --- 2: manifest.json.tmp planted as a symlink ---------------------------------------------------

def test_manifest_tmp_symlink_is_replaced_not_followed(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir(), elsewhere.mkdir()
    precious = elsewhere / "precious.txt"
    precious.write_text("keep me\n")
    (run / "manifest.json.tmp").symlink_to(precious)
    write_manifest(run, kind="sample", status="complete")
    assert precious.read_text() == "keep me\n"
    assert read_manifest(run)["status"] == "complete"
    assert not (run / "manifest.json.tmp").exists() and not (run / "manifest.json.tmp").is_symlink()


# --- 3: .lock planted as a symlink ---------------------------------------------------------------

def test_lock_symlink_is_refused_and_its_target_untouched(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir(), elsewhere.mkdir()
    precious = elsewhere / "precious.txt"
    precious.write_text("keep me\n")
    (run / ".lock").symlink_to(precious)
    with pytest.raises(RecordError) as err:
        with RunLock(run):
            pass
    assert ".lock" in one_line(err.value) and "symlink" in str(err.value)
    assert precious.read_text() == "keep me\n"


def test_lock_still_works_and_records_the_holder(tmp_path):
    run = tmp_path / "run"
    with RunLock(run):
        assert (run / ".lock").read_text() == str(os.getpid())
        with pytest.raises(RecordError, match="one writer per run folder"):
            with RunLock(run):
                pass


# --- 7: base64 of "Bearer <key>", "Basic <b64(user:key)>" and any prefix --------------------------

def _base64_decodings(text: str):
    """Every base64 decoding of text's base64-looking runs, at each of the four alignments."""
    import re

    for token in re.findall(r"[A-Za-z0-9+/=]{8,}", text):
        for start in range(4):
            chunk = token[start:]
            chunk = chunk[: len(chunk) - len(chunk) % 4]
            try:
                yield base64.b64decode(chunk).decode("latin-1")
            except ValueError:
                continue


def recoverable(text: str, key: str, depth: int = 2) -> bool:
    """Whether the key (or 6+ characters of it) is in text, plainly or in any base64 alignment, nested
    up to ``depth`` times ("Basic <b64(user:key)>" inside a base64 header is two)."""
    pieces = {key[i:i + 6] for i in range(len(key) - 5)}
    if any(p in text for p in pieces):
        return True
    return depth > 0 and any(recoverable(d, key, depth - 1) for d in _base64_decodings(text))


@pytest.mark.parametrize("prefix", ["", "Bearer ", "Basic ", "x", "xy", "xyz", "alice:", "Authorization: Bearer "])
def test_base64_of_the_key_behind_any_prefix_is_redacted(prefix):
    for suffix in ("", " tail", "!"):
        echoed = base64.b64encode((prefix + KEY + suffix).encode()).decode()
        out = scrub_text(f"completion: {echoed} end", KEY)
        assert "<redacted>" in out
        assert not recoverable(out, KEY), (prefix, suffix, out)


def test_base64_of_a_basic_header_is_redacted():
    basic = "Basic " + base64.b64encode(f"alice:{KEY}".encode()).decode()
    echoed = base64.b64encode(basic.encode()).decode()
    out = scrub_text(echoed, KEY)
    assert not recoverable(out, KEY), out


# --- 8/9/10/13: credentials in a URL's query string ------------------------------------------------

@pytest.mark.parametrize("name", ["api_key", "apikey", "key", "token", "access_token", "password", "secret", "sig",
                                  "signature", "client_secret", "X-Amz-Signature", "auth"])
def test_query_string_credentials_are_redacted(name):
    for url in (f"http://127.0.0.1:9/echo?{name}={KEY}", f"http://h/v1?model=m&{name}={KEY}&n=2",
                f"https://h/v1;{name}={KEY}#x"):
        out = scrub_text(f"polyvox: {url}: connection refused")
        assert KEY not in out and "<redacted>" in out, out
    assert scrub_text("http://h/v1?max_tokens=16&model=m") == "http://h/v1?max_tokens=16&model=m"


def test_manifest_never_holds_a_query_string_key(tmp_path):
    write_manifest(tmp_path / "run", kind="sample",
                   settings={"base_url": f"http://127.0.0.1:9/echo?api_key={KEY}", "endpoints": [f"http://h?token={KEY}"]})
    assert KEY not in (tmp_path / "run" / "manifest.json").read_text()


# --- 15/16/17: URL userinfo with spaces, several '@', or a single slash ----------------------------

@pytest.mark.parametrize("url", [
    "http://alice:Zk4q9 LmPw7xQ@127.0.0.1:34871/echo",     # 15: a space in the password
    "http://alice:Zk4q9@LmPw7xQ@127.0.0.1:99999/echo",     # 16: an unescaped '@'
    "http://alice@Zk4q9:LmPw7xQ@127.0.0.1:1/echo",
    "https:/alice:Zk4q9LmPw7xQ@host/v1",                   # 17: what Path makes of https://
    "https:/alice:Zk4q9 LmPw7xQ@host",
])
def test_url_userinfo_is_redacted_whole(url):
    out = scrub_text(f"polyvox: --base-url must be an http(s) URL, got '{url}'")
    assert not any(p in out for p in PASSWORD_PIECES), out
    assert "<redacted>@" in out


def test_userinfo_rule_leaves_ordinary_urls_alone():
    text = "see http://host/a?b=1 and mail me@example.org"
    assert scrub_text(text) == text


# --- 20-23: duplicate keys -------------------------------------------------------------------------

def test_jsonl_duplicate_key_is_refused_with_file_and_line(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    first = json.dumps(LINE)
    second = json.dumps(LINE)[:-1] + ', "problem_id": "injected"}'
    path.write_text(first + "\n" + second + "\n")
    with pytest.raises(RecordError) as err:
        read_jsonl(path)
    assert one_line(err.value) == f"{path}:2: duplicate key 'problem_id'"


def test_json_duplicate_key_is_refused_with_file_and_line(tmp_path):
    (tmp_path / "manifest.json").write_text('{\n  "kind": "sample",\n  "status": "failed",\n  "status": "complete"\n}\n')
    with pytest.raises(RecordError) as err:
        read_manifest(tmp_path)
    assert one_line(err.value) == f"{tmp_path / 'manifest.json'}:4: duplicate key 'status'"


def test_nested_duplicate_key_is_refused(tmp_path):
    path = tmp_path / "systems.jsonl"
    path.write_text('{"prompt_id": "a", "responses": {"a": "x", "a": "y"}}\n')
    with pytest.raises(RecordError, match=r":1: duplicate key 'a'"):
        list(iter_jsonl(path))


# --- 30: numbers that overflow to infinity ---------------------------------------------------------

def test_overflowing_number_is_refused_on_reading(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_text(json.dumps(LINE) + "\n" + json.dumps(LINE).replace('"latency_s": 0.1', '"latency_s": 1e400') + "\n")
    with pytest.raises(RecordError) as err:
        read_jsonl(path)
    assert one_line(err.value).startswith(f"{path}:2: ") and "1e400" in str(err.value)
    (tmp_path / "m.json").write_text('{"a": 1,\n "b": -1e999}')
    with pytest.raises(RecordError, match=r"m\.json:2: .*not finite"):
        read_json(tmp_path / "m.json")


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_append_refuses_a_non_finite_number_and_writes_nothing(tmp_path, bad):
    path = tmp_path / "graded.jsonl"
    with pytest.raises(RecordError) as err:
        append_jsonl(path, [LINE, dict(LINE, sample_index=1, latency_s=bad)])
    msg = one_line(err.value)
    assert msg.startswith(str(path)) and "'p1'" in msg and "record 2" in msg
    assert not path.exists() or path.read_text() == ""


# --- 38-42: a symlink to /dev/zero, a FIFO -----------------------------------------------------------

@pytest.mark.parametrize("reader", ["iter_jsonl", "read_json"])
def test_a_fifo_is_refused_without_opening_it(tmp_path, reader):
    fifo = tmp_path / "rollouts.jsonl"
    os.mkfifo(fifo)
    with deadline(5), pytest.raises(RecordError) as err:
        list(iter_jsonl(fifo)) if reader == "iter_jsonl" else read_json(fifo)
    assert one_line(err.value).startswith(f"{fifo}: ") and "FIFO" in str(err.value)


@pytest.mark.parametrize("reader", ["iter_jsonl", "read_json"])
def test_a_symlink_to_dev_zero_is_refused_at_once(tmp_path, reader):
    # in a child with 2 GB of address space, so the unfixed reader fails fast instead of taking the machine
    link = tmp_path / "rollouts.jsonl"
    link.symlink_to("/dev/zero")
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'lib')!r})
        from polyvox.records import RecordError, iter_jsonl, read_json
        try:
            list(iter_jsonl(sys.argv[1])) if {reader!r} == "iter_jsonl" else read_json(sys.argv[1])
        except RecordError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", code, str(link)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.startswith(f"{link}: ") and "device" in out.stdout


# --- 43-44: integers too long to convert -------------------------------------------------------------

def test_a_5000_digit_integer_names_file_and_line(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_text(json.dumps(LINE) + "\n" + json.dumps(LINE).replace('"prompt_tokens": 3', '"prompt_tokens": ' + "9" * 5000) + "\n")
    with pytest.raises(RecordError) as err:
        read_jsonl(path)
    assert one_line(err.value).startswith(f"{path}:2: ") and "5000 digits" in str(err.value)
    (tmp_path / "manifest.json").write_text('{"settings":\n {"seed": ' + "1" * 5000 + "}}")
    with pytest.raises(RecordError) as err:
        read_manifest(tmp_path)
    assert one_line(err.value).startswith(f"{tmp_path / 'manifest.json'}:2: ")
    assert len(str(err.value)) < 300


# --- 50: a lone surrogate ------------------------------------------------------------------------------

def test_a_lone_surrogate_is_refused_naming_file_and_record_and_nothing_is_written(tmp_path):
    path = tmp_path / "graded.jsonl"
    append_jsonl(path, [LINE])
    before = path.read_bytes()
    bad = dict(LINE, problem_id="w1-abc", sample_index=3, completion="text \ud800")
    with pytest.raises(RecordError) as err:
        append_jsonl(path, [dict(LINE, sample_index=1), bad, dict(LINE, sample_index=2)])
    msg = one_line(err.value)
    assert msg.startswith(f"{path}: ") and "'w1-abc'" in msg and "3" in msg and "surrogate" in msg
    assert path.read_bytes() == before


def test_scrub_still_redacts_by_name_and_value():
    assert scrub({"api_key": "x", "url": f"http://u:p4ssword@h?token={KEY}"}) == {
        "api_key": "<redacted>", "url": "http://<redacted>@h?token=<redacted>"}


def test_a_lone_surrogate_is_refused_on_reading_with_file_and_line(tmp_path):
    path = tmp_path / "systems.jsonl"
    path.write_text('{"prompt_id": "a", "text": "ok \\ud83d\\ude00"}\n{"prompt_id": "b", "text": "bad \\ud800"}\n')
    with pytest.raises(RecordError) as err:
        read_jsonl(path)
    assert one_line(err.value).startswith(f"{path}:2: ") and "surrogate" in str(err.value)
    (tmp_path / "m.json").write_text('{"a": "\\\\ud800 is only written here",\n "b": "\\udfff"}')
    with pytest.raises(RecordError, match=r"m\.json:2: holds a lone surrogate"):
        read_json(tmp_path / "m.json")
    ok = tmp_path / "ok.jsonl"  # a surrogate pair is one character; an escaped backslash is no surrogate
    ok.write_text('{"t": "\\ud83d\\ude00 \\\\ud800"}\n')
    assert read_jsonl(ok) == [{"t": "\U0001F600 \\ud800"}]


def test_training_logs_record_a_nan_metric_as_null(tmp_path):
    from polyvox.records import append_jsonl, read_jsonl
    from polyvox.train.logs import finite_or_null

    row = {"step": 3, "loss": float("nan"), "reward_std": float("inf"), "per_level": [1.0, float("-inf")]}
    append_jsonl(tmp_path / "train_log.jsonl", [finite_or_null(row)])
    assert read_jsonl(tmp_path / "train_log.jsonl") == [{"step": 3, "loss": None, "reward_std": None,
                                                         "per_level": [1.0, None]}]
