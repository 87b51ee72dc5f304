"""The explorer page: its data (:func:`explorer_data`, JSON-able, traces rendered once into a pool),
the quick filters (the same rules in Python and in the page's JavaScript), and the page fragment
(:func:`explorer_html`: controls in HTML, the data as JSON, ``assets/explorer.js`` and ``explorer.css``)."""
from __future__ import annotations

import html
import json
import uuid
from typing import TYPE_CHECKING

from .markdown import STYLE, asset, render_markdown, style
from .summary import _missing, answer_text

if TYPE_CHECKING:
    from .rollouts import Rollouts

MAX_TRACE_MB = 16.0  # rendered trace HTML embedded in one explorer page (identical traces stored once)
EXPLORER_STYLE = style("explorer.css")
EXPLORER_JS = asset("explorer.js").removesuffix("\n")  # __PVID__ stands for the page fragment's id


QUICK_FILTERS = {  # key → (button label, what it keeps); the page's JavaScript applies the same rules (PRED)
    "ab": ("A right, B wrong", "A is correct on more of its samples than B (one sample each: A right, B wrong)"),
    "ba": ("B right, A wrong", "B is correct on more of its samples than A"),
    "disagree": ("systems disagree", "the systems' most frequent graded answers differ (no answer counts as one)"),
    "wrong": ("wrong only", "at least one sample of a system graded wrong"),
    "cap": ("cap hit", "at least one sample cut at the token cap"),
    "invalid": ("invalid format", "at least one sample fails its format's check (panel: debate then answer "
                                  "blocks; think: a closed think block, then a boxed answer)"),
}


def _acc(st):
    return st["correct"] / st["graded"] if st and st["graded"] else None


def quick_filter(row: dict, key: str, systems: list, a: str, b: str) -> bool:
    """Whether an explorer row (``explorer_data(...)["groups"][i]["rows"][j]``) passes quick filter ``key``
    with systems ``a`` and ``b`` compared — the rules the page applies (see :data:`QUICK_FILTERS`)."""
    st = row["stats"]
    if key in ("ab", "ba"):
        x, y = (_acc(st.get(a)), _acc(st.get(b))) if key == "ab" else (_acc(st.get(b)), _acc(st.get(a)))
        return a != b and x is not None and y is not None and x > y
    if key == "disagree":
        return len({st[s]["answer"] for s in systems if st.get(s) and st[s]["graded"]}) > 1
    if key == "wrong":
        return any(st[s]["graded"] > st[s]["correct"] for s in systems if st.get(s))
    if key == "cap":
        return any(st[s]["cap"] > 0 for s in systems if st.get(s))
    if key == "invalid":
        return any(st[s]["invalid"] > 0 for s in systems if st.get(s))
    raise KeyError(f"unknown quick filter {key!r}; filters: {', '.join(QUICK_FILTERS)}")


def filter_rows(group: dict, key: str, a: str | None = None, b: str | None = None) -> list[str]:
    """The problem ids of an explorer group that quick filter ``key`` keeps (``a``/``b``: the group's defaults)."""
    a, b = a or group["a"], b or group["b"]
    return [r["id"] for r in group["rows"] if quick_filter(r, key, group["systems"], a, b)]


