"""The built book in a real browser: Playwright for Python driving Debian's ``chromium``
(``executable_path``; no browser is ever downloaded — ``.ci/run`` installs the Debian
package when it is missing), the book served on 127.0.0.1 by a real HTTP server.

Every page is visited once (all ``<details>`` opened) and checked for: elements wider than
the main column that are not inside a horizontal scroll container, console errors (and
requests that leave 127.0.0.1: the book must read offline), images without alt text, and
internal links that do not resolve. Each test reports *every* offending page in one
assertion message. The explorer (``.pv-x``) is driven: search filters rows, a header click sorts, the
page-length menu works, and a row opens both traces with math typeset (MathJax) for problem ``a``.
Screenshots of what a reader sees first (1280×900) go to ``_build/screenshots/``.

The book: ``POLYVOX_BOOK_HTML`` (a built ``_build/html``) if set; else the session's one
build (``conftest.built_book``, shared with ``tests/test_book.py``, which rebuilds only on a copy).
"""
import functools
import json
import os
import re
import shutil
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

VIEWPORT = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}  # a phone held upright: no page may scroll sideways at this width
SCREENSHOTS = {"intro": "book/intro.html", "accuracy": "book/panel/accuracy.html", "explorer": "book/panel/explorer.html"}

# Elements wider than their column, or sticking out of it, not inside a horizontal scroll container.
# The column is the main one (article); a cell tagged full-width (Jupyter Book's tag) may use the
# whole main area (article and right margin) and is itself the column of what it holds. Tables, on every
# page: one wider than its column must be inside its own horizontal scroll box that fits the text column
# (a full-width cell holds only tables that fit it).
WIDTH_CHECK = """() => {
  const col = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const area = (document.querySelector('main.bd-main') || document.querySelector('main') || document.body).getBoundingClientRect();
  const colRect = col.getBoundingClientRect();
  const columnOf = (el) => {
    const fw = el.closest('.tag_full-width, .full-width');
    if (!fw || !col.contains(fw)) return colRect;
    return fw === el ? area : fw.getBoundingClientRect();
  };
  const scrolls = (el) => { const o = getComputedStyle(el).overflowX; return o === 'auto' || o === 'scroll' || o === 'hidden'; };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
      (typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\\s+/).slice(0, 3).join('.') : '');
  const out = [];
  const bad = new Set();
  for (const el of col.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const c = columnOf(el);
    if (r.width <= c.width + 1 && r.left >= c.left - 1 && r.right <= c.right + 1) continue;
    let contained = false, p = el.parentElement, reported = false;
    while (p && p !== col) {
      if (bad.has(p)) { reported = true; break; }
      if (scrolls(p) && p.getBoundingClientRect().width <= c.width + 1) { contained = true; break; }
      p = p.parentElement;
    }
    if (contained) continue;
    bad.add(el);
    if (reported) continue;
    const text = (el.innerText || '').trim().replace(/\\s+/g, ' ').slice(0, 60);
    out.push({element: name(el), width: Math.round(r.width), column: Math.round(c.width),
              overhang: Math.round(Math.max(r.right - c.right, c.left - r.left, 0)), text});
  }
  // A table wider than its column (the text column, or the area of the full-width cell it is in) sits in its
  // own horizontal scroll box, and that box fits the text column: a full-width cell may hold a table that fits
  // it, never one that still scrolls (half under the page's contents column, with its prose beside it).
  for (const t of col.querySelectorAll('table')) {
    const r = t.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || bad.has(t)) continue;
    const c = columnOf(t);
    if (r.width <= c.width + 1 && r.left >= c.left - 1 && r.right <= c.right + 1) continue;
    let box = null;
    for (let p = t.parentElement; p && p !== col; p = p.parentElement) if (scrolls(p)) { box = p; break; }
    const b = box ? box.getBoundingClientRect() : null;
    if (b && b.width <= colRect.width + 1 && b.left >= colRect.left - 1 && b.right <= colRect.right + 1) continue;
    const cap = t.querySelector('caption');
    out.push({element: name(t) + (b ? ` in a ${Math.round(b.width)}-px scroll box wider than the text column` : ''),
              width: Math.round(r.width), column: Math.round(colRect.width),
              overhang: Math.round(Math.max((b || r).right - colRect.right, colRect.left - (b || r).left, 0)),
              text: ((cap ? cap.innerText : t.innerText) || '').trim().replace(/\\s+/g, ' ').slice(0, 60)});
  }
  const page = document.documentElement.scrollWidth > window.innerWidth + 1 ?
      {scrollWidth: document.documentElement.scrollWidth, viewport: window.innerWidth} : null;
  return {offenders: out, page};
}"""

