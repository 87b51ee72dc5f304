"""The bad-input table of ``polyvox sample``, ``grade`` and ``merge`` (issue 17).

Every case is refused cleanly (:func:`_hostile.refused`): a non-zero exit, one line on stderr,
no traceback, and the workspace byte-identical with nothing added. The runs are written by
:func:`polyvox.runs.sample` with a fake backend whose identity is the ``openai`` backend's on
``--model m --base-url http://127.0.0.1:9`` (:mod:`_fixtures`), so the command line reaches the same settings
without a model, a server or a download; the world task needs no data, the AIME copies are
small. The folders are built once per module (seconds).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _fixtures import BASE_URL, aime_data, edit_manifest, make_run
from _hostile import refused

from polyvox import runs


def sample_argv(out, *extra, task="world", n=2, limit=3):
    return ["sample", "--task", task, "--format", "panel", "--backend", "openai", "--model", "m", "--base-url", BASE_URL,
            "--n", str(n), "--limit", str(limit), "--out", str(out), *extra]


def _copy(w: Path, src: str, dst: str) -> Path:
    shutil.copytree(w / src, w / dst)
    return w / dst


@pytest.fixture(scope="module")
def w(tmp_path_factory, root) -> Path:
    w = tmp_path_factory.mktemp("hostile_runs")
    make_run(w / "run")
    make_run(w / "aime", task="aime_panel", data_dir=root / "data")
    for i in (0, 1):
        make_run(w / f"s{i}", n=1, limit=4, shard=i, nshards=2)
    make_run(w / "s_other", n=2, limit=4, shard=1, nshards=2)
    make_run(w / "s0_seed", n=1, limit=4, shard=0, nshards=2, seed=1)
    runs.merge([w / "s0", w / "s1"], w / "merged")
    merged_old = _copy(w, "merged", "merged_old")
    edit_manifest(merged_old, lambda m: m["settings"].pop("shard_problems_sha256", None))

    def set_gold(rows):
        rows[1]["answer"] = "999"

    def set_text(rows):
        rows[2]["problem"] += " (edited)"

    def nonint(rows):
        for r in rows:
            r["answer"] = "12.5"

    aime_data(root, w / "data_gold", set_gold)
    aime_data(root, w / "data_text", set_text)
    aime_data(root, w / "data_nonint", nonint)
    make_run(w / "ungradable", task="aime_panel", data_dir=w / "data_nonint")
    (w / "data_empty").mkdir()
    (w / "file.txt").write_text("not a folder\n")
    (w / "empty_dir").mkdir()
    for name, manifest in (("judge", {"kind": "judge", "comparisons": []}), ("rl", {"kind": "rl", "config": {}}),
                           ("unrecognised", {"status": "complete"})):
        (w / name).mkdir()
        (w / name / "manifest.json").write_text(json.dumps(manifest))
    shipped = _copy(w, "run", "shipped")  # records under a manifest without settings
    (shipped / "manifest.json").write_text(json.dumps({"status": "complete", "model": "m"}))
    (w / "rollouts_only").mkdir()
    shutil.copy(w / "run/rollouts.jsonl", w / "rollouts_only/rollouts.jsonl")

    for name, status in (("running", "running"), ("failed", "failed"), ("no_status", None)):
        folder = _copy(w, "run", name)
        edit_manifest(folder, lambda m, s=status: m.update(status=s) if s else m.pop("status"))
    for name in ("s1_running",):
        edit_manifest(_copy(w, "s1", name), lambda m: m.update(status="running"))
    s1_short = _copy(w, "s1", "s1_short")
    (s1_short / "rollouts.jsonl").write_text("".join((w / "s1/rollouts.jsonl").read_text().splitlines(True)[:-1]))
    s1_bad = _copy(w, "s1", "s1_malformed")
    (s1_bad / "rollouts.jsonl").write_text("{oops\n")

    lines = (w / "run/rollouts.jsonl").read_text().splitlines()
    first = json.loads(lines[0])

    def line(**change):
        return json.dumps({**first, **change})

    without_completion = {k: v for k, v in first.items() if k != "completion"}
    variants = {
        "malformed": [lines[0], "{oops"] + lines[2:],
        "list_line": [lines[0], "[1, 2]"] + lines[2:],
        "duplicate": lines + lines[:1],
        "nan": [lines[0].replace('"latency_s": ', '"latency_s": NaN, "x": ')] + lines[1:],
        "index_str": [line(sample_index="0")] + lines[1:],
        "completion_int": [line(completion=7)] + lines[1:],
        "no_completion": [json.dumps(without_completion)] + lines[1:],
        "unknown_problem": [line(problem_id="nope")] + lines[1:],
        "index_7": lines + [line(sample_index=7)],
        "index_neg": lines + [line(sample_index=-1)],
        "short": lines[:-1],
    }
    for name, rows in variants.items():
        _copy(w, "run", f"r_{name}")
        (w / f"r_{name}/rollouts.jsonl").write_text("\n".join(rows) + "\n")
    torn = _copy(w, "run", "r_torn")
    (torn / "rollouts.jsonl").write_text("\n".join(lines) + "\n" + lines[0][:40])
    (_copy(w, "run", "r_empty") / "rollouts.jsonl").write_text("")
    (_copy(w, "run", "r_binary") / "rollouts.jsonl").write_bytes(b'{"a": "\xff\xfe"}\n')
    gone = _copy(w, "run", "r_gone")
    (gone / "rollouts.jsonl").unlink()
    as_dir = _copy(w, "run", "r_dir")
    (as_dir / "rollouts.jsonl").unlink()
    (as_dir / "rollouts.jsonl").mkdir()

    (_copy(w, "run", "m_list") / "manifest.json").write_text("[1, 2]")
    (_copy(w, "run", "m_bad") / "manifest.json").write_text("{not json")
    settings_edits = {
        "m_settings_str": lambda m: m.update(settings="world"),
        "m_n_str": lambda m: m["settings"].update(n="two"),
        "m_n_0": lambda m: m["settings"].update(n=0),
        "m_task": lambda m: m["settings"].update(task="chess"),
        "m_limit": lambda m: m["settings"].update(limit=-1),
        "m_shard": lambda m: m["settings"].update(shard=5),
        "m_options": lambda m: m["settings"].update(task_options=[1]),
        "m_no_hash": lambda m: m["settings"].pop("problems_sha256"),
        "m_hash": lambda m: m["settings"].update(problems_sha256="0" * 64),
        "m_no_task": lambda m: m["settings"].pop("task"),
    }
    for name, change in settings_edits.items():
        edit_manifest(_copy(w, "run", name), change)
    return w


def _grade(run, *extra):
    return lambda w: ["grade", str(w / run) if run is not None else "", *extra]


def _sample(out, *extra, **kw):
    """``polyvox sample`` into the workspace's folder ``out`` ("" and "." as they are)."""
    return lambda w: sample_argv(w / out if out not in ("", ".") else out, *extra, **kw)


