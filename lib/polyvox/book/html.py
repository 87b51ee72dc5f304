"""A page from any chapter run: the executed notebook as an offline HTML page in the book's style.

``polyvox run CHAPTER … --html`` writes ``<notebook>.html`` beside the executed notebook. The page reads
like the chapter in the book, and opens from ``file://`` with no network:

- cells through nbconvert (``static/rerun-page.html.j2``, on nbconvert's ``classic`` cells): no prompts,
  each code cell's source one click away (the book's hide-input), the parameters cells left out (the
  "This run" box under the title lists the parameters the run was given, from its manifest);
- Markdown (cells and ``text/markdown`` outputs) read as the book reads it: MyST admonitions
  (```` ```{important} ````, ```` ```{admonition} Title ````), roles (``{doc}``, ``{ref}``, …: their text),
  dollar math, tables, definition lists (:func:`markdown_html`);
- book tables as the chapter displayed them (each in its own scroll box), book figures numbered with
  their caption and alt text, embedded as ``data:`` images;
- the book's style sheets inlined (``static/polyvox.css``, the book's ``book/_static/polyvox-book.css``
  and ``static/rerun-page.css`` for the page around the article), and MathJax 3 from this environment
  (:func:`polyvox.explore.mathjax.mathjax_html`) when the page has math. No CDN, no network address.
"""
from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

STATIC = Path(__file__).parent / "static"
TEMPLATE = STATIC / "rerun-page.html.j2"
HIDDEN_TAGS = ("parameters", "injected-parameters", "remove-cell")
ADMONITIONS = {"note", "important", "tip", "hint", "warning", "caution", "attention", "danger", "error", "seealso"}
_MATH = re.compile(r"\\\(|\\\[|\$\$|<span class=\"math|<div class=\"math")
_MATHJAX_MARK = "/*PV-MJ-BEGIN*/"
# addresses the embedded libraries carry but this page never needs: MathJax's speech-rule-engine and XPath
# polyfill (loaded only for assistive options, from a CDN by default) point at a local folder that is not
# shipped; MathJax's "About" box and itables' no-script banner link to their sites
_OFFLINE = [(re.compile(r"https://cdn\.jsdelivr\.net/npm/"), "mathjax-extensions-not-shipped/"),
            (re.compile(r'<a href="https://www\.mathjax\.org">(www\.mathjax\.org)</a>'), r"\1"),
            (re.compile(r'<a href="https://itables\.org/?">(.*?)</a>', re.S), r"\1")]


def _markdown():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.anchors import anchors_plugin
    from mdit_py_plugins.deflist import deflist_plugin
    from mdit_py_plugins.dollarmath import dollarmath_plugin
    from mdit_py_plugins.myst_role import myst_role_plugin

    def math(content: str, opts: dict) -> str:
        return (r"\[" + html.escape(content) + r"\]") if opts.get("display_mode") else (r"\(" + html.escape(content) + r"\)")

    md = (MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
          .use(dollarmath_plugin, double_inline=True, renderer=math).use(myst_role_plugin).use(deflist_plugin)
          .use(anchors_plugin, min_level=1, max_level=3))

    def role(self, tokens, idx, options, env):
        tok = tokens[idx]
        name, text = tok.meta.get("name", ""), tok.content
        if name == "math":
            return r"\(" + html.escape(text) + r"\)"
        label = re.match(r"^(.*?)\s*<([^<>]*)>$", text, re.S)  # {doc}`text <target>`: the text
        shown = (label.group(1) or label.group(2)) if label else text
        if name in ("ref", "numref") and label and re.fullmatch(r"[\w-]+", label.group(2)):  # a label on this page
            return f'<a class="pv-role pv-role-ref" href="#{label.group(2)}">{html.escape(shown)}</a>'
        if name in ("doc", "ref", "numref", "download", "term"):
            return f'<span class="pv-role pv-role-{html.escape(name)}">{html.escape(shown)}</span>'
        return f"<code>{html.escape(shown)}</code>"

    def fence(self, tokens, idx, options, env):
        tok = tokens[idx]
        info = tok.info.strip()
        directive = re.match(r"^\{([\w-]+)\}\s*(.*)$", info)
        if not directive:
            lang = html.escape(info.split()[0]) if info else ""
            cls = f' class="language-{lang}"' if lang else ""
            return f'<div class="highlight"><pre><code{cls}>{html.escape(tok.content)}</code></pre></div>\n'
        name, arg = directive.group(1), directive.group(2).strip()
        options, body = _directive_options(tok.content)
        if name == "admonition" or name in ADMONITIONS:
            title = arg if name == "admonition" else (arg or name.capitalize())
            classes = " ".join(html.escape(c) for c in ["admonition", name, *options.get("class", "").split()])
            return (f'<div class="{classes}"><p class="admonition-title">{md.renderInline(title)}</p>\n'
                    f"{md.render(body)}</div>\n")
        if name in ("math",):
            return f'<div class="math">\\[{html.escape(body)}\\]</div>\n'
        # any other directive (figure, code-cell, …): its body, as text the reader can still read
        return f'<div class="pv-directive pv-directive-{html.escape(name)}">{md.render(body)}</div>\n'

    md.add_render_rule("myst_role", role)
    md.add_render_rule("fence", fence)
    return md


