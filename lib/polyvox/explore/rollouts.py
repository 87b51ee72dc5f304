"""The rollouts of one or more systems and their views: the table, the explorer, the side-by-side traces."""
from __future__ import annotations

import html
from dataclasses import dataclass, field

import pandas as pd

from .markdown import STYLE, render_markdown, table_html
from .page import MAX_TRACE_MB, explorer_data, explorer_html
from .summary import NO_ANSWER, _missing, _outcome, answer_text, summarize


@dataclass
class Rollouts:
    """Traces of one or more systems on a set of problems.

    ``traces``: one row per sample — system, problem_id, sample_index, completion,
    reasoning, final, correct (True/False/None), length, cap_hit, extracted.
    ``problems``: id → {"text", "gold", "label"}. ``length_unit``: "tokens" or "words".
    """

    traces: pd.DataFrame
    problems: dict
    systems: list
    length_unit: str = "tokens"
    source: str = ""
    notes: list = field(default_factory=list)
    benchmarks: dict = field(default_factory=dict)  # system → benchmark (the run's task); one group when empty

    # -------------------------------------------------------------- table
    def groups(self, systems: list | None = None) -> dict[str, list[str]]:
        """Benchmark → its systems, in order (one group when the systems share a task)."""
        out: dict[str, list[str]] = {}
        for s in self._systems(systems):
            out.setdefault(self.benchmarks.get(s, ""), []).append(s)
        return out

    def stats(self, systems: list | None = None) -> dict:
        """(system, problem_id) → per-problem summary of its samples (see :func:`summarize`)."""
        t = self.traces[self.traces["system"].isin(self._systems(systems))]
        return {key: summarize(sub) for key, sub in t.groupby(["system", "problem_id"], sort=False)}

    def table(self, systems: list | None = None) -> pd.DataFrame:
        """Problems × systems: per system correctness, graded answer, mean length and cap hits (one row
        per problem), then the gold and the problem text. With several benchmarks, a ``benchmark`` column.

        One sample per problem: correctness ``yes``/``no``/``not graded``; several: the fraction correct
        (None when nothing is graded). The answer is the most frequent graded answer, ``no answer`` when
        the grader found none; lengths are rounded to whole tokens (words)."""
        groups = self.groups(systems)
        stats = self.stats(systems)
        t = self.traces[self.traces["system"].isin([s for g in groups.values() for s in g])]
        single = bool((t.groupby(["system", "problem_id"]).size() == 1).all())
        rows = []
        for bench, group in groups.items():
            sub_t = t[t["system"].isin(group)]
            for pid in dict.fromkeys(sub_t["problem_id"]):
                p = self.problems.get(pid, {})
                row = {"problem": pid}
                if len(groups) > 1:
                    row["benchmark"] = bench
                if any(q.get("label") for q in self.problems.values()):
                    row["label"] = p.get("label", "")
                for s in [x for g in groups.values() for x in g]:
                    st = stats.get((s, pid)) if s in group else None
                    if single:
                        row[f"{s}: correct"] = "—" if st is None else (
                            "not graded" if not st["graded"] else ("yes" if st["correct"] else "no"))
                        row[f"{s}: answer"] = "—" if st is None else answer_text(st)
                        row[f"{s}: {self.length_unit}"] = None if st is None else int(round(st["length"]))
                        row[f"{s}: cap hit"] = "—" if st is None else ("yes" if st["cap"] else "no")
                    else:
                        row[f"{s}: correct"] = None if st is None or not st["graded"] else round(
                            st["correct"] / st["graded"], 3)
                        row[f"{s}: answer"] = "—" if st is None else answer_text(st)
                        row[f"{s}: mean {self.length_unit}"] = None if st is None else int(round(st["length"]))
                        row[f"{s}: cap hits"] = 0 if st is None else st["cap"]
                        row[f"{s}: samples"] = 0 if st is None else st["n"]
                row["gold"] = p.get("gold") or ""
                row["text"] = p.get("text") or ""
                rows.append(row)
        return pd.DataFrame(rows)

    def explorer(self, systems: list | None = None, a: str | None = None, b: str | None = None,
                 page_length: int = 10, max_trace_mb: float = MAX_TRACE_MB):
        """The explorer as HTML: search box, quick filters, page-length menu, a sortable table of problems ×
        systems (one per benchmark), and per row both systems' traces with a selector over all samples.
        Self-contained (vanilla JavaScript, data embedded): works in the built book and live in JupyterLab.

        ``a``/``b``: the two systems compared (the quick filters "A right, B wrong" and the side-by-side
        traces; changeable on the page). Traces are embedded up to ``max_trace_mb`` MB of rendered HTML
        (identical traces stored once); problems past the cap are listed and say so, as does the page."""
        from IPython.display import HTML

        return HTML(self.explorer_html(systems, a, b, page_length, max_trace_mb))

    def explorer_html(self, systems: list | None = None, a: str | None = None, b: str | None = None,
                      page_length: int = 10, max_trace_mb: float = MAX_TRACE_MB) -> str:
        return explorer_html(explorer_data(self, systems, a, b, page_length, max_trace_mb))

    def show_table(self, systems: list | None = None, page_length: int = 10, text_chars: int = 160):
        """The table as an interactive itables HTML table (sortable, filterable, paged), offline.

        The problem text is cut to ``text_chars`` for the table (the full text is in the side-by-side).
        """
        from IPython.display import HTML

        df = self.table(systems)
        df["text"] = [s if len(s) <= text_chars else s[:text_chars].rstrip() + "…" for s in df["text"]]
        return HTML(table_html(df, page_length=page_length))

    # -------------------------------------------------------------- traces
    def side_by_side(self, problem_id: str, a: str | None = None, b: str | None = None, sample: int = 0):
        """The problem, its gold and two systems' traces (sample ``sample``), rendered, as HTML."""
        from IPython.display import HTML

        return HTML(self.side_by_side_html(problem_id, a, b, sample))

    def side_by_side_html(self, problem_id: str, a: str | None = None, b: str | None = None,
                          sample: int = 0) -> str:
        a, b = self._pair(a, b)
        if problem_id not in set(self.traces["problem_id"]):
            raise KeyError(f"problem {problem_id!r} is not in {self.source or 'these rollouts'}")
        p = self.problems.get(problem_id, {})
        head = (f"<div class='pv-problem'><b>Problem {html.escape(str(problem_id))}</b>"
                + (f" · {html.escape(str(p['label']))}" if p.get("label") else "")
                + f"<div class='pv-md'>{render_markdown(p.get('text') or '(problem text not available)')}</div>"
                + (f"<div><i>Gold:</i> {render_markdown(str(p['gold']), inline=True)}</div>" if p.get("gold") else "")
                + "</div>")
        cols = "".join(self._trace_column(s, problem_id, sample) for s in (a, b))
        return f"<div class='pv-explore'>{STYLE}{head}<div class='pv-pair'>{cols}</div></div>"

    def compare(self, a: str | None = None, b: str | None = None, problems: list | None = None, sample: int = 0):
        """One collapsible block per problem (summary line: id, label, both systems' outcome), as HTML."""
        from IPython.display import HTML

        a, b = self._pair(a, b)
        ids = problems or list(dict.fromkeys(self.traces["problem_id"]))
        parts = []
        for pid in ids:
            p = self.problems.get(pid, {})
            text = " ".join((p.get("text") or "").split())
            summary = [f"<b>{html.escape(str(pid))}</b>"]
            if p.get("label"):
                summary.append(html.escape(str(p["label"])))
            summary.append(html.escape(text[:110] + ("…" if len(text) > 110 else "")))
            for s in (a, b):
                row = self._row(s, pid, sample)
                if row is not None:
                    summary.append(f"{html.escape(s)}: {_outcome(row['correct'])}, {int(row['length'])} "
                                   f"{self.length_unit}{', cut at the cap' if row['cap_hit'] else ''}")
            parts.append(f"<details><summary>{' · '.join(summary)}</summary>"
                         f"{self.side_by_side_html(pid, a, b, sample)}</details>")
        return HTML(STYLE + "\n".join(parts))

    # -------------------------------------------------------------- helpers
    def _systems(self, systems):
        systems = list(systems or self.systems)
        unknown = [s for s in systems if s not in self.systems]
        if unknown:
            raise KeyError(f"unknown system(s) {', '.join(unknown)}; systems: {', '.join(self.systems)}")
        return systems

    def pair(self, a=None, b=None) -> tuple[str, str]:
        """The two systems to compare: those given, else the first two (one system: itself twice)."""
        return self._pair(a, b)

    def _pair(self, a, b):
        if a is None and b is None:
            if len(self.systems) == 1:
                return self.systems[0], self.systems[0]
            a, b = self.systems[:2]
        elif b is None:
            b = next((s for s in self.systems if s != a), a)
        elif a is None:
            a = next((s for s in self.systems if s != b), b)
        self._systems([a, b])
        return a, b

    def _row(self, system, problem_id, sample):
        t = self.traces
        sub = t[(t["system"] == system) & (t["problem_id"] == problem_id) & (t["sample_index"] == sample)]
        return None if sub.empty else sub.iloc[0]

    def _trace_column(self, system, problem_id, sample):
        row = self._row(system, problem_id, sample)
        title = f"<div class='pv-sys'>{html.escape(system)}"
        if row is None:
            return f"<div class='pv-col'>{title}</div><p>no sample {sample} for this problem</p></div>"
        facts = [_outcome(row["correct"]), f"{int(row['length'])} {self.length_unit}"]
        if row["cap_hit"]:
            facts.append("<b>cut at the token cap</b>")
        if row.get("format_ok") is False:
            facts.append("invalid format")
        if not _missing(row["correct"]):
            ex = None if _missing(row.get("extracted")) else str(row["extracted"])
            facts.append(f"graded answer <code>{html.escape(ex)}</code>" if ex else NO_ANSWER)
        final = row["final"].strip()
        final_html = render_markdown(final) if final else "<p><i>no final answer</i></p>"
        reasoning = row["reasoning"].strip()
        reasoning_html = (f"<details class='pv-reasoning' open><summary>Reasoning ({len(reasoning.split())} words)"
                          f"</summary><div class='pv-md pv-scroll'>{render_markdown(reasoning)}</div></details>"
                          if reasoning else "")
        return (f"<div class='pv-col'>{title} <span class='pv-facts'>· {' · '.join(facts)}</span></div>"
                f"<div class='pv-final'><i>Final answer</i><div class='pv-md'>{final_html}</div></div>"
                f"{reasoning_html}</div>")
