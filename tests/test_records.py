"""Validated JSONL: malformed lines and missing fields name the file and the line."""
import dataclasses
import json
import pickle
from dataclasses import dataclass, field

import pydantic
import pytest

from polyvox.studies.panel import published
from polyvox.records import (GradedSample, GradeStatus, Outcome, RunStatus, Sample, RecordError, Verdict, append_jsonl,
                             from_dict, read_jsonl, repair_truncated_tail, scrub, write_manifest)


@dataclass
class _Nested:
    batch: int
    xs: list[int] = field(default_factory=list)
    by_source: dict[str, float] = field(default_factory=dict)


def sample(i=0, **kw):
    d = dict(problem_id="p1", sample_index=i, prompt_hash="h", completion="x", prompt_tokens=3,
             completion_tokens=5, finish_reason="stop", latency_s=0.1)
    d.update(kw)
    return d


def test_round_trip(tmp_path):
    path = tmp_path / "r.jsonl"
    append_jsonl(path, [Sample(**sample(0)), Sample(**sample(1))])
    got = read_jsonl(path, Sample)
    assert [s.key for s in got] == [("p1", 0), ("p1", 1)]


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(sample(0)) + "\n" + "{not json\n" + json.dumps(sample(2)) + "\n")
    with pytest.raises(RecordError) as exc:
        read_jsonl(path, Sample)
    assert f"{path}:2" in str(exc.value) and "malformed JSON" in str(exc.value)


def test_missing_field_names_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    bad = sample(1)
    del bad["completion"]
    path.write_text(json.dumps(sample(0)) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(RecordError, match=r":3: missing field 'completion'"):
        read_jsonl(path, Sample)


def test_wrong_type_is_an_error(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(sample(0, sample_index="zero")) + "\n")
    with pytest.raises(RecordError, match=r":1: field 'sample_index'"):
        read_jsonl(path, Sample)


def test_truncated_tail_is_tolerated_only_when_asked(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(sample(0)) + "\n" + json.dumps(sample(1))[:20])
    with pytest.raises(RecordError, match=":2:"):
        read_jsonl(path, Sample)
    assert len(read_jsonl(path, Sample, tolerate_truncated_tail=True)) == 1
    assert repair_truncated_tail(path)
    assert len(read_jsonl(path, Sample)) == 1


def test_repair_truncates_in_place_and_keeps_a_whole_last_record(tmp_path):
    path = tmp_path / "r.jsonl"
    body = "".join(json.dumps(sample(i)) + "\n" for i in range(3))
    path.write_text(body + json.dumps(sample(3)))  # whole record, newline missing
    assert not repair_truncated_tail(path)
    assert len(read_jsonl(path, Sample)) == 4 and path.read_text().endswith("\n")
    path.write_text(body + '{"problem_id": "p3", "sam')
    assert repair_truncated_tail(path) and path.read_text() == body
    path.write_text('{"problem_id": "p0", "sa')  # a torn first line
    assert repair_truncated_tail(path) and path.read_text() == ""


def test_manifest_never_holds_secrets(tmp_path):
    write_manifest(tmp_path, parameters={"api_key": "sk-abc", "api_key_env": "OPENAI_API_KEY", "n": 3})
    text = (tmp_path / "manifest.json").read_text()
    assert "sk-abc" not in text and "OPENAI_API_KEY" in text and "versions" in text
    assert scrub({"nested": {"token": "t"}}) == {"nested": {"token": "<redacted>"}}


@pytest.mark.parametrize("key,value,redacted", [
    ("api_key", "abc", True), ("OPENAI_API_KEY", "abc", True), ("hf_token", "abc", True), ("token", "abc", True),
    ("access_token", "abc", True), ("client_secret", "abc", True), ("password", "abc", True),
    ("authorization", "abc", True), ("aws_secret_access_key", "abc", True),
    ("eos_token", "<|im_end|>", False), ("pad_token", "<|endoftext|>", False), ("cache_key", "9f2c", False),
    ("max_tokens", 512, False), ("api_key_env", "OPENAI_API_KEY", False), ("completion_tokens", 7, False),
    # key-shaped values are built from pieces so that no key-like literal sits in the source
    ("note", "key " + "sk-" + "abcdefghij" * 2 + " here", True), ("header", "Bearer abc.def-123456", True),
    ("model", "hf_" + "abcdefghij" * 3 + "12345", True), ("model", "Qwen/Qwen3-4B", False),
])
def test_scrub_redacts_credentials_not_tokenizer_settings(key, value, redacted):
    out = scrub({"outer": [{key: value}]})["outer"][0][key]
    assert (out != value) == redacted
    if redacted:
        assert "<redacted>" in out


def test_published_loader_reports_bad_row(tmp_path):
    bad = tmp_path / "multipersona" / "reports/variance_band/panel_g8"
    bad.mkdir(parents=True)
    (bad / "per_problem.jsonl").write_text('{"uid": "a", "source": "amc", "n_samples": 8, "n_correct": 3, "band": "variance_band"}\n'
                                           '{"uid": "b", "source": "amc", "n_samples": 8, "band": "all_zero"}\n')
    (bad / "summary.json").write_text("{}")
    with pytest.raises(RecordError, match=r"per_problem.jsonl:2: missing field 'n_correct'"):
        published.band_records(tmp_path, "panel")


def test_manifest_records_the_checkout_commit_or_the_override(tmp_path, monkeypatch):
    from polyvox.records import git_commit, write_manifest

    monkeypatch.delenv("POLYVOX_GIT_COMMIT", raising=False)
    head = git_commit()
    assert head is not None and len(head.split("-")[0]) == 40  # tests run from a checkout
    write_manifest(tmp_path / "a", settings={})
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["git_commit"] == head
    monkeypatch.setenv("POLYVOX_GIT_COMMIT", "0123abc-dirty")
    write_manifest(tmp_path / "b", settings={})
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["git_commit"] == "0123abc-dirty"


# ---------------------------------------------------------------- typed validation (pydantic), issue 18 item 4

def graded(**kw):
    return {**sample(0), "correct": True, "grade_status": "ok", **kw}


@pytest.mark.parametrize("cls,obj,message", [
    (Sample, sample(0, sample_index=True), "field 'sample_index' should be a valid integer, got bool True"),
    (Sample, sample(0, sample_index=1.0), "field 'sample_index' should be a valid integer, got float 1.0"),
    (Sample, sample(0, latency_s="0.1"), "field 'latency_s' should be a valid number, got str '0.1'"),
    (Sample, sample(0, metadata=None), "field 'metadata' should be a valid dictionary, got null"),
    (Sample, sample(0, completion=["a"]), "field 'completion' should be a valid string, got list"),
    (Sample, sample(0, problem_id="x" * 40 + "sk-secret"), None),  # a long string is fine, and never echoed
    (Sample, {"problem_id": "p1"}, "missing field 'sample_index' for Sample (and 6 more)"),
    (GradedSample, graded(grade_status="fine"),
     "field 'grade_status' should be 'ok', 'no_answer', 'ungradable' or 'timeout', got str 'fine'"),
    (GradedSample, graded(correct=1), "field 'correct' should be a valid boolean, got int 1"),
    (GradedSample, graded(extracted=3), "field 'extracted' should be a valid string, got int 3"),
    (Verdict, {"prompt_id": "a", "system_a": "x", "system_b": "y", "outcome": "win"},
     "field 'outcome' should be 'W', 'L', 'T', 'U' or 'M', got str 'win'"),
    (_Nested, {"batch": 1, "xs": [1, "2"]}, "field 'xs[1]' should be a valid integer, got str '2'"),
    (_Nested, {"batch": 1, "by_source": {"amc": True}}, "field 'by_source.amc' should be a valid number, got bool True"),
])
def test_a_bad_field_is_one_line_naming_file_line_field_and_expectation(tmp_path, cls, obj, message):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(obj) + "\n")
    if message is None:
        assert read_jsonl(path, cls)[0].problem_id == obj["problem_id"]
        return
    with pytest.raises(RecordError) as exc:
        read_jsonl(path, cls)
    assert str(exc.value) == f"{path}:1: {message}"
    assert "\n" not in str(exc.value)


