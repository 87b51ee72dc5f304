"""``polyvox run CHAPTER … --html``: a page from any chapter run, in the book's style, that opens offline.

The slow test runs one cheap chapter (the explorer on the shipped case study: math, a book table, the
explorer's own scripts) through the real command line with ``--html`` and opens the page from ``file://``
in the session Chromium (``conftest.browser``) with every request recorded: nothing may leave ``file://``
(a ``data:`` URL is part of the page), MathJax must have typeset math (``mjx-container``), the book table
must be there in its own scroll box, and the book's style sheets must apply. The fast test renders a
small notebook made here (a MyST admonition, dollar math, a role, a book table and a book figure).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
POLYVOX = ROOT / ".venv" / "bin" / "polyvox"
NETWORK = re.compile(r"""(?:src|action)\s*=\s*["']?\s*(?:https?:)?//|cdn\.|jsdelivr|unpkg|googleapis""", re.I)
URL = re.compile(r"""https?://[^\s"'<>\\)]+""")
NAMESPACE = re.compile(r"http://www\.w3\.org/\d{4}/[\w/]+")  # XML namespace names: identifiers, never fetched
MATH_DONE = """async () => { if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise; } return true; }"""
STYLE = """() => {
  const css = (sel, prop) => { const el = document.querySelector(sel); return el ? getComputedStyle(el)[prop] : null; };
  return {font: getComputedStyle(document.body).fontFamily, column: document.querySelector('article.bd-article')
            .getBoundingClientRect().width, wrap: css('.pv-table-wrap', 'overflowX'),
          digits: css('table.pv-table', 'fontVariantNumeric'), code: css('article p code', 'color'),
          title: css('.admonition.polyvox-rerun > .admonition-title', 'backgroundColor'),
          page: document.documentElement.scrollWidth, viewport: window.innerWidth};
}"""


def network_addresses(text: str) -> list[str]:
    """Addresses in the page other than XML namespace names and the targets of the prose's links (outside
    every script): a CDN, a library's own site, anything a script could fetch."""
    links = set(re.findall(r'<a [^>]*href="(https?://[^"]+)"', re.sub(r"<script.*?</script>", "", text, flags=re.S)))
    return sorted({u for u in URL.findall(text) if not NAMESPACE.fullmatch(u) and u not in links}
                  | set(NETWORK.findall(text)))