def _directive_options(content: str) -> tuple[dict, str]:
    """A MyST directive's ``:key: value`` lines (at its top), and the body after them."""
    lines = content.splitlines()
    options = {}
    while lines and re.match(r"^:[\w-]+:", lines[0]):
        key, _, value = lines.pop(0)[1:].partition(":")
        options[key.strip()] = value.strip()
    return options, "\n".join(lines).strip("\n") + "\n"


_MD = None


def markdown_html(text: str) -> str:
    """Markdown as the book reads it (MyST admonitions and roles, dollar math, tables) as HTML; math is left
    between ``\\(``/``\\)`` and ``\\[``/``\\]`` for MathJax."""
    global _MD
    if _MD is None:
        _MD = _markdown()
    text = re.sub(r"^\(([\w-]+)\)=\s*$", r'<a id="\1"></a>', text, flags=re.M)  # a MyST label: an anchor
    return _MD.render(text)


def _figure_html(data: dict, meta: dict, number: int) -> str:
    png = "".join(data["image/png"]) if isinstance(data["image/png"], list) else data["image/png"]
    alt = html.escape(meta.get("alt", ""), quote=True)
    return (f'<figure class="pv-figure" id="fig-{html.escape(meta.get("figure", str(number)))}">'
            f'<img src="data:image/png;base64,{png.strip()}" alt="{alt}">'
            f'<figcaption><span class="caption-number">Fig. {number} </span>{html.escape(meta.get("caption", ""))}'
            "</figcaption></figure>")


def prepare(nb, manifest: dict | None = None):
    """The executed notebook as the page shows it: parameters cells out (listed in the run box instead),
    book figures numbered with caption and alt text, the tables' raw-value payload dropped."""
    import nbformat

    from .tables import MIME as TABLE_MIME

    cells, figures = [], 0
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if any(t in HIDDEN_TAGS for t in tags):
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            data.pop(TABLE_MIME, None)
            meta = out.get("metadata", {}).get("polyvox", {})
            if "figure" in meta and "image/png" in data:
                figures += 1
                out["data"] = {"text/html": _figure_html(data, meta, figures), "text/plain": meta.get("caption", "")}
                out["metadata"] = {}
        cells.append(cell)
    at = 1 if cells and cells[0].cell_type == "markdown" else 0
    if manifest:
        box = nbformat.v4.new_markdown_cell(run_box(manifest))
        cells.insert(at, box)
    nb.cells = cells
    return nb


def _yaml_value(value) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def run_box(manifest: dict) -> str:
    """The "This run" box under the title: chapter, status, when, commit, and each parameter given."""
    chapter = manifest.get("chapter", "?")
    params = manifest.get("parameters") or {}
    given = {k: v for k, v in params.items() if k != "run_dir"}  # run_dir: set by polyvox run from --out
    outside = [k for k in manifest.get("parameters_outside_root") or [] if k in given]
    shown = {k: (f"{k.upper()}_PATH" if k in outside else _yaml_value(v)) for k, v in given.items()}
    command = (f".venv/bin/polyvox run {chapter}" + "".join(f" -p {k}={v}" for k, v in shown.items())
               + " --out FOLDER --html")
    where = "".join(f" `{k.upper()}_PATH`: the full path of `{k}`, a folder outside the repository that the record "
                    f"names by its last parts only (`{given[k]}`)." for k in outside)
    lines = ["````{admonition} This run", ":class: tip polyvox-rerun", "",
             f"The chapter `{chapter}`, run with the parameters below: status **{manifest.get('status', '?')}**, "
             f"finished {str(manifest.get('finished', '—')).replace('T', ' ')}, polyvox at commit "
             f"`{str(manifest.get('git_commit', '—'))[:12]}`. The executed notebook and its `manifest.json` lie "
             "beside this page. The same run, into a new folder:", "", "```bash", command, "```", "",
             *([where.strip(), ""] if where else [])]
    if params:
        from .tables import small_table_html

        lines.append(small_table_html(f"The parameters of this run of {chapter}.", ["parameter", "value"],
                                      [[f"`{k}`", f"`{_yaml_value(v)}`" + (" (the run folder: `polyvox run` sets it "
                                                                           "from `--out`)" if k == "run_dir" else "")]
                                       for k, v in params.items()]))
    else:
        lines.append("The chapter ran with its defaults (the shipped records).")
    return "\n".join(lines + ["````"])