def _merge(*shards, out="new"):
    """``polyvox merge`` of the workspace's shard folders into ``out`` (None: an empty --out)."""
    return lambda w: ["merge", *(str(w / s) for s in shards), "--out", str(w / out) if out is not None else ""]


# (case id, argv builder (workspace) -> argv, expected words in the one line)
CASES = [
    # ---- grade: what is graded must be a complete sample run
    ("grade-missing", _grade("nope"), "no such folder"),
    ("grade-file", _grade("file.txt"), "a file, not a run folder"),
    ("grade-through-file", _grade("file.txt/run"), "no such folder"),
    ("grade-empty-name", _grade(None), "a run folder must be named"),
    ("grade-empty-dir", _grade("empty_dir"), "no manifest.json"),
    ("grade-judge", _grade("judge"), "holds a judge run, not a sample run"),
    ("grade-rl", _grade("rl"), "not a sample run"),
    ("grade-running", _grade("running"), "not complete (status 'running')"),
    ("grade-failed", _grade("failed"), "not complete (status 'failed')"),
    ("grade-no-status", _grade("no_status"), "not complete (status None)"),
    ("grade-short", _grade("r_short"), "5 of 6 records"),
    ("grade-foreign", _grade("shipped"), "no settings"),
    ("grade-rollouts-only", _grade("rollouts_only"), "no manifest.json"),
    # ---- grade: the problems must be the ones sampled
    ("grade-gold-changed", lambda w: ["grade", str(w / "aime"), "--data-dir", str(w / "data_gold")],
     "problem '2024_1': its gold differs"),
    ("grade-text-changed", lambda w: ["grade", str(w / "aime"), "--data-dir", str(w / "data_text")],
     "problem '2024_2': its text differs"),
    ("grade-data-missing", lambda w: ["grade", str(w / "aime"), "--data-dir", str(w / "no_data")], "file not found"),
    ("grade-data-empty", lambda w: ["grade", str(w / "aime"), "--data-dir", str(w / "data_empty")], "file not found"),
    ("grade-data-file", lambda w: ["grade", str(w / "aime"), "--data-dir", str(w / "file.txt")], "file not found"),
    ("grade-hash-changed", _grade("m_hash"), "problems changed since sampling"),
    ("grade-merged-old", _grade("merged_old"), "merge the shards again"),
    # ---- grade: rollouts that are not a run's records
    ("grade-malformed", _grade("r_malformed"), "rollouts.jsonl:2: malformed JSON"),
    ("grade-torn", _grade("r_torn"), "rollouts.jsonl:7: malformed JSON"),
    ("grade-list-line", _grade("r_list_line"), "rollouts.jsonl:2: expected a JSON object"),
    ("grade-binary", _grade("r_binary"), "rollouts.jsonl:1: not UTF-8"),
    ("grade-empty", _grade("r_empty"), "no records to grade"),
    ("grade-gone", _grade("r_gone"), "rollouts.jsonl: file not found"),
    ("grade-dir", _grade("r_dir"), "is a folder, not a JSONL file"),
    ("grade-nan", _grade("r_nan"), "rollouts.jsonl:1: malformed JSON (NaN is not a JSON value"),
    ("grade-index-str", _grade("r_index_str"), "rollouts.jsonl:1: field 'sample_index' should be"),
    ("grade-completion-int", _grade("r_completion_int"), "rollouts.jsonl:1: field 'completion' should be"),
    ("grade-no-completion", _grade("r_no_completion"), "rollouts.jsonl:1: missing field 'completion'"),
    ("grade-unknown-problem", _grade("r_unknown_problem"), "rollouts.jsonl:1: problem 'nope' is not in task world"),
    ("grade-duplicate", _grade("r_duplicate"), "rollouts.jsonl:7: duplicate key"),
    ("grade-index-7", _grade("r_index_7"), "rollouts.jsonl:7: sample_index 7 is outside 0 … 1"),
    ("grade-index-neg", _grade("r_index_neg"), "rollouts.jsonl:7: sample_index -1 is outside"),
    # ---- grade: manifests that are not a sample run's
    ("grade-manifest-list", _grade("m_list"), "expected a JSON object, got list"),
    ("grade-manifest-bad", _grade("m_bad"), "malformed JSON"),
    ("grade-settings-str", _grade("m_settings_str"), "no settings"),
    ("grade-n-str", _grade("m_n_str"), "settings.n should be an integer ≥ 1, got 'two'"),
    ("grade-n-0", _grade("m_n_0"), "settings.n should be an integer ≥ 1, got 0"),
    ("grade-task", _grade("m_task"), "unknown task 'chess'"),
    ("grade-no-task", _grade("m_no_task"), "settings.task missing"),
    ("grade-limit", _grade("m_limit"), "settings.limit should be"),
    ("grade-shard", _grade("m_shard"), "settings.shard should be an index below nshards"),
    ("grade-options", _grade("m_options"), "settings.task_options should be a mapping"),
    ("grade-no-hash", _grade("m_no_hash"), "problems_sha256 missing"),
    # ---- grade: its own arguments, and what grading found
    ("grade-max-1.5", _grade("run", "--max-ungradable", "1.5"), "--max-ungradable must be a fraction in [0, 1]"),
    ("grade-max-neg", _grade("run", "--max-ungradable", "-0.1"), "--max-ungradable must be a fraction"),
    ("grade-max-nan", _grade("run", "--max-ungradable", "nan"), "--max-ungradable must be a fraction"),
    ("grade-max-word", _grade("run", "--max-ungradable", "some"), "invalid float value"),
    ("grade-workers-0", _grade("run", "--workers", "0"), "--workers must be an integer ≥ 1"),
    ("grade-workers-neg", _grade("run", "--workers", "-3"), "--workers must be an integer ≥ 1"),
    ("grade-workers-word", _grade("run", "--workers", "x"), "invalid int value"),
    ("grade-ungradable", lambda w: ["grade", str(w / "ungradable"), "--data-dir", str(w / "data_nonint")],
     "6 of 6 samples (100.0%) are ungradable, above --max-ungradable 0.05"),
    # ---- sample: output folders
    ("sample-out-empty", _sample(""), "(got '')"),
    ("sample-out-dot", _sample("."), "(got '.')"),
    ("sample-out-file", _sample("file.txt"), "a file, not a run folder"),
    ("sample-out-through-file", _sample("file.txt/run"), "a file, not a folder (in the path"),
    ("sample-out-judge", _sample("judge"), "holds a judge run"),
    ("sample-out-rl", _sample("rl"), "holds a rl run"),
    ("sample-out-unrecognised", _sample("unrecognised"), "holds a unrecognised run"),
    ("sample-out-foreign", _sample("shipped"), "never adopts"),
    ("sample-out-rollouts-only", _sample("rollouts_only"), "never adopts"),
    ("sample-out-other-n", _sample("running", n=3), "other settings (n)"),
    ("sample-out-merged", _sample("merged", n=1, limit=4), "other settings"),
    ("sample-out-manifest-list", _sample("m_list"), "expected a JSON object, got list"),
    # ---- sample: records in the folder that are not this run's
    ("sample-unknown-key", _sample("r_unknown_problem"), "key ('nope', 0) is not in this run"),
    ("sample-index-7", _sample("r_index_7"), "rollouts.jsonl:7: key"),
    ("sample-malformed", _sample("r_malformed"), "rollouts.jsonl:2: malformed JSON"),
    ("sample-duplicate", _sample("r_duplicate"), "rollouts.jsonl:7: duplicate key"),
    ("sample-binary", _sample("r_binary"), "not UTF-8"),
    ("sample-index-str", _sample("r_index_str"), "field 'sample_index' should be"),
    # ---- sample: data
    ("sample-data-missing", lambda w: sample_argv(w / "new", "--data-dir", str(w / "no_data"), task="aime_panel"),
     "file not found"),
    ("sample-no-problems", _sample("new", "--level", "9"), "no problems"),
    ("sample-n-0", _sample("new", n=0), "--n must be an integer ≥ 1"),
    # ---- merge: shards
    ("merge-incomplete", _merge("s0", "s1_running"), "shard 1 is not complete (status 'running')"),
    ("merge-short", _merge("s0", "s1_short"), "1 records, but the shard's manifest says 2"),
    ("merge-other-run", _merge("s0", "s_other"), "a shard of another run (n differ"),
    ("merge-other-seed", _merge("s1", "s0_seed"), "a shard of another run (seed differ"),
    ("merge-twice", _merge("s0", "s0"), "also in another shard"),
    ("merge-missing", _merge("s0", "nope"), "no such folder"),
    ("merge-file", _merge("s0", "file.txt"), "a file, not a run folder"),
    ("merge-judge", _merge("s0", "judge"), "no settings"),
    ("merge-empty-dir", _merge("s0", "empty_dir"), "no settings"),
    ("merge-merged", _merge("merged"), "a merged run, not a shard"),
    ("merge-malformed", _merge("s0", "s1_malformed"), "rollouts.jsonl:1: malformed JSON"),
    ("merge-no-shards", _merge(), "required"),
    # ---- merge: the out folder
    ("merge-out-shard", _merge("s0", "s1", out="s0"), "holds a run already"),
    ("merge-out-run", _merge("s0", "s1", out="run"), "merge writes a new folder"),
    ("merge-out-records", _merge("s0", "s1", out="rollouts_only"), "exists; merge writes a new folder"),
    ("merge-out-empty", _merge("s0", "s1", out=None), "(got '')"),
    ("merge-out-file", _merge("s0", "s1", out="file.txt"), "a file, not a run folder"),
    ("merge-out-through-file", _merge("s0", "s1", out="file.txt/m"), "a file, not a folder (in the path"),
    ("merge-out-judge", _merge("s0", "s1", out="judge"), "holds a judge run"),
]


