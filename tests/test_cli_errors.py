"""Bad input, as a hostile-but-honest user gives it: every case exits non-zero with ONE line on stderr,
no traceback, and leaves every file as it was (hashes before and after).

The command runs in-process (``polyvox.cli.main``) so the 70-odd cases take seconds; the argument
checks all run before any model loads, which is part of what is tested.
"""
import hashlib
import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # one polyvox process per case (24 s of the fast suite's 122 s of test time): in make test, not test-fast

from polyvox import cli, runs
from polyvox.backends import BackendSpec, SamplingParams


@pytest.fixture(scope="module")
def ws(tiny, root, tmp_path_factory):
    """A workspace: a complete run, a foreign folder, bad files, and a mini book with its own corrections."""
    w = tmp_path_factory.mktemp("ws")
    runs.sample(w / "run", "aime_panel", "panel", BackendSpec("transformers", str(tiny), None, {"batch_size": 2}),
                n=1, params=SamplingParams(max_tokens=4), limit=2, data_dir=root / "data", progress=False, chunk=2)
    runs.sample(w / "run_n2", "aime_panel", "panel", BackendSpec("transformers", str(tiny), None, {"batch_size": 2}),
                n=2, params=SamplingParams(max_tokens=4), limit=2, data_dir=root / "data", progress=False, chunk=2)
    lines = (w / "run/rollouts.jsonl").read_text().splitlines()
    variants = {
        "malformed": lines[0] + "\n{oops\n",
        "duplicate": "\n".join(lines + lines[:1]) + "\n",
        "empty": "",
        "nan": lines[0].replace('"latency_s": ', '"latency_s": NaN, "x": ') + "\n",
        "unknown_problem": lines[0].replace('"problem_id": "2024_0"', '"problem_id": "nope"') + "\n",
    }
    for name, text in variants.items():
        shutil.copytree(w / "run", w / f"g_{name}")
        (w / f"g_{name}/rollouts.jsonl").write_text(text)
    shutil.copytree(w / "run", w / "g_binary")
    (w / "g_binary/rollouts.jsonl").write_bytes(b'{"a": "\xff\xfe"}\n')
    shutil.copytree(w / "run", w / "g_dir_records")
    (w / "g_dir_records/rollouts.jsonl").unlink()
    (w / "g_dir_records/rollouts.jsonl").mkdir()
    for name, text in (("m_list", "[1, 2]"), ("m_bad", "{not json")):
        shutil.copytree(w / "run", w / name)
        (w / name / "manifest.json").write_text(text)
    shutil.copytree(w / "run", w / "shipped")  # records under a manifest without settings, as older runs were
    (w / "shipped/manifest.json").write_text(json.dumps({"status": "complete", "model": "tiny-base"}))
    (w / "file.txt").write_text("not a model\n")
    (w / "no_config").mkdir()
    (w / "no_config/weights.bin").write_text("x")
    (w / "bad_adapter").mkdir()
    (w / "bad_adapter/adapter_config.json").write_text("{}")
    yamls = {
        "bad.yaml": "a: [unclosed\n", "list.yaml": "- 1\n- 2\n", "params_chapter.yaml": "panel/nope: {x: 1}\n",
        "params_param.yaml": "panel/length: {nope: 1}\n", "scale_bad.yaml": "models: {}\n",
        "rl_stages5.yaml": "model: m\narm: panel\nout: o\nstages: 5\n",
        "rl_unknown.yaml": "model: m\narm: panel\nout: o\nlora_rnak: 4\nstages: []\n",
        "rl_type.yaml": "model: m\narm: panel\nout: o\nlora_rank: x\nstages: [{name: a, steps: 1, task: world}]\n",
        "rl_task.yaml": "model: m\narm: panel\nout: o\nstages: [{name: a, steps: 1, task: chess}]\n",
        "rl_steps.yaml": "model: m\narm: panel\nout: o\nstages: [{name: a, steps: 0, task: world}]\n",
    }
    for name, text in yamls.items():
        (w / name).write_text(text)
    book = w / "book_root"
    (book / "book").mkdir(parents=True)
    (book / "_config.yml").write_text("title: t\n")
    (book / "_toc.yml").write_text("format: jb-book\nroot: book/intro\n")
    (book / "book/intro.md").write_text("# intro\n")
    (book / "data").mkdir()
    return w


def snapshot(*folders: Path) -> dict:
    out = {}
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def _sample(tiny, out, *extra):
    return ["sample", "--task", "aime_panel", "--format", "panel", "--model", str(tiny), "--n", "1", "--limit", "2",
            "--max-tokens", "4", "--chunk", "2", "--batch-size", "2", "--out", str(out), *extra]


