"""The render step (fast: no notebook runs): re-run box, corrections page and banners, book tables and
figures turned into CSV downloads and numbered figures, the figure checks, the findings page."""
import base64
import importlib
import struct
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

from polyvox.book import findings, plots, tables  # noqa: E402
from polyvox.book.render import BookError  # noqa: E402

render = importlib.import_module("polyvox.book.render")  # the module (polyvox.book.render is also a function)

PARAMS = '''data_dir = "data"  # folder holding multipersona/ (the published records)
generate = False  # True: sample first
runs = None  # a run folder
limit = 3
tolerance = 0.05  # win-rate points from 50% …
# … within which the arms are called indistinguishable
cats = ["a", "b"]  # categories | with a pipe
'''


def test_parameters_are_read_with_defaults_and_meanings():
    got = render.parameters_of(PARAMS)
    assert [(p["name"], p["value"], p["meaning"]) for p in got] == [
        ("data_dir", "data", "folder holding multipersona/ (the published records)"),
        ("generate", False, "True: sample first"),
        ("runs", None, "a run folder"),
        ("limit", 3, ""),
        ("tolerance", 0.05, "win-rate points from 50% … … within which the arms are called indistinguishable"),
        ("cats", ["a", "b"], "categories | with a pipe"),
    ]


def test_rerun_box_gives_the_command_and_each_parameter_as_the_cli_reads_it():
    box = render.rerun_markdown("panel/length", render.parameters_of(PARAMS))
    assert box.startswith("````{admonition} Re-run this chapter") and box.rstrip().endswith("````")
    assert ".venv/bin/polyvox run panel/length --out runs/panel-length" in box
    assert "polyvox book build --only panel/length --params params.yaml" in box
    import re

    [table] = re.findall(r"<table class=\"pv-table pv-params\">.*?</table>", box)
    assert "<caption>The parameters of panel/length: name, default and meaning.</caption>" in table
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tbody>(.*)</tbody>", table)[0].split("</tr>")
             if row]
    assert cells == [["<code>data_dir</code>", "<code>data</code>", "folder holding multipersona/ (the published records)"],
                     ["<code>generate</code>", "<code>false</code>", "True: sample first"],
                     ["<code>runs</code>", "<code>null</code>", "a run folder"],
                     ["<code>limit</code>", "<code>3</code>", "—"],
                     ["<code>tolerance</code>", "<code>0.05</code>",
                      "win-rate points from 50% … … within which the arms are called indistinguishable"],
                     ["<code>cats</code>", "<code>[a, b]</code>", "categories | with a pipe"]]
    assert "\n\n" not in table  # one HTML block: MyST passes it through inside the admonition
    # every default, written as the box writes it, is read back by `polyvox run -p` as the same value
    from polyvox.cli import parse_kv

    for p in render.parameters_of(PARAMS):
        assert parse_kv([f"{p['name']}={render._cli_value(p['value'])}"]) == {p["name"]: p["value"]}
    assert "no parameters" in render.rerun_markdown("x/y", [])


def test_rerun_box_of_every_shipped_chapter_lists_all_its_papermill_parameters(root):
    import papermill as pm

    from polyvox import book

    for ch in book.chapters(root):
        nb = nbformat.read(ch.source, as_version=4)
        [cell] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        names = [p["name"] for p in render.parameters_of(cell.source)]
        assert names == list(pm.inspect_notebook(str(ch.source))), ch.name


def _write_corrections(root: Path, items) -> None:
    (root / "data").mkdir(exist_ok=True)
    (root / "data/corrections.yml").write_text(yaml.safe_dump(items, allow_unicode=True))


ITEM = {"date": "2026-09-23", "study": "panel", "chapters": ["book/panel/length"], "claimed": "x", "stands": "y",
        "source": "the README"}


