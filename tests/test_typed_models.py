"""Records and manifests as typed models (issue 18 item 4): the status enums write the strings the files
always held, and each pydantic model that replaced a hand-written validator refuses in the same one line,
naming the file (and line) and the field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyvox.backends import SamplingParams
from polyvox.explore.published import check_case_study
from polyvox.judge.records import _verdict, read_systems
from polyvox.records import RecordError
from polyvox.runs.sample import check_run_settings, check_sample_args
from polyvox.statuses import Choice, GradeStatus, Outcome, RunStatus
from polyvox.studies.panel import published as panel


# ---------------------------------------------------------------- enums: the strings on disk

@pytest.mark.parametrize("enum, values", [
    (RunStatus, ["running", "complete", "failed", "interrupted", "merging", "short", "no_steps", "stages complete",
                 "ok"]),
    (GradeStatus, ["ok", "no_answer", "ungradable", "timeout"]),
    (Outcome, ["W", "L", "T", "U", "M"]),
    (Choice, ["A", "B", "tie", "unparseable"]),
])
def test_each_status_is_the_string_it_stands_for(enum, values):
    assert [m.value for m in enum] == values
    for member, value in zip(enum, values):
        assert member == value and hash(member) == hash(value) and f"{member}" == str(member) == value
        assert json.dumps({"s": member}, indent=2) == json.dumps({"s": value}, indent=2)


def test_judge_choices_are_the_choice_enum():
    from polyvox import judge as J

    assert J.CHOICES == ("A", "B", "tie") and J.RECORDED == ("A", "B", "tie", "unparseable")


# ---------------------------------------------------------------- sampling's arguments (SampleArgs)

def _args(**change):
    args = dict(fmt="panel", n=2, params=SamplingParams(64, 1.0, 1.0), limit=None, shard=0, nshards=1, chunk=8, seed=0)
    return {**args, **change}


@pytest.mark.parametrize("change, message", [
    ({"n": 0}, "--n must be an integer ≥ 1, got 0"),
    ({"n": True}, "--n must be an integer ≥ 1, got True"),
    ({"params": SamplingParams(64, float("nan"), 1.0)}, "--temperature must be a number ≥ 0, got nan"),
    ({"params": SamplingParams(64, 1.0, 0)}, "--top-p must be a number in (0, 1], got 0"),
    ({"params": SamplingParams(0, 1.0, 1.0)}, "--max-tokens must be an integer ≥ 1, got 0"),
    ({"limit": 0}, "--limit must be an integer ≥ 1 (or absent), got 0"),
    ({"shard": 2, "nshards": 2}, "--shard must be in 0 … 1 (--nshards 2), got 2"),
    ({"shard": -1}, "--shard must be in 0 … 0 (--nshards 1), got -1"),
    ({"seed": -1}, "--seed must be an integer ≥ 0, got -1"),
    ({"fmt": "nope"}, "unknown format 'nope'; formats: panel, think, plain"),
])
def test_a_bad_sampling_argument_is_one_line_naming_the_option(change, message):
    with pytest.raises(ValueError) as err:
        check_sample_args(**_args(**change))
    assert str(err.value) == message


def test_good_sampling_arguments_are_a_typed_model():
    args = check_sample_args(**_args(limit=5))
    assert (args.n, args.limit, args.fmt) == (2, 5, "panel")


# ---------------------------------------------------------------- a sample manifest's settings (SampleSettings)

SETTINGS = {"task": "world", "task_options": {}, "n": 2, "limit": 3, "shard": 0, "nshards": 2,
            "problems_sha256": "ab", "format": "panel"}


@pytest.mark.parametrize("change, message", [
    ({"n": "two"}, "settings.n should be an integer ≥ 1, got 'two'"),
    ({"task": None}, "settings.task should be a task name, got None"),
    ({"task_options": [1]}, "settings.task_options should be a mapping, got [1]"),
    ({"limit": -1}, "settings.limit should be an integer ≥ 1 or null, got -1"),
    ({"shard": 5}, "settings.shard should be an index below nshards (2) or 'merged', got 5"),
    ({"shard": "x"}, "settings.shard should be an index below nshards (2) or 'merged', got 'x'"),
    ({"problems_sha256": None}, "settings.problems_sha256 missing: the run's problems cannot be checked"),
    ({"shard": "merged"}, "settings.shard_problems_sha256 missing: this run was merged before"),
    ({"shard": "merged", "shard_problems_sha256": {"0": "a", "7": "b"}},
     "settings.shard_problems_sha256 has a bad entry '7': 'b'"),
    ({"shard": "merged", "shard_problems_sha256": {"0": 3}}, "settings.shard_problems_sha256 has a bad entry '0': 3"),
])
def test_bad_settings_are_one_line_naming_the_manifest_and_the_setting(change, message):
    with pytest.raises(RecordError) as err:
        check_run_settings(Path("m/manifest.json"), {**SETTINGS, **change})
    assert str(err.value).startswith(f"m/manifest.json: {message}")


def test_a_missing_setting_is_named_and_other_settings_are_kept():
    with pytest.raises(RecordError, match=r"^m.json: settings.task missing: not a complete polyvox sample manifest$"):
        check_run_settings(Path("m.json"), {k: v for k, v in SETTINGS.items() if k != "task"})
    merged = {**SETTINGS, "shard": "merged", "shard_problems_sha256": {"0": "a", "1": "b"}}
    assert check_run_settings(Path("m.json"), merged).model_extra == {"format": "panel"}


# ---------------------------------------------------------------- a judge's files (SystemsRow, VerdictLine)

ROW = {"prompt_id": "p0", "prompt": "q", "preference": "", "responses": {"x": "a"}}


@pytest.mark.parametrize("row, message", [
    ({k: v for k, v in ROW.items() if k != "preference"}, "missing field 'preference' for a systems row"),
    ({**ROW, "prompt_id": ""}, "empty prompt_id"),
    ({**ROW, "prompt": None}, "field 'prompt' should be a string, got NoneType"),
    ({**ROW, "responses": ["a"]}, "field 'responses' should be an object {system: text}, got list"),
    ({**ROW, "responses": {"x": "a", "y": 3}}, "response of system 'y' should be a string, got int"),
    (5, "expected a JSON object (a systems row), got int"),
])
def test_a_bad_systems_row_is_one_line_naming_file_and_line(tmp_path, row, message):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(ROW) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(RecordError) as err:
        read_systems(path)
    assert str(err.value) == f"{path}:2: {message}"


def test_a_systems_row_is_kept_as_read_with_its_labels(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({**ROW, "user": 7}) + "\n")
    assert read_systems(path) == {"p0": {**ROW, "user": 7}}


@pytest.mark.parametrize("line, message", [
    ({"key": "0" * 64, "choice": "C"}, "choice 'C' is not one of A, B, tie, unparseable"),
    ({"key": "0" * 64}, "choice None is not one of A, B, tie, unparseable"),
    ({"key": 7, "choice": "A"}, "a verdict needs its 'key' (64 hex digits, the call's sha256), got 7"),
    ({"choice": "A"}, "a verdict needs its 'key' (64 hex digits, the call's sha256), got none"),
    ({"key": "0" * 63 + "\n", "choice": "A"}, "a verdict needs its 'key'"),
    ([1], "expected a JSON object (a verdict), got list"),
])
def test_a_bad_verdict_line_is_one_line_naming_file_and_line(line, message):
    with pytest.raises(RecordError) as err:
        _verdict(Path("verdicts.jsonl"), 3, line)
    assert str(err.value).startswith(f"verdicts.jsonl:3: {message}")


def test_a_verdict_line_is_returned_as_read():
    line = {"key": "f" * 64, "choice": "unparseable", "raw": "?", "attempts": 3}
    assert _verdict(Path("v.jsonl"), 1, line) is line


# ---------------------------------------------------------------- published files (CaseStudy, DispersionRow)

def _case(**item_change):
    trace = {"raw": "r"}
    item = {"id": "a", "category_short": "c", "problem": "p", "expected": "1", "panel": trace, "thinking": trace}
    return {"items": [item, {**item, **item_change}], "metadata": {}}


@pytest.mark.parametrize("data, message", [
    ({"items": []}, "expected an object with a non-empty list 'items'"),
    ([1], "expected an object with a non-empty list 'items'"),
    (_case(expected=None), "items[1]: field 'expected' should be a string, got NoneType"),
    ({"items": [_case()["items"][0], 3]}, "items[1]: expected an object, got int"),
    ({**_case(), "metadata": []}, "field 'metadata' should be an object, got list"),
    (_case(thinking={"raw": 3}), "items[1].thinking: expected an object with a string 'raw'"),
    (_case(panel="text"), "items[1].panel: expected an object with a string 'raw'"),
])
def test_a_bad_case_study_is_one_line_naming_the_item(data, message):
    with pytest.raises(RecordError) as err:
        check_case_study(Path("t.json"), data)
    assert str(err.value) == f"t.json: {message}"


def test_a_missing_field_of_a_case_study_item_is_named_before_a_wrong_one():
    data = _case(id=1)
    del data["items"][1]["problem"]
    with pytest.raises(RecordError, match=r"^t.json: items\[1\]: missing field 'problem'$"):
        check_case_study(Path("t.json"), data)


def test_a_dispersion_row_is_checked_with_its_file_line_and_kept_whole(tmp_path):
    folder = tmp_path / "multipersona/reports/diversity_analysis"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text("{}")
    row = {"label": "a", "uid": "u", "n_samples": 4, "n_correct": 2, "mean_pairwise_dist": 0.1, "level": "3"}
    (folder / "per_problem.jsonl").write_text(json.dumps(row) + "\n\n" + json.dumps({**row, "n_correct": "2"}) + "\n")
    with pytest.raises(RecordError) as err:
        panel.dispersion(tmp_path, "math50")
    assert str(err.value) == (f"{folder / 'per_problem.jsonl'}:3: field 'n_correct' should be a valid integer, "
                              "got str '2'")
    (folder / "per_problem.jsonl").write_text(json.dumps(row) + "\n")
    assert list(panel.dispersion(tmp_path, "math50").columns) == list(row)