# (case id, argv builder (tiny, ws) -> argv, expected words in the one line, corrections.yml text or None)
CASES = [
    # sample: argument rules, checked before any model loads
    ("n0", lambda t, w: _sample(t, w / "new") + ["--n", "0"], "--n must be an integer ≥ 1", None),
    ("n-2", lambda t, w: _sample(t, w / "new") + ["--n", "-2"], "--n must be", None),
    ("temp-1", lambda t, w: _sample(t, w / "new") + ["--temperature", "-1"], "--temperature must be a number ≥ 0", None),
    ("temp-nan", lambda t, w: _sample(t, w / "new") + ["--temperature", "nan"], "--temperature must be", None),
    ("top_p1.5", lambda t, w: _sample(t, w / "new") + ["--top-p", "1.5"], "--top-p must be a number in (0, 1]", None),
    ("top_p0", lambda t, w: _sample(t, w / "new") + ["--top-p", "0"], "--top-p must be", None),
    ("limit0", lambda t, w: _sample(t, w / "new") + ["--limit", "0"], "--limit must be an integer ≥ 1", None),
    ("limit-1", lambda t, w: _sample(t, w / "new") + ["--limit", "-1"], "--limit must be", None),
    ("shard=nshards", lambda t, w: _sample(t, w / "new") + ["--shard", "2", "--nshards", "2"], "--shard must be in 0 … 1", None),
    ("shard-1", lambda t, w: _sample(t, w / "new") + ["--shard", "-1"], "--shard must be", None),
    ("nshards-1", lambda t, w: _sample(t, w / "new") + ["--nshards", "-1"], "--nshards must be an integer ≥ 1", None),
    ("chunk0", lambda t, w: _sample(t, w / "new") + ["--chunk", "0"], "--chunk must be an integer ≥ 1", None),
    ("max_tokens0", lambda t, w: _sample(t, w / "new") + ["--max-tokens", "0"], "--max-tokens must be", None),
    ("seed-1", lambda t, w: _sample(t, w / "new") + ["--seed", "-1"], "--seed must be", None),
    ("batch0", lambda t, w: _sample(t, w / "new") + ["--batch-size", "0"], "--batch-size must be", None),
    ("level-no-levels", lambda t, w: _sample(t, w / "new") + ["--level", "5"], "task aime_panel has no levels", None),
    ("level-none-left", lambda t, w: ["sample", "--task", "math500", "--level", "9", "--format", "panel", "--model",
                                     str(t), "--out", str(w / "new")], "no problems", None),
    ("task", lambda t, w: _sample(t, w / "new") + ["--task", "chess"], "invalid choice: 'chess'", None),
    ("format", lambda t, w: _sample(t, w / "new") + ["--format", "xml"], "invalid choice: 'xml'", None),
    ("n-abc", lambda t, w: _sample(t, w / "new") + ["--n", "abc"], "invalid int value", None),
    ("backend", lambda t, w: _sample(t, w / "new") + ["--backend", "bogus"], "invalid choice: 'bogus'", None),
    ("model-missing", lambda t, w: _sample(w / "nope/model", w / "new"), "no such model folder", None),
    ("model-file", lambda t, w: _sample(w / "file.txt", w / "new"), "a file, not a model folder", None),
    ("model-no-config", lambda t, w: _sample(w / "no_config", w / "new"), "no config.json: not a model folder", None),
    ("adapter-missing", lambda t, w: _sample(t, w / "new") + ["--adapter", str(w / "nope")], "no such adapter folder", None),
    ("adapter-no-weights", lambda t, w: _sample(t, w / "new") + ["--adapter", str(w / "bad_adapter")],
     "no adapter_model.safetensors", None),
    ("openai-adapter", lambda t, w: _sample("m", w / "new") + ["--backend", "openai", "--adapter", str(w / "bad_adapter")],
     "serves what the server loaded", None),
    ("out-file", lambda t, w: _sample(t, w / "file.txt"), "a file, not a run folder", None),
    ("out-other-n", lambda t, w: _sample(t, w / "run") + ["--n", "3"], "other settings (n)", None),
    ("out-other-chunk", lambda t, w: _sample(t, w / "run") + ["--chunk", "5"], "other settings (chunk)", None),
    ("out-other-batch", lambda t, w: _sample(t, w / "run") + ["--batch-size", "8"], "other settings (batch_size)", None),
    ("out-other-model", lambda t, w: _sample(t, w / "run") + ["--max-tokens", "5"], "other settings (sampling)", None),
    ("out-foreign", lambda t, w: _sample(t, w / "shipped"), "never adopts", None),
    ("out-manifest-list", lambda t, w: _sample(t, w / "m_list"), "expected a JSON object, got list", None),
    ("out-manifest-bad", lambda t, w: _sample(t, w / "m_bad"), "malformed JSON", None),
    # grade
    ("grade-missing", lambda t, w: ["grade", str(w / "nope")], "no such folder", None),
    ("grade-file", lambda t, w: ["grade", str(w / "file.txt")], "a file, not a run folder", None),
    ("grade-foreign", lambda t, w: ["grade", str(w / "shipped")], "no settings", None),
    ("grade-malformed", lambda t, w: ["grade", str(w / "g_malformed")], "rollouts.jsonl:2: malformed JSON", None),
    ("grade-duplicate", lambda t, w: ["grade", str(w / "g_duplicate")], "rollouts.jsonl:3: duplicate key", None),
    ("grade-empty", lambda t, w: ["grade", str(w / "g_empty")], "no records to grade", None),
    ("grade-nan", lambda t, w: ["grade", str(w / "g_nan")], "rollouts.jsonl:1: malformed JSON (NaN is not a JSON value", None),
    ("grade-binary", lambda t, w: ["grade", str(w / "g_binary")], "rollouts.jsonl:1: not UTF-8", None),
    ("grade-dir", lambda t, w: ["grade", str(w / "g_dir_records")], "is a folder, not a JSONL file", None),
    ("grade-unknown-problem", lambda t, w: ["grade", str(w / "g_unknown_problem")], "problem 'nope' is not in task", None),
    ("grade-manifest-list", lambda t, w: ["grade", str(w / "m_list")], "expected a JSON object", None),
    # merge
    ("merge-mixed", lambda t, w: ["merge", str(w / "run"), str(w / "run_n2"), "--out", str(w / "new")],
     "a shard of another run (n differ", None),
    ("merge-twice", lambda t, w: ["merge", str(w / "run"), str(w / "run"), "--out", str(w / "new")],
     "also in another shard", None),
    ("merge-into-run", lambda t, w: ["merge", str(w / "run"), "--out", str(w / "run_n2")], "merge writes a new folder", None),
    ("merge-foreign", lambda t, w: ["merge", str(w / "shipped"), "--out", str(w / "new")], "no settings", None),
    ("merge-out-file", lambda t, w: ["merge", str(w / "run"), "--out", str(w / "file.txt")], "a file, not a run folder", None),
    # run (a chapter)
    ("run-chapter", lambda t, w: ["run", "panel/nope", "--out", str(w / "new")], "unknown chapter 'panel/nope'", None),
    ("run-param", lambda t, w: ["run", "panel/length", "-p", "nope=1", "--out", str(w / "new")],
     "unknown parameter(s) nope", None),
    ("run-kv", lambda t, w: ["run", "panel/length", "-p", "nope", "--out", str(w / "new")], "-p expects key=value", None),
    ("run-yaml", lambda t, w: ["run", "panel/length", "-p", "data_dir=[x", "--out", str(w / "new")],
     "not a YAML value", None),
    ("run-out-file", lambda t, w: ["run", "panel/length", "--out", str(w / "file.txt")], "a file, not a run folder", None),
    ("run-out-taken", lambda t, w: ["run", "panel/length", "--out", str(w / "run")], "holds a sample run", None),
    # book build --params (checked against the chapters and their parameters cells)
    ("params-yaml", lambda t, w: ["book", "build", "--params", str(w / "bad.yaml")], "not valid YAML", None),
    ("params-list", lambda t, w: ["book", "build", "--params", str(w / "list.yaml")], "expected a mapping", None),
    ("params-chapter", lambda t, w: ["book", "build", "--params", str(w / "params_chapter.yaml")],
     "unknown chapter(s) panel/nope", None),
    ("params-param", lambda t, w: ["book", "build", "--params", str(w / "params_param.yaml")],
     "panel/length: unknown parameter(s) nope", None),
    ("params-missing", lambda t, w: ["book", "build", "--params", str(w / "nope.yaml")], "No such file or directory", None),
    ("only", lambda t, w: ["book", "build", "--only", "panel/nope"], "unknown chapter 'panel/nope'", None),
    # world and rl
    ("world-stage", lambda t, w: ["world", "run", "--out", str(w / "new"), "--stages", "bogus"],
     "unknown stage(s) bogus", None),
    ("world-scale", lambda t, w: ["world", "run", "--out", str(w / "new"), "--scale", "huge"],
     "unknown world scale 'huge'", None),
    ("world-scale-file", lambda t, w: ["world", "run", "--out", str(w / "new"), "--scale", str(w / "scale_bad.yaml")],
     "expected the sections", None),
    ("rl-missing", lambda t, w: ["rl", "--config", str(w / "nope.yaml")], "No such file or directory", None),
    ("rl-stages5", lambda t, w: ["rl", "--config", str(w / "rl_stages5.yaml")], "stages must be a non-empty list", None),
    ("rl-list", lambda t, w: ["rl", "--config", str(w / "list.yaml")], "expected a mapping of RLConfig fields", None),
    ("rl-yaml", lambda t, w: ["rl", "--config", str(w / "bad.yaml")], "not valid YAML", None),
    ("rl-unknown", lambda t, w: ["rl", "--config", str(w / "rl_unknown.yaml")], "unknown keys lora_rnak", None),
    ("rl-type", lambda t, w: ["rl", "--config", str(w / "rl_type.yaml")], "lora_rank must be a number", None),
    ("rl-task", lambda t, w: ["rl", "--config", str(w / "rl_task.yaml")], "unknown task 'chess'", None),
    ("rl-steps", lambda t, w: ["rl", "--config", str(w / "rl_steps.yaml")], "needs a name and steps ≥ 1", None),
    # the command line itself
    ("no-command", lambda t, w: [], "the following arguments are required", None),
    ("bogus-command", lambda t, w: ["bogus"], "invalid choice: 'bogus'", None),
]

