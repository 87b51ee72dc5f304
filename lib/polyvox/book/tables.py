"""One table style for the whole book.

``show_table(df, name, kinds=...)`` displays a DataFrame the way every chapter shows
tables: no index column, each column formatted by its *kind* (a fixed number of decimals
per kind, integers as integers, ``—`` for missing, never ``-0.000``), headers that carry
units, and a horizontal scroll inside the table's own container. A table too wide for the
text column is flagged wide; the book's render step then gives its cell the ``full-width``
tag. The raw values travel with the output as CSV; the render step writes them to a file
and puts a download link below the table (``render.py``), so a cached chapter keeps its
downloads.

Kinds (``KINDS``): decimals and how a value is written.

======== =============================================== ===========
kind     for                                             example
======== =============================================== ===========
text     labels                                          MATH-500
int      counts (thousands separated)                    1,234
rate     proportions / probabilities in [0, 1]           0.570
value    recomputed-vs-published values (print precision) 0.5703
delta    signed differences of values                    +0.0012
rate_δ   signed differences of rates (kind "rate_delta")  +0.325
pct      percentages                                     57.0
pp       signed percentage-point differences             +1.2
t        t statistics                                    -3.41
p        p values (``< 0.001`` below 0.001)               0.012, < 0.001
sci      tiny magnitudes (scientific notation)           3.2e−05
tokens   token counts and means (whole tokens)           16,384
ratio    ratios                                          2.31
score    other reals                                     0.123
bool     yes / no                                        yes
======== =============================================== ===========
"""
from __future__ import annotations

import fnmatch
import html
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

MISSING = "—"
MINUS = "−"  # U+2212: a real minus sign, the width of a plus
COLUMN_PX = 680  # the book's text column at a 1400-px window (sphinx-book-theme: about 690 px of text)
CHAR_PX = 7.6  # an average character of the table font at 0.85 rem
CELL_PAD_PX = 14
MIME = "application/vnd.polyvox.table+json"  # raw values and name; the render step writes the CSV


@dataclass(frozen=True)
class Kind:
    decimals: int | None  # None: not a number (text, bool)
    signed: bool = False  # always show + or −
    thousands: bool = False
    unit: str = ""  # appended to a header that does not name a unit already


KINDS: dict[str, Kind] = {
    "text": Kind(None),
    "bool": Kind(None),
    "int": Kind(0, thousands=True),
    "rate": Kind(3),
    "value": Kind(4),
    "delta": Kind(4, signed=True),
    "rate_delta": Kind(3, signed=True),
    "pct": Kind(1, unit="%"),
    "pp": Kind(1, signed=True, unit="pp"),
    "points": Kind(1),  # an unsigned size in percentage points (an sd, a spread), the column's name says so
    "t": Kind(2),
    "p": Kind(3),
    "sci": Kind(1),
    "tokens": Kind(0, thousands=True, unit="tokens"),
    "ratio": Kind(2, unit="×"),
    "score": Kind(3),
}


def _is_missing(x) -> bool:
    if x is None or x is pd.NA or x is pd.NaT:
        return True
    try:
        return bool(isinstance(x, (float, np.floating)) and math.isnan(x))
    except TypeError:
        return False


def format_value(x, kind: str) -> str:
    """One value written as its kind says: fixed decimals, no negative zero, ``—`` for missing."""
    if kind not in KINDS:
        raise ValueError(f"unknown table kind {kind!r}; kinds: {', '.join(KINDS)}")
    if _is_missing(x):
        return MISSING
    k = KINDS[kind]
    if kind == "bool":
        return "yes" if bool(x) else "no"
    if k.decimals is None:
        return str(x)
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)  # a label in a numeric column (e.g. "not checkable") is shown as written
    if math.isinf(v):
        return ("" if v > 0 else MINUS) + "∞"
    if kind == "p" and 0 <= v < 10 ** -k.decimals:
        return "< 0.001"  # a p value is never printed as 0.000 or in scientific notation
    if kind == "sci":
        mant, exp = f"{v:.1e}".split("e")
        return f"{mant.replace('-', MINUS)}e{MINUS if int(exp) < 0 else ''}{abs(int(exp)):02d}"
    rounded = round(v, k.decimals)
    if rounded == 0:
        rounded = 0.0  # no negative zero: -0.00004 prints as 0.0000
    text = f"{abs(rounded):,.{k.decimals}f}" if k.thousands else f"{abs(rounded):.{k.decimals}f}"
    if rounded < 0:
        return MINUS + text
    if k.signed and rounded > 0:
        return "+" + text
    return text


