"""The explorer (``polyvox.explore``) in a real browser: Playwright for Python driving Debian's
``chromium`` (``executable_path``; no browser is downloaded: ``apt-get install -y chromium``).

Pages are rendered from a small run folder: 10 problems spread over the levels (every sample of each: 8 in the
recordings) of the shipped world evaluations at two token caps (its first evaluated seed's smallest and largest,
``data/runs/world/seed-0/eval/cap-256`` and ``cap-1024`` in the panel-only recording; both systems: four systems
of one benchmark) and a fresh ``polyvox sample`` of the tiny test model on
gsm8k (a second benchmark), plus the published case study (math, headings). They are served on
127.0.0.1 with everything else refused: the explorer must work offline.

Driven: the controls are there at load; typing in the search box; each quick filter (the rows kept
are those :func:`polyvox.explore.filter_rows` keeps); opening a row and switching through all its
samples; the benchmark menu; the problem text wrapped inside the column at 1280 px; math typeset
and no headings from traces; the same in a page Jupyter Book builds with the book's own config and
style sheets. Screenshots: ``/tmp/explore-quick-filters.png``, ``/tmp/explore-traces.png``,
``/tmp/explore-book.png``. The last test runs the same explorer live in JupyterLab (``polyvox
explore``'s notebook, its cells run from the Run menu).
"""
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from _fixtures import shipped_world

from polyvox import explore

pytestmark = pytest.mark.slow

VIEWPORT = {"width": 1280, "height": 900}
SHOTS = Path("/tmp")
# the built book's main column is about this wide at 1280 px: the page puts the explorer in one like it
PAGE = ("<!doctype html><html><head><meta charset='utf-8'><title>explorer</title></head>"
        "<body style='font-family:sans-serif;margin:2em auto;max-width:760px'><main>{body}</main></body></html>")