BAD_CORRECTIONS = [
    ("corr-yaml", "- date: [unclosed\n", "not valid YAML"),
    ("corr-claimed-42", "- {date: 2026-01-01, chapters: [], claimed: 42, stands: s, source: x}\n", "claimed must be text"),
    ("corr-chapters-str", "- {date: 2026-01-01, chapters: book/x, claimed: c, stands: s, source: x}\n",
     "chapters must be a list"),
    ("corr-unknown-key", "- {date: 2026-01-01, chapters: [], claimed: c, stands: s, source: x, extra: 1}\n",
     "unknown key(s) extra"),
    ("corr-missing", "- {date: 2026-01-01, chapters: [], claimed: c}\n", "is missing stands, source"),
    ("corr-not-list", "date: 2026-01-01\n", "expected a list of corrections"),
    ("corr-entry-str", "- just text\n", "entry 1 is not a mapping"),
]


def _check(capsys, argv, expected, *folders):
    before = snapshot(*folders)
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code not in (0, None), f"exit {code}"
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("polyvox: ")
    assert expected in lines[0], lines[0]
    assert snapshot(*folders) == before, "a file changed"


@pytest.mark.parametrize("case,argv,expected,_", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_and_changes_nothing(case, argv, expected, _, tiny, ws, root, capsys, monkeypatch):
    monkeypatch.chdir(root)
    _check(capsys, argv(tiny, ws), expected, ws, root / "data")


@pytest.mark.parametrize("case,text,expected", BAD_CORRECTIONS, ids=[c[0] for c in BAD_CORRECTIONS])
def test_a_bad_correction_leaves_the_book_untouched(case, text, expected, ws, capsys, monkeypatch):
    root = ws / "book_root"
    (root / "data/corrections.yml").write_text(text)
    monkeypatch.chdir(root)
    _check(capsys, ["book", "build", "--no-html"], expected, root)


def test_the_table_is_big_enough():
    assert len(CASES) + len(BAD_CORRECTIONS) >= 60


def test_debug_shows_the_traceback(ws, capsys, monkeypatch):
    with pytest.raises(Exception, match="no settings"):
        cli.main(["--debug", "grade", str(ws / "shipped")])
    monkeypatch.setenv("POLYVOX_DEBUG", "1")
    with pytest.raises(Exception, match="no settings"):
        cli.main(["grade", str(ws / "shipped")])


def test_secrets_never_reach_the_error_line(ws, capsys, monkeypatch):
    bad = ws / "secret.yaml"
    fake_key = "sk-" + "abcdefghij" * 3  # key-shaped, built here so no key-like literal sits in the source
    bad.write_text(f"model: m\narm: panel\nout: o\nstages: [{{name: a, steps: 1, task: {fake_key}}}]\n")
    assert cli.main(["rl", "--config", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "sk-abcdefghij" not in err and "<redacted>" in err
    bad.unlink()