def _integral(s: pd.Series) -> bool:
    vals = pd.to_numeric(s, errors="coerce").dropna()
    return len(vals) > 0 and bool(np.all(np.isfinite(vals))) and bool(np.all(vals == np.round(vals)))


def infer_kind(s: pd.Series) -> str:
    """The kind of a column nobody named: bool, int (also 72.0-style floats), score for other reals, else text."""
    if pd.api.types.is_bool_dtype(s):
        return "bool"
    if pd.api.types.is_numeric_dtype(s):
        return "int" if _integral(s) else "score"
    nonmissing = [x for x in s if not _is_missing(x)]
    if nonmissing and all(isinstance(x, (bool, np.bool_)) for x in nonmissing):
        return "bool"
    if nonmissing and all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)
                          for x in nonmissing):
        return "int" if _integral(pd.Series(nonmissing, dtype=float)) else "score"
    return "text"


def _label(col) -> str:
    return " / ".join(str(c) for c in col if str(c)) if isinstance(col, tuple) else str(col)


def column_kinds(df: pd.DataFrame, kinds: dict[str, str] | None = None) -> dict:
    """Kind per column: an exact name in ``kinds`` first, then the first glob pattern that matches
    (``"* Δ"``, ``"*pass@k*"``; a MultiIndex column is matched as ``"top / sub"``), else inferred."""
    kinds = kinds or {}
    for k in kinds.values():
        if k not in KINDS:
            raise ValueError(f"unknown table kind {k!r}; kinds: {', '.join(KINDS)}")
    out = {}
    for col in df.columns:
        label = _label(col)
        if label in kinds:
            out[col] = kinds[label]
            continue
        for pattern, kind in kinds.items():
            if fnmatch.fnmatchcase(label, pattern):
                out[col] = kind
                break
        else:
            out[col] = infer_kind(df[col])
    return out


def with_unit(header: str, kind: str) -> str:
    """The header with its kind's unit appended, unless it names the unit already."""
    unit = KINDS[kind].unit
    if not unit or unit in header or (unit == "tokens" and "token" in header):
        return header
    return f"{header} ({unit})"


def _as_columns(df: pd.DataFrame) -> pd.DataFrame:
    """A meaningful index (named, or not 0..n-1) becomes leading columns; the index itself is never shown."""
    if isinstance(df.index, pd.RangeIndex) and df.index.name is None and df.index.start == 0 and df.index.step == 1:
        return df
    if df.index.name is None and df.index.names == [None] and pd.api.types.is_integer_dtype(df.index):
        return df.reset_index(drop=True)
    return df.reset_index()


def format_frame(df: pd.DataFrame, kinds: dict[str, str] | None = None, units: bool = True) -> pd.DataFrame:
    """The table as strings: every cell formatted by its column's kind, the index dropped, units in headers."""
    df = _as_columns(df)
    ck = column_kinds(df, kinds)
    out = pd.DataFrame({col: [format_value(x, ck[col]) for x in df[col]] for col in df.columns}, index=df.index)
    out.columns = df.columns
    if units:
        if isinstance(df.columns, pd.MultiIndex):
            out.columns = pd.MultiIndex.from_tuples(
                [tuple(list(col[:-1]) + [with_unit(str(col[-1]), ck[col])]) for col in df.columns])
        else:
            out.columns = [with_unit(str(col), ck[col]) for col in df.columns]
    return out