IMAGES = """() => Array.from(document.querySelectorAll('img')).map(i => ({src: i.getAttribute('src') || '',
    alt: (i.getAttribute('alt') || '').trim()}))"""
LINKS = "() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"
MATH_DONE = """async () => { if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise; } return true; }"""


def chromium_path() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.fail("Debian's chromium is not installed: apt-get install -y chromium (.ci/run does it)")
    return exe


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        # browsers ask every site for /favicon.ico; the book declares none (not a page's error)
        if self.path == "/favicon.ico":
            self.send_response(204)
            self.end_headers()
            return
        super().do_GET()


@pytest.fixture(scope="session")
def book_html(request) -> Path:
    env = os.environ.get("POLYVOX_BOOK_HTML")
    if env:
        return Path(env).resolve()
    _, report, _ = request.getfixturevalue("built_book")  # the session's one build (conftest)
    assert not report.failures, report.failures
    return report.html


def serve_folder(folder: Path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="session")
def server(book_html):
    srv, url = serve_folder(book_html)
    yield url
    srv.shutdown()


# `browser`: the one Chromium of the test process (conftest.py)


def pages_of(html_root: Path) -> list[str]:
    """The book's pages (index.html only redirects to the intro: the link test checks its target)."""
    return sorted(p.relative_to(html_root).as_posix() for p in (html_root / "book").rglob("*.html"))


def open_page(browser, url: str, viewport: dict = VIEWPORT):
    """A new page at url; returns (page, console errors, requests that left 127.0.0.1)."""
    page = browser.new_page(viewport=viewport)
    errors, external = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))

    def route(r):
        if urllib.parse.urlparse(r.request.url).hostname in ("127.0.0.1", None):
            r.continue_()
        else:
            external.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(url, wait_until="load")
    page.evaluate(MATH_DONE)
    page.wait_for_timeout(300)  # DataTables render after their module loads
    return page, errors, external


@pytest.fixture(scope="session")
def visited(browser, server, book_html, root):
    """Every page visited once: findings per page, and the three screenshots."""
    shots = root / "_build" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    found = {}
    for rel in pages_of(book_html):
        page, errors, external = open_page(browser, f"{server}/{rel}")
        for name, target in SCREENSHOTS.items():
            if rel == target:
                page.screenshot(path=str(shots / f"{name}.png"))
        tables = page.evaluate(TABLE_FIT)  # as a reader first sees the page: before any <details> is opened
        page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        page.evaluate(MATH_DONE)
        page.wait_for_timeout(100)
        found[rel] = {"width": page.evaluate(WIDTH_CHECK), "errors": errors, "external": external,
                      "images": page.evaluate(IMAGES), "links": page.evaluate(LINKS), "tables": tables}
        page.close()
    return found


@pytest.fixture(scope="session")
def visited_on_a_phone(browser, server, book_html):
    """Every page at 390 px wide (all ``<details>`` opened): the width check, per page."""
    found = {}
    for rel in pages_of(book_html):
        page, _, _ = open_page(browser, f"{server}/{rel}", PHONE)
        page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        page.evaluate(MATH_DONE)
        page.wait_for_timeout(100)
        found[rel] = page.evaluate(WIDTH_CHECK)
        page.close()
    return found


def _width_lines(found: dict) -> list[str]:
    lines = []
    for rel, w in found.items():
        for o in w["offenders"]:
            lines.append(f"{rel}: <{o['element']}> {o['width']} px in a {o['column']} px column, "
                         f"{o['overhang']} px outside it ({o['text']!r})")
        if w["page"]:
            lines.append(f"{rel}: the page scrolls sideways ({w['page']['scrollWidth']} px in {w['page']['viewport']} px)")
    return lines


