"""Records stored gzipped (``<name>.gz``, the shipped recordings' form): read as the plain file would be, found by
every reader of a run folder, refused in one line when damaged; writers never write them."""
from __future__ import annotations

import gzip
import json
import shutil

import pytest
from _fixtures import shipped_world

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


# mtime=0: the same bytes in every process (a header with the clock's time made xdist's workers collect other ids)
@pytest.mark.parametrize("data, says", [(b"not gzip at all\n", "not a readable gzip file"),
                                        (gzip.compress(b'{"a": 1}\n' * 200, mtime=0)[:-20], "not a readable gzip file"),
                                        (gzip.compress(b'{"a": 1}\n{"a": \n', mtime=0), "malformed JSON"),
                                        (gzip.compress(b'{"a": 1, "a": 2}\n', mtime=0), "duplicate key")],
                         ids=["not-gzip", "cut-short", "malformed-json", "duplicate-key"])
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
    w = shipped_world(root)
    src = w.folder(w.panel)
    run = tmp_path / w.panel
    run.mkdir()
    shutil.copy(src / "manifest.json", run / "manifest.json")
    (run / "graded.jsonl.gz").write_bytes(gzip.compress(("\n".join(w.lines(w.panel)) + "\n").encode("utf-8")))
    assert runs.is_run(run) and runs.find_runs(tmp_path) == [run]
    got, want = runs.graded_samples(run), runs.graded_samples(src)
    assert got.equals(want) and len(got) > 0
    assert runs.load(run).graded and len(runs.load(run).samples) == len(want)


# ---------------------------------------------------------------- shipping a recorded run

def _large_grades(root) -> str:
    """The shipped world run's panel evaluation at its smallest cap, as the text of a graded.jsonl larger than
    ship.GZIP_OVER: the recording's grades as they are (recorded runs: ~1 MB, trained models' samples compress
    ~30×); a smaller evaluation (a smoke-scale stand-in: a few dozen samples) repeated, each copy under new
    sample indices, until it is."""
    from polyvox import ship

    w = shipped_world(root)
    text = "\n".join(w.lines(w.panel)) + "\n"
    rows = [json.loads(x) for x in w.lines(w.panel)]
    n, copies = max(r["sample_index"] for r in rows) + 1, 1
    while len(text.encode("utf-8")) <= ship.GZIP_OVER:
        text += "".join(json.dumps({**r, "sample_index": r["sample_index"] + copies * n}) + "\n" for r in rows)
        copies += 1
    return text


def _recorded(tmp_path, root):
    """A recorded run to ship (src/: an evaluation, adapters, a checkpoint, a log) and want/, a run folder of the
    same evaluation's manifest and grades (src/'s evaluation sits beside a rollouts.jsonl that is no run's)."""
    src = tmp_path / "src"
    ev = src / "seed-0/eval/cap-256/panel"
    ev.mkdir(parents=True)
    w = shipped_world(root)
    text = _large_grades(root)
    for folder in (ev, tmp_path / "want"):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(w.folder(w.panel) / "manifest.json", folder / "manifest.json")
        (folder / "graded.jsonl").write_text(text)  # ~1 MB: stored gzipped
    (ev / "rollouts.jsonl").write_text("{}\n")  # beside its grades: left out
    (ev / ".lock").write_text("")
    ad = src / "seed-0/rl-panel/hard/adapter"
    ad.mkdir(parents=True)
    (ad / "adapter_model.safetensors").write_bytes(b"w" * 100)
    (ad / "adapter_config.json").write_text("{}")
    (src / "seed-0/rl-panel/checkpoint-5").mkdir()
    (src / "seed-0/rl-panel/checkpoint-5/optimizer.pt").write_bytes(b"x")
    (src / "seed-0/rl-panel/train_log.jsonl").write_text('{"step": 1}\n')  # small: copied as it is
    return src, ev


@pytest.mark.slow  # 2-4 s here: in make test, out of the 60-s fast tier
def test_ship_keeps_records_stores_large_ones_gzipped_and_leaves_weights(tmp_path, root):
    from polyvox import ship

    src, ev = _recorded(tmp_path, root)
    r = ship.ship(src, tmp_path / "dest")
    dest = tmp_path / "dest"
    assert {p for p, _ in r["gzip"]} == {"seed-0/eval/cap-256/panel/graded.jsonl"}
    left = {p for p, _ in r["leave"]}
    assert left == {"seed-0/eval/cap-256/panel/rollouts.jsonl", "seed-0/eval/cap-256/panel/.lock",
                    "seed-0/rl-panel/hard/adapter/adapter_model.safetensors", "seed-0/rl-panel/checkpoint-5/optimizer.pt"}
    shipped = dest / "seed-0/eval/cap-256/panel"
    assert (shipped / "graded.jsonl.gz").stat().st_size * 10 < (ev / "graded.jsonl").stat().st_size
    want = tmp_path / "want"  # what src's graded.jsonl holds (the shipped recording's grades)
    assert runs.graded_samples(shipped).equals(runs.graded_samples(want)) and len(runs.graded_samples(want)) > 0
    assert (dest / "seed-0/rl-panel/train_log.jsonl").read_text() == '{"step": 1}\n'
    assert (dest / "seed-0/rl-panel/hard/adapter/adapter_config.json").exists()
    with pytest.raises(ValueError, match="already exists"):
        ship.ship(src, dest)
    kept = ship.ship(src, tmp_path / "dest2", keep_weights=["seed-0/rl-*/hard/adapter/*"])
    assert "seed-0/rl-panel/hard/adapter/adapter_model.safetensors" in {p for p, _ in kept["copy"]}
    assert not (tmp_path / "dest2.tmp").exists()


def test_ship_refuses_a_link_and_says_so_in_one_line(tmp_path, root, capsys):
    from polyvox import ship

    src, _ = _recorded(tmp_path, root)
    (src / "elsewhere").symlink_to(tmp_path)
    assert ship.main([str(src), str(tmp_path / "dest")]) == 2
    err = capsys.readouterr().err.strip()
    assert "symbolic link" in err and "\n" not in err and not (tmp_path / "dest").exists()
