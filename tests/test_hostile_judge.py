"""The bad-input table of ``polyvox judge plan|run|tally``, ``personas run``, ``collab run`` and
``world run`` (issue 17, items 6, 7 and 16).

Every case is refused cleanly (:func:`_hostile.refused`): a non-zero exit, one line on stderr,
no traceback, and the whole workspace byte-identical with nothing added — no lock, manifest,
scale file or empty folder left behind. Each case builds its own small workspace (a systems
file, verdicts, hand-written manifests of other kinds of run); no model is loaded, since every
refusal comes before any work.

Checked against the code before issue 17's changes to judge and the pipelines: every case fails
there but the eleven rows of rules that already held (kept as regression rows):
``collab_stage_with_another_scale``, ``verdict_repeated_key_run``,
``world_while_another_writer_holds_the_folder`` (the library's), and ``judge_run_with_no_chunk``,
``judge_run_with_no_attempts``, ``side_without_a_system``, ``side_with_an_empty_system``,
``systems_file_missing``, ``systems_file_a_folder``, ``personas_with_an_unknown_stage``,
``collab_with_missing_models`` (refused by the command line's argument checks, which the library
now repeats for its other callers).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from _hostile import refused

ROWS = [{"prompt_id": f"p{i}", "prompt": f"q{i}", "preference": "concise", "gold": str(i), "n_steps": 1, "user": f"u{i % 2}",
         "responses": {"x": f"so it is {i}", "y": f"well it might be {i + 1}"}} for i in range(4)]


def write_rows(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def manifest(folder: Path, **fields) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(fields, indent=2) + "\n")
    return folder


def sample_folder(folder: Path, kind: bool = True) -> Path:
    """A sample run's folder (kind recorded, or an older manifest recognised by its settings)."""
    extra = {"kind": "sample"} if kind else {}
    manifest(folder, **extra, settings={"task": "world", "format": "panel", "n": 1}, status="complete")
    (folder / "rollouts.jsonl").write_text(json.dumps({"problem_id": "a", "sample_index": 0}) + "\n")
    return folder


def verdict(key="0" * 64, choice="A", **kw) -> dict:
    return {"key": key, "judge": "rubric", "prompt_id": "p0", "choice": choice, "raw": "[[A]]", "attempts": 1,
            "latency_s": 0.0, **kw}


def judge_folder(folder: Path, lines) -> Path:
    manifest(folder, kind="judge", comparisons=[["s.jsonl:x", "s.jsonl:y"]], judges=[{"judge": "rubric"}],
             status="complete")
    write_rows(folder / "verdicts.jsonl", lines)
    return folder


def scale(study: str, name: str) -> dict:
    from importlib import import_module

    return import_module(f"polyvox.studies.{study}.pipeline").load_scale(name)


def settings_of(s: dict, *sections, **extra) -> dict:
    return json.loads(json.dumps({"scale": s["name"], **{k: s[k] for k in sections}, **extra}))


def root_folder(folder: Path, kind: str, s: dict) -> Path:
    return manifest(folder, kind=kind, scale=s["name"], settings=json.loads(json.dumps(s)), status="stages complete")


def personas_legacy(folder: Path, name: str = "smoke") -> Path:
    """A personas run folder as recorded before root manifests: scale.yaml and a complete router stage."""
    s = scale("personas", name)
    folder.mkdir(parents=True)
    (folder / "scale.yaml").write_text(yaml.safe_dump(s, sort_keys=False))
    manifest(folder / "router", settings=settings_of(s, "model", "world", "router"), status="complete")
    return folder


def collab_legacy(folder: Path, name: str = "smoke") -> Path:
    s = scale("collab", name)
    manifest(folder / "models", settings=settings_of(s, "data", "models"), status="complete", seconds=1.0)
    return folder


def world_legacy(folder: Path, name: str = "smoke") -> Path:
    s = scale("world", name)
    manifest(folder / "models", settings=settings_of(s, "models", seed=None), status="complete", stage="models")
    return folder


CASES: dict = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _ab(w: Path, f: Path | None = None) -> list[str]:
    f = f or w / "s.jsonl"
    return ["--a", f"{f}:x", "--b", f"{f}:y"]


def judge_argv(w: Path, action: str = "run", out: Path | None = None, f: Path | None = None, *extra) -> list[str]:
    return ["judge", action, *_ab(w, f), "--out", str(out or w / "v"), *extra]


# ---------------------------------------------------------------- judge run: folders of another kind (item 7)

@case
def judge_run_into_a_sample_folder(w):
    return judge_argv(w, out=sample_folder(w / "run")), "holds a sample run"