def chromium_path() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.fail("Debian's chromium is not installed: apt-get install -y chromium")
    return exe


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _copy_shipped(root: Path, dest: Path, cap: int, problems: int = 10):
    """Both shipped systems at one cap on 10 problems spread over the levels (every 18th of the panel-only
    recording's 180), all their samples."""
    w = shipped_world(root)
    for system in w.systems:
        (dest / system).mkdir(parents=True)
        shutil.copy(w.folder(system, cap) / "manifest.json", dest / system)
        lines = w.lines(system, cap)
        ids = list(dict.fromkeys(json.loads(x)["problem_id"] for x in lines))
        ids = ids[::max(1, len(ids) // problems)][:problems]
        keep = [x for x in lines if json.loads(x)["problem_id"] in ids]
        (dest / system / "graded.jsonl").write_text("\n".join(keep) + "\n")


def _caps(root: Path) -> list[int]:
    """The two caps the page shows: the smallest and the largest the shipped world's first evaluated seed has."""
    caps = shipped_world(root).caps
    assert len(caps) >= 2, f"the shipped world run's first evaluated seed has one cap: {caps}"
    return [caps[0], caps[-1]]


def _samples(root: Path) -> int:
    """Samples per problem in the shipped evaluations (8 in the recordings)."""
    return shipped_world(root).samples_per_problem()


def _search_queries(rows) -> list[str]:
    """Queries of the four kinds the search box takes, each matching some of the rows but not all (taken from the
    rows: the problems differ between recordings; ``pears``, ``taken out``, ``w4-``, ``cards 478`` on the
    panel-only recording's): a word of a problem's text, two words of one, an id's level prefix, a word and a
    number of one."""
    texts = [_search_text(r) for r in rows]

    def splits(query):
        return 0 < sum(all(w in t for w in query.split()) for t in texts) < len(texts)

    words = [re.findall(r"[a-z]{4,}", r["text"].lower()) for r in rows]
    numbers = [re.findall(r"\b\d{2,}\b", r["text"]) for r in rows]
    word = next(w for ws in words for w in ws if splits(w))
    pair = next(q for ws in words for q in (f"{a} {b}" for a, b in zip(ws, ws[1:]) if a != b and word not in (a, b))
                if splits(q))
    level = next(q for r in rows if splits(q := r["id"].split("-")[0] + "-"))
    number = next(q for ws, ns in zip(words, numbers) for q in (f"{w} {n}" for w in ws for n in ns) if splits(q))
    return [word, pair, level, number]


@pytest.fixture(scope="module")
def run_folder(root, tiny, tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("explore") / "runs"
    for cap in _caps(root):
        _copy_shipped(root, runs / "world" / f"cap-{cap}", cap)
    cmd = [sys.executable, "-m", "polyvox.cli", "sample", "--task", "gsm8k", "--format", "panel", "--model", str(tiny),
           "--n", "3", "--limit", "3", "--max-tokens", "16", "--temperature", "1.0", "--out", str(runs / "gsm8k" / "tiny")]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return runs


@pytest.fixture(scope="module")
def site(root, run_folder, tmp_path_factory):
    """The two pages, served on 127.0.0.1: (base URL, {page: explorer data})."""
    folder = tmp_path_factory.mktemp("site")
    mathjax = explore.mathjax_html()
    pages = {}
    for name, ro in (("run", explore.load(run_folder, data_dir=root / "data")),
                     ("case", explore.load(None, data_dir=root / "data"))):
        data = explore.explorer_data(ro)
        (folder / f"{name}.html").write_text(PAGE.format(body=mathjax + explore.explorer_html(data)), encoding="utf-8")
        pages[name] = data
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", pages
    server.shutdown()


# `browser`: the one Chromium of the test process (conftest.py)


class Page:
    """A page with its console errors and the requests that tried to leave 127.0.0.1."""

    def __init__(self, browser, url):
        self.errors, self.external = [], []
        self.page = browser.new_page(viewport=VIEWPORT)
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

        def route(r):
            if urllib.parse.urlparse(r.request.url).hostname in ("127.0.0.1", None):
                r.continue_()
            else:
                self.external.append(r.request.url)
                r.abort()

        self.page.route("**/*", route)
        self.page.goto(url, wait_until="load")
        self.page.wait_for_selector(".pv-x tr.pv-row")
        self.x = self.page.locator(".pv-x").first

    def rows(self) -> list[str]:
        return [r.get_attribute("data-pid") for r in self.x.locator("tbody tr.pv-row").all()]

    def show_all(self):
        self.x.locator("select.pv-len").select_option("0")

    def close(self):
        assert not self.errors, self.errors
        assert not self.external, f"requests off the machine: {self.external}"
        self.page.close()


def _search_text(row) -> str:
    return " ".join([row["id"], row["label"], row["text"], row["gold"]]
                    + [st["shown"] for st in row["stats"].values()]).lower()


def test_controls_are_always_shown_and_search_filters_rows(browser, site):
    url, pages = site
    p = Page(browser, f"{url}/run.html")
    i = [g["name"] for g in pages["run"]["groups"]].index("world")
    g = pages["run"]["groups"][i]
    assert p.x.locator("select.pv-bench").is_visible()  # two benchmarks: a menu
    p.x.locator("select.pv-bench").select_option(str(i))
    for sel in ("input.pv-search", "select.pv-len", "select.pv-a", "select.pv-b", ".pv-clear"):
        assert p.x.locator(sel).is_visible(), sel
    assert p.x.locator("button.pv-filter").count() == 6 and all(b.is_visible() for b in p.x.locator("button.pv-filter").all())
    assert p.x.locator("select.pv-len option").all_inner_texts() == ["10", "25", "50", "100", "all"]
    assert len(p.rows()) == 10 and "of 10 problems" in p.x.locator(".pv-info").inner_text()
    p.x.locator("select.pv-len").select_option("25")
    for query in _search_queries(g["rows"]):
        want = [r["id"] for r in g["rows"] if all(w in _search_text(r) for w in query.split())]
        p.x.locator("input.pv-search").fill(query)
        p.page.wait_for_timeout(300)
        assert p.rows() == want and 0 < len(want) < 10, (query, want)
        assert f"of {len(want)} problem{'' if len(want) == 1 else 's'} (filtered from 10)" in p.x.locator(".pv-info").inner_text()
    p.x.locator("input.pv-search").fill("")
    p.page.wait_for_timeout(300)
    assert len(p.rows()) == 10
    # a header click sorts (numbers: largest first), a second click reverses; "problem" restores the order
    system = g["systems"][-1]
    length = {r["id"]: r["stats"][system]["length"] for r in g["rows"]}
    header = p.x.locator(f"th.pv-sort[data-key='l:{system}']")
    header.click()
    assert p.rows() == sorted(length, key=lambda k: -length[k]) and "pv-desc" in header.get_attribute("class")
    header.click()
    assert p.rows() == sorted(length, key=lambda k: length[k])
    p.x.locator("th.pv-sort[data-key='id']").click()
    assert p.rows() == [r["id"] for r in g["rows"]]
    p.close()


def test_each_quick_filter_keeps_the_rows_python_keeps(browser, site):
    url, pages = site
    p = Page(browser, f"{url}/run.html")
    p.show_all()
    groups = {g["name"]: (i, g) for i, g in enumerate(pages["run"]["groups"])}
    i, g = groups["world"]
    p.x.locator("select.pv-bench").select_option(str(i))
    p.show_all()
    assert p.x.locator("select.pv-a").input_value() == g["a"] and p.x.locator("select.pv-b").input_value() == g["b"]
    kept = {}
    for key in explore.QUICK_FILTERS:
        button = p.x.locator(f"button.pv-filter[data-filter='{key}']")
        want = explore.filter_rows(g, key)
        assert button.locator(".pv-count").inner_text() == f"({len(want)})"
        button.click()
        assert button.get_attribute("aria-pressed") == "true"
        assert p.rows() == want, key
        kept[key] = want
        if key == "wrong":
            p.page.screenshot(path=str(SHOTS / "explore-quick-filters.png"))
        button.click()
        assert len(p.rows()) == len(g["rows"])
    assert any(kept.values()) and not all(len(v) == len(g["rows"]) for v in kept.values())
    # filters combine (and), and clear
    p.x.locator("button.pv-filter[data-filter='wrong']").click()
    p.x.locator("button.pv-filter[data-filter='cap']").click()
    assert p.rows() == [r for r in kept["wrong"] if r in kept["cap"]]
    p.x.locator(".pv-clear").click()
    assert len(p.rows()) == len(g["rows"])
    # another pair: the A/B filters follow the menus
    other = [s for s in g["systems"] if s not in (g["a"], g["b"])][0]
    p.x.locator("select.pv-a").select_option(other)
    want = explore.filter_rows(g, "ab", a=other, b=g["b"])
    assert p.x.locator("button.pv-filter[data-filter='ab'] .pv-count").inner_text() == f"({len(want)})"
    p.x.locator("button.pv-filter[data-filter='ab']").click()
    assert p.rows() == want
    p.close()


def _facts(x, unit="tokens") -> list[str]:
    words = ["not graded" if x["correct"] is None else ("correct" if x["correct"] else "wrong"), f"{x['length']} {unit}"]
    if x["correct"] is not None:
        words.append("no answer" if x["answer"] is None else f"graded answer {x['answer']}")
    return words


def test_a_row_opens_its_traces_with_every_sample(browser, site, root):
    url, pages = site
    p = Page(browser, f"{url}/run.html")
    i, g = next((i, g) for i, g in enumerate(pages["run"]["groups"]) if g["name"] == "world")
    p.x.locator("select.pv-bench").select_option(str(i))
    p.show_all()
    # a problem whose samples differ (some right, some wrong), so switching samples shows different traces and
    # facts; a run where no sample is right (an untrained smoke stand-in) has none: one whose lengths differ
    mixed = [r["id"] for r in g["rows"] if 0 < r["stats"][g["a"]]["correct"] < r["stats"][g["a"]]["n"]]
    if not any(r["stats"][s]["correct"] for r in g["rows"] for s in g["systems"]):
        mixed = [r["id"] for r in g["rows"] if len({x["length"] for x in g["traces"][r["id"]][g["a"]]}) > 1]
    pid = mixed[0]
    p.x.locator(f"tr.pv-row[data-pid='{pid}']").click()
    detail = p.x.locator(f"tr.pv-detail[data-pid='{pid}']")
    assert detail.is_visible() and detail.locator(".pv-col").count() == 2
    assert next(r for r in g["rows"] if r["id"] == pid)["text"] in detail.inner_text()
    for side, system in (("a", g["a"]), ("b", g["b"])):
        col = detail.locator(f".pv-col[data-side='{side}']")
        samples = g["traces"][pid][system]
        assert col.locator("select.pv-sample option").count() == len(samples) == _samples(root)
        assert system in col.locator(".pv-sys").inner_text()
        for j, x in enumerate(samples):
            col.locator("select.pv-sample").select_option(str(j))
            facts = col.locator(".pv-facts").inner_text()
            assert all(w in facts for w in _facts(x)), (j, facts)
            assert (x["final"] is None) or col.locator(".pv-final").inner_text().strip()
        col.locator("button.pv-snext").click()  # wraps around to the first
        assert col.locator("select.pv-sample").input_value() == "0"
        col.locator("button.pv-sprev").click()
        assert col.locator("select.pv-sample").input_value() == str(len(samples) - 1)
    wrong = next(j for j, x in enumerate(g["traces"][pid][g["a"]]) if x["correct"] is False)
    detail.locator(".pv-col[data-side='a'] select.pv-sample").select_option(str(wrong))
    detail.scroll_into_view_if_needed()
    p.page.screenshot(path=str(SHOTS / "explore-traces.png"))
    # the text row opens the same problem; a second click closes it
    p.x.locator(f"tr.pv-row[data-pid='{pid}']").click()
    assert p.x.locator("tr.pv-detail").count() == 0
    p.x.locator(f"tr.pv-xtextrow[data-pid='{pid}']").click()
    assert p.x.locator("tr.pv-detail").count() == 1
    p.close()


def test_each_benchmark_has_its_own_table(browser, site):
    url, pages = site
    p = Page(browser, f"{url}/run.html")
    names = [g["name"] for g in pages["run"]["groups"]]
    assert sorted(names) == ["gsm8k", "world"]
    assert [o.split(" (")[0] for o in p.x.locator("select.pv-bench option").all_inner_texts()] == names
    i = names.index("gsm8k")
    g = pages["run"]["groups"][i]
    p.x.locator("select.pv-bench").select_option(str(i))
    assert p.x.locator("select.pv-a option").all_inner_texts() == ["gsm8k/tiny"] == g["systems"]
    assert len(p.rows()) == 3 and p.x.locator("thead").inner_text().count("gsm8k/tiny") == 1
    for key in ("ab", "ba", "disagree"):  # one system: nothing to compare
        assert p.x.locator(f"button.pv-filter[data-filter='{key}']").is_disabled()
    p.x.locator("tr.pv-row").first.click()
    cols = p.x.locator("tr.pv-detail .pv-col")
    assert cols.count() == 2  # the one system's samples side by side: its first two
    assert [c.locator("select.pv-sample").input_value() for c in cols.all()] == ["0", "1"]
    assert cols.first.locator("select.pv-sample option").count() == 3
    p.close()


WIDTHS = """() => {
  const box = document.querySelector('.pv-x .pv-scrollx').getBoundingClientRect();
  const main = document.querySelector('main').getBoundingClientRect();
  const out = [];
  for (const el of document.querySelectorAll('.pv-x .pv-xtext, .pv-x .pv-detail-in')) {
    const r = el.getBoundingClientRect();
    if (r.width && (r.left < box.left - 1 || r.right > box.right + 1)) out.push([el.className, r.left, r.right]);
  }
  return {outside: out, box: [box.left, box.right], main: [main.left, main.right],
          page: document.documentElement.scrollWidth - window.innerWidth};
}"""


def test_problem_text_is_visible_without_horizontal_scrolling_at_1280px(browser, site):
    url, pages = site
    p = Page(browser, f"{url}/run.html")
    i = [g["name"] for g in pages["run"]["groups"]].index("world")
    p.x.locator("select.pv-bench").select_option(str(i))
    p.x.locator("tr.pv-row").first.click()
    found = p.page.evaluate(WIDTHS)
    assert found["page"] <= 0 and not found["outside"], found
    assert found["box"][1] <= found["main"][1] + 1
    # scrolled sideways (four systems may not fit the column), the text stays in view and wrapped
    p.page.evaluate("() => { const b = document.querySelector('.pv-x .pv-scrollx'); b.scrollLeft = b.scrollWidth; }")
    p.page.wait_for_timeout(100)
    assert not p.page.evaluate(WIDTHS)["outside"]
    text = p.x.locator(".pv-xtext").first
    assert text.is_visible() and text.inner_text().strip()
    p.close()


CUTS = """() => Array.from(document.querySelectorAll('.pv-x .pv-xtext')).map(el =>
  [el.closest('tr').getAttribute('data-pid'), el.classList.contains('pv-cut'), el.scrollHeight > el.clientHeight + 2])"""


def test_a_problem_preview_cut_at_three_lines_says_so(browser, site):
    url, pages = site
    p = Page(browser, f"{url}/run.html")
    i = [g["name"] for g in pages["run"]["groups"]].index("world")
    p.x.locator("select.pv-bench").select_option(str(i))
    p.show_all()
    p.page.set_viewport_size({"width": 390, "height": 800})  # a phone: long problems take more than three lines
    p.page.wait_for_timeout(1000)  # the resize marks the previews again
    cuts = p.page.evaluate(CUTS)
    assert cuts and all(marked == overflowing for _pid, marked, overflowing in cuts), cuts
    assert any(m for _p, m, _o in cuts) and not all(m for _p, m, _o in cuts), cuts  # some cut, some whole
    pid = next(pid for pid, m, _o in cuts if m)
    assert "open the row" in p.x.locator(f"tr.pv-xtextrow[data-pid='{pid}'] .pv-xtext").get_attribute("title")
    p.x.locator(f"tr.pv-row[data-pid='{pid}']").click()  # the opened row holds the whole problem, never cut
    whole = p.x.locator("tr.pv-detail .pv-problem .pv-md")
    assert whole.evaluate("el => el.scrollHeight <= el.clientHeight + 2")
    assert not p.errors
    p.close()


def test_case_study_math_is_typeset_and_trace_headings_are_not_page_headings(browser, site):
    url, pages = site
    p = Page(browser, f"{url}/case.html")
    assert p.x.locator("h1, h2, h3, h4, h5, h6").count() == 0
    p.x.locator("tr.pv-row[data-pid='a']").click()
    detail = p.x.locator("tr.pv-detail")
    p.page.wait_for_function("() => document.querySelectorAll('.pv-x tr.pv-detail mjx-container').length >= 5")
    assert "A circle passes through the points" in detail.inner_text()
    assert "\\(" not in detail.inner_text() and "nan" not in detail.inner_text().lower()
    assert p.x.locator("h1, h2, h3, h4, h5, h6").count() == 0
    assert detail.locator("p.pv-h").count() >= 1  # the thinking answer's "### Approach 1…", demoted
    p.close()


# ------------------------------------------------------------------ in a Jupyter Book page

@pytest.fixture(scope="module")
def book_page(root, site, tmp_path_factory):
    """One page built by Jupyter Book with the book's own _config.yml and style sheets (its theme, its
    table sheet, Sphinx's deferred MathJax for the page's own math): the explorers as chapter outputs."""
    import nbformat

    _, pages = site
    book = tmp_path_factory.mktemp("jb")
    shutil.copy(root / "_config.yml", book / "_config.yml")
    shutil.copytree(root / "book" / "_static", book / "book" / "_static")
    (book / "_toc.yml").write_text("format: jb-book\nroot: explorer\n")
    v4 = nbformat.v4

    def html_cell(source, h):
        return v4.new_code_cell(source, outputs=[v4.new_output("display_data", data={"text/html": h, "text/plain": ""})])

    cells = [v4.new_markdown_cell("# Explorer\n\nThe page's own math: $x^2 + 1$."),
             html_cell("explore.init()", explore.mathjax_html()),
             v4.new_markdown_cell("## Runs"), html_cell("ro.explorer()", explore.explorer_html(pages["run"])),
             v4.new_markdown_cell("## Case study"), html_cell("case.explorer()", explore.explorer_html(pages["case"]))]
    nbformat.write(v4.new_notebook(cells=cells), book / "explorer.ipynb")
    done = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", str(book)], cwd=book,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and (book / "_build/html/explorer.html").exists(), done.stdout[-2000:] + done.stderr[-2000:]
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(book / "_build/html")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/explorer.html"
    server.shutdown()


IN_COLUMN = """() => {
  const col = document.querySelector('article.bd-article').getBoundingClientRect();
  const out = [];
  for (const el of document.querySelectorAll('.pv-x .pv-xtext, .pv-x .pv-detail-in, .pv-x .pv-bar')) {
    const r = el.getBoundingClientRect();
    if (r.width && (r.left < col.left - 1 || r.right > col.right + 1)) out.push([el.className, r.left, r.right]);
  }
  const ids = Array.from(document.querySelectorAll('.pv-x td.pv-id')).filter(td => td.firstChild &&
      td.firstChild.nodeType === 3 && td.getClientRects().length &&
      (() => { const r = document.createRange(); r.selectNodeContents(td.firstChild); return r.getClientRects().length > 1; })());
  return {outside: out, wrappedIds: ids.length, column: [col.left, col.right],
          page: document.documentElement.scrollWidth - window.innerWidth};
}"""


def test_in_a_jupyter_book_page_the_text_wraps_in_the_column_and_math_typesets(browser, site, book_page):
    world = next(g for g in site[1]["run"]["groups"] if g["name"] == "world")
    longest = max(world["rows"], key=lambda r: len(r["text"]))["id"]
    p = Page(browser, book_page)
    runs, case = p.page.locator(".pv-x").nth(0), p.page.locator(".pv-x").nth(1)
    runs.locator("select.pv-bench").select_option(str([o.split(" (")[0] for o in runs.locator(
        "select.pv-bench option").all_inner_texts()].index("world")))
    runs.locator("tr.pv-row").first.click()
    found = p.page.evaluate(IN_COLUMN)
    assert found["page"] <= 0 and not found["outside"] and not found["wrappedIds"], found
    text = runs.locator(f"tr.pv-xtextrow[data-pid='{longest}'] .pv-xtext").bounding_box()
    assert text["height"] > 40, "the problem text wraps onto lines (the book's nowrap table cells stay out)"
    case.locator("tr.pv-row[data-pid='a']").click()
    p.page.wait_for_function("() => document.querySelectorAll('.pv-x')[1].querySelectorAll('tr.pv-detail mjx-container')"
                             ".length >= 5")
    assert "\\(" not in case.locator("tr.pv-detail").inner_text()
    # the page's contents list: its own headings only, none from the traces
    toc = [t.strip() for t in p.page.locator(".bd-toc a").all_inner_texts()]
    assert toc and set(toc) <= {"Runs", "Case study"}, toc
    assert p.page.locator(".pv-x h1, .pv-x h2, .pv-x h3, .pv-x h4, .pv-x h5, .pv-x h6").count() == 0
    p.page.screenshot(path=str(SHOTS / "explore-book.png"))
    p.close()


# ------------------------------------------------------------------ live in JupyterLab

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_explorer_live_in_jupyterlab_from_polyvox_explore(browser, root, run_folder, tmp_path):
    """``polyvox explore``'s notebook opened in a real JupyterLab (``--allow-root``: these tests may run as
    root); its cells run from the Run menu; a row opens, samples switch, math is typeset."""
    import nbformat

    run = tmp_path / "lab" / "my-run"
    shutil.copytree(run_folder / "world" / f"cap-{_caps(root)[0]}", run)
    rows = explore.explorer_data(explore.load(run, data_dir=root / "data"))["groups"][0]["rows"]
    word, n = _search_queries(rows)[0], _samples(root)  # a word some problems have ("pears"), 8 samples each
    nb_path = explore.write_notebook(run, data_dir=root / "data")
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("case = explore.load(None, data_dir=DATA)\ncase.explorer()"))
    nbformat.write(nb, nb_path)
    port, token = _free_port(), "pv-explore-test"
    jupyter = Path(sys.executable).parent / "jupyter"
    proc = subprocess.Popen([str(jupyter), "lab", "--no-browser", "--allow-root", f"--port={port}", "--ip=127.0.0.1",
                             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path / 'lab'}",
                             "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config")})
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
                break
            except OSError:
                assert time.time() < deadline and proc.poll() is None, "jupyter lab did not start"
                time.sleep(0.5)
        page = browser.new_page(viewport=VIEWPORT)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/lab/tree/my-run/explore.ipynb?token={token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_timeout(3000)  # the kernel connects
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        page.wait_for_function("() => document.querySelectorAll('.pv-x').length === 2 && "
                               "document.querySelectorAll('.pv-x')[1].querySelector('tr.pv-row')", timeout=240_000)
        x = page.locator(".pv-x").first
        assert x.locator("tr.pv-row").count() == 10 and x.locator("button.pv-filter").count() == 6
        x.locator("input.pv-search").fill(word)
        page.wait_for_timeout(300)
        assert 0 < x.locator("tr.pv-row").count() < 10
        x.locator("tr.pv-row").first.click()
        col = x.locator("tr.pv-detail .pv-col[data-side='a']")
        assert col.locator("select.pv-sample option").count() == n
        j = min(5, n - 1)
        col.locator("select.pv-sample").select_option(str(j))
        assert col.locator(".pv-sample").input_value() == str(j) and f"sample {j}" in col.locator(
            "select.pv-sample option:checked").inner_text()
        case = page.locator(".pv-x").nth(1)
        case.locator("tr.pv-row[data-pid='a']").click()
        page.wait_for_function("() => document.querySelectorAll('.pv-x')[1]"
                               ".querySelectorAll('tr.pv-detail mjx-container').length >= 5", timeout=60_000)
        case.locator("tr.pv-detail").scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "explore-jupyterlab.png"))
        assert not errors, errors
        page.close()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_pages_hold_all_traces(site):
    _, pages = site
    for data in pages.values():
        e = data["embedded"]
        assert e["problems"] == e["of"], e
        assert json.loads(json.dumps(data)) == data