def cells_html(nb) -> tuple[str, str]:
    """(the cells as HTML, the code highlighting's style sheet) through nbconvert and the page template."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_file=str(TEMPLATE), exclude_input_prompt=True, exclude_output_prompt=True,
                            anchor_link_text="", filters={"markdown2html": markdown_html})
    body, resources = exporter.from_notebook_node(nb)
    css = "\n".join(resources.get("inlining", {}).get("css", []))
    return body, css


def _headings(body: str) -> list[tuple[str, str]]:
    """(id, text) of each second-level heading: the page's contents, as the book's right-hand column."""
    out = []
    for m in re.finditer(r'<h2 id="([^"]+)"[^>]*>(.*?)</h2>', body, re.S):
        text = re.sub(r"<[^>]+>", "", m.group(2)).replace("¶", "").strip()
        out.append((m.group(1), html.unescape(text)))
    return out


def _book_css(root: Path | None) -> str:
    sheets = [STATIC / "polyvox.css"]
    if root is not None:
        sheets.append(root / "book" / "_static" / "polyvox-book.css")
    sheets.append(STATIC / "rerun-page.css")
    return "\n".join(p.read_text(encoding="utf-8") for p in sheets if p.is_file())


def _book_title(root: Path | None) -> str:
    if root is not None and (root / "_config.yml").is_file():
        import yaml

        title = (yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}).get("title")
        if title:
            return str(title)
    return "polyvox"


def page_html(nb, manifest: dict | None = None, root: Path | None = None) -> str:
    """The whole page: book title bar, the article (title, "This run" box, the cells), the page's contents."""
    from ..explore.mathjax import mathjax_html

    nb = prepare(nb, manifest)
    body, pygments_css = cells_html(nb)
    title = re.search(r"<h1[^>]*>(.*?)</h1>", body, re.S)
    title = html.unescape(re.sub(r"<[^>]+>", "", title.group(1)).replace("¶", "").strip()) if title else "Chapter run"
    chapter = (manifest or {}).get("chapter", "")
    contents = "".join(f'<li><a href="#{html.escape(i, quote=True)}">{html.escape(t)}</a></li>' for i, t in _headings(body))
    # MathJax only where there is math, and once: a chapter that embeds it (the explorer) loads its own copy
    math = mathjax_html() if _MATH.search(body) and _MATHJAX_MARK not in body else ""
    icon = base64.b64encode((STATIC / "favicon.svg").read_bytes()).decode() if (STATIC / "favicon.svg").is_file() else ""
    book = _book_title(root)
    run_facts = ""
    if manifest:
        facts = [("chapter", chapter), ("status", manifest.get("status", "")), ("finished", manifest.get("finished", "")),
                 ("commit", str(manifest.get("git_commit", ""))[:12])]
        run_facts = "<dl class='pv-run-facts'>" + "".join(
            f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in facts if v) + "</dl>"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="polyvox run --html">
<title>{html.escape(title)} — {html.escape(book)} (a run)</title>
{f'<link rel="icon" href="data:image/svg+xml;base64,{icon}">' if icon else ''}
<style>{pygments_css}</style>
<style>{_book_css(root)}</style>
</head>
<body>
<header class="pv-topbar"><span class="pv-book-title">{html.escape(book)}</span>
<span class="pv-run-label">{f'a re-run chapter: <code>{html.escape(chapter)}</code>' if chapter else "a run's notebook"}</span></header>
<div class="pv-layout">
<aside class="pv-sidebar" aria-label="This run"><p class="pv-sidebar-title">{html.escape(book)}</p>{run_facts}
<p class="pv-sidebar-note">{'This page was written from the run folder by <code>polyvox run … --html</code>' if manifest
    else "This page was written from an executed notebook (<code>polyvox.book.html.write_page</code>)"}; it reads offline.</p></aside>
<main class="bd-main" id="main-content">
<article class="bd-article" role="main">
{body}
</article>
</main>
{f'<nav class="pv-contents" aria-label="Contents"><p class="pv-contents-title">Contents</p><ul>{contents}</ul></nav>' if contents else ''}
</div>
{math}
</body>
</html>
"""


def offline(page: str) -> str:
    """The page with no CDN address: what the embedded libraries would fetch points at a local, absent folder."""
    for pattern, repl in _OFFLINE:
        page = pattern.sub(repl, page)
    return page


def write_page(notebook: Path, manifest: dict | None = None, root: Path | None = None) -> Path:
    """Write ``<notebook>.html`` beside an executed chapter notebook; return its path. The manifest is read
    from ``manifest.json`` beside the notebook when not given."""
    import nbformat

    from ..records import KIND_CHAPTER

    notebook = Path(notebook)
    if manifest is None and (notebook.parent / "manifest.json").is_file():
        manifest = json.loads((notebook.parent / "manifest.json").read_text(encoding="utf-8"))
        if manifest.get("kind") != KIND_CHAPTER:  # the folder of another kind of run: no "This run" box
            manifest = None
    nb = nbformat.read(str(notebook), as_version=4)
    out = notebook.with_suffix(".html")
    text = page_html(nb, manifest, root)
    out.write_text(offline(text), encoding="utf-8")
    return out
