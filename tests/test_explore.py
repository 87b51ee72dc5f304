"""polyvox.explore on shipped records (fast), and from a live Jupyter kernel on a fresh
``polyvox sample`` run of the shipped tiny-think model (slow)."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from polyvox import explore
from polyvox.records import RecordError

WORLD_EVAL = "data/runs/world/seed-0/eval/cap-256"


@pytest.fixture(scope="module")
def published(root):
    return explore.load(None, data_dir=root / "data")


def test_published_case_study_table_is_problems_by_systems(published):
    assert published.systems == ["panel", "thinking"]
    table = published.table()
    assert len(table) == 20 and table["problem"].tolist()[0] == "a"
    for s in ("panel", "thinking"):
        assert {f"{s}: correct", f"{s}: words", f"{s}: cap hit"} <= set(table.columns)
        assert set(table[f"{s}: correct"]) <= {"yes", "no", "—"}
    graded = table[table["label"].isin(explore.GRADED_CATEGORIES)]
    assert (graded["panel: correct"] != "—").all() and (table[~table.index.isin(graded.index)]["panel: correct"] == "—").all()
    assert table.loc[0, "text"].startswith("A circle passes through the points (0,0), (8,0), and (0,6)")


def test_final_answers_are_whole_not_the_tail_of_a_trace(published, root):
    items = {it["id"]: it for it in json.loads((root / "data" / explore.CASE_STUDY).read_text())["items"]}
    t = published.traces
    think_a = t[(t.system == "thinking") & (t.problem_id == "a")].iloc[0]
    assert think_a["final"] == items["a"]["thinking"]["answer"].replace("<|im_end|>", "").strip()
    assert think_a["final"].startswith("To find the radius") and len(think_a["final"]) > 1000
    assert "</think>" not in think_a["final"] and "<think>" not in think_a["reasoning"]


def test_side_by_side_renders_markdown_and_latex_with_the_problem(published):
    page = published.side_by_side_html("a")
    assert "A circle passes through the points" in page and "r = 5." in page
    assert "\\n" not in page  # no literal backslash-n from a repr
    # the panel's \( \) and the thinking answer's $$ $$ become MathJax spans; Markdown is rendered
    assert re.search(r"<span class='math[^']*'>\\\(\(x - h\)\^2", page)
    assert "<span class='math notranslate nohighlight mathjax_process tex2jax_process pv-display'>\\[" in page
    assert "<strong>Approach 1: Using the Equation of a Circle</strong>" in page
    assert "<mutipersonaDebate>" not in page and "&lt;|im_end|&gt;" not in page
    assert page.count("class='pv-col'") == 2
    with pytest.raises(KeyError, match="problem 'zz'"):
        published.side_by_side_html("zz")
    with pytest.raises(KeyError, match="unknown system"):
        published.side_by_side_html("a", "panel", "nope")


@pytest.mark.parametrize("text, math, plain", [
    ("costs $5 and $10 today", [], "costs $5 and $10 today"),
    ("area $\\pi r^2$ here", ["\\(\\pi r^2\\)"], None),
    ("so \\[x = \\frac{1}{2}\\] done", ["\\[x = \\frac{1}{2}\\]"], None),
    ("<think>hi</think> **bold**", [], "&lt;think&gt;hi&lt;/think&gt; <strong>bold</strong>"),
    ("a < b and $a<b$", ["\\(a&lt;b\\)"], None),
])
def test_render_markdown_keeps_math_for_mathjax_and_escapes_html(text, math, plain):
    out = explore.render_markdown(text)
    assert re.findall(r"<span class='math[^']*'>(.*?)</span>", out) == math
    if plain is not None:
        assert plain in out
    assert out.startswith("<div class='mathjax_ignore tex2jax_ignore'>")


def test_table_html_is_an_offline_datatable_with_a_page_length_menu(published):
    html = published.show_table(page_length=10).data
    assert "<table" in html and not re.search(r"(src=|from |import\()\s*['\"]?https?://", html)  # nothing fetched
    assert '"pageLength": 10' in html and '"lengthMenu": [10, 25, 50, 100]' in html
    assert '"scrollX": true' in html and "panel: correct" in html
    script = explore.mathjax_html()
    assert len(script) > 1_000_000 and "https://" not in script.split("\n", 2)[1]


def test_shipped_world_eval_runs_load_as_two_systems(root, tmp_path):
    # the first 12 problems (8 samples each) of both shipped systems, manifests as shipped
    for system in ("tiny-panel", "tiny-think"):
        (tmp_path / "eval" / system).mkdir(parents=True)
        shutil.copy(root / WORLD_EVAL / system / "manifest.json", tmp_path / "eval" / system)
        lines = (root / WORLD_EVAL / system / "graded.jsonl").read_text().splitlines()[:96]
        (tmp_path / "eval" / system / "graded.jsonl").write_text("\n".join(lines) + "\n")
    ro = explore.load(tmp_path / "eval", data_dir=root / "data")
    assert ro.systems == ["tiny-panel", "tiny-think"] and ro.length_unit == "tokens" and not ro.notes
    table = ro.table()
    assert len(table) == 12 and {"tiny-think: correct", "tiny-think: cap hits", "tiny-think: samples"} <= set(table)
    assert (table["tiny-think: samples"] == 8).all()
    graded = [json.loads(x) for x in (tmp_path / "eval/tiny-think/graded.jsonl").read_text().splitlines()]
    assert table["tiny-think: cap hits"].sum() == sum(g["finish_reason"] == "length" for g in graded)
    assert abs(table["tiny-think: correct"].mean() - sum(g["correct"] for g in graded) / len(graded)) < 1e-3
    pid = table["problem"].iloc[0]
    page = ro.side_by_side_html(pid, "tiny-panel", "tiny-think")
    assert ro.problems[pid]["text"] in page and "Final answer" in page and ro.problems[pid]["label"] == "1"


def test_an_ungraded_run_is_graded_in_memory_like_the_shipped_grades(root, tmp_path):
    src = root / WORLD_EVAL / "tiny-think"
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(src / "manifest.json", run / "manifest.json")
    lines = (src / "graded.jsonl").read_text().splitlines()[:40]
    (run / "rollouts.jsonl").write_text("\n".join(lines) + "\n")  # Sample reads the rollout fields only
    ro = explore.load(run, data_dir=root / "data")
    assert ro.systems == ["run"]
    assert ro.traces["correct"].tolist() == [json.loads(x)["correct"] for x in lines]
    assert not (run / "graded.jsonl").exists()  # nothing written into the reader's run


def test_bad_input_is_one_error_naming_the_file(root, tmp_path):
    with pytest.raises(RecordError, match="no run here"):
        explore.load(tmp_path, data_dir=root / "data")
    with pytest.raises(RecordError, match="no such run folder"):
        explore.load(tmp_path / "missing")
    run = tmp_path / "run"
    shutil.copytree(root / WORLD_EVAL / "tiny-panel", run)
    good = (run / "graded.jsonl").read_text().splitlines()[0]
    (run / "graded.jsonl").write_text(good + "\n{oops\n")
    with pytest.raises(RecordError, match=r"run/graded.jsonl:2: malformed JSON"):
        explore.load(run, data_dir=root / "data")
    data = tmp_path / "data"
    case = data / explore.CASE_STUDY
    case.parent.mkdir(parents=True)
    items = json.loads((root / "data" / explore.CASE_STUDY).read_text())
    del items["items"][3]["thinking"]
    case.write_text(json.dumps(items))
    with pytest.raises(RecordError, match=r"transcripts.json: items\[3\]: missing field 'thinking'"):
        explore.load(None, data_dir=data)


LIVE_CELLS = [
    "from polyvox import explore\nexplore.init()\nro = explore.load(RUN, data_dir=DATA)",
    "ro.show_table()",
    "ro.side_by_side(ro.traces.problem_id.iloc[0])",
    "print(ro.systems, len(ro.traces), ro.traces.correct.notna().all())",
]


@pytest.mark.slow
def test_explore_from_a_live_kernel_on_a_fresh_sample_of_tiny_think(root, tmp_path):
    import nbclient
    import nbformat

    run = tmp_path / "my-sample"
    cmd = [sys.executable, "-m", "polyvox.cli", "sample", "--task", "world", "--format", "think",
           "--model", str(root / "data/models/tiny-think"), "--n", "2", "--limit", "3", "--level", "1",
           "--max-tokens", "96", "--temperature", "1.0", "--out", str(run)]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "rollouts.jsonl").read_text().count("\n") == 6 and not (run / "graded.jsonl").exists()
    setup = f"RUN = {str(run)!r}\nDATA = {str(root / 'data')!r}"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup)]
                                  + [nbformat.v4.new_code_cell(c) for c in LIVE_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(root)}}).execute()
    html = lambda cell: "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)  # noqa: E731
    errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    table, pair = html(nb.cells[2]), html(nb.cells[3])
    assert "<table" in table and "my-sample: correct" in table and "my-sample: mean tokens" in table
    assert "my-sample: cap hits" in table and '"pageLength": 10' in table
    assert "class='pv-pair'" in pair and pair.count("class='pv-col'") == 2 and "Final answer" in pair
    assert "Problem w1-" in pair  # the problem's id and text from the run's task
    out = "".join(o.get("text", "") for o in nb.cells[4].outputs)
    assert out.strip() == "['my-sample'] 6 True"  # graded in memory with the task's grader
    # the explorer chapter pointed at the same run (runs=), through papermill
    chapter = tmp_path / "explore-my-sample"
    done = subprocess.run([sys.executable, "-m", "polyvox.cli", "run", "panel/explorer", "-p", f"runs={run}",
                           "--out", str(chapter)], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    executed = nbformat.read(chapter / "explorer.ipynb", as_version=4)
    page = "".join(html(c) for c in executed.cells if c.cell_type == "code")
    assert "my-sample: correct" in page and "class='pv-pair'" in page and page.count("<details>") == 3
    assert "3 problems, 1 system(s)" in "".join(o.get("data", {}).get("text/markdown", "")
                                                for c in executed.cells if c.cell_type == "code" for o in c.outputs)