def test_no_page_scrolls_sideways_on_a_390_px_phone(visited_on_a_phone):
    """At 390 px nothing sticks out of the column unless it is inside its own scroll box (inline code
    wraps, tables and code blocks scroll in place), and no page scrolls sideways."""
    lines = _width_lines(visited_on_a_phone)
    assert not lines, f"{len(lines)} problem(s) at 390 px:\n" + "\n".join(lines)


def test_every_book_table_has_a_caption(visited_on_a_phone, book_html):
    """Every table of every page opens with a caption: the chapters' (polyvox.book.tables), the re-run boxes'
    parameter tables, the intro's findings tables (MyST's table directive), the explorer's. Markup inside
    scripts is data, not page (the explorer's traces, where a model may write its own tables)."""
    lines = []
    for rel in pages_of(book_html):
        text = re.sub(r"<script\b.*?</script>", "", (book_html / rel).read_text(), flags=re.S)
        for m in re.finditer(r'<table\b[^>]*>(.{0,200})', text, re.S):
            if not m.group(1).lstrip().startswith("<caption"):
                lines.append(f"{rel}: a table without a caption ({m.group(1)[:80]!r})")
    assert not lines, "\n".join(lines)


TABLE_FIT = """() => Array.from(document.querySelectorAll('.pv-table-wrap')).map(w => ({
    caption: ((w.querySelector('caption') || {}).innerText || '').slice(0, 60), need: w.scrollWidth, box: w.clientWidth}))"""


def test_part_one_and_four_tables_fit_their_box_at_1280_px(visited):
    """At 1280 px a Part I or Part IV table is not cut off: it fits its box without sideways scrolling
    (label cells wrap at spaces; the accuracy chapter's first table was cut off before). Measured on the
    visit of every page at 1280 px (``visited``), before its ``<details>`` are opened, not on a second visit."""
    lines = []
    for rel, f in visited.items():
        if not rel.startswith(("book/panel/", "book/world/")):
            continue
        lines += [f"{rel}: {t['caption']!r} needs {t['need']} px in its {t['box']} px box"
                  for t in f["tables"] if t["need"] > t["box"] + 1]
    assert not lines, "\n".join(lines)


def test_no_element_wider_than_the_main_column(visited):
    lines = []
    for rel, f in visited.items():
        w = f["width"]
        for o in w["offenders"]:
            lines.append(f"{rel}: <{o['element']}> {o['width']} px in a {o['column']} px column, "
                         f"{o['overhang']} px outside it ({o['text']!r})")
        if w["page"]:
            lines.append(f"{rel}: the page scrolls sideways ({w['page']['scrollWidth']} px in {w['page']['viewport']} px)")
    assert not lines, f"{len(lines)} element(s) wider than the main column, not in a scroll container:\n" + "\n".join(lines)


def test_no_console_errors_and_no_requests_off_the_machine(visited):
    lines = [f"{rel}: console: {e[:200]}" for rel, f in visited.items() for e in dict.fromkeys(f["errors"])]
    lines += [f"{rel}: requested {u} (the book must read offline)" for rel, f in visited.items()
              for u in dict.fromkeys(f["external"])]
    assert not lines, f"{len(lines)} console error(s) / external request(s):\n" + "\n".join(lines)


def test_every_image_has_alt_text(visited):
    lines = []
    for rel, f in visited.items():
        for img in f["images"]:
            alt, src = img["alt"], img["src"]
            if not alt:
                lines.append(f"{rel}: <img src={src!r}> has no alt text")
            elif re.fullmatch(r"[\w./-]+\.(png|svg|jpe?g|gif)", alt) or alt == src:
                lines.append(f"{rel}: <img> has its file path as alt text ({alt!r})")
    assert not lines, f"{len(lines)} image(s) without alt text:\n" + "\n".join(lines)