def estimated_width(formatted: pd.DataFrame) -> float:
    """Pixels the table needs: per column the longest cell or header word run, at the table font."""
    total = 0.0
    for i, col in enumerate(formatted.columns):
        header = col[-1] if isinstance(col, tuple) else col
        # a header wraps at spaces, but not below its longest word or about 12 characters
        words = str(header).split()
        head = max(max((len(w) for w in words), default=0), min(len(str(header)), 12))
        cells = max((len(x) for x in formatted.iloc[:, i]), default=0)
        total += max(head, cells) * CHAR_PX + CELL_PAD_PX
    return total


def table_html(formatted: pd.DataFrame, numeric: list[bool], caption: str | None = None) -> str:
    """The formatted table as HTML inside a scrolling container; numeric columns right-aligned."""
    cols = list(formatted.columns)
    multi = isinstance(formatted.columns, pd.MultiIndex)
    head = []
    if multi:
        nlev = formatted.columns.nlevels
        # a column with no sub-headers (a key like k) spans every header row
        solo = [all(not str(x) for x in col[1:]) for col in cols]
        for lev in range(nlev):
            cells, i = [], 0
            while i < len(cols):
                if solo[i]:
                    if lev == 0:
                        cls = "pv-num" if numeric[i] else "pv-text"
                        cells.append(f'<th rowspan="{nlev}" class="{cls}">{html.escape(str(cols[i][0]))}</th>')
                    i += 1
                    continue
                span = 1
                if lev < nlev - 1:
                    while (i + span < len(cols) and not solo[i + span]
                           and cols[i + span][: lev + 1] == cols[i][: lev + 1]):
                        span += 1
                text = str(cols[i][lev])
                attr = f' colspan="{span}"' if span > 1 else ""
                cls = "pv-group" if lev < nlev - 1 else ("pv-num" if numeric[i] else "pv-text")
                cells.append(f'<th{attr} class="{cls}">{html.escape(text)}</th>')
                i += span
            head.append("<tr>" + "".join(cells) + "</tr>")
    else:
        head.append("<tr>" + "".join(f'<th class="{"pv-num" if n else "pv-text"}">{html.escape(str(c))}</th>'
                                     for c, n in zip(cols, numeric)) + "</tr>")
    body = []
    for row in formatted.itertuples(index=False):
        body.append("<tr>" + "".join(f'<td class="{"pv-num" if n else "pv-text"}">{html.escape(str(v))}</td>'
                                     for v, n in zip(row, numeric)) + "</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return ('<div class="pv-table-wrap" style="overflow-x:auto;max-width:100%">'
            f'<table class="pv-table">{cap}<thead>{"".join(head)}</thead><tbody>{"".join(body)}</tbody></table></div>')


def _inline_html(text: str) -> str:
    """Markdown text with inline code spans (`x`) as HTML: the rest escaped."""
    parts = str(text).split("`")
    return "".join(f"<code>{html.escape(x)}</code>" if i % 2 else html.escape(x) for i, x in enumerate(parts))


def small_table_html(caption: str, header: list[str], rows: list[list[str]]) -> str:
    """A small table of text cells (inline code spans kept) with its caption, in the book tables' style and
    scroll box: for tables written by the book itself (a chapter's parameters, a run's), as one HTML block
    with no blank line, so that MyST and markdown-it pass it through inside an admonition. Class ``pv-table
    pv-params``: styled as the chapters' tables, told apart from them (those have a CSV download each)."""
    head = "<tr>" + "".join(f'<th class="pv-text">{html.escape(h)}</th>' for h in header) + "</tr>"
    body = "".join("<tr>" + "".join(f'<td class="pv-text">{_inline_html(c)}</td>' for c in row) + "</tr>"
                   for row in rows)
    return ('<div class="pv-table-wrap" style="overflow-x:auto;max-width:100%">'
            f'<table class="pv-table pv-params"><caption>{html.escape(caption)}</caption><thead>{head}</thead>'
            f'<tbody>{body}</tbody></table></div>')


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"table name {name!r} has no letters or digits")
    return slug


