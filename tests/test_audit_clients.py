"""Regression tests for the hostile audit's findings in the clients: the openai backend's replies
and base URL, the request cache's lines, judge runs and tallies, and explore's notebook."""
import json
from contextlib import contextmanager

import pytest
from _fixtures import QuietHandler, local_server, shipped_world

from polyvox.backends import Request, SamplingParams
from polyvox.backends.openai import OpenAIBackend

KEY = "sk-audit-0123456789"


class Replying(QuietHandler):
    reply: dict = {}

    def do_POST(self):  # noqa: N802
        self.body()
        self.send(200, Replying.reply)


@contextmanager
def replying(choice: dict, usage=None):
    Replying.reply = {"choices": [choice], **({} if usage is None else {"usage": usage})}
    with local_server(Replying) as url:
        yield url


def _one(url, monkeypatch):
    monkeypatch.setenv("POLYVOX_AUDIT_KEY", KEY)
    backend = OpenAIBackend("m", base_url=url, api_key_env="POLYVOX_AUDIT_KEY", max_retries=0)
    [c] = backend.generate([Request("hi", seed=1)], SamplingParams(max_tokens=2))
    return c


# 6: a usage field holding the key
@pytest.mark.parametrize("usage", [{"prompt_tokens": 1, "completion_tokens": KEY},
                                   {"prompt_tokens": 1, "completion_tokens": -3},
                                   {"prompt_tokens": 1.5, "completion_tokens": 1},
                                   {"prompt_tokens": True, "completion_tokens": 1}])
def test_openai_usage_not_a_count_is_refused_without_quoting_it(usage, monkeypatch):
    with replying({"text": "ok", "finish_reason": "stop"}, usage) as url:
        with pytest.raises(RuntimeError) as err:
            _one(url, monkeypatch)
    msg = str(err.value).split(": ", 1)[1]  # after the server's address (its port may hold any digits)
    assert "\n" not in msg and KEY not in msg and "usage." in msg and "-3" not in msg and "1.5" not in msg
    if usage["prompt_tokens"] is True:
        assert "a boolean" in msg


# 26/27: text null or a number
@pytest.mark.parametrize("text", [None, 42, ["a"], {"k": KEY}])
def test_openai_text_not_a_string_is_refused(text, monkeypatch):
    with replying({"text": text, "finish_reason": "stop"}, {"prompt_tokens": 1, "completion_tokens": 1}) as url:
        with pytest.raises(RuntimeError, match=r"choices\[0\]\.text") as err:
            _one(url, monkeypatch)
    msg = str(err.value).split(": ", 1)[1]  # after the server's address (its port may hold any digits)
    assert "\n" not in msg and KEY not in msg and "42" not in msg


def test_openai_finish_reason_not_a_string_is_refused(monkeypatch):
    with replying({"text": "ok", "finish_reason": 7}, {"prompt_tokens": 1, "completion_tokens": 1}) as url:
        with pytest.raises(RuntimeError, match="finish_reason"):
            _one(url, monkeypatch)


# 28: finish reasons kept as given; None is a normal stop; no usage counts 0
@pytest.mark.parametrize("finish,recorded", [("content_filter", "content_filter"), ("length", "length"),
                                             ("stop", "stop"), (None, "stop")])
def test_openai_finish_reason_is_kept_as_the_server_gave_it(finish, recorded, monkeypatch):
    with replying({"text": "ok", "finish_reason": finish}) as url:
        c = _one(url, monkeypatch)
    assert c.finish_reason == recorded and c.text == "ok" and (c.prompt_tokens, c.completion_tokens) == (0, 0)


# 8/9: a credential in the base URL's query string
@pytest.mark.parametrize("query", [f"api_key={KEY}", f"x=1&access_token={KEY}", f"apiKey={KEY}", f"sig={KEY}"])
def test_openai_base_url_with_a_credential_query_is_refused(query, monkeypatch):
    url = f"http://127.0.0.1:9/v1?{query}"
    for make in (lambda: OpenAIBackend("m", base_url=url, api_key_env=None),
                 lambda: OpenAIBackend.describe("m", base_url=url)):
        with pytest.raises(ValueError, match="--api-key-env") as err:
            make()
        assert KEY not in str(err.value) and "\n" not in str(err.value)


def test_openai_base_url_with_a_harmless_query_is_kept():
    assert OpenAIBackend.describe("m", base_url="http://127.0.0.1:9?region=eu")["base_url"].endswith("?region=eu")


