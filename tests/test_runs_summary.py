"""The one-screen summary `polyvox sample` and `polyvox grade` end with (issue 19 item 3)."""
import json
import shutil

import pytest

from _fixtures import shipped_world
from _hostile import run_cli
from polyvox import metrics, runs

GRADE_FIELDS = ("correct", "extracted", "grade_status")


def _as_sampled(w, system, dest):
    """A shipped graded world eval run (``w``'s ``system`` at its smallest cap) as `polyvox sample` left it:
    manifest and rollouts.jsonl."""
    dest.mkdir(parents=True)
    manifest = json.loads((w.folder(system) / "manifest.json").read_text())
    manifest.pop("grading", None)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    rows = [json.loads(x) for x in w.lines(system)]
    with open(dest / "rollouts.jsonl", "w") as fh:
        for r in rows:
            r = {k: v for k, v in r.items() if k not in GRADE_FIELDS}
            r["metadata"] = {}
            fh.write(json.dumps(r) + "\n")
    return rows


@pytest.fixture(scope="module")
def folder(root, tmp_path_factory):
    out = tmp_path_factory.mktemp("summary") / "eval"
    w = shipped_world(root)
    shipped = {}
    for system in w.systems:
        shipped[system] = _as_sampled(w, system, out / system)
    return out, shipped


@pytest.mark.slow  # 2-4 s here: in make test, out of the 60-s fast tier
def test_grade_takes_a_folder_of_runs_and_prints_accuracy_with_wilson_intervals(folder, root, monkeypatch):
    out, shipped = folder
    monkeypatch.chdir(root)
    rc, stdout, err = run_cli(["grade", str(out)])
    assert rc == 0, err
    lines = stdout.splitlines()
    assert lines[0].split()[:5] == ["task", "system", "model", "problems", "samples"]
    for system, rows in shipped.items():
        k, n = sum(r["correct"] for r in rows), len(rows)
        lo, hi = metrics.wilson_interval(k, n)
        row = next(ln for ln in lines if f" {system} " in ln)
        assert f"{k / n:.1%} [{lo:.1%}, {hi:.1%}]" in row  # the same grades as the shipped graded file
        caps = sum(r["finish_reason"] == "length" for r in rows) / n
        assert f"{caps:.1%}" in row
        assert (out / system / "graded.jsonl").exists()
        assert f"files: {out / system}/graded.jsonl" in stdout


def test_the_summary_of_an_ungraded_run_grades_in_memory_and_writes_nothing(folder, root, tmp_path):
    out, shipped = folder
    w = shipped_world(root)
    run = tmp_path / "think"
    _as_sampled(w, w.think, run)
    before = sorted(p.name for p in run.iterdir())
    s = runs.summarize(run, root / "data")
    rows = shipped[w.think]  # every problem's n samples (1,440: 180 problems of 8 in the panel-only recording)
    assert s.correct == sum(r["correct"] for r in rows)
    assert s.samples == len(rows) == len({r["problem_id"] for r in rows}) * w.samples_per_problem()
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written
    assert "graded in memory" in "\n".join(runs.summary_lines([s]))


def test_a_limit_above_the_tasks_size_says_how_many_problems_it_took(folder, root, tmp_path):
    out, _ = folder
    run = tmp_path / "limited"
    shutil.copytree(out / shipped_world(root).panel, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["settings"]["limit"] = 100000
    (run / "manifest.json").write_text(json.dumps(manifest))
    s = runs.summarize(run, root / "data", grade_in_memory=False)
    assert "took all" in s.note and str(s.problems) in s.note
