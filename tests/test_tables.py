"""The book's table style (polyvox.book.tables): formatting by kind, inference, headers, width, CSV, HTML."""
import math

import numpy as np
import pandas as pd
import pytest

from polyvox.book import tables as T

M = T.MINUS

# (value, kind, expected text)
CASES = [
    # missing, in every spelling, is a dash
    (None, "rate", "—"), (float("nan"), "rate", "—"), (np.nan, "int", "—"), (pd.NA, "delta", "—"),
    (None, "text", "—"), (pd.NaT, "value", "—"),
    # integers as integers, thousands separated
    (72.0, "int", "72"), (72, "int", "72"), (np.int64(1234), "int", "1,234"), (1234567.0, "int", "1,234,567"),
    (-3.0, "int", f"{M}3"), (0.4, "int", "0"), (-0.4, "int", "0"),
    # rates: three decimals
    (0.57, "rate", "0.570"), (0.68, "rate", "0.680"), (1, "rate", "1.000"), (0.12345, "rate", "0.123"),
    # values (recomputed vs published): four decimals, no negative zero
    (0.5703, "value", "0.5703"), (-0.00004, "value", "0.0000"), (-0.0, "value", "0.0000"),
    (-0.00006, "value", f"{M}0.0001"),
    # signed differences
    (0.0012, "delta", "+0.0012"), (-0.0012, "delta", f"{M}0.0012"), (0.0, "delta", "0.0000"),
    (-4e-16, "delta", "0.0000"), (4e-16, "delta", "0.0000"), (0.3246, "rate_delta", "+0.325"),
    (-0.0004, "rate_delta", "0.000"),
    # percentages and percentage points
    (57.03, "pct", "57.0"), (-0.04, "pct", "0.0"), (1.25, "pp", "+1.2"), (-1.26, "pp", f"{M}1.3"), (0, "pp", "0.0"),
    (6.693, "points", "6.7"), (0.04, "points", "0.0"),
    # t and p
    (-3.4149, "t", f"{M}3.41"), (2.0, "t", "2.00"), (-0.001, "t", "0.00"),
    (0.0123, "p", "0.012"), (0.5, "p", "0.500"), (3.2e-5, "p", "< 0.001"), (1e-12, "p", "< 0.001"),
    (0.0, "p", "< 0.001"), (0.00099, "p", "< 0.001"), (0.001, "p", "0.001"), (1.0, "p", "1.000"),
    # tiny magnitudes that are not p values: scientific
    (3.2e-5, "sci", f"3.2e{M}05"), (-2e-5, "sci", f"{M}2.0e{M}05"), (1.5e-7, "sci", f"1.5e{M}07"),
    # tokens and ratios
    (16384.2, "tokens", "16,384"), (812.5, "tokens", "812"), (2.3149, "ratio", "2.31"), (float("inf"), "ratio", "∞"),
    (float("-inf"), "score", f"{M}∞"),
    # booleans and text
    (True, "bool", "yes"), (False, "bool", "no"), (np.bool_(True), "bool", "yes"), ("MATH-500", "text", "MATH-500"),
    (3, "text", "3"), ("not checkable", "int", "not checkable"),
]


@pytest.mark.parametrize("value,kind,expected", CASES)
def test_format_value(value, kind, expected):
    assert T.format_value(value, kind) == expected


def test_unknown_kind_is_an_error_naming_the_kinds():
    with pytest.raises(ValueError, match="unknown table kind 'percent'.*rate"):
        T.format_value(0.5, "percent")
    with pytest.raises(ValueError, match="unknown table kind"):
        T.column_kinds(pd.DataFrame({"a": [1]}), {"a": "nope"})


# (column values, inferred kind)
INFER = [
    ([1, 2, 3], "int"), ([72.0, 8.0], "int"), ([72.0, np.nan], "int"), ([0.5, 0.25], "score"),
    ([True, False], "bool"), (["a", "b"], "text"), (["a", None], "text"), ([None, None], "text"),
    ([np.nan, np.nan], "score"), ([1, 2.5], "score"), ([3, None, 4], "int"),
]


@pytest.mark.parametrize("values,kind", INFER)
def test_infer_kind(values, kind):
    assert T.infer_kind(pd.Series(values)) == kind


def test_kinds_by_exact_name_then_first_matching_pattern_then_inferred():
    df = pd.DataFrame({"k": [1], "accuracy": [0.5], "accuracy Δ": [0.1], "t": [1.0], "label": ["x"], "n": [3.0]})
    ck = T.column_kinds(df, {"accuracy": "rate", "* Δ": "delta", "acc*": "value", "t": "t"})
    assert ck == {"k": "int", "accuracy": "rate", "accuracy Δ": "delta", "t": "t", "label": "text", "n": "int"}


# (header, kind, shown header)
HEADERS = [
    ("accuracy", "pct", "accuracy (%)"), ("accuracy %", "pct", "accuracy %"), ("gain", "pp", "gain (pp)"),
    ("gain (pp)", "pp", "gain (pp)"), ("median", "tokens", "median (tokens)"), ("tokens per correct", "tokens",
                                                                              "tokens per correct"),
    ("ratio", "ratio", "ratio (×)"), ("accuracy", "rate", "accuracy"), ("k", "int", "k"),
]


@pytest.mark.parametrize("header,kind,shown", HEADERS)
def test_headers_say_units(header, kind, shown):
    assert T.with_unit(header, kind) == shown