@case
def judge_run_into_an_older_sample_folder(w):
    return judge_argv(w, out=sample_folder(w / "run", kind=False)), "holds a sample run"


@case
def judge_run_into_a_personas_root(w):
    return judge_argv(w, out=root_folder(w / "p", "personas pipeline", scale("personas", "smoke"))), \
        "personas pipeline run"


@case
def judge_run_into_an_older_personas_root(w):
    return judge_argv(w, out=personas_legacy(w / "p")), "no manifest.json"


@case
def judge_run_into_a_stage_folder(w):
    return judge_argv(w, out=personas_legacy(w / "p") / "router"), "holds a stage run"


@case
def judge_run_into_a_world_root(w):
    return judge_argv(w, out=root_folder(w / "world", "world pipeline", scale("world", "smoke"))), "world pipeline"


@case
def judge_run_into_a_folder_of_other_files(w):
    (w / "notes").mkdir()
    (w / "notes" / "todo.txt").write_text("mine\n")
    return judge_argv(w, out=w / "notes"), "no manifest.json"


@case
def judge_run_into_a_file(w):
    (w / "v").write_text("a file\n")
    return judge_argv(w), "a file"


@case
def judge_run_under_a_file(w):
    (w / "f").write_text("a file\n")
    return judge_argv(w, out=w / "f" / "v"), "a file"


@case
def judge_run_while_another_writer_holds_the_folder(w):
    judge_folder(w / "v", [json.dumps(verdict())])
    return judge_argv(w), "in use by process"


@case
def judge_run_with_no_chunk(w):
    return judge_argv(w, "run", None, None, "--chunk", "0"), "chunk"


@case
def judge_run_with_no_attempts(w):
    return judge_argv(w, "run", None, None, "--max-attempts", "0"), "attempts"


# ---------------------------------------------------------------- judge run: malformed systems (item 16)

def _systems_case(w, rows, expect):
    f = write_rows(w / "bad.jsonl", rows)
    return judge_argv(w, f=f), expect


@case
def systems_line_not_an_object(w):
    return _systems_case(w, [ROWS[0], "5"], "bad.jsonl:2")


@case
def systems_line_a_list(w):
    return _systems_case(w, ["[1, 2]"], "bad.jsonl:1")


@case
def systems_responses_a_list(w):
    return _systems_case(w, [{**ROWS[0], "responses": ["x", "y"]}], "bad.jsonl:1")


@case
def systems_response_not_text(w):
    return _systems_case(w, [ROWS[0], {**ROWS[1], "responses": {"x": 3, "y": "b"}}], "bad.jsonl:2")


@case
def systems_prompt_id_a_list(w):
    return _systems_case(w, [{**ROWS[0], "prompt_id": ["p"]}], "bad.jsonl:1")


@case
def systems_prompt_id_empty(w):
    return _systems_case(w, [{**ROWS[0], "prompt_id": ""}], "bad.jsonl:1")


@case
def systems_prompt_null(w):
    return _systems_case(w, [ROWS[0], ROWS[1], {**ROWS[2], "prompt": None}], "bad.jsonl:3")


@case
def systems_preference_missing(w):
    row = {k: v for k, v in ROWS[1].items() if k != "preference"}
    return _systems_case(w, [ROWS[0], row], "bad.jsonl:2")


@case
def systems_duplicate_prompt(w):
    return _systems_case(w, [ROWS[0], ROWS[1], ROWS[0]], "bad.jsonl:3")


@case
def systems_malformed_json(w):
    return _systems_case(w, [ROWS[0], '{"prompt_id": "p1", '], "bad.jsonl:2")


@case
def systems_file_empty(w):
    return _systems_case(w, [], "no systems rows")


@case
def systems_file_missing(w):
    return judge_argv(w, f=w / "missing.jsonl"), "missing.jsonl"


@case
def systems_file_a_folder(w):
    (w / "dir.jsonl").mkdir()
    return judge_argv(w, f=w / "dir.jsonl"), "dir.jsonl"


@case
def side_without_a_system(w):
    return ["judge", "run", "--a", str(w / "s.jsonl"), "--b", f"{w / 's.jsonl'}:y", "--out", str(w / "v")], \
        "FILE:SYSTEM"


@case
def side_with_an_empty_system(w):
    return ["judge", "run", "--a", f"{w / 's.jsonl'}:", "--b", f"{w / 's.jsonl'}:y", "--out", str(w / "v")], \
        "FILE:SYSTEM"


@case
def side_with_an_unknown_system(w):
    return ["judge", "run", "--a", f"{w / 's.jsonl'}:zz", "--b", f"{w / 's.jsonl'}:y", "--out", str(w / "v")], \
        "no row answers as system 'zz'"