def test_records_keep_the_values_as_read_and_stay_plain_dataclasses(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps(graded(latency_s=2, extra_key="ignored")) + "\n")
    (g,) = read_jsonl(path, GradedSample)
    assert type(g) is GradedSample and dataclasses.is_dataclass(g)
    assert type(g.latency_s) is int and g.grade_status == "ok" and type(g.grade_status) is str
    out = tmp_path / "again.jsonl"
    append_jsonl(out, [g])
    # written back as read (defaults filled in), the unknown key dropped
    assert json.loads(out.read_text()) == {**graded(latency_s=2), "metadata": {}, "extracted": None}
    assert pickle.loads(pickle.dumps(g)) == g


def test_writers_name_the_enum_and_the_file_holds_the_string(tmp_path):
    path = tmp_path / "g.jsonl"
    append_jsonl(path, [GradedSample(**sample(0), correct=False, grade_status=GradeStatus.TIMEOUT)])
    assert json.loads(path.read_text())["grade_status"] == "timeout"
    assert read_jsonl(path, GradedSample)[0].grade_status == GradeStatus.TIMEOUT
    write_manifest(tmp_path, status=RunStatus.COMPLETE, counts={GradeStatus.OK: 3})
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"] == {"ok": 3}
    assert [s.value for s in RunStatus][:2] == ["running", "complete"] and Outcome.TIE == "T"


def test_from_dict_takes_a_pydantic_model_too():
    class Settings(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(strict=True)
        n: int

    assert from_dict(Settings, {"n": 2}).n == 2
    with pytest.raises(RecordError, match=r"^manifest.json: field 'n' should be a valid integer, got str 'two'$"):
        from_dict(Settings, {"n": "two"}, "manifest.json")


def test_moved_helpers_are_still_importable_from_records():
    from polyvox import folders, records, secrets

    assert records.RunLock is folders.RunLock and records.check_out_path is folders.check_out_path
    assert records.check_folder_kind is folders.check_folder_kind
    assert records.scrub is secrets.scrub and records.scrub_text is secrets.scrub_text
    with pytest.raises(AttributeError):
        records.no_such_name