def test_format_frame_drops_the_index_and_formats_every_cell():
    df = pd.DataFrame({"k": [1.0, 2.0], "x": [0.5, -0.00001], "x Δ": [np.nan, -0.0]}, index=[5, 9])
    out = T.format_frame(df, {"x": "value", "x Δ": "delta"})
    assert list(out.columns) == ["k", "x", "x Δ"]
    assert out.values.tolist() == [["1", "0.5000", "—"], ["2", "0.0000", "0.0000"]]
    assert list(out.index) == [0, 1]


def test_a_named_index_becomes_a_column_and_a_crosstab_keeps_its_labels():
    tab = pd.crosstab(pd.Series(["a", "a", "b"], name="panel"), pd.Series(["x", "y", "y"], name="thinking"))
    out = T.format_frame(tab)
    assert list(out.columns) == ["panel", "x", "y"]
    assert out.values.tolist() == [["a", "1", "1"], ["b", "0", "1"]]


def test_html_has_no_index_column_scrolls_in_its_container_and_escapes():
    df = pd.DataFrame({"system": ["<b>panel</b>"], "accuracy": [0.5]})
    data, meta = T.table_bundle(df, "My table!", {"accuracy": "rate"})
    html = data["text/html"]
    assert html.startswith('<div class="pv-table-wrap" style="overflow-x:auto;max-width:100%">')
    assert "&lt;b&gt;panel&lt;/b&gt;" in html and "<b>panel" not in html
    assert html.count("<th ") == 2 and "0.500" in html
    assert '<td class="pv-num">0.500</td>' in html and '<td class="pv-text">' in html
    assert meta == {"polyvox": {"table": "my-table", "wide": False}}
    assert data[T.MIME]["name"] == "my-table"


def test_wide_tables_are_flagged_and_narrow_ones_are_not():
    narrow = pd.DataFrame({"k": range(3), "pass@k": [0.1, 0.2, 0.3]})
    wide = pd.DataFrame({f"a rather long column name {i}": [0.123456] for i in range(12)})
    assert not T.table_bundle(narrow, "n")[0][T.MIME]["wide"]
    assert T.table_bundle(wide, "w")[0][T.MIME]["wide"]
    assert T.table_bundle(wide, "w", wide=False)[1]["polyvox"]["wide"] is False
    assert T.estimated_width(T.format_frame(wide)) > T.COLUMN_PX


def test_csv_keeps_full_precision_integers_and_empty_missing():
    df = pd.DataFrame({"k": [1.0, 2.0], "x": [0.123456789, np.nan], "label": ["a", None]})
    assert T.csv_text(df) == "k,x,label\n1,0.123456789,a\n2,,\n"


def test_grouped_and_long_form_reshape_a_beside_table():
    from polyvox.book.report import beside

    rec = pd.DataFrame({"k": [1, 2], "a": [0.1, 0.2], "b": [1.0, 2.0]})
    pub = pd.DataFrame({"k": [1, 2], "a": [0.1, 0.25], "b": [1.0, 2.0]})
    table = beside(rec, pub, ["k"], ["a", "b"])
    long = T.long_form(table, ["k"], ["a", "b"])
    assert list(long.columns) == ["k", "quantity", "recomputed", "published", "Δ"] and len(long) == 4
    assert long.loc[2, "Δ"] == pytest.approx(-0.05)
    g = T.grouped(table, ["k"], ["a", "b"])
    out = T.format_frame(g, T.BESIDE_KINDS)
    assert out.values.tolist()[1] == ["2", "0.2000", "0.2500", f"{M}0.0500", "2.0000", "2.0000", "0.0000"]
    html = T.table_bundle(g, "g", T.BESIDE_KINDS)[0]["text/html"]
    assert '<th rowspan="2" class="pv-num">k</th>' in html and '<th colspan="3" class="pv-group">a</th>' in html
    assert T.csv_text(g).splitlines()[0] == "k,a / recomputed,a / published,a / Δ,b / recomputed,b / published,b / Δ"


def test_names_need_letters_or_digits():
    with pytest.raises(ValueError, match="no letters or digits"):
        T.table_bundle(pd.DataFrame({"a": [1]}), "—")


def test_format_value_never_prints_negative_zero_over_a_sweep():
    for kind, k in T.KINDS.items():
        if k.decimals is None or kind in ("p", "sci"):  # p: "< 0.001"; sci: scientific on purpose
            continue
        for v in np.linspace(-10 ** -(k.decimals + 1) * 4.9, 0, 7):
            text = T.format_value(float(v), kind)
            assert not text.startswith(("-", M)), (kind, v, text)
            assert math.isclose(float(text.replace(",", "").replace("+", "") or 0), 0.0, abs_tol=1e-12)


def test_show_table_needs_a_caption():
    with pytest.raises(T.CaptionError, match="'t': a caption is required"):
        T.show_table(pd.DataFrame({"a": [1]}), "t")
    with pytest.raises(T.CaptionError):
        T.show_table(pd.DataFrame({"a": [1]}), "t", caption="  ")


def test_the_caption_is_the_tables_first_element():
    data, _ = T.table_bundle(pd.DataFrame({"a": [1]}), "t", caption="What <it> holds")
    assert "<table class=\"pv-table\"><caption>What &lt;it&gt; holds</caption><thead>" in data["text/html"]