# 29/45: the request cache's lines are checked, refused with file:line
_GOOD = {"text": "ok", "prompt_tokens": 1, "completion_tokens": 2, "finish_reason": "stop", "latency_s": 0.5}


@pytest.mark.parametrize("line", [
    {"completion": _GOOD},
    {"key": 7, "completion": _GOOD},
    {"key": "k", "completion": {**_GOOD, "text": 7}},
    {"key": "k", "completion": {**_GOOD, "prompt_tokens": "many"}},
    {"key": "k", "completion": {**_GOOD, "completion_tokens": -1}},
    {"key": "k", "completion": {**_GOOD, "finish_reason": None}},
    {"key": "k", "completion": {**_GOOD, "latency_s": "slow"}},
    {"key": "k", "completion": {k: v for k, v in _GOOD.items() if k != "text"}},
    {"key": "k", "completion": {**_GOOD, "extra": 1}},
    {"key": "k", "completion": "ok"},
    ["k", _GOOD],
])
def test_cache_line_of_the_wrong_shape_is_refused_with_file_and_line(line, tmp_path):
    from polyvox.cache import CompletionCache
    from polyvox.records import RecordError

    path = tmp_path / "cache.jsonl"
    path.write_text(json.dumps({"key": "a", "completion": _GOOD}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(RecordError, match=rf"^{path}:2: ") as err:
        CompletionCache(path)
    assert "\n" not in str(err.value) and "many" not in str(err.value)


def test_cache_line_of_the_right_shape_is_read(tmp_path):
    from polyvox.cache import CompletionCache

    path = tmp_path / "cache.jsonl"
    path.write_text(json.dumps({"key": "a", "completion": {**_GOOD, "finish_reason": "content_filter"}}) + "\n")
    c = CompletionCache(path).get("a")
    assert (c.text, c.prompt_tokens, c.completion_tokens, c.finish_reason) == ("ok", 1, 2, "content_filter")


# judge: 5 (a rerun with nothing to do writes nothing), 51 (lone surrogate), 52 (mixed label types)
def _systems(path, rows=None, users=None):
    rows = rows or [{"prompt_id": f"p{i}", "prompt": f"q{i}", "preference": "short",
                     "user": (users[i] if users else f"u{i % 2}"),
                     "responses": {"x": "a" * (i + 1), "y": "bb b" * (i + 1)}} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rubric():
    from polyvox import judge as J
    return J.RubricJudge(lambda text, row: -len(text), "audit")


def test_judge_rerun_of_a_complete_folder_writes_nothing(tmp_path):
    from polyvox import judge as J
    f = _systems(tmp_path / "s.jsonl")
    out = tmp_path / "j"
    J.run(f"{f}:x", f"{f}:y", out, _rubric())
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"}
    assert json.loads(before["manifest.json"])["status"] == "complete"
    r = J.run(f"{f}:x", f"{f}:y", out, _rubric())
    assert r["calls_made"] == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"} == mtimes
    # a new comparison with nothing to call (identical texts) is still recorded
    J.run(f"{f}:x", f"{f}:x", out, _rubric())
    assert len(json.loads((out / "manifest.json").read_text())["comparisons"]) == 2


def test_judge_lone_surrogate_in_a_response_is_refused_with_file_and_line(tmp_path):
    from polyvox import judge as J
    from polyvox.records import RecordError
    f = tmp_path / "s.jsonl"
    rows = [{"prompt_id": "p0", "prompt": "q", "preference": "", "responses": {"x": "fine", "y": "ok"}},
            {"prompt_id": "p1", "prompt": "q", "preference": "", "responses": {"x": "fine", "y": "ok"}}]
    text = "".join(json.dumps(r) + "\n" for r in rows).replace('"ok"}}\n', '"bad \\ud800"}}\n', 2)
    text = text.replace('"bad \\ud800"}}\n', '"ok"}}\n', 1)  # only line 2 holds the surrogate
    f.write_text(text)
    with pytest.raises(RecordError, match=rf"^{f}:2: .*lone surrogate") as err:
        J.run(f"{f}:x", f"{f}:y", tmp_path / "j", _rubric())
    assert "\n" not in str(err.value)
    assert not (tmp_path / "j").exists()


def test_judge_tally_refuses_a_label_of_mixed_types(tmp_path):
    from polyvox import judge as J
    f = _systems(tmp_path / "s.jsonl", users=[7, "u1", 7, "u1"])
    out = tmp_path / "j"
    J.run(f"{f}:x", f"{f}:y", out, _rubric())
    for kwargs in ({"groups": "user"}, {"by": ("user",)}):
        with pytest.raises(ValueError, match=rf"^{f}: label 'user' holds both strings and numbers") as err:
            J.tally(f"{f}:x", f"{f}:y", out, _rubric(), n_boot=50, **kwargs)
        assert "\n" not in str(err.value)
    g = _systems(tmp_path / "t.jsonl", users=[7, 8, 7, 8])
    assert J.tally(f"{g}:x", f"{g}:y", tmp_path / "k", _rubric(), n_boot=50, groups="user")["overall"]["n"] == 0


# explore: 47 (a run another process is writing), 48 (--out into another kind of folder), 49 (DATA portable)
def _sample_run(root, dest):
    """The shipped world run's thinking evaluation at its smallest cap, its first 16 samples."""
    import shutil
    w = shipped_world(root)
    dest.mkdir(parents=True)
    shutil.copy(w.folder(w.think) / "manifest.json", dest)
    (dest / "graded.jsonl").write_text("\n".join(w.lines(w.think)[:16]) + "\n")
    return dest


def test_explore_refuses_a_run_folder_another_process_is_writing(root, tmp_path):
    from polyvox import explore
    from polyvox.records import RecordError, RunLock
    run = _sample_run(root, tmp_path / "run")
    with RunLock(run):
        before = sorted(p.name for p in run.iterdir())
        with pytest.raises(RecordError, match="in use by process"):
            explore.write_notebook(run, data_dir=root / "data")
        assert sorted(p.name for p in run.iterdir()) == before
    assert explore.write_notebook(run, data_dir=root / "data") == run / "explore.ipynb"


def test_explore_refuses_out_inside_a_folder_of_another_kind(root, tmp_path):
    from polyvox import explore
    from polyvox import judge as J
    run = _sample_run(root, tmp_path / "run")
    f = _systems(tmp_path / "s.jsonl")
    J.run(f"{f}:x", f"{f}:y", tmp_path / "j", _rubric())
    before = sorted(p.name for p in (tmp_path / "j").iterdir())
    for out in (tmp_path / "j" / "explore.ipynb", tmp_path / "j" / "deeper" / "explore.ipynb",
                run / "notes" / "x.ipynb"):
        with pytest.raises(ValueError, match="judge run|inside the sample run folder") as err:
            explore.write_notebook(run, out=out, data_dir=root / "data")
        assert "\n" not in str(err.value) and not out.exists()
    assert sorted(p.name for p in (tmp_path / "j").iterdir()) == before and not (run / "notes").exists()
    # allowed: the run itself, another sample run, a folder of runs, a path inside no run
    other = _sample_run(root, tmp_path / "runs" / "other")
    for out in (run / "a.ipynb", other / "b.ipynb", tmp_path / "runs" / "c.ipynb", tmp_path / "free" / "d.ipynb"):
        assert explore.write_notebook(run, out=out, data_dir=root / "data") == out and out.is_file()


def _data_line(path):
    import nbformat
    line = next(ln for c in nbformat.read(path, as_version=4).cells for ln in c.source.splitlines()
                if ln.startswith("DATA = "))
    return line.split("#")[0].split("=", 1)[1].strip().strip("'")


def test_explore_names_the_data_folder_relative_to_the_notebook_in_one_checkout(root, tmp_path):
    import shutil

    from polyvox import explore
    shutil.copy(root / "_toc.yml", tmp_path / "_toc.yml")
    shutil.copy(root / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "data").mkdir()
    run = _sample_run(root, tmp_path / "runs" / "w" / "run")
    path = explore.write_notebook(run, data_dir=tmp_path / "data")
    assert _data_line(path) == "../../../data" and (path.parent / "../../../data").resolve() == tmp_path / "data"
    # data below the notebook's folder: relative too
    (run / "bench").mkdir()
    assert _data_line(explore.write_notebook(run, data_dir=run / "bench", force=True)) == "bench"


def test_explore_says_when_it_names_the_data_folder_by_an_absolute_path(root, tmp_path, capsys):
    from polyvox import cli
    run = _sample_run(root, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere-data"
    elsewhere.mkdir()
    assert cli.main(["explore", str(run), "--data-dir", str(elsewhere)]) == 0
    out = capsys.readouterr().out
    assert _data_line(run / "explore.ipynb") == str(elsewhere.resolve())
    assert "absolute path" in out and "edit DATA" in out