def test_corrections_page_has_distinct_headings_linked_sources_and_math(tmp_path):
    _write_corrections(tmp_path, [
        {**ITEM, "what": "compute estimate", "claimed": r"A ~$10^4$–$10^5\times$ estimate.",
         "url": "https://example.org/readme", "status": "withdrawn"},
        {**ITEM, "what": "dispersion ratio", "date": "2026-10-01"}])
    items = render.load_corrections(tmp_path)
    page = render.corrections_page(items)
    heads = [line for line in page.splitlines() if line.startswith("## ")]
    assert heads == ["## 2026-10-01 — panel — dispersion ratio", "## 2026-09-23 — panel — compute estimate"]
    assert "- **Source:** [the README](https://example.org/readme)" in page
    assert "- **Source:** the README" in page
    assert r"~$10^4$–$10^5\times$" in page  # dollarmath renders it (see the built-book test)
    banner = render.banner_markdown(items[:1])
    assert "Correction of 2026-09-23 — compute estimate" in banner and "[the README](https://example.org/readme)" in banner


@pytest.mark.parametrize("bad,message", [
    ([ITEM, ITEM], "same heading"),
    ([{**ITEM, "url": "example.org"}], "url must be an http"),
    ([{**ITEM, "status": "retracted"}], "status must be withdrawn or revised"),
])
def test_corrections_are_checked(tmp_path, bad, message):
    _write_corrections(tmp_path, bad)
    with pytest.raises(BookError, match=message):
        render.load_corrections(tmp_path)


def test_the_shipped_corrections_load_with_distinct_headings(root):
    items = render.load_corrections(root)
    assert len({render.correction_heading(c) for c in items}) == len(items) >= 5
    assert all(c.get("url", "").startswith("https://") for c in items)


def _figure():
    fig, axes = plt.subplots(1, 2, sharey=True)
    for ax in axes:
        ax.plot([1, 2, 3], [0.1, 0.5, 0.4], label="panel")
        ax.set_xlabel("k")
    axes[0].set_ylabel("pass@k")
    plots.integer_ticks(axes[0])
    plots.legend_outside(fig, "bottom")
    return fig


def _executed_notebook(tmp_path: Path) -> Path:
    params = nbformat.v4.new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    table_cell = nbformat.v4.new_code_cell("show_table(...)")
    wide = pd.DataFrame({f"a rather long column name {i}": [0.5] for i in range(12)})
    for df, name in ((pd.DataFrame({"k": [1, 2], "x": [0.5, 0.25]}), "small one"), (wide, "wide one")):
        data, meta = tables.table_bundle(df, name)
        table_cell.outputs.append(nbformat.v4.new_output("display_data", data=data, metadata=meta))
    fig_cell = nbformat.v4.new_code_cell("show_figure(...)")
    data, meta = plots.figure_bundle(_figure(), "pass@k curves", "pass@k against k.", "Two line charts of pass@k.")
    fig_cell.outputs.append(nbformat.v4.new_output("display_data", data=data, metadata=meta))
    plain = nbformat.v4.new_code_cell("1 + 1")
    plain.outputs.append(nbformat.v4.new_output("execute_result", data={"text/plain": "2"}, execution_count=1))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"), params, table_cell, fig_cell, plain])
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    return path