def explorer_data(ro: Rollouts, systems: list | None = None, a: str | None = None, b: str | None = None,
                  page_length: int = 10, max_trace_mb: float = MAX_TRACE_MB) -> dict:
    """Everything the explorer page shows, as JSON-able data (rendered HTML in one shared ``pool``).

    ``groups``: one per benchmark: ``systems``, default ``a``/``b``, ``rows`` (id, label, plain text,
    gold, the rendered problem (a pool index), per-system summaries (:func:`summarize`, plus ``shown``:
    the answer as displayed)) and
    ``traces``: problem → system → every sample (index, correct, graded answer, length, cap hit,
    format validity, final answer and reasoning as pool indices), for the problems within the cap.
    ``embedded``: how many problems' traces are on the page, of how many, and the cap.
    """
    pool: list[str] = []
    seen: dict[str, int] = {}
    size = [0]

    def put(text: str, inline: bool = False) -> int:
        key = ("i" if inline else "b") + text
        if key not in seen:
            rendered = render_markdown(text, inline=inline)
            seen[key] = len(pool)
            pool.append(rendered)
            size[0] += len(rendered.encode("utf-8"))
        return seen[key]

    groups_in = ro.groups(systems)
    stats = ro.stats(systems)
    cap_bytes = max_trace_mb * 1e6
    embedded = total = 0
    groups = []
    for bench, group in groups_in.items():
        ga, gb = _group_pair(group, a, b)
        t = ro.traces[ro.traces["system"].isin(group)]
        rows, traces = [], {}
        for pid in dict.fromkeys(t["problem_id"]):
            p = ro.problems.get(pid, {})
            text, gold, label = str(p.get("text") or ""), str(p.get("gold") or ""), str(p.get("label") or "")
            row_stats = {}
            for s in group:
                st = stats.get((s, pid))
                if st is not None:
                    row_stats[s] = {**st, "length": round(st["length"], 1), "shown": answer_text(st)}
            rows.append({"id": str(pid), "label": label, "text": text, "gold": gold,
                         "problem": put(text or "(problem text not available)"), "stats": row_stats})
            total += 1
            if size[0] > cap_bytes:
                continue
            per = {}
            for s in group:
                sub = t[(t["system"] == s) & (t["problem_id"] == pid)].sort_values("sample_index")
                per[s] = [{"i": int(r.sample_index), "correct": None if _missing(r.correct) else bool(r.correct),
                           "answer": None if _missing(r.extracted) else str(r.extracted),
                           "length": int(r.length), "cap": bool(r.cap_hit),
                           "valid": None if _missing(getattr(r, "format_ok", None)) else bool(r.format_ok),
                           "final": put(str(r.final).strip()) if str(r.final).strip() else None,
                           "reasoning": put(str(r.reasoning).strip()) if str(r.reasoning).strip() else None,
                           "words": len(str(r.reasoning).split())}
                          for r in sub.itertuples()]
            traces[str(pid)] = per
            embedded += 1
        groups.append({"name": bench or "rollouts", "systems": list(group), "a": ga, "b": gb,
                       "rows": rows, "traces": traces})
    return {"id": f"pv-explorer-{uuid.uuid4().hex[:12]}", "unit": ro.length_unit, "source": ro.source,
            "page_length": int(page_length), "groups": groups, "pool": pool,
            "filters": {k: list(v) for k, v in QUICK_FILTERS.items()},
            "embedded": {"problems": embedded, "of": total, "mb": round(size[0] / 1e6, 4), "cap_mb": max_trace_mb}}


def _group_pair(group: list, a, b) -> tuple[str, str]:
    """The pair compared in one benchmark: a/b where they belong to it, else its first two systems."""
    a = a if a in group else None
    b = b if b in group else None
    if a is None:
        a = next((s for s in group if s != b), group[0])
    if b is None:
        b = next((s for s in group if s != a), a)
    return a, b


