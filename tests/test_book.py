"""The book pipeline for real: papermill executes every chapter, Jupyter Book builds the HTML.

One session fixture copies the book sources into a temporary folder and builds the
whole book there (every chapter through papermill = the chapters' smoke test); the
other tests look at what it produced, then change inputs and rebuild.
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from polyvox import book

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(built_book):
    """The session's book build (conftest.built_book), read but never changed here."""
    return built_book


@pytest.fixture(scope="module")
def rebuilt(built_book, tmp_path_factory):
    """A copy of the built book (its execution cache included) for the tests that change inputs and
    rebuild, so the session's build stays as built for the other modules (the browser test)."""
    dest, report, _ = built_book
    copy = tmp_path_factory.mktemp("rebuilt") / "book"
    shutil.copytree(dest, copy, symlinks=True)
    return copy, report, copy / "params.yaml"


def test_every_chapter_executes_without_error(built, root):
    dest, report, _ = built
    names = [c.name for c in book.chapters(root)]
    assert report.failures == []
    assert sorted(report.executed) == sorted(names) and len(names) >= 5
    for name in names:
        nb = nbformat.read(dest / "book" / f"{name}.ipynb", as_version=4)
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, (name, errors)


def test_html_has_figures_corrections_and_banners(built):
    dest, report, _ = built
    html = report.html
    assert (html / "index.html").exists()
    for chapter in ("accuracy", "length", "dispersion", "variance_band"):
        page = (html / "book" / "panel" / f"{chapter}.html").read_text()
        assert "<img" in page, chapter
        assert "# Parameters" not in page, f"{chapter}: papermill's injected cell is visible"
    for chapter in ("accuracy", "dispersion", "length"):
        assert "Correction of 2026-09-23" in (html / "book" / "panel" / f"{chapter}.html").read_text()
    assert len(re.findall(r"<h2>2026-09-23 — ", (html / "book" / "corrections.html").read_text())) == 5
    explorer = (html / "book" / "panel" / "explorer.html").read_text()
    assert explorer.count("class='pv-x'") == 1 and "dt-container" not in explorer  # ro.explorer(), not itables
    assert "Traces of all 20 problems are on this page" in explorer
    assert "Correction of" not in (html / "book" / "panel" / "explorer.html").read_text()
    corrections = (html / "book" / "corrections.html").read_text()
    assert "2026-09-23" in corrections and "wider search" in corrections


PANEL = ("accuracy", "length", "dispersion", "variance_band")


def _pages(html: Path):
    return sorted(p for p in html.rglob("*.html") if "_static" not in p.parts)


def test_panel_figures_are_numbered_with_captions_and_alt_text(built):
    dest, report, _ = built
    for chapter in PANEL:
        page = (report.html / "book" / "panel" / f"{chapter}.html").read_text()
        figures = re.findall(r"<figure[^>]*>(.*?)</figure>", page, re.S)
        imgs = re.findall(r"<img [^>]*>", page)
        assert figures and len(figures) == len(imgs), chapter
        for fig in figures:
            alt = re.search(r'<img [^>]*alt="([^"]*)"', fig).group(1)
            assert len(alt) > 20 and not alt.endswith(".png"), (chapter, alt)
            assert re.search(r'<span class="caption-number">Fig\. \d+ </span><span class="caption-text">[^<]{20,}',
                             fig), chapter
            png = re.search(r'src="([^"]+\.png)"', fig).group(1)
            data = (report.html / "book" / "panel" / png).resolve().read_bytes()
            at = data.index(b"pHYs") + 4  # pixels per metre, written by matplotlib from the dpi
            assert int.from_bytes(data[at:at + 4], "big") * 0.0254 >= 149.9, (chapter, png)


def test_every_panel_table_is_styled_and_downloadable(built):
    dest, report, _ = built
    for chapter in PANEL:
        page = (report.html / "book" / "panel" / f"{chapter}.html").read_text()
        tables = page.count('<table class="pv-table">')
        links = re.findall(r'<a class="reference download internal" download="" href="([^"]+\.csv)"', page)
        assert tables >= 2 and len(links) == tables, (chapter, tables, len(links))
        for href in links:
            f = (report.html / "book" / "panel" / href).resolve()
            assert f.is_file() and f.read_text().count("\n") >= 2, (chapter, href)
        assert "dataframe" not in page, f"{chapter}: a raw pandas table is left"
        assert "-0.0000" not in page and "NaN" not in page, chapter


