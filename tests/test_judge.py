"""Pairwise judging: both orders, free ties, cache and resume (in-process and after a real kill),
unparseable verdicts, the length-controlled view, and an LLM judge against a real `transformers serve`."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from polyvox.records import RecordError
from conftest import serve

from polyvox import judge as J
from polyvox.records import read_jsonl


def write_systems(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def score_len(text, row):  # a toy rubric: the text whose number equals gold wins, else the shorter one
    return (text.split()[-1] == row["gold"]) * 10 - len(text.split()) * 0.01


class Biased:
    """A scripted judge: for prompts in `first_wins` it always picks the text shown first (position bias)."""

    name = "biased"

    def __init__(self, first_wins=(), garbage=(), log=None):
        self.first_wins, self.garbage, self.log = set(first_wins), set(garbage), log if log is not None else []
        self.rubric = J.RubricJudge(score_len, "toy")

    def identity(self):
        return {"judge": "biased"}

    def ask(self, calls, attempt=0):
        self.log.extend((c.prompt_id, attempt) for c in calls)
        out = []
        for c in calls:
            if c.prompt_id in self.garbage:
                out.append("I cannot decide")
            elif c.prompt_id in self.first_wins:
                out.append("[[A]]")
            else:
                out.extend(self.rubric.ask([c]))
        return out

    def parse(self, raw):
        return J.parse_verdict(raw)


@pytest.fixture
def systems(tmp_path):
    rows = []
    for i in range(8):
        good, bad = f"so it is {i}", f"well the answer might be {i + 1}"
        responses = {"x": good if i % 2 == 0 else bad, "y": bad if i % 2 == 0 else good}
        if i == 7:
            responses["y"] = responses["x"]  # identical texts: a free tie
        rows.append({"prompt_id": f"p{i}", "prompt": f"q{i}", "preference": "concise" if i < 4 else "thorough",
                     "gold": str(i), "pick": "one" if i % 3 else "two", "responses": responses})
    return write_systems(tmp_path / "systems.jsonl", rows)


def test_both_orders_table(systems, tmp_path):
    a, b = f"{systems}:x", f"{systems}:y"
    log = []
    judge = Biased(first_wins={"p2"}, log=log)  # p2: each order prefers the first text -> disagreement -> T
    plan = J.plan(a, b, tmp_path / "v", judge)
    assert plan == {"prompts": 8, "identical": 1, "calls_needed": 14, "cached": 0, "to_make": 14}
    J.run(a, b, tmp_path / "v", judge)
    assert len(log) == 14 and ("p7", 0) not in log  # identical texts cost nothing
    df = J.outcomes(a, b, tmp_path / "v", judge).set_index("prompt_id")
    assert df.loc["p0", "outcome"] == "W" and df.loc["p1", "outcome"] == "L"
    assert df.loc["p2", "outcome"] == "T" and (df.loc["p2", "ab"], df.loc["p2", "ba"]) == ("A", "A")
    assert df.loc["p7", "outcome"] == "T"
    t = J.tally(a, b, tmp_path / "v", judge, by=("preference", "pick"), n_boot=200)
    o = t["overall"]
    assert (o["n"], o["W"], o["T"], o["L"]) == (8, 3, 2, 3) and o["win_rate"] == pytest.approx(0.5)
    assert o["ci_low"] <= 0.5 <= o["ci_high"]
    assert t["by"]["preference"]["concise"]["n"] == 4 and set(t["by"]["pick"]) == {"one", "two"}
    text = J.as_table(t)
    assert "by preference" in text and "win  50.0%" in text
    # a second run and a swapped comparison reuse the cache: no new calls for the same texts in the same order
    assert J.plan(a, b, tmp_path / "v", judge)["to_make"] == 0
    assert J.plan(b, a, tmp_path / "v", judge)["to_make"] == 0


def test_a_shipped_gzipped_cache_is_read_as_it_is_and_refused_to_writers(systems, tmp_path):
    """polyvox.ship stores a large verdicts.jsonl as verdicts.jsonl.gz: tallies and outcomes read it as the plain
    cache (the Part II chapter's shipped run); a writer is refused in one line instead of asking every call again."""
    import gzip

    a, b = f"{systems}:x", f"{systems}:y"
    judge = Biased(first_wins={"p2"})
    J.run(a, b, tmp_path / "v", judge)
    plain = J.outcomes(a, b, tmp_path / "v", judge)
    raw = (tmp_path / "v" / J.VERDICTS).read_bytes()
    (tmp_path / "v" / f"{J.VERDICTS}.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "v" / J.VERDICTS).unlink()
    J.check_out(tmp_path / "v")  # the folder is still a verdicts folder
    assert J.outcomes(a, b, tmp_path / "v", judge).equals(plain)
    assert J.plan(a, b, tmp_path / "v", judge)["to_make"] == 0
    with pytest.raises(RecordError, match=r"verdicts.jsonl.gz.*read-only \(gunzip it"):
        J.run(a, b, tmp_path / "v", judge)
    assert not (tmp_path / "v" / J.VERDICTS).exists()


def test_read_only_cache_loads_are_remembered_until_the_file_changes(systems, tmp_path):
    """A chapter tallies a hundred comparisons against one cache: read-only loads are parsed once per file state
    and handed out read-only; a resumed run's appends (another comparison's verdicts) are seen at the next read."""
    from polyvox.judge import records as R

    a, b = f"{systems}:x", f"{systems}:y"
    judge = Biased()
    J.run(a, b, tmp_path / "v", judge)
    first = R.load_cache(tmp_path / "v", repair=False)
    assert R.load_cache(tmp_path / "v", repair=False) is first  # not parsed again
    with pytest.raises(TypeError):
        first["x"] = {}  # read-only: no caller can change what the next one reads
    J.run(b, a, tmp_path / "v", Biased(first_wins={"p1", "p3"}))  # the same texts in the other order: all cached
    J.run(a, b, tmp_path / "v", Biased(garbage={"p5"}), retry_unparseable=False)
    c = dict(R.load_cache(tmp_path / "v", repair=False))
    assert c == dict(first)  # nothing new was asked
    rows = [json.loads(x) for x in systems.read_text().splitlines()]
    rows[0]["responses"]["x"] = "a new text 0"
    other = write_systems(tmp_path / "other.jsonl", rows)
    J.run(f"{other}:x", f"{other}:y", tmp_path / "v", judge)  # two new calls appended
    after = R.load_cache(tmp_path / "v", repair=False)
    assert after is not first and len(after) == len(first) + 2
    assert J.plan(f"{other}:x", f"{other}:y", tmp_path / "v", judge)["to_make"] == 0


def test_unparseable_is_retried_then_recorded_never_a_tie(systems, tmp_path):
    a, b = f"{systems}:x", f"{systems}:y"
    log = []
    judge = Biased(garbage={"p0"}, log=log)
    J.run(a, b, tmp_path / "v", judge, max_attempts=3)
    assert sorted(att for pid, att in log if pid == "p0") == [0, 0, 1, 1, 2, 2]  # two orders, three attempts each
    recs = [r for r in read_jsonl(tmp_path / "v" / J.VERDICTS) if r["prompt_id"] == "p0"]
    assert [r["choice"] for r in recs] == ["unparseable"] * 2 and all(r["attempts"] == 3 for r in recs)
    o = J.tally(a, b, tmp_path / "v", judge, n_boot=100)["overall"]
    assert o["unparseable"] == 1 and o["n"] == 7
    # asked again on request, a parsed verdict replaces the unparseable one
    judge.garbage = set()
    assert J.plan(a, b, tmp_path / "v", judge, retry_unparseable=True)["to_make"] == 2
    J.run(a, b, tmp_path / "v", judge, retry_unparseable=True)
    assert J.tally(a, b, tmp_path / "v", judge, n_boot=100)["overall"]["unparseable"] == 0


class Dies(Biased):
    def __init__(self, after):
        super().__init__()
        self.after = after

    def ask(self, calls, attempt=0):
        if len(self.log) >= self.after:
            raise KeyboardInterrupt
        return super().ask(calls, attempt)


def test_resume_after_interruption_loses_and_duplicates_nothing(systems, tmp_path):
    a, b = f"{systems}:x", f"{systems}:y"
    with pytest.raises(KeyboardInterrupt):
        J.run(a, b, tmp_path / "v", Dies(after=4), chunk=4)
    assert len(read_jsonl(tmp_path / "v" / J.VERDICTS)) == 4
    log = []
    J.run(a, b, tmp_path / "v", Biased(log=log), chunk=4)
    assert len(log) == 10
    keys = [r["key"] for r in read_jsonl(tmp_path / "v" / J.VERDICTS)]
    assert len(keys) == len(set(keys)) == 14


def test_length_controlled_view_removes_a_pure_length_preference():
    import pandas as pd

    rows = []
    for i in range(200):  # A wins exactly when it is longer, and is longer 80% of the time
        longer = i % 5 != 0
        rows.append({"prompt_id": f"p{i}", "outcome": "W" if longer else "L",
                     "words_a": 30 + (i % 7) if longer else 10, "words_b": 10 if longer else 30 + (i % 7)})
    df = pd.DataFrame(rows)
    raw = J.summarize(df, n_boot=100)["win_rate"]
    lc = J.length_controlled(df, n_boot=50)
    assert raw == pytest.approx(0.8) and abs(lc["win_rate"] - 0.5) < 0.15 and lc["slope"] > 0


def test_cluster_bootstrap_is_wider_under_within_cluster_correlation_and_equal_for_singletons():
    import pandas as pd

    from polyvox.metrics import bootstrap_ci

    # 24 users × 4 prompts; each user's prompts share one outcome (perfect within-user correlation)
    user_outcome = ["W", "L", "T", "W", "L", "L"] * 4
    df = pd.DataFrame([{"prompt_id": f"u{u}-{j}", "user": f"u{u}", "outcome": o}
                       for u, o in enumerate(user_outcome) for j in range(4)])
    per_prompt, by_user = J.summarize(df, n_boot=2000), J.summarize(df, n_boot=2000, groups="user")
    assert per_prompt["win_rate"] == by_user["win_rate"] and by_user["clusters"] == 24
    assert "clusters" not in per_prompt  # the default output is unchanged
    width = lambda s: s["ci_high"] - s["ci_low"]  # noqa: E731
    assert width(by_user) > 1.5 * width(per_prompt)  # ≈ √4 = 2 times wider in expectation

    # one prompt per cluster: the same draws, so the same interval as the per-prompt bootstrap
    one = df.groupby("user", sort=False).head(1).copy()
    assert J.summarize(one, n_boot=500, groups="user")["ci_low"] == J.summarize(one, n_boot=500)["ci_low"]
    assert J.summarize(one, n_boot=500, groups="user")["ci_high"] == J.summarize(one, n_boot=500)["ci_high"]
    x = np.random.default_rng(3).random(30)
    assert J.cluster_bootstrap_ci(x, np.arange(30)[::-1], n_boot=700, seed=5) == \
        pytest.approx(bootstrap_ci(x, n_boot=700, seed=5), abs=1e-12)

    # unequal clusters: the statistic is the mean over all items drawn (size-weighted)
    wr, lo, hi = J.cluster_bootstrap_ci([1, 1, 1, 0], ["a", "a", "a", "b"], n_boot=200)
    assert wr == 0.75 and lo == 0.0 and hi == 1.0
    with pytest.raises(ValueError):
        J.summarize(df, groups="no such label")


def test_parse_verdict():
    assert J.parse_verdict("I think [[B]] is better") == "B"
    assert J.parse_verdict("[[tie]]") == "tie" and J.parse_verdict(" a. ") == "A"
    assert J.parse_verdict("[[A]] or [[B]]") is None and J.parse_verdict("") is None


SLOW_RUN = """
import sys, time
sys.path.insert(0, {lib!r})
from polyvox import judge as J
def score(text, row):
    time.sleep(0.05)
    return -len(text)
J.run({a!r}, {b!r}, {out!r}, J.RubricJudge(score, "slow"), chunk=2)
"""


@pytest.mark.slow
def test_resume_after_a_real_kill(tmp_path, root):
    rows = [{"prompt_id": f"p{i}", "prompt": f"q{i}", "preference": "concise", "gold": "1",
             "responses": {"x": "a" * (i + 1), "y": "b" * (20 - i)}} for i in range(20)]
    s = write_systems(tmp_path / "s.jsonl", rows)
    a, b, out = f"{s}:x", f"{s}:y", tmp_path / "v"
    code = SLOW_RUN.format(lib=str(root / "lib"), a=a, b=b, out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        if (out / J.VERDICTS).exists() and len((out / J.VERDICTS).read_text().splitlines()) >= 6:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    judge = J.RubricJudge(lambda t, r: -len(t), "slow")
    before = J.plan(a, b, out, judge)
    assert 0 < before["to_make"] < 40 and before["cached"] + before["to_make"] == 40
    J.run(a, b, out, judge)
    keys = [r["key"] for r in read_jsonl(out / J.VERDICTS)]
    assert len(keys) == len(set(keys)) == 40
    o = J.tally(a, b, out, judge, n_boot=100)["overall"]
    assert (o["W"], o["L"], o["T"]) == (10, 10, 0)  # x shorter for i < 10 (wins), longer after


@pytest.fixture(scope="module")
def served(tiny):
    """`transformers serve` with the tiny model on 127.0.0.1, stopped by its process group id."""
    with serve(tiny) as (url,):
        yield url, str(tiny)


@pytest.mark.slow
def test_llm_judge_over_a_real_transformers_serve(served, tmp_path):
    """Both orders through /v1/chat/completions of a real local server: every call recorded once,
    unparseable replies (a random tiny model) retried and recorded as such; throughput measured."""
    from polyvox.backends.openai import OpenAIBackend

    url, model = served
    rows = [{"prompt_id": f"p{i}", "prompt": f"What is {i} plus 1?", "preference": "concise", "gold": str(i + 1),
             "responses": {"x": f"The answer is {i + 1}.", "y": f"Let's see. {i} + 1 = {i + 1}."}} for i in range(4)]
    s = write_systems(tmp_path / "s.jsonl", rows)
    judge = J.LLMJudge(OpenAIBackend(model, base_url=url, api_key_env=None, concurrency=4), max_tokens=4)
    a, b = f"{s}:x", f"{s}:y"
    assert J.plan(a, b, tmp_path / "v", judge)["to_make"] == 8
    stats = J.run(a, b, tmp_path / "v", judge, max_attempts=2)
    print("llm judge throughput", stats)
    assert stats["calls_made"] == 8 and stats["verdicts_per_s"] > 0
    recs = read_jsonl(tmp_path / "v" / J.VERDICTS)
    assert len(recs) == 8 and all(r["choice"] in ("A", "B", "tie", "unparseable") for r in recs)
    assert all(r["attempts"] == 2 for r in recs if r["choice"] == "unparseable")
    o = J.tally(a, b, tmp_path / "v", judge, n_boot=50)["overall"]
    assert o["n"] + o["unparseable"] == 4
    assert J.plan(a, b, tmp_path / "v", judge)["to_make"] == 0