def _json_script(obj) -> str:
    """JSON safe inside <script type="application/json">: no ``</`` (which would close it) nor ``<!--``."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\u0021--")


def _mb(mb: float) -> str:
    return f"{mb:.1f} MB" if mb >= 0.1 else f"{max(mb * 1000, 0.1):.0f} kB" if mb >= 0.001 else "under 1 kB"


def explorer_html(data: dict) -> str:
    """The explorer page fragment for :func:`explorer_data`'s data: controls in HTML (shown before and
    without the script), the data as JSON, the vanilla JavaScript that draws the table and the traces."""
    did = data["id"]
    e = data["embedded"]
    esc = html.escape
    if e["problems"] == e["of"]:
        cap_line = (f"Traces of all {e['of']} problems are on this page ({_mb(e['mb'])} of rendered traces; cap "
                    f"{e['cap_mb']:g} MB).")
    else:
        cap_line = (f"<b>Traces of the first {e['problems']} of {e['of']} problems are on this page</b> (cap "
                    f"{e['cap_mb']:g} MB of rendered traces reached); the other rows list no traces. Raise it "
                    f"with <code>ro.explorer(max_trace_mb=…)</code> live (<code>polyvox explore RUN</code>), or "
                    f"narrow the systems with <code>systems=[…]</code>.")
    groups = data["groups"]
    bench = ""
    if len(groups) > 1:
        bench = ("<label class='pv-ctl'>benchmark <select class='pv-bench'>" + "".join(
            f"<option value='{i}'>{esc(g['name'])} ({len(g['systems'])} system{'s' if len(g['systems']) > 1 else ''}, "
            f"{len(g['rows'])} problems)</option>" for i, g in enumerate(groups)) + "</select></label>")
    g0 = groups[0]
    pick = lambda cls, cur: (f"<select class='{cls}'>" + "".join(  # noqa: E731
        f"<option{' selected' if s == cur else ''}>{esc(s)}</option>" for s in g0["systems"]) + "</select>")
    lengths = sorted({10, 25, 50, 100, data["page_length"]})
    menu = ("<select class='pv-len'>" + "".join(
        f"<option value='{n}'{' selected' if n == data['page_length'] else ''}>{n}</option>" for n in lengths)
        + "<option value='0'>all</option></select>")
    buttons = "".join(f"<button type='button' class='pv-btn pv-filter' data-filter='{k}' aria-pressed='false' "
                      f"title='{esc(why)}'>{esc(label)} <span class='pv-count'></span></button>"
                      for k, (label, why) in data["filters"].items())
    legend = "".join(f"<li><b>{esc(label)}</b>: {esc(why)}</li>" for label, why in data["filters"].values())
    return (f"<div class='pv-x' id='{did}'>{STYLE}{EXPLORER_STYLE}"
            f"<div class='pv-bar'>{bench}"
            f"<label class='pv-ctl'>A {pick('pv-a', g0['a'])}</label>"
            f"<label class='pv-ctl'>B {pick('pv-b', g0['b'])}</label>"
            f"<label class='pv-ctl pv-searchbox'>search <input type='search' class='pv-search' "
            f"placeholder='id, text, gold, answer…'></label>"
            f"<label class='pv-ctl'>show {menu} rows</label></div>"
            f"<div class='pv-bar pv-filters'>{buttons}"
            f"<button type='button' class='pv-btn pv-clear'>clear filters</button></div>"
            f"<details class='pv-legend'><summary>What the quick filters keep (they combine with each other and with "
            f"the search)</summary><ul>{legend}</ul></details>"
            f"<div class='pv-note'>Click a row to open its traces side by side, with a selector over all samples. "
            f"{cap_line}</div>"
            f"<div class='pv-scrollx'><table class='pv-xtable'><caption>One row per problem: each system's graded answers and "
            f"correctness, sortable by a click on a header.</caption><thead></thead><tbody><tr><td>The explorer draws "
            f"this table with JavaScript: if this line stays, run the cell again (JupyterLab runs scripts of "
            f"trusted outputs only).</td></tr></tbody></table></div>"
            f"<div class='pv-bar pv-foot'><span class='pv-info'></span><span class='pv-pager'>"
            f"<button type='button' class='pv-btn pv-prev'>‹ previous</button> <span class='pv-page'></span> "
            f"<button type='button' class='pv-btn pv-next'>next ›</button></span></div>"
            f"<script type='application/json' id='{did}-data'>{_json_script(data)}</script>"
            f"<script>{EXPLORER_JS.replace('__PVID__', did)}</script></div>")