def test_every_internal_link_resolves(visited, server):
    cache: dict[str, str | None] = {}

    def fetch(url):
        if url not in cache:
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    cache[url] = r.read().decode("utf-8", "replace") if url.endswith(".html") else ""
            except (urllib.error.URLError, OSError):
                cache[url] = None
        return cache[url]

    lines = []
    index = fetch(f"{server}/index.html") or ""
    redirect = re.search(r"""http-equiv=["']refresh["'][^>]*url=([^"'>]+)""", index, re.I)
    if redirect and fetch(f"{server}/{redirect.group(1).strip()}") is None:
        lines.append(f"index.html: redirects to {redirect.group(1)}, which does not resolve")
    for rel, f in visited.items():
        for href in dict.fromkeys(f["links"]):
            if not href.startswith(server):
                continue
            target, _, frag = href.partition("#")
            body = fetch(target)
            if body is None:
                lines.append(f"{rel}: link to {href[len(server):]} does not resolve")
            elif frag and target.endswith(".html") and not re.search(
                    rf"""(id|name)=["']{re.escape(urllib.parse.unquote(frag))}["']""", body):
                lines.append(f"{rel}: link to {href[len(server):]}: no anchor #{frag} there")
    assert not lines, f"{len(lines)} internal link(s) broken:\n" + "\n".join(lines)


def test_screenshots_of_intro_a_part_one_chapter_and_the_explorer(visited, root):
    for name in SCREENSHOTS:
        shot = root / "_build" / "screenshots" / f"{name}.png"
        assert shot.exists() and shot.stat().st_size > 10_000, shot


def _search_text(row) -> str:
    return " ".join([row["id"], row["label"], row["text"], row["gold"]]
                    + [st["shown"] for st in row["stats"].values()]).lower()


def test_explorer_search_filters_header_click_sorts_row_opens_traces_and_math_renders(browser, server):
    """The chapter's explorer (``ro.explorer()``, root ``.pv-x``): 10 of the 20 case-study problems per page, the
    page-length menu, the search box, a header click sorting by a system's length, a row opening both traces
    side by side with MathJax-typeset math (tests/test_explore_browser.py drives every control on runs)."""
    page, errors, _ = open_page(browser, f"{server}/book/panel/explorer.html")
    at_load = len(errors)  # errors on load are the console test's; here: none from using the explorer
    page.wait_for_selector(".pv-x tr.pv-row")
    x = page.locator(".pv-x").first
    data = json.loads(x.locator("script[type='application/json']").first.text_content())
    g = data["groups"][0]
    assert len(g["rows"]) == 20 and data["embedded"]["problems"] == 20
    rows = lambda: [r.get_attribute("data-pid") for r in x.locator("tbody tr.pv-row").all()]  # noqa: E731
    assert len(rows()) == 10 and "of 20 problems" in x.locator(".pv-info").inner_text()
    # the page-length menu shows its choices and changes the page
    menu = x.locator("select.pv-len")
    assert menu.locator("option").all_inner_texts() == ["10", "25", "50", "100", "all"]
    box = menu.bounding_box()
    assert box and box["width"] >= 30, f"page-length menu {box}"
    menu.select_option("25")
    assert len(rows()) == 20
    # typing in the search box filters rows
    want = [r["id"] for r in g["rows"] if "circle" in _search_text(r)]
    x.locator("input.pv-search").fill("circle")
    page.wait_for_timeout(300)
    assert rows() == want and 1 <= len(want) < 20, want
    x.locator("input.pv-search").fill("")
    page.wait_for_timeout(300)
    assert len(rows()) == 20
    # a header click sorts by a system's length (largest first), a second click reverses
    system = g["systems"][-1]
    length = {r["id"]: r["stats"][system]["length"] for r in g["rows"] if system in r["stats"]}
    header = x.locator(f"th.pv-sort[data-key='l:{system}']")
    header.click()
    page.wait_for_timeout(200)
    first = [length[k] for k in rows() if k in length]
    assert first == sorted(first, reverse=True) and first != sorted(first)
    header.click()
    page.wait_for_timeout(200)
    second = [length[k] for k in rows() if k in length]
    assert second == sorted(second)
    # a row opens the problem (the circle through (0,0), (8,0), (0,6)) and both traces, math typeset by MathJax
    pid = want[0]
    x.locator(f"tr.pv-row[data-pid='{pid}']").click()
    detail = x.locator(f"tr.pv-detail[data-pid='{pid}']")
    assert detail.is_visible() and detail.locator(".pv-col").count() == 2
    assert "A circle passes through the points" in detail.inner_text()
    page.wait_for_timeout(500)
    assert detail.locator("mjx-container").count() >= 5, "no MathJax-rendered math in the opened traces"
    assert "\\(" not in detail.inner_text() and "\\n" not in detail.inner_text()
    # the static side-by-side section below the explorer still renders its math
    assert page.locator(".pv-explore mjx-container").count() >= 1
    assert not errors[at_load:], errors[at_load:]
    page.close()


