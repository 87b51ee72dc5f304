"""Records stored gzipped (``<name>.gz``, the shipped recordings' form): read as the plain file would be, found by
every reader of a run folder, refused in one line when damaged; writers never write them."""
from __future__ import annotations

import gzip
import json
import shutil

import pytest

from polyvox import runs
from polyvox.jsonl import RecordError, exists, iter_jsonl, stored
from polyvox.records import read_jsonl

ROWS = [{"a": 1, "text": "x" * 50}, {"a": 2, "text": "é ∑ \\u00e9"}]


def _plain(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS), encoding="utf-8")
    return p


def test_a_gzipped_record_reads_as_the_plain_one(tmp_path):
    plain = _plain(tmp_path)
    want = read_jsonl(plain)
    gz = tmp_path / "r.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    assert stored(plain) == gz and exists(plain)
    assert read_jsonl(plain) == want == read_jsonl(gz)  # asked for by either name


def test_the_plain_file_wins_when_both_are_there(tmp_path):
    plain = _plain(tmp_path)
    (tmp_path / "r.jsonl.gz").write_bytes(gzip.compress(b'{"a": 99}\n'))
    assert stored(plain) == plain and [r["a"] for r in read_jsonl(plain)] == [1, 2]


@pytest.mark.parametrize("data, says", [(b"not gzip at all\n", "not a readable gzip file"),
                                        (gzip.compress(b'{"a": 1}\n' * 200)[:-20], "not a readable gzip file"),
                                        (gzip.compress(b'{"a": 1}\n{"a": \n'), "malformed JSON"),
                                        (gzip.compress(b'{"a": 1, "a": 2}\n'), "duplicate key")])
def test_a_damaged_gzipped_record_is_one_line_naming_the_file(tmp_path, data, says):
    gz = tmp_path / "r.jsonl.gz"
    gz.write_bytes(data)
    with pytest.raises(RecordError) as e:
        list(iter_jsonl(tmp_path / "r.jsonl"))
    assert str(gz) in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


def test_missing_either_way_is_file_not_found(tmp_path):
    assert not exists(tmp_path / "r.jsonl")
    with pytest.raises(RecordError, match="file not found"):
        read_jsonl(tmp_path / "r.jsonl")


def test_a_run_folder_with_gzipped_grades_is_a_run(root, tmp_path):
    """The shipped world evaluation's graded.jsonl, stored gzipped: found, loaded, and the same samples."""
    src = root / "data/runs/world/seed-0/eval/cap-256/tiny-panel"
    run = tmp_path / "tiny-panel"
    run.mkdir()
    shutil.copy(src / "manifest.json", run / "manifest.json")
    (run / "graded.jsonl.gz").write_bytes(gzip.compress((src / "graded.jsonl").read_bytes()))
    assert runs.is_run(run) and runs.find_runs(tmp_path) == [run]
    got, want = runs.graded_samples(run), runs.graded_samples(src)
    assert got.equals(want) and len(got) > 0
    assert runs.load(run).graded and len(runs.load(run).samples) == len(want)