# ---------------------------------------------------------------- judge run/plan/tally: malformed verdicts (item 16)

def _verdicts_case(w, lines, action, expect):
    judge_folder(w / "v", lines)
    return judge_argv(w, action), expect


@case
def verdict_without_key_run(w):
    v = verdict()
    del v["key"]
    return _verdicts_case(w, [json.dumps(v)], "run", "verdicts.jsonl:1")


@case
def verdict_without_key_tally(w):
    v = verdict()
    del v["key"]
    return _verdicts_case(w, [json.dumps(verdict()), json.dumps(v)], "tally", "verdicts.jsonl:2")


@case
def verdict_key_a_number_run(w):
    return _verdicts_case(w, [json.dumps(verdict(key=7))], "run", "verdicts.jsonl:1")


@case
def verdict_choice_not_allowed_run(w):
    return _verdicts_case(w, [json.dumps(verdict(choice="C"))], "run", "not one of")


@case
def verdict_choice_not_allowed_tally(w):
    # a real verdict for p0's first order, then one whose choice no judge gives: refused, not tallied as a tie
    from polyvox import judge as J
    from polyvox.judge.records import _calls
    from polyvox.studies.personas.pipeline import rubric_judge

    rows = J.read_systems(w / "s.jsonl")
    p = J.pairs(f"{w / 's.jsonl'}:x", f"{w / 's.jsonl'}:y")[0]
    ab, ba = _calls(p)
    ident = rubric_judge().identity()
    assert rows
    return _verdicts_case(w, [json.dumps(verdict(J.call_key(ident, ab), "A")),
                              json.dumps(verdict(J.call_key(ident, ba), "maybe"))], "tally", "verdicts.jsonl:2")


@case
def verdict_choice_missing_plan(w):
    v = verdict()
    del v["choice"]
    return _verdicts_case(w, [json.dumps(v)], "plan", "verdicts.jsonl:1")


@case
def verdict_line_a_list_tally(w):
    return _verdicts_case(w, ["[1]"], "tally", "verdicts.jsonl:1")


@case
def verdict_repeated_key_run(w):
    return _verdicts_case(w, [json.dumps(verdict()), json.dumps(verdict(choice="B"))], "run", "duplicate verdict")


# ---------------------------------------------------------------- judge plan and tally: wrong folders (item 7)

@case
def judge_plan_in_a_sample_folder(w):
    return judge_argv(w, "plan", sample_folder(w / "run")), "holds a sample run"


@case
def judge_plan_in_a_file(w):
    (w / "v").write_text("a file\n")
    return judge_argv(w, "plan"), "a file"


@case
def judge_tally_of_a_sample_folder(w):
    return judge_argv(w, "tally", sample_folder(w / "run")), "holds a sample run"


@case
def judge_tally_of_a_file(w):
    (w / "v").write_text("a file\n")
    return judge_argv(w, "tally"), "a file"


# ---------------------------------------------------------------- personas run (items 6, 7)

def personas_argv(out: Path, scale_name: str = "smoke", *extra) -> list[str]:
    return ["personas", "run", "--scale", scale_name, "--out", str(out), *extra]


@case
def personas_into_a_sample_folder(w):
    return personas_argv(sample_folder(w / "run")), "holds a sample run"


@case
def personas_into_a_judge_folder(w):
    return personas_argv(judge_folder(w / "v", [json.dumps(verdict())])), "holds a judge run"


@case
def personas_into_a_world_root(w):
    return personas_argv(root_folder(w / "world", "world pipeline", scale("world", "smoke"))), "world pipeline"


@case
def personas_into_an_older_collab_root(w):
    return personas_argv(collab_legacy(w / "collab")), "no manifest.json"


@case
def personas_with_another_scale(w):
    return personas_argv(root_folder(w / "p", "personas pipeline", scale("personas", "smoke")), "cpu"), "differs in"


@case
def personas_with_another_scale_older_folder(w):
    return personas_argv(personas_legacy(w / "p"), "cpu"), "differs in"


@case
def personas_with_another_scale_older_folder_no_stage(w):
    folder = personas_legacy(w / "p")
    (folder / "router" / "manifest.json").unlink()
    (folder / "router").rmdir()
    return personas_argv(folder, "cpu"), "differs in"


@case
def personas_stage_of_another_kind(w):
    root = root_folder(w / "p", "personas pipeline", scale("personas", "smoke"))
    sample_folder(root / "router")
    return personas_argv(root), "holds a sample run"


@case
def personas_judge_stage_of_another_kind(w):
    root = root_folder(w / "p", "personas pipeline", scale("personas", "smoke"))
    sample_folder(root / "judge")
    return personas_argv(root, "smoke", "--stages", "judge"), "holds a sample run"