def _open(browser, url: str, width: int = 1280):
    """The page at url, every request recorded (only file: and data: are let through); console errors."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    requests, errors = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))

    def route(r):
        requests.append(r.request.url)
        r.continue_() if r.request.url.startswith(("file:", "data:")) else r.abort()

    page.route("**/*", route)
    page.goto(url, wait_until="load")
    page.evaluate(MATH_DONE)
    page.wait_for_timeout(300)
    return page, requests, errors


@pytest.mark.slow
@pytest.mark.xdist_group("book")  # the browser tests share one worker (conftest.pytest_collection_modifyitems)
def test_run_html_writes_an_offline_page_of_the_explorer_chapter_in_the_book_style(browser, tmp_path):
    out = tmp_path / "explorer-run"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["HF_HUB_OFFLINE"] = "1"
    proc = subprocess.run([str(POLYVOX), "run", "panel/explorer", "--out", str(out), "--html"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page_file = out / "explorer.html"
    assert f"page: {page_file}" in proc.stdout, proc.stdout
    assert (out / "explorer.ipynb").is_file() and json.loads((out / "manifest.json").read_text())["status"] == "ok"
    text = page_file.read_text()
    assert not network_addresses(text), f"network addresses in the page: {network_addresses(text)[:10]}"
    assert str(ROOT) not in text and str(tmp_path) not in text, "the page names an absolute path"
    assert "This run" in text and "panel/explorer" in text

    page, requests, errors = _open(browser, page_file.as_uri())
    left = [u for u in requests if not u.startswith(("file:", "data:"))]
    assert not left, f"requests that leave file://: {left[:10]}"
    assert not errors, errors
    assert page.locator("mjx-container").count() >= 5, "MathJax typeset no math"
    tables = page.locator("table.pv-table")
    assert tables.count() >= 1 and tables.first.locator("caption").count() == 1
    assert page.locator(".pv-x tr.pv-row").count() >= 10, "the explorer's table did not render"
    style = page.evaluate(STYLE)
    assert "system-ui" in style["font"], style  # the book's font stack (rerun-page.css)
    assert style["wrap"] == "auto" and style["digits"] == "tabular-nums", style  # static/polyvox.css
    assert style["code"] == "rgb(145, 37, 131)", style  # inline code as the book colours it
    assert 600 <= style["column"] <= 720, style  # the book's text column at 1280 px
    assert style["page"] <= style["viewport"], style  # nothing scrolls the page sideways
    # a row opens its traces, their math typeset
    page.locator(".pv-x tr.pv-row").first.click()
    page.wait_for_timeout(500)
    assert page.locator(".pv-x tr.pv-detail mjx-container").count() >= 1
    page.close()

    phone, _, _ = _open(browser, page_file.as_uri(), width=390)
    narrow = phone.evaluate(STYLE)
    phone.close()
    assert narrow["page"] <= narrow["viewport"], f"the page scrolls sideways at 390 px: {narrow}"

    # the same command on the complete run writes its page again without running the chapter
    finished = json.loads((out / "manifest.json").read_text())["finished"]
    page_file.unlink()
    again = subprocess.run([str(POLYVOX), "run", "panel/explorer", "--out", str(out), "--html"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and page_file.is_file(), again.stderr[-2000:]
    assert json.loads((out / "manifest.json").read_text())["finished"] == finished


def test_page_of_a_small_notebook_renders_admonitions_math_roles_tables_and_figures(tmp_path):
    """No chapter runs: a notebook made here, as a chapter leaves it, through write_page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import nbformat
    import pandas as pd

    from polyvox.book.html import write_page
    from polyvox.book.plots import figure_bundle
    from polyvox.book.tables import table_bundle

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.set_ylabel("y")
    fig_data, fig_meta = figure_bundle(fig, "line", "A line through the origin.", "A rising straight line.")
    plt.close(fig)
    tab_data, tab_meta = table_bundle(pd.DataFrame({"system": ["a"], "accuracy": [0.5]}), "acc",
                                      {"accuracy": "rate"}, "Accuracy of one system")
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("x = 1  # a parameter")
    params.metadata["tags"] = ["parameters"]
    cell = nbformat.v4.new_code_cell("show()")
    cell.outputs = [nbformat.v4.new_output("display_data", data=fig_data, metadata=fig_meta),
                    nbformat.v4.new_output("display_data", data=tab_data, metadata=tab_meta),
                    nbformat.v4.new_output("display_data", data={"text/markdown": "Gain $a^2$, see {doc}`the intro </book/intro>`."})]
    nb.cells = [nbformat.v4.new_markdown_cell("# A chapter\n\n```{important}\nRead **this**.\n```\n\n(sec)=\n## Section"),
                params, cell]
    nbformat.write(nb, tmp_path / "chapter.ipynb")
    manifest = {"kind": "chapter", "chapter": "panel/x", "status": "ok", "parameters": {"x": 2}, "finished": "2026-01-01T00:00:00"}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    text = write_page(tmp_path / "chapter.ipynb", root=ROOT).read_text()
    assert (tmp_path / "chapter.html").is_file()
    assert '<div class="admonition important">' in text and "<strong>this</strong>" in text
    assert '<figure class="pv-figure"' in text and 'alt="A rising straight line."' in text and "Fig. 1" in text
    assert '<table class="pv-table"><caption>Accuracy of one system</caption>' in text
    assert r"\(a^2\)" in text and "the intro" in text and "{doc}" not in text
    assert "x = 1  # a parameter" not in text  # the parameters cell: listed in the run box instead
    assert "This run" in text and "-p x=2" in text
    assert '<a id="sec"></a>' in text and 'href="#section"' in text  # a MyST label, the contents column
    assert "mjx" not in text.split("<body>")[0] and "/*PV-MJ-BEGIN*/" in text  # MathJax, embedded
    assert not network_addresses(text), network_addresses(text)[:10]


def test_a_path_outside_the_repository_is_a_named_placeholder_in_the_pages_command():
    """The record names such a folder by its last parts only (no absolute path on disk): the page's command
    shows a placeholder and says what to give, instead of a recorded path that would not be found."""
    from polyvox.book.html import run_box

    box = run_box({"chapter": "panel/explorer", "status": "ok", "parameters": {"runs": "tmp/sample19", "limit": 3},
                   "parameters_outside_root": ["runs"]})
    assert ".venv/bin/polyvox run panel/explorer -p runs=RUNS_PATH -p limit=3 --out FOLDER --html" in box
    assert "`RUNS_PATH`: the full path of `runs`" in box and "(`tmp/sample19`)" in box
    plain = run_box({"chapter": "panel/explorer", "status": "ok", "parameters": {"runs": "runs/mine"}})
    assert "-p runs=runs/mine --out FOLDER" in plain and "_PATH" not in plain