def test_render_writes_csvs_and_figures_links_them_and_adds_the_boxes(tmp_path):
    executed = _executed_notebook(tmp_path)
    target = tmp_path / "book/x/ch.ipynb"
    assert render.render(executed, target, [{**ITEM, "what": "w"}], chapter="x/ch", root=tmp_path)
    nb = nbformat.read(target, as_version=4)
    kinds = [c.metadata.get("tags") for c in nb.cells]
    assert kinds[1] == ["polyvox-corrections"] and kinds[2] == ["polyvox-rerun"]
    assert "remove-cell" in nb.cells[3].metadata.tags  # the parameters: listed in the box instead
    tcell, fcell = nb.cells[4], nb.cells[5]
    assert "full-width" in tcell.metadata.tags  # one wide table
    md = [o.data["text/markdown"] for o in tcell.outputs if "text/markdown" in o.data]
    assert md == ["{download}`Download this table (CSV) </_build/.polyvox/assets/x/ch/small-one.csv>`",
                  "{download}`Download this table (CSV) </_build/.polyvox/assets/x/ch/wide-one.csv>`"]
    assert all(tables.MIME not in o.data for o in tcell.outputs)
    assert (tmp_path / "_build/.polyvox/assets/x/ch/small-one.csv").read_text() == "k,x\n1,0.5\n2,0.25\n"
    [fig] = fcell.outputs
    text = fig.data["text/markdown"]
    assert text.startswith("```{figure} /_build/.polyvox/assets/x/ch/pass-k-curves.png\n")
    assert ":name: fig-x-ch-pass-k-curves" in text and ":alt: Two line charts of pass@k." in text
    assert text.rstrip().endswith("pass@k against k.\n```")
    png = (tmp_path / "_build/.polyvox/assets/x/ch/pass-k-curves.png").read_bytes()
    width = struct.unpack(">I", png[16:20])[0]
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and width >= 6 * plots.DPI  # a 6.4-inch figure at 150 dpi
    # rendering again changes nothing
    assert not render.render(executed, target, [{**ITEM, "what": "w"}], chapter="x/ch", root=tmp_path)


def test_figures_need_a_y_label_on_every_panel_a_caption_and_alt_text():
    fig, axes = plt.subplots(1, 2)
    axes[0].plot([1, 2], [1, 2]); axes[0].set_ylabel("accuracy")
    axes[1].plot([1, 2], [1, 2]); axes[1].set_title("per source")
    with pytest.raises(plots.FigureError, match="panel 2 of 2 .'per source'. has no y label"):
        plots.figure_bundle(fig, "f", "caption", "alt")
    fig = _figure()  # sharey: the second panel borrows the first one's label
    data, meta = plots.figure_bundle(fig, "f", "caption", "alt  text\nhere")
    assert fig.axes[1].get_ylabel() == "pass@k" and meta["polyvox"]["alt"] == "alt text here"
    assert base64.b64decode(data["image/png"])[:4] == b"\x89PNG"
    with pytest.raises(plots.FigureError, match="caption and alt text are required"):
        plots.figure_bundle(_figure(), "f", "caption", " ")
    plt.close("all")


def test_integer_ticks_on_a_count_axis():
    fig, ax = plt.subplots()
    ax.plot(range(1, 11), range(10))
    plots.integer_ticks(ax, "x")
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in ax.get_xticks())
    plt.close(fig)


def test_legend_outside_merges_handles_and_sits_outside_the_axes():
    fig = _figure()
    fig.canvas.draw()
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["panel"]
    box, axes_box = legend.get_window_extent(), fig.axes[0].get_window_extent()
    assert box.y1 <= axes_box.y0 + 1  # below the axes, not on the data
    plt.close(fig)


def test_findings_markdown_lists_each_study_with_status_and_chapter_link():
    items = [findings.Finding("panel", "A | B", "reproduced", "Δ 0", "book/panel/accuracy"),
             findings.Finding("collab", "C", "differs", "Δ 2", "book/collab/audit"),
             findings.Finding("panel", "D", "withdrawn", "2026", "book/corrections")]
    text = findings.findings_markdown(items)
    assert ('| A \\| B | <span class="pv-status pv-reproduced">reproduced</span> | Δ 0 | '
            '{doc}`/book/panel/accuracy` |') in text
    assert '<span class="pv-status pv-published-only">' in findings.Finding("x", "c", "published only", "", "").label()
    assert ":::{table} Part III — sliced models collaborating: each claim" in text and "Part II —" not in text
    assert text.rstrip().endswith("In all: 1 reproduced, 1 differs, 1 withdrawn.")