def test_every_chapter_opens_with_a_rerun_box(built, root):
    dest, report, _ = built
    for ch in book.chapters(root):
        page = (report.html / f"{ch.toc_entry}.html").read_text()
        assert "Re-run this chapter" in page and f"polyvox<span class=\"w\"> </span>run<span class=\"w\"> </span>" \
            f"{ch.name}" in page, ch.name


def test_the_intro_summarises_the_findings_with_computed_statuses(built):
    dest, report, _ = built
    intro = (report.html / "book" / "intro.html").read_text()
    assert "What was found" in intro and "sampling engine lands" not in intro
    assert intro.count('class="pv-status pv-reproduced"') >= 5 and intro.count('class="pv-status pv-withdrawn"') == 5
    assert "pv-not-computed" not in intro
    for part in ("panel/accuracy", "panel/variance_band", "personas/persona_basis", "collab/audit", "world/replication"):
        assert f'href="{part}.html"' in intro, part


def test_pages_declare_thebe_once_at_most_and_link_only_existing_files(built):
    dest, report, _ = built
    for page in _pages(report.html):
        text = page.read_text()
        assert text.count("const THEBE_JS_URL") <= 1, page
        for href in re.findall(r'(?:href|src)="(?![a-z]+:)([^"#?]+)', text):
            assert (page.parent / href).resolve().exists(), (page.relative_to(report.html), href)


def test_executed_chapters_have_no_stderr_or_progress_debris(built, root):
    dest, _, _ = built
    for ch in book.chapters(root):
        nb = nbformat.read(dest / "book" / f"{ch.name}.ipynb", as_version=4)
        streams = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "stream"]
        bad = [o.text[:120] for o in streams if o.name == "stderr" or "Warning" in o.text or "%|" in o.text]
        assert not bad, (ch.name, bad)


def test_a_healthy_build_prints_no_kernel_warning_and_records_the_commit(built):
    dest, _, params = built
    cli = subprocess.run([sys.executable, "-m", "polyvox.cli", "book", "build", "--only", "panel/length", "--force",
                          "--no-html", "--params", str(params)], cwd=dest, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    out = cli.stdout + cli.stderr
    for noise in ("IPKernelApp", "without encryption", "KeyboardInterrupt", "Traceback", "WARNING"):
        assert noise not in out, (noise, out[-2000:])
    manifest = json.loads((dest / "_build/.polyvox/manifest.json").read_text())
    assert manifest["executed"] == ["panel/length"] and "git_commit" in manifest


def test_published_tables_reproduce_in_the_built_chapters(built):
    dest, _, _ = built
    texts = []
    for name in ("accuracy", "dispersion", "variance_band", "length"):
        nb = nbformat.read(dest / "book" / "panel" / f"{name}.ipynb", as_version=4)
        texts += [o["data"]["text/markdown"] for c in nb.cells if c.cell_type == "code"
                  for o in c.outputs if "text/markdown" in o.get("data", {})]
    agreements = [t for t in texts if "largest absolute difference" in t]
    assert len(agreements) >= 8
    assert all("NOT zero" not in t for t in agreements), agreements


def test_the_built_book_names_no_absolute_build_path(built):
    dest, _, _ = built
    leaks = [str(p.relative_to(dest)) for folder in (dest / "_build/html", dest / "book") for p in folder.rglob("*")
             if p.is_file() and p.suffix in (".html", ".ipynb", ".txt") and str(dest) in p.read_text(errors="ignore")]
    assert not leaks, leaks[:10]


def test_rebuild_with_nothing_changed_executes_nothing(rebuilt):
    dest, _, params = rebuilt
    report = book.build(dest, params_file=params, html=False, progress=False)
    assert report.executed == [] and len(report.cached) >= 5


def test_changing_one_chapters_data_reexecutes_only_that_chapter(rebuilt):
    dest, _, params = rebuilt
    traj = dest / "data/multipersona/reports/olympiad_panel_only/heldout_trajectory.jsonl"
    traj.write_text(traj.read_text() + "\n")  # same records, different bytes
    report = book.build(dest, params_file=params, html=False, progress=False)
    assert report.executed == ["panel/variance_band"]


def test_new_correction_renders_without_reexecution(rebuilt):
    dest, _, params = rebuilt
    corr = dest / "data/corrections.yml"
    items = yaml.safe_load(corr.read_text())
    items.append({"date": "2026-12-01", "chapters": ["book/panel/explorer"], "claimed": "x claimed",
                  "stands": "y stands", "source": "test"})
    corr.write_text(yaml.safe_dump(items))
    report = book.build(dest, params_file=params, html=False, progress=False)
    assert report.executed == []
    nb = nbformat.read(dest / "book/panel/explorer.ipynb", as_version=4)
    assert "Correction of 2026-12-01" in nb.cells[1].source
    assert "2026-12-01" in (dest / "book/corrections.md").read_text()


def _mini_book(tmp_path: Path) -> Path:
    (tmp_path / "_config.yml").write_text("title: t\nexecute:\n  execute_notebooks: 'off'\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n"
                                       "  - file: book/x/good\n  - file: book/x/bad\n")
    (tmp_path / "book").mkdir()
    (tmp_path / "book/intro.md").write_text("# intro\n")
    (tmp_path / "notebooks/x").mkdir(parents=True)
    for name, code in (("good", "print(1 + 1)"), ("bad", "x = 1\nraise ValueError('boom in chapter')")):
        params = nbformat.v4.new_code_cell("n = 1")
        params.metadata["tags"] = ["parameters"]
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {name}"), params,
                                             nbformat.v4.new_code_cell(code)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, tmp_path / f"notebooks/x/{name}.ipynb")
    return tmp_path