WIDE_TABLE = ("<table id='wide-inline'><tr>" + "".join(f"<td style='white-space:nowrap'>column {i}: 0.000000</td>"
                                                      for i in range(40)) + "</tr></table>")


def _flagged(browser, folder: Path, name: str) -> list[str]:
    srv, url = serve_folder(folder)
    try:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{url}/{name}", wait_until="load")
        found = page.evaluate(WIDTH_CHECK)
        page.close()
    finally:
        srv.shutdown()
    return [o["element"] for o in found["offenders"]]


def test_width_check_flags_a_wide_inline_table_in_a_built_page(browser, book_html, tmp_path):
    """The check can fail: a temp copy of a built chapter with a wide table inline is flagged,
    the same table inside a horizontal scroll container is not."""
    shutil.copytree(book_html, tmp_path / "html")
    page = tmp_path / "html/book/panel/length.html"
    text = page.read_text()
    marker = re.search(r"<article[^>]*bd-article[^>]*>", text)
    assert marker, "no article.bd-article in the built page"
    cut = marker.end()
    (tmp_path / "html/book/panel/wide.html").write_text(text[:cut] + WIDE_TABLE + text[cut:])
    scroll = f"<div style='overflow-x:auto'>{WIDE_TABLE.replace('wide-inline', 'wide-scrolled')}</div>"
    (tmp_path / "html/book/panel/scrolled.html").write_text(text[:cut] + scroll + text[cut:])
    wide = _flagged(browser, tmp_path / "html", "book/panel/wide.html")
    assert "table#wide-inline" in wide, wide
    assert not any("wide-scrolled" in e for e in _flagged(browser, tmp_path / "html", "book/panel/scrolled.html"))


FITS_FULL_WIDTH = ("<table id='full-fits' style='width:900px'><tr><td>a table wider than the text column "
                   "that fits its full-width cell</td></tr></table>")


def test_width_check_on_a_tiny_fixture_page(browser, tmp_path):
    """Inline wide table: flagged; in a scroll container of the text column's width: not; a full-width cell
    may use the main area beyond the article for a table that fits it, but a table wider than that cell is
    flagged, inline or in a scroll box as wide as the cell (wider than the text column)."""
    body = ("<main class='bd-main' style='width:1100px'><article class='bd-article' style='width:700px'><p>fits</p>"
            + WIDE_TABLE
            + f"<div style='overflow-x:auto'>{WIDE_TABLE.replace('wide-inline', 'wide-scrolled')}</div>"
            + "<div class='cell tag_full-width' style='width:1000px'><p>a full-width cell</p>"
            + f"<div style='overflow-x:auto'>{WIDE_TABLE.replace('wide-inline', 'full-scrolled')}</div>"
            + f"<div style='overflow-x:auto;max-width:700px'>{WIDE_TABLE.replace('wide-inline', 'full-boxed')}</div>"
            + FITS_FULL_WIDTH
            + WIDE_TABLE.replace("wide-inline", "full-inline") + "</div></article></main>")
    (tmp_path / "p.html").write_text(f"<!doctype html><html><body style='margin:0'>{body}</body></html>")
    flagged = _flagged(browser, tmp_path, "p.html")
    assert flagged == ["table#wide-inline", "table#full-inline",
                       "table#full-scrolled in a 1000-px scroll box wider than the text column"], flagged
