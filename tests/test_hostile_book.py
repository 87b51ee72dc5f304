"""Issue 17 item 6 and the bad-input table of ``polyvox book build`` and ``polyvox run``.

Every case is refused through :func:`_hostile.refused`: non-zero exit, one stderr line, no
traceback, and the book (its sources, ``_build/`` and any run folder the case prepared) unchanged
with nothing added — no lock file, no manifest, no empty folder. Among them, the item's new rules:
a book build is one writer (``RunLock`` on ``_build/.polyvox``) and refuses a cache folder of
another kind; ``polyvox run`` refuses a run folder of another kind, a complete chapter run, an
unfinished one of other settings, a folder holding files of no run, and a folder in use.

The slow tests run real chapters (papermill): a failed chapter run re-runs in its folder with the
same settings, and a second ``book build`` while one holds the lock is refused.
"""
import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from _fixtures import make_book as book
from _hostile import refused, run_cli

from polyvox.records import RunLock, read_manifest

GOOD = "print('n is', n)"
FLAKY = "import pathlib\nif not pathlib.Path(run_dir, 'go').exists():\n    raise RuntimeError('no go file yet')\nprint('went')"


def make_book(root: Path, code: str = GOOD, slow_cell: str | None = None) -> Path:
    """A one-chapter book (x/ch: parameters n and run_dir) with nothing built."""
    return book(root, code, 'n = 1\nrun_dir = "runs/x"', *([slow_cell] if slow_cell else []))


