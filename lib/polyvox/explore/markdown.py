"""Rendering a trace: Markdown with its LaTeX kept for MathJax, the style sheets of the trace views
and of the itables table (package data under ``assets/``), and the table as an itables page."""
from __future__ import annotations

import html
import re
from importlib.resources import files

import pandas as pd


def asset(name: str) -> str:
    """The text of one of the package's page assets (``polyvox/explore/assets/<name>``)."""
    return (files(__package__) / "assets" / name).read_text(encoding="utf-8")


def style(name: str) -> str:
    """A style sheet of the assets as a ``<style>`` element."""
    return f"<style>\n{asset(name)}</style>"


_MATH = re.compile(
    r"(?P<dd>\$\$(?P<dd_b>.+?)\$\$)"
    r"|(?P<br>\\\[(?P<br_b>.+?)\\\])"
    r"|(?P<pa>\\\((?P<pa_b>.+?)\\\))"
    r"|(?P<d>(?<![\\$\w])\$(?=[^\s$])(?P<d_b>(?:[^$\n]|\n(?!\s*\n))+?)(?<=[^\s\\])\$(?![\d$]))",
    re.S)


def render_markdown(text: str, inline: bool = False) -> str:
    """Markdown to HTML with LaTeX kept for MathJax: ``$…$``, ``\\(…\\)`` inline, ``$$…$$``, ``\\[…\\]`` display.

    Raw HTML in the text (``<think>``, ``<answer>`` …) is shown as text, never interpreted.
    Math is marked up as Sphinx does (class ``math``) and everything else is wrapped in
    ``mathjax_ignore``, so a stray dollar sign in prose is never typeset.
    """
    from markdown_it import MarkdownIt

    spans: list[str] = []

    def keep(m: re.Match) -> str:
        if m.group("dd") or m.group("br"):
            body = m.group("dd_b") if m.group("dd") else m.group("br_b")
            spans.append(f"<span class='math notranslate nohighlight mathjax_process tex2jax_process pv-display'>"
                         f"\\[{html.escape(body.strip())}\\]</span>")
        else:
            body = m.group("pa_b") if m.group("pa") else m.group("d_b")
            spans.append(f"<span class='math notranslate nohighlight mathjax_process tex2jax_process'>"
                         f"\\({html.escape(body.strip())}\\)</span>")
        return f"PVMATHSPAN{len(spans) - 1}X"

    protected = _MATH.sub(keep, text)
    md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table")
    out = md.renderInline(protected) if inline else md.render(protected)
    # headings inside a trace are the model's, not the page's: bold paragraphs (no entries in the page's
    # or JupyterLab's table of contents); markdown-it escapes raw HTML, so every <hN> here is its own
    out = re.sub(r"<h([1-6])>(.*?)</h\1>", r"<p class='pv-h pv-h\1'><strong>\2</strong></p>", out, flags=re.S)
    out = re.sub(r"PVMATHSPAN(\d+)X", lambda m: spans[int(m.group(1))], out)
    tag = "span" if inline else "div"
    return f"<{tag} class='mathjax_ignore tex2jax_ignore'>{out}</{tag}>"


STYLE = style("trace.css")  # the side-by-side traces (and the explorer's)


def table_html(df: pd.DataFrame, page_length: int = 10) -> str:
    """df as an itables (DataTables) HTML table: sortable headers, search box, page-length menu.

    Requires :func:`init` (or itables' ``init_notebook_mode``) earlier in the notebook.
    """
    from itables import to_html_datatable

    lengths = sorted({10, 25, 50, 100, page_length})
    widths = [{"targets": [i], "className": f"pv-{c}"} for i, c in enumerate(df.columns) if c in ("text", "gold")]
    return (TABLE_STYLE + to_html_datatable(
        df, connected=False, showIndex=False, pageLength=page_length, lengthMenu=lengths,
        classes="display compact cell-border", scrollX=True, autoWidth=False,
        # itables' default makes only the 6 px arrow a sort target (header text selectable): the whole header sorts
        text_in_header_can_be_selected=False, columnDefs=widths,
        layout={"topStart": "pageLength", "topEnd": "search", "bottomStart": "info", "bottomEnd": "paging"}))


# The book's theme styles <select> and table headers: keep the page-length menu legible
# (its options had no visible text) and the whole header cell the sort target.
TABLE_STYLE = style("table.css")
