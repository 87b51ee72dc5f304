"""polyvox.explore on shipped records (fast), and from a live Jupyter kernel on a fresh
``polyvox sample`` run of the shipped tiny-think model (slow)."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # 6 s of the fast suite's test time: in make test, not test-fast (its 60 s)
from _fixtures import shipped_world

from polyvox import explore
from polyvox.records import RecordError


@pytest.fixture(scope="module")
def published(root):
    return explore.load(None, data_dir=root / "data")


def test_published_case_study_table_is_problems_by_systems(published):
    assert published.systems == ["panel", "thinking"]
    table = published.table()
    assert len(table) == 20 and table["problem"].tolist()[0] == "a"
    for s in ("panel", "thinking"):
        assert {f"{s}: correct", f"{s}: words", f"{s}: cap hit"} <= set(table.columns)
        assert set(table[f"{s}: correct"]) <= {"yes", "no", "not graded"}
    graded = table[table["label"].isin(explore.GRADED_CATEGORIES)]
    ungraded = table[~table.index.isin(graded.index)]
    assert (graded["panel: correct"] != "not graded").all() and (ungraded["panel: correct"] == "not graded").all()
    assert (ungraded["panel: answer"] == "not graded").all() and "nan" not in table.astype(str).to_string().lower()
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
    # the first 12 problems (every sample of each: 8 in the recordings) of both shipped systems, manifests as shipped
    w = shipped_world(root)
    t, n = w.think, w.samples_per_problem()
    for system in w.systems:
        w.copy(tmp_path / "eval" / system, system, problems=12)
    ro = explore.load(tmp_path / "eval", data_dir=root / "data")
    assert ro.systems == list(w.systems) and ro.length_unit == "tokens" and not ro.notes
    table = ro.table()
    assert len(table) == 12 and {f"{t}: correct", f"{t}: cap hits", f"{t}: samples"} <= set(table)
    assert (table[f"{t}: samples"] == n).all()
    graded = [json.loads(x) for x in (tmp_path / "eval" / t / "graded.jsonl").read_text().splitlines()]
    assert len(graded) == 12 * n
    assert table[f"{t}: cap hits"].sum() == sum(g["finish_reason"] == "length" for g in graded)
    assert abs(table[f"{t}: correct"].mean() - sum(g["correct"] for g in graded) / len(graded)) < 1e-3
    pid = table["problem"].iloc[0]
    page = ro.side_by_side_html(pid, *w.systems)
    assert ro.problems[pid]["text"] in page and "Final answer" in page and ro.problems[pid]["label"] == "1"


def test_an_ungraded_run_is_graded_in_memory_like_the_shipped_grades(root, tmp_path):
    w = shipped_world(root)
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(w.folder(w.think) / "manifest.json", run / "manifest.json")
    lines = w.lines(w.think)[:40]
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
    w = shipped_world(root)
    run = w.copy(tmp_path / "run", w.panel)
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
    "ro.explorer()",
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
    explorer = html(nb.cells[5])
    data = json.loads(re.search(r"<script type='application/json' id='[\w-]+-data'>(.*?)</script>", explorer, re.S).group(1))
    assert [len(data["groups"][0]["traces"][pid]["my-sample"]) for pid in data["groups"][0]["traces"]] == [2, 2, 2]
    # the explorer chapter pointed at the same run (runs=), through papermill
    chapter = tmp_path / "explore-my-sample"
    done = subprocess.run([sys.executable, "-m", "polyvox.cli", "run", "panel/explorer", "-p", f"runs={run}",
                           "--out", str(chapter)], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    executed = nbformat.read(chapter / "explorer.ipynb", as_version=4)
    page = "".join(html(c) for c in executed.cells if c.cell_type == "code")
    # the chapter's explorer (ro.explorer: rows → traces over all samples) and its side-by-side section
    assert page.count("class='pv-x'") + page.count('class="pv-x"') == 1 and "class='pv-pair'" in page
    data = json.loads(re.search(r"<script type='application/json' id='[\w-]+-data'>(.*?)</script>", page, re.S).group(1))
    assert data["groups"][0]["systems"] == ["my-sample"] and len(data["groups"][0]["traces"]) == 3
    assert "3 problems, 1 system(s)" in "".join(o.get("data", {}).get("text/markdown", "")
                                                for c in executed.cells if c.cell_type == "code" for o in c.outputs)


# ------------------------------------------------------------------ the explorer's data (issue 19 item 5)

def _shipped(root, dest, systems=None, cap=None, problems=12):
    """The first ``problems`` problems (every sample of each) of the shipped world eval runs at ``cap`` (default: the
    smallest), both systems unless ``systems`` (folder names) are given, manifests as shipped."""
    w = shipped_world(root)
    for system in systems or w.systems:
        w.copy(dest / system, system, cap, problems)
    return dest


def _records(folder):
    return [json.loads(x) for x in (folder / "graded.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def world(root, tmp_path_factory):
    folder = _shipped(root, tmp_path_factory.mktemp("world") / "eval")
    return folder, explore.load(folder, data_dir=root / "data")


def test_explorer_rows_hold_every_sample_of_both_systems(world, root):
    folder, ro = world
    w = shipped_world(root)
    data = explore.explorer_data(ro)
    assert len(data["groups"]) == 1 and data["embedded"] == {**data["embedded"], "problems": 12, "of": 12}
    g = data["groups"][0]
    assert g["name"] == "world" and g["systems"] == list(w.systems) and (g["a"], g["b"]) == tuple(g["systems"])
    assert [r["id"] for r in g["rows"]] == list(dict.fromkeys(r["problem_id"] for r in _records(folder / w.think)))
    for system in g["systems"]:
        recs = _records(folder / system)
        for rec in recs:
            samples = g["traces"][rec["problem_id"]][system]
            # the selector lists all n samples, in order
            assert [x["i"] for x in samples] == list(range(w.samples_per_problem()))
            x = samples[rec["sample_index"]]
            assert (x["correct"], x["answer"], x["length"], x["cap"]) == (
                rec["correct"], rec["extracted"], rec["completion_tokens"], rec["finish_reason"] == "length")
            reasoning, final = explore.split_trace(ro_format := json.loads(
                (folder / system / "manifest.json").read_text())["settings"]["format"], rec["completion"])
            if final.strip():  # an empty final part (none written: a trace cut at the cap, an untrained run's) is None
                assert x["final"] is not None and data["pool"][x["final"]] == explore.render_markdown(final)
            else:
                assert x["final"] is None
            if reasoning:
                assert data["pool"][x["reasoning"]] == explore.render_markdown(reasoning)
            assert x["valid"] == explore.formats.format_valid(ro_format, rec["completion"])
    # identical traces are stored once
    assert len(data["pool"]) == len(set(data["pool"]))
    page = explore.explorer_html(data)
    embedded = re.search(r"<script type='application/json' id='([\w-]+)-data'>(.*?)</script>", page, re.S)
    assert embedded.group(1) == data["id"] and json.loads(embedded.group(2)) == json.loads(json.dumps(data))
    assert "Traces of all 12 problems are on this page" in page


def _majority(answers):
    counts = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    return max(counts, key=counts.get)


def test_quick_filters_match_the_records(world, root):
    folder, ro = world
    w = shipped_world(root)
    g = explore.explorer_data(ro)["groups"][0]
    recs = {s: _records(folder / s) for s in g["systems"]}
    ids = [r["id"] for r in g["rows"]]

    def per(system, pid):
        return [r for r in recs[system] if r["problem_id"] == pid]

    def acc(system, pid):
        rs = per(system, pid)
        return sum(r["correct"] for r in rs) / len(rs)

    a, b = g["systems"]
    expect = {
        "ab": [p for p in ids if acc(a, p) > acc(b, p)],
        "ba": [p for p in ids if acc(b, p) > acc(a, p)],
        "disagree": [p for p in ids if len({_majority([r["extracted"] for r in per(s, p)]) for s in recs}) > 1],
        "wrong": [p for p in ids if any(not r["correct"] for s in recs for r in per(s, p))],
        "cap": [p for p in ids if any(r["finish_reason"] == "length" for s in recs for r in per(s, p))],
        "invalid": [p for p in ids if any(not explore.formats.format_valid(
            w.fmt(s), r["completion"]) for s in recs for r in per(s, p))],
    }
    for key, want in expect.items():
        assert explore.filter_rows(g, key) == want, key
    assert all(expect[k] for k in ("wrong", "invalid")), "the fixture should exercise these filters"
    assert explore.filter_rows(g, "ab", a=b, b=a) == expect["ba"]  # swapping A and B swaps the two filters
    assert explore.filter_rows(g, "ab", a=a, b=a) == []  # one system against itself: never
    with pytest.raises(KeyError, match="unknown quick filter"):
        explore.filter_rows(g, "nope")


def test_table_formats_numbers_and_says_no_answer_not_nan(root, tmp_path):
    # a graded run where the grader found no answer in some samples: extracted null in graded.jsonl. Two problems:
    # the first with its first k samples ungradable and the others right (k = 3 of 8: 0.625 correct; the shipped
    # recording's samples 3-7 of it are right as recorded), the second with no answer in any sample
    w = shipped_world(root)
    t, n = w.think, w.samples_per_problem()
    k = min(3, (n - 1) // 2)  # fewer than the right samples: the first problem's most frequent answer is theirs
    run = _shipped(root, tmp_path, systems=(t,), problems=2) / t
    recs = _records(run)
    pid, second = dict.fromkeys(r["problem_id"] for r in recs)
    gold = str(explore.load(run, data_dir=root / "data").problems[pid]["gold"])
    for r in recs:
        if r["problem_id"] == second:
            r.update(correct=False, extracted=None)
        elif r["sample_index"] < k:
            r.update(correct=False, extracted=None, grade_status="ungradable")
        else:
            r.update(correct=True, extracted=gold, grade_status="ok")
    (run / "graded.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    ro = explore.load(run, data_dir=root / "data")
    table = ro.table()
    assert list(table["problem"]) == [pid, second]
    assert table.loc[1, f"{t}: answer"] == "no answer" and table.loc[1, f"{t}: correct"] == 0.0
    assert table.loc[0, f"{t}: correct"] == round((n - k) / n, 3) and table.loc[0, f"{t}: answer"] == gold
    assert table[f"{t}: mean tokens"].map(type).eq(int).all()
    assert "nan" not in table.astype(str).to_string().lower()
    page = ro.side_by_side_html(pid if k else second, sample=0)  # sample 0: no answer
    assert "no answer" in page and "nan" not in page.lower()
    g = explore.explorer_data(ro)["groups"][0]
    assert g["rows"][1]["stats"][t]["shown"] == "no answer"
    assert [x["answer"] for x in g["traces"][pid][t][:k]] == [None] * k
    assert [x["answer"] for x in g["traces"][second][t]] == [None] * n
    # pandas turns a column of Nones into NaN: still "no answer", never "nan"
    ro.traces["extracted"] = float("nan")
    ro.traces["correct"] = False
    assert "graded answer" not in ro.side_by_side_html(pid) and "nan" not in ro.side_by_side_html(pid).lower()
    assert set(ro.table()[f"{t}: answer"]) == {"no answer"}
    data = explore.explorer_data(ro)
    assert "NaN" not in json.dumps(data) and "nan" not in explore.explorer_html(data).split("<script>")[0].lower()


def test_headings_inside_traces_are_demoted(published):
    out = explore.render_markdown("# Step 1\n\ntext\n\n## Step 2\n\n$x$ ok\n\nSetext\n======")
    assert not re.search(r"<h[1-6]", out) and "<p class='pv-h pv-h1'><strong>Step 1</strong></p>" in out
    assert "<strong>Setext</strong>" in out and "\\(x\\)" in out
    t = published.traces
    with_heads = t[t["completion"].str.contains(r"^#{1,6} ", regex=True, flags=re.M)]
    assert len(with_heads), "the case study has traces with Markdown headings"
    page = published.side_by_side_html(with_heads["problem_id"].iloc[0])
    assert not re.search(r"<h[1-6][ >]", page)


def _run_of(root, dest, task, fmt, pids_completions, task_options=None):
    """A run folder as polyvox sample writes it (manifest settings + rollouts.jsonl), with given completions."""
    dest.mkdir(parents=True)
    settings = {"task": task, "format": fmt, "limit": None, "task_options": task_options or {}, "n": 2,
                "sampling": {"max_tokens": 32, "temperature": 1.0}}
    (dest / "manifest.json").write_text(json.dumps({"settings": settings, "status": "complete"}))
    lines = [json.dumps({"problem_id": pid, "sample_index": i, "prompt_hash": "x", "completion": c,
                         "prompt_tokens": 5, "completion_tokens": 12 + i, "finish_reason": "length" if i else "stop",
                         "latency_s": 0.1, "metadata": {}})
             for pid, cs in pids_completions for i, c in enumerate(cs)]
    (dest / "rollouts.jsonl").write_text("\n".join(lines) + "\n")
    return dest


def test_a_folder_with_two_benchmarks_gives_one_group_each(root, tmp_path):
    from polyvox import tasks

    w = shipped_world(root)
    _shipped(root, tmp_path / "mix" / "world", problems=3)
    gsm = tasks.load("gsm8k", root / "data", limit=2)
    _run_of(root, tmp_path / "mix" / "gsm8k-plain", "gsm8k", "plain",
            [(gsm[0].id, [f"So the answer is \\boxed{{{gsm[0].gold}}}.", "No idea."]),
             (gsm[1].id, ["\\boxed{0}", f"\\boxed{{{gsm[1].gold}}}"])])
    ro = explore.load(tmp_path / "mix", data_dir=root / "data")
    assert ro.groups() == {"gsm8k": ["gsm8k-plain"], "world": [f"world/{s}" for s in w.systems]}
    data = explore.explorer_data(ro, a=f"world/{w.think}")
    by = {g["name"]: g for g in data["groups"]}
    assert [r["id"] for r in by["gsm8k"]["rows"]] == [gsm[0].id, gsm[1].id] and len(by["world"]["rows"]) == 3
    assert (by["world"]["a"], by["world"]["b"]) == (f"world/{w.think}", f"world/{w.panel}")
    assert by["gsm8k"]["a"] == by["gsm8k"]["b"] == "gsm8k-plain"  # one system: compared with itself
    st = by["gsm8k"]["rows"][0]["stats"]["gsm8k-plain"]
    assert (st["n"], st["graded"], st["correct"], st["cap"], st["invalid"]) == (2, 2, 1, 1, 0)  # plain: no format check
    assert by["gsm8k"]["rows"][0]["text"] == gsm[0].text
    assert explore.filter_rows(by["gsm8k"], "wrong") == [gsm[0].id, gsm[1].id]
    assert explore.filter_rows(by["gsm8k"], "disagree") == []
    table = ro.table()
    assert list(table["benchmark"]) == ["gsm8k"] * 2 + ["world"] * 3
    assert "benchmark <select class='pv-bench'>" in explore.explorer_html(data)


def test_trace_cap_is_stated_on_the_page(world):
    _, ro = world
    data = explore.explorer_data(ro, max_trace_mb=0.002)
    e = data["embedded"]
    assert 0 < e["problems"] < e["of"] == 12
    assert len(data["groups"][0]["traces"]) == e["problems"]
    page = explore.explorer_html(data)
    assert f"Traces of the first {e['problems']} of 12 problems are on this page" in page


def test_explorer_page_has_its_controls_and_fetches_nothing(world):
    _, ro = world
    page = ro.explorer(page_length=25).data
    for marker in ("class='pv-search'", "class='pv-len'", "<option value='25' selected>25</option>",
                   "<option value='0'>all</option>", "class='pv-a'", "class='pv-b'"):
        assert marker in page, marker
    assert [m for m in re.findall(r"data-filter='(\w+)'", page)] == list(explore.QUICK_FILTERS)
    assert not re.search(r"(src=|href=|import\(|fetch\()\s*['\"]?https?://", page)
    assert page.count("<script") == 2 and "</script" not in page.split("-data'>", 1)[1].split("</script>", 1)[0]


def test_write_notebook_explores_a_run_without_touching_tracked_notebooks(world, root, tmp_path):
    import nbformat

    folder, _ = world
    w = shipped_world(root)
    path = explore.write_notebook(folder)
    assert path == folder / "explore.ipynb"
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "RUN = '.'" in code and f"DATA = {str((root / 'data').resolve())!r}" in code and "ro.explorer(" in code
    assert explore.find_runs(folder) == [folder / s for s in w.systems]  # still the same runs
    path.write_text(path.read_text().replace("ro.table()", "ro.table()  # mine"))
    assert "# mine" in explore.write_notebook(folder).read_text()  # kept
    assert "# mine" not in explore.write_notebook(folder, force=True).read_text()
    other = explore.write_notebook(folder / w.think, out=tmp_path / "nb" / "x.ipynb")
    run_line = next(line for c in nbformat.read(other, as_version=4).cells for line in c.source.splitlines()
                    if line.startswith("RUN = "))
    rel = run_line.split("#")[0].split("=", 1)[1].strip().strip("'")
    assert not Path(rel).is_absolute() and (other.parent / rel).resolve() == (folder / w.think).resolve()
    with pytest.raises(RecordError, match="no run here"):
        explore.write_notebook(tmp_path / "nb")
    with pytest.raises(ValueError, match=".ipynb"):
        explore.write_notebook(folder, out=tmp_path / "x.txt")


def test_polyvox_explore_command_writes_the_notebook_and_says_how_to_open_it(root, tmp_path, capsys):
    import os

    from polyvox import cli

    t = shipped_world(root).think
    run = _shipped(root, tmp_path / "run", systems=(t,), problems=2) / t
    assert cli.main(["explore", str(run), "--data-dir", str(root / "data")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"notebook: {run / 'explore.ipynb'}" and (run / "explore.ipynb").is_file()
    assert " lab " in out[1] and str(run / "explore.ipynb") in out[1]
    assert out[1].endswith(" --allow-root") == (os.geteuid() == 0)
    assert cli.main(["explore", str(run)]) == 0
    assert "already there: kept" in capsys.readouterr().out
    assert cli.main(["explore", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("polyvox: ") and "no such run folder" in err and len(err.strip().splitlines()) == 1


def test_exploring_shipped_records_writes_under_runs_not_data(root, tmp_path):
    import nbformat

    # a checkout (its _toc.yml and _config.yml) whose data/ ships a run
    shutil.copy(root / "_toc.yml", tmp_path / "_toc.yml")
    shutil.copy(root / "_config.yml", tmp_path / "_config.yml")
    shipped = _shipped(root, tmp_path / "data" / "runs" / "w", systems=(shipped_world(root).think,), problems=2)
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "data").rglob("*"))
    path = explore.write_notebook(shipped, data_dir=root / "data")
    assert path == tmp_path / "runs" / "explore-runs-w.ipynb"
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "data").rglob("*")) == before  # nothing added to data/
    run_line = next(line for c in nbformat.read(path, as_version=4).cells for line in c.source.splitlines()
                    if line.startswith("RUN = "))
    rel = run_line.split("#")[0].split("=", 1)[1].strip().strip("'")
    assert (path.parent / rel).resolve() == shipped.resolve()
    assert explore.default_notebook(tmp_path / "elsewhere") == tmp_path / "elsewhere" / "explore.ipynb"