@pytest.mark.parametrize("case,argv,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_in_one_line_and_changes_nothing(case, argv, expected, w, monkeypatch):
    monkeypatch.chdir(w)  # a refusal that wrote into the working folder would show in the snapshot too
    refused(argv(w), watch=[w], expect=expected)


def test_the_table_is_big_enough():
    assert len(CASES) >= 50
    for command in ("grade", "sample", "merge"):
        assert sum(c[0].startswith(command) for c in CASES) >= 10, command


def test_the_good_cases_beside_the_table_pass(w, tmp_path, root):
    """The same fixtures, used as intended, are accepted: the table refuses bad input, not everything."""
    from _hostile import run_cli

    work = tmp_path / "work"
    for name in ("run", "aime", "merged", "ungradable"):
        shutil.copytree(w / name, work / name)
    assert run_cli(["grade", str(work / "run")])[0] == 0
    assert run_cli(["grade", str(work / "aime"), "--data-dir", str(root / "data")])[0] == 0
    assert run_cli(["grade", str(work / "merged")])[0] == 0
    assert run_cli(["grade", str(work / "ungradable"), "--data-dir", str(w / "data_nonint"),
                    "--max-ungradable", "1"])[0] == 0
    assert run_cli(["merge", str(w / "s0"), str(w / "s1"), "--out", str(work / "m2")])[0] == 0
    assert run_cli(sample_argv(work / "run"))[0] == 0  # a complete run: nothing to sample, no network