def test_failing_chapter_gives_one_clear_message_and_keeps_the_others(tmp_path):
    root = _mini_book(tmp_path)
    report = book.build(root, html=False, progress=False)
    assert report.executed == ["x/good"]
    [failure] = report.failures
    assert failure.chapter == "x/bad"
    assert "notebooks/x/bad.ipynb" in failure.message and "cell 2" in failure.message
    assert "ValueError: boom in chapter" in failure.message
    assert (root / "book/x/good.ipynb").exists() and not (root / "book/x/bad.ipynb").exists()
    assert (root / "_build/.polyvox/failed/x/bad.ipynb").exists()
    cli = subprocess.run([sys.executable, "-m", "polyvox.cli", "book", "build", "--no-html"], cwd=root,
                         capture_output=True, text=True)
    assert cli.returncode == 1
    assert "chapter x/bad failed" in cli.stderr and "Traceback" not in cli.stderr


def test_run_writes_executed_notebook_and_manifest(tmp_path, root):
    out = tmp_path / "run"
    cli = subprocess.run([sys.executable, "-m", "polyvox.cli", "run", "panel/length", "-p", "data_dir=data",
                          "--out", str(out)], cwd=root, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["parameters"] == {"data_dir": "data"}
    assert manifest["chapter"] == "panel/length" and "papermill" in manifest["versions"]
    assert (out / "length.ipynb").exists()
    bad = subprocess.run([sys.executable, "-m", "polyvox.cli", "run", "panel/length", "-p", "nope=1",
                          "--out", str(tmp_path / "bad")], cwd=root, capture_output=True, text=True)
    assert bad.returncode == 1 and "unknown parameter(s) nope" in bad.stderr


def _code_cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_chapters_define_no_functions(root):
    """Chapters narrate; every function they need lives in polyvox (studies/<part>/analysis.py, metrics,
    book) and is tested there. A chapter's code cells define none (``def`` or ``lambda``)."""
    import ast

    found = []
    for nb in sorted((root / "notebooks").rglob("*.ipynb")):
        for i, src in enumerate(_code_cells(nb)):
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                    found.append(f"{nb.relative_to(root)}: code cell {i}, line {node.lineno}: {type(node).__name__}")
    assert not found, "\n".join(found)


def test_prose_names_no_internal_label_and_no_path_outside_the_repository(root):
    """The chapters and hand-written pages name the studies as published, never by this project's
    labels ("seed 002") or by a path outside the repository (../shared)."""
    import re as _re

    # the corrections page is written from data/corrections.yml: that source is checked, with data's READMEs
    pages = [*(root / "notebooks").rglob("*.ipynb"), *(p for p in (root / "book").glob("*.md") if p.name != "corrections.md"),
             root / "data" / "corrections.yml", *(root / "data").rglob("README.md"), *(root / "data").rglob("*_published.yaml")]
    texts = {p.relative_to(root): p.read_text() for p in pages}
    bad = [f"{p}: {m.group(0)!r}" for p, t in texts.items()
           for m in _re.finditer(r"(?i)\bseed 00\d\b|\.\./shared|shared/seeds|stored-repository|read_file", t)]
    assert not bad, "\n".join(bad)