def chapter_manifest(folder: Path, status: str, chapter: str = "x/ch", parameters: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    m = {"kind": "chapter", "chapter": chapter, "parameters": parameters or {"n": 1, "run_dir": "runs/x"},
         "parameters_sha256": "0" * 64, "status": status}
    (folder / "manifest.json").write_text(json.dumps(m))
    return folder


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# each case: (setup(root, tmp) -> argv, expected words in the one line); the book root is the working folder
BOOK = ["book", "build", "--no-html"]
CASES = {
    # ---- book build
    "only: unknown chapter": (lambda r, t: BOOK + ["--only", "nope"], "unknown chapter"),
    "only: empty name": (lambda r, t: BOOK + ["--only", ""], "unknown chapter"),
    "only: a notebook path that does not exist": (lambda r, t: BOOK + ["--only", str(t / "x.ipynb")],
                                                  "unknown chapter"),
    "params: no such file": (lambda r, t: BOOK + ["--params", str(t / "missing.yaml")], "missing.yaml"),
    "params: a folder": (lambda r, t: BOOK + ["--params", str(t)], "elsewhere"),
    "params: not YAML": (lambda r, t: BOOK + ["--params", str(_write(t / "p.yaml", "x/ch: [1,\n"))], "p.yaml"),
    "params: a list": (lambda r, t: BOOK + ["--params", str(_write(t / "p.yaml", "- 1\n- 2\n"))], "mapping"),
    "params: unknown chapter": (lambda r, t: BOOK + ["--params", str(_write(t / "p.yaml", "nope: {n: 2}\n"))],
                                "unknown chapter"),
    "params: unknown parameter": (lambda r, t: BOOK + ["--params", str(_write(t / "p.yaml", "x/ch: {zz: 2}\n"))],
                                  "unknown parameter"),
    "corrections: malformed": (lambda r, t: _write(r / "data/corrections.yml", "- date: 2020-01-01\n  chapters: x\n")
                               and BOOK, "corrections"),
    "_build is a file": (lambda r, t: _write(r / "_build", "x") and BOOK, "a file"),
    "_build/.polyvox is a file": (lambda r, t: _write(r / "_build/.polyvox", "x") and BOOK, "a file"),
    "cache folder holds a sample run": (
        lambda r, t: _write(r / "_build/.polyvox/manifest.json", json.dumps({"kind": "sample", "status": "complete"}))
        and BOOK, "sample run"),
    "cache folder holds a judge run": (
        lambda r, t: _write(r / "_build/.polyvox/manifest.json", json.dumps({"comparisons": [], "judges": []}))
        and BOOK, "judge run"),
    # ---- run
    "run: unknown chapter": (lambda r, t: ["run", "nope", "--out", str(t / "o")], "unknown chapter"),
    "run: -p without =": (lambda r, t: ["run", "x/ch", "-p", "n", "--out", str(t / "o")], "key=value"),
    "run: -p unknown parameter": (lambda r, t: ["run", "x/ch", "-p", "zz=1", "--out", str(t / "o")],
                                  "unknown parameter"),
    "run: -p value not YAML": (lambda r, t: ["run", "x/ch", "-p", "n=[1,", "--out", str(t / "o")], "YAML"),
    "run: --out is a file": (lambda r, t: ["run", "x/ch", "--out", str(_write(t / "f", "x"))], "a file"),
    "run: --out through a file": (lambda r, t: ["run", "x/ch", "--out", str(_write(t / "f", "x") / "sub")],
                                  "a file"),
    "run: --out empty": (lambda r, t: ["run", "x/ch", "--out", ""], "must be named"),
    "run: --out .": (lambda r, t: ["run", "x/ch", "--out", "."], "must be named"),
    "run: --out holds a sample run": (
        lambda r, t: ["run", "x/ch", "--out", str(_write(t / "s/manifest.json", json.dumps(
            {"kind": "sample", "settings": {}, "status": "complete"})).parent)], "sample run"),
    "run: --out holds a judge run": (
        lambda r, t: ["run", "x/ch", "--out", str(_write(t / "j/manifest.json", json.dumps(
            {"comparisons": [["a", "b"]]})).parent)], "judge run"),
    "run: --out holds the book cache": (
        lambda r, t: _write(r / "_build/.polyvox/manifest.json", json.dumps({"kind": "book build"}))
        and ["run", "x/ch", "--out", str(r / "_build/.polyvox")], "book build run"),
    "run: --out holds a complete chapter run": (
        lambda r, t: ["run", "x/ch", "--out", str(chapter_manifest(t / "c", "ok"))], "complete run"),
    "run: --out holds a failed run with other parameters": (
        lambda r, t: ["run", "x/ch", "-p", "n=2", "--out", str(chapter_manifest(t / "c", "failed"))],
        "other settings (parameters"),
    "run: --out holds a killed run of another chapter": (
        lambda r, t: ["run", "x/ch", "--out", str(chapter_manifest(t / "c", "running", chapter="y/other"))],
        "other settings (chapter"),
    "run: --out holds files of no run": (
        lambda r, t: ["run", "x/ch", "--out", str(_write(t / "mine/notes.txt", "keep").parent)], "no manifest"),
    "run: --out is the book itself": (lambda r, t: ["run", "x/ch", "--out", str(r)], "no manifest"),
    "run: --out holds a manifest that is not JSON": (
        lambda r, t: ["run", "x/ch", "--out", str(_write(t / "bad/manifest.json", "{nope").parent)],
        "malformed JSON"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_and_changes_nothing(case, tmp_path, monkeypatch):
    root = make_book(tmp_path / "book")
    other = tmp_path / "elsewhere"
    other.mkdir()
    setup, expect = CASES[case]
    argv = setup(root, other)
    monkeypatch.chdir(root)
    refused(argv, watch=[root, other], expect=expect)


def test_not_in_a_book(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(BOOK, watch=[tmp_path], expect="_toc.yml")
    refused(["run", "x/ch", "--out", str(tmp_path / "o")], watch=[tmp_path], expect="_toc.yml")


def test_a_book_build_is_one_writer(tmp_path, monkeypatch):
    """A second build while one holds the cache's lock is refused in one line, and changes nothing."""
    root = make_book(tmp_path / "book")
    monkeypatch.chdir(root)
    with RunLock(root / "_build/.polyvox"):
        line = refused(BOOK, watch=[root], expect="in use by process")
    assert "one writer" in line


def test_a_chapter_run_folder_in_use_is_refused(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book")
    folder = tmp_path / "run"
    monkeypatch.chdir(root)
    with RunLock(folder):  # a run that holds its folder and has not written its manifest yet
        refused(["run", "x/ch", "--out", str(folder)], watch=[root, folder], expect="in use by process")


@pytest.mark.slow  # runs a chapter twice (papermill)
def test_a_failed_chapter_run_reruns_in_its_folder_with_the_same_settings(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book", code=FLAKY)
    out = tmp_path / "run"
    monkeypatch.chdir(root)
    rc, _, err = run_cli(["run", "x/ch", "-p", "n=3", "--out", str(out)])
    assert rc == 1 and "no go file yet" in err and len(err.strip().splitlines()) == 1
    first = read_manifest(out)
    assert first["status"] == "failed" and first["kind"] == "chapter" and "no go file yet" in first["error"]
    refused(["run", "x/ch", "-p", "n=4", "--out", str(out)], watch=[root, out], expect="other settings (parameters")
    (out / "go").write_text("")  # what the chapter lacked
    rc, stdout, err = run_cli(["run", "x/ch", "-p", "n=3", "--out", str(out)])
    assert rc == 0, err
    again = read_manifest(out)
    assert again["status"] == "ok" and again["parameters"] == first["parameters"]
    nb = nbformat.read(out / "ch.ipynb", as_version=4)
    assert "went" in "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    refused(["run", "x/ch", "-p", "n=3", "--out", str(out)], watch=[root, out], expect="complete run")


@pytest.mark.slow  # a real second process while a build runs a chapter (papermill)
def test_a_second_book_build_is_refused_while_one_runs(tmp_path):
    root = make_book(tmp_path / "book", slow_cell="import time\ntime.sleep(20)")
    first = subprocess.Popen([sys.executable, "-m", "polyvox.cli", "book", "build", "--no-html"], cwd=root,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (root / "_build/.polyvox/running").exists():
            time.sleep(0.05)
        second = subprocess.run([sys.executable, "-m", "polyvox.cli", "book", "build", "--no-html"], cwd=root,
                                capture_output=True, text=True)
        assert second.returncode == 1 and f"in use by process {first.pid}" in second.stderr, second.stderr
        assert second.stderr.count("\n") == 1
    finally:
        first.kill()
        first.wait()