@case
def personas_with_an_unknown_stage(w):
    return personas_argv(w / "p", "smoke", "--stages", "router,nope"), "unknown stage"


@case
def personas_while_another_writer_holds_the_folder(w):
    return personas_argv(personas_legacy(w / "p")), "in use by process"


@case
def personas_into_a_file(w):
    (w / "p").write_text("a file\n")
    return personas_argv(w / "p"), "a file"


# ---------------------------------------------------------------- collab run (items 6, 7)

def collab_argv(out: Path, scale_name: str = "smoke", *extra) -> list[str]:
    return ["collab", "run", "--scale", scale_name, "--out", str(out), *extra]


@case
def collab_into_a_sample_folder(w):
    return collab_argv(sample_folder(w / "run")), "holds a sample run"


@case
def collab_into_an_older_personas_root(w):
    return collab_argv(personas_legacy(w / "p")), "no manifest.json"


@case
def collab_with_another_scale(w):
    root = root_folder(w / "c", "collab pipeline", scale("collab", "smoke"))
    return collab_argv(root, "cpu", "--stages", "pd"), "differs in"


@case
def collab_stage_with_another_scale(w):
    return collab_argv(collab_legacy(w / "c"), "cpu"), "other settings"


@case
def collab_with_missing_models(w):
    return collab_argv(w / "c", "smoke", "--stages", "pd", "--models", str(w / "nowhere")), "no such folder"


@case
def collab_while_another_writer_holds_the_folder(w):
    return collab_argv(collab_legacy(w / "c"), "smoke", "--stages", "pd"), "in use by process"


@case
def collab_into_a_file(w):
    (w / "c").write_text("a file\n")
    return collab_argv(w / "c"), "a file"


# ---------------------------------------------------------------- world run (items 6, 7)

def world_argv(out: Path, scale_name: str = "smoke", *extra) -> list[str]:
    return ["world", "run", "--scale", scale_name, "--out", str(out), *extra]


@case
def world_into_a_sample_folder(w):
    return world_argv(sample_folder(w / "run")), "holds a sample run"


@case
def world_into_an_older_personas_root(w):
    return world_argv(personas_legacy(w / "p")), "no manifest.json"


@case
def world_with_another_scale_older_folder(w):
    return world_argv(world_legacy(w / "world", "h200")), "other settings"


@case
def world_with_another_scale(w):
    return world_argv(root_folder(w / "world", "world pipeline", scale("world", "h200"))), "differs in"


@case
def world_with_another_first_seed(w):
    s = scale("world", "smoke")
    return world_argv(root_folder(w / "world", "world pipeline", {**s, "seeds": [5, *s["seeds"]]})), "first seed"


@case
def world_while_another_writer_holds_the_folder(w):
    return world_argv(world_legacy(w / "world")), "in use by process"


LOCKED = {"judge_run_while_another_writer_holds_the_folder": "v",
          "personas_while_another_writer_holds_the_folder": "p",
          "collab_while_another_writer_holds_the_folder": "c",
          "world_while_another_writer_holds_the_folder": "world"}


def test_the_table_is_large_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused(name, tmp_path, monkeypatch):
    from polyvox.records import RunLock

    w = tmp_path / "w"
    w.mkdir()
    write_rows(w / "s.jsonl", ROWS)
    monkeypatch.chdir(w)
    argv, expect = CASES[name](w)
    if name in LOCKED:  # another writer (here: this process, through its own open file) holds the folder
        with RunLock(w / LOCKED[name]):
            refused(argv, watch=[tmp_path], expect=expect)
    else:
        refused(argv, watch=[tmp_path], expect=expect)


def test_a_verdicts_file_is_not_changed_by_plan_or_tally(tmp_path):
    """plan and tally read: a torn last line (a writer killed mid-append) is skipped, not cut from the file."""
    from _hostile import run_cli

    w = tmp_path
    write_rows(w / "s.jsonl", ROWS)
    rc, _, err = run_cli(judge_argv(w, "run"))
    assert rc == 0, err
    path = w / "v" / "verdicts.jsonl"
    with path.open("a") as fh:
        fh.write('{"key": "torn')
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    for action in ("plan", "tally"):
        rc, out, err = run_cli(judge_argv(w, action))
        assert rc == 0, err
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    rc, out, err = run_cli(judge_argv(w, "run"))  # the writer cuts the torn line and adds nothing else
    assert rc == 0 and json.loads(out.splitlines()[-1])["calls_made"] == 0
    assert path.read_text().endswith("}\n") and len(path.read_text().splitlines()) == 8