def csv_text(df: pd.DataFrame) -> str:
    """The raw values (full precision, integers as integers, missing empty), headers flattened."""
    df = _as_columns(df)
    out = df.copy()
    out.columns = [_label(c) for c in df.columns]
    for col in out.columns:
        s = out[col]
        if pd.api.types.is_float_dtype(s) and _integral(s) and s.notna().all():
            out[col] = s.astype("int64")
    return out.to_csv(index=False, lineterminator="\n")


def table_bundle(df: pd.DataFrame, name: str, kinds: dict[str, str] | None = None, caption: str | None = None,
                 units: bool = True, wide: bool | None = None) -> tuple[dict, dict]:
    """(data, metadata) of the display output ``show_table`` emits."""
    slug = _slug(name)
    df = _as_columns(df)
    formatted = format_frame(df, kinds, units)
    ck = column_kinds(df, kinds)
    numeric = [ck[c] not in ("text", "bool") for c in df.columns]
    width = estimated_width(formatted)
    is_wide = width > COLUMN_PX if wide is None else bool(wide)
    data = {"text/html": table_html(formatted, numeric, caption),
            "text/plain": formatted.to_string(index=False),
            MIME: {"name": slug, "csv": csv_text(df), "wide": is_wide, "width_px": round(width)}}
    return data, {"polyvox": {"table": slug, "wide": is_wide}}


class CaptionError(ValueError):
    pass


def show_table(df: pd.DataFrame, name: str, kinds: dict[str, str] | None = None, caption: str | None = None,
               units: bool = True, wide: bool | None = None) -> None:
    """Display ``df`` in the book's table style, downloadable as ``<name>.csv`` in the built book.

    kinds: column name or glob pattern -> kind (see ``KINDS``); columns not named are
    inferred (integral numbers -> int, other reals -> score, text). caption: required — every book
    table says what it holds (``CaptionError`` otherwise). wide: force the full-width placement
    (default: when the estimated width exceeds the text column).
    """
    from IPython.display import display

    if not caption or not caption.strip():
        raise CaptionError(f"table {name!r}: a caption is required (what the table holds, in a sentence)")

    data, metadata = table_bundle(df, name, kinds, caption, units, wide)
    display(data, raw=True, metadata=metadata)


# a report.beside table shown with grouped(): values at print precision, differences signed
BESIDE_KINDS = {"* / recomputed": "value", "* / published": "value", "* / Δ": "delta"}


def long_form(table: pd.DataFrame, on: list[str], columns: list[str],
              suffixes=(" (recomputed)", " (published)", " Δ")) -> pd.DataFrame:
    """A ``report.beside`` table reshaped long: one row per (keys, quantity) with recomputed, published, Δ."""
    rows = []
    for _, r in table.iterrows():
        for c in columns:
            rows.append({**{k: r[k] for k in on}, "quantity": c, "recomputed": r[f"{c}{suffixes[0]}"],
                         "published": r[f"{c}{suffixes[1]}"], "Δ": r[f"{c}{suffixes[2]}"]})
    return pd.DataFrame(rows)


def grouped(table: pd.DataFrame, on: list[str], columns: list[str],
            suffixes=(" (recomputed)", " (published)", " Δ"), labels=("recomputed", "published", "Δ")) -> pd.DataFrame:
    """A ``report.beside`` table with two header rows: the quantity over (recomputed, published, Δ)."""
    parts = {(k, ""): table[k] for k in on}
    for c in columns:
        for s, lab in zip(suffixes, labels):
            parts[(c, lab)] = table[f"{c}{s}"]
    out = pd.DataFrame(parts)
    out.columns = pd.MultiIndex.from_tuples(list(parts))
    return out
