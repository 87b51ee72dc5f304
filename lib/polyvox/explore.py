"""Browse and compare rollouts: a sortable, filterable table of problems × systems and
side-by-side traces, from any run folder or from the book's published records.

Works the same in a live Jupyter notebook (``.venv/bin/jupyter lab``) and in the built book::

    from polyvox import explore
    explore.init()                        # once per notebook: the table and math libraries, offline
    ro = explore.load("runs/my-sample")   # a run folder, a folder of run folders, or None
    ro.show_table()                       # problems × systems: correctness, length, cap hits
    ro.side_by_side("w1-3f2f8c348e")      # two systems' traces on one problem, rendered

What it reads
- ``load(None)`` (the default): the published case study of the panel-of-experts study
  (``<data_dir>/multipersona/reports/case_study/transcripts.json``): 20 problems, one
  ``panel`` and one ``thinking`` trace each. Problems in ``graded_categories`` are graded
  against the first number of the study's ``expected`` text (math-verify, task ``math``);
  the others have no single checkable answer (correctness ``None``). These records carry
  no finish reason or token count: a trace without its closing marker (``</answer>`` for
  the panel, ``</think>`` for thinking) counts as a cap hit, and length is in words.
- ``load(path)``: a run folder as ``polyvox sample`` / :mod:`polyvox.runs` writes it
  (``manifest.json`` with ``settings`` and ``rollouts.jsonl`` and/or ``graded.jsonl``) is one
  system, named after the folder; a folder holding run folders at any depth (a
  ``generate=true`` chapter run, ``data/runs/world/seed-0/eval/cap-256``) gives one system per
  run folder, named by its path below ``path``. ``load([p, q])`` or ``load({"a": p, "b": q})``
  names them explicitly. Problem texts and golds come from the run's task
  (:func:`polyvox.tasks.load` with the run's task options, under ``data_dir``); a run
  without ``graded.jsonl`` is graded in memory with the task's grader (nothing is written).
  Length is the recorded ``completion_tokens``; a cap hit is ``finish_reason == "length"``.
  Bad input raises :class:`polyvox.records.RecordError` naming the file.

What it shows
- :meth:`Rollouts.table`: one row per problem; per system its correctness (``yes``/``no``
  with one sample, the fraction correct with several), mean length and cap hits.
  :meth:`Rollouts.show_table` renders it with itables (DataTables), offline: click a header
  to sort, type in the search box to filter, choose the page length.
- :meth:`Rollouts.side_by_side`: the problem text, the gold, and for each of two systems
  the full final answer and the full reasoning, Markdown and LaTeX rendered
  (markdown-it; math marked up as Sphinx does, ``<span class="math">\\(…\\)</span>``, and
  typeset by MathJax). :meth:`Rollouts.compare` gives one collapsible block per problem.

Math typesetting: JupyterLab typesets HTML outputs with its own bundled MathJax. For the
book and other static HTML, :func:`init` embeds MathJax 3 (the SVG build from the
``django-static-mathjax`` package, Apache-2.0) in the output, so pages render math without
network access; it stands aside when the page already has a MathJax or runs inside Jupyter.
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import formats
from .records import GradedSample, RecordError, Sample, portable_path, read_json, read_jsonl, read_manifest

ROLLOUTS, GRADED, MANIFEST = "rollouts.jsonl", "graded.jsonl", "manifest.json"
CASE_STUDY = "multipersona/reports/case_study/transcripts.json"
GRADED_CATEGORIES = ("two_route", "distractor", "multistep")


# ------------------------------------------------------------------ loading

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

    # -------------------------------------------------------------- table
    def table(self, systems: list | None = None) -> pd.DataFrame:
        """Problems × systems: per system correctness, mean length and cap hits (one row per problem),
        then the gold and the problem text."""
        systems = self._systems(systems)
        t = self.traces[self.traces["system"].isin(systems)]
        single = bool((t.groupby(["system", "problem_id"]).size() == 1).all())
        order = list(dict.fromkeys(t["problem_id"]))
        rows = []
        for pid in order:
            p = self.problems.get(pid, {})
            row = {"problem": pid}
            if any(q.get("label") for q in self.problems.values()):
                row["label"] = p.get("label", "")
            row["text"] = p.get("text") or ""
            row["gold"] = p.get("gold") or ""
            for s in systems:
                sub = t[(t["system"] == s) & (t["problem_id"] == pid)]
                graded = sub["correct"].dropna()
                if single:
                    row[f"{s}: correct"] = "—" if graded.empty else ("yes" if bool(graded.iloc[0]) else "no")
                    row[f"{s}: {self.length_unit}"] = int(sub["length"].iloc[0]) if len(sub) else None
                    row[f"{s}: cap hit"] = ("yes" if bool(sub["cap_hit"].iloc[0]) else "no") if len(sub) else "—"
                else:
                    row[f"{s}: correct"] = round(float(graded.astype(float).mean()), 3) if len(graded) else None
                    row[f"{s}: mean {self.length_unit}"] = round(float(sub["length"].mean()), 1) if len(sub) else None
                    row[f"{s}: cap hits"] = int(sub["cap_hit"].sum())
                    row[f"{s}: samples"] = int(len(sub))
            row["gold"], row["text"] = row.pop("gold"), row.pop("text")  # correctness first, texts last
            rows.append(row)
        return pd.DataFrame(rows)

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
        if row.get("extracted"):
            facts.append(f"graded answer <code>{html.escape(str(row['extracted']))}</code>")
        final = row["final"].strip()
        final_html = render_markdown(final) if final else "<p><i>no final answer</i></p>"
        reasoning = row["reasoning"].strip()
        reasoning_html = (f"<details class='pv-reasoning' open><summary>Reasoning ({len(reasoning.split())} words)"
                          f"</summary><div class='pv-md pv-scroll'>{render_markdown(reasoning)}</div></details>"
                          if reasoning else "")
        return (f"<div class='pv-col'>{title} <span class='pv-facts'>· {' · '.join(facts)}</span></div>"
                f"<div class='pv-final'><i>Final answer</i><div class='pv-md'>{final_html}</div></div>"
                f"{reasoning_html}</div>")


def _outcome(correct) -> str:
    if correct is None or (isinstance(correct, float) and pd.isna(correct)):
        return "not graded"
    return "correct" if bool(correct) else "wrong"


def load(runs=None, data_dir="data", grade: bool = True,
         graded_categories=GRADED_CATEGORIES) -> Rollouts:
    """Rollouts from ``runs`` (None → the published case study; a path, a list of paths or {name: path})."""
    data_dir = _data_dir(data_dir)
    if runs is None or runs == "":
        return published(data_dir, graded_categories)
    if isinstance(runs, dict):
        named = [(str(k), _data_dir(v)) for k, v in runs.items()]
    elif isinstance(runs, (list, tuple)):
        named = [(_name(_data_dir(r), _data_dir(r)), _data_dir(r)) for r in runs]
    else:
        root = _data_dir(runs)
        named = [(_name(d, root), d) for d in find_runs(root)]
    frames, problems, notes = [], {}, []
    for name, folder in named:
        df, probs, note = _load_run(folder, name, data_dir, grade)
        frames.append(df)
        problems.update(probs)
        notes += note
    traces = pd.concat(frames, ignore_index=True)
    source = ", ".join(portable_path(p) for _, p in named) if isinstance(runs, (dict, list, tuple)) \
        else portable_path(_data_dir(runs))
    return Rollouts(traces, problems, [n for n, _ in named], "tokens", source, notes)


def _data_dir(data_dir) -> Path:
    """A relative path as given when it exists, else against the repository root (a notebook
    opened from notebooks/<part>/ names runs/ and data/ as the book's build does)."""
    p = Path(data_dir)
    if p.is_absolute() or p.exists():
        return p
    try:  # a chapter opened from notebooks/<part>/ in Jupyter: the repository's data/
        from .book.build import find_root
        return find_root() / p
    except Exception:  # noqa: BLE001 — outside a checkout the path is used as given
        return p


def _name(folder: Path, root: Path) -> str:
    rel = folder.resolve().relative_to(root.resolve()) if folder.resolve() != root.resolve() else Path(".")
    return folder.resolve().name if str(rel) == "." else rel.as_posix()


def _is_run(folder: Path) -> bool:
    return (folder / MANIFEST).is_file() and ((folder / ROLLOUTS).is_file() or (folder / GRADED).is_file())


def find_runs(path) -> list[Path]:
    """The run folders at or below path (a folder with manifest.json and rollouts.jsonl or graded.jsonl)."""
    path = Path(path)
    if not path.exists():
        raise RecordError(path, None, "no such run folder")
    if not path.is_dir():
        raise RecordError(path, None, "a file, not a run folder")
    if _is_run(path):
        return [path]
    found = sorted({m.parent for m in path.rglob(MANIFEST) if _is_run(m.parent)})
    if not found:
        raise RecordError(path, None, "no run here: a run folder holds manifest.json and rollouts.jsonl "
                                      "or graded.jsonl (polyvox sample --out writes one)")
    return found


def split_trace(fmt: str, completion: str) -> tuple[str, str]:
    """(reasoning, final answer) of a completion in a prompt format (panel, think, plain)."""
    from .answers import answer_body

    if fmt == "think":
        return formats.split_think(completion)
    if fmt == "panel":
        m = re.search(r"<mutipersonaDebate>(.*?)(?:</mutipersonaDebate>|<answer>|$)", completion, re.S)
        reasoning = m.group(1) if m else completion.split("<answer>", 1)[0]
        return reasoning.strip(), (answer_body(completion) or "")
    return "", completion.strip()


def _load_run(folder: Path, name: str, data_dir: Path, grade: bool):
    from . import grading, tasks

    settings = read_manifest(folder).get("settings")
    if not isinstance(settings, dict) or "task" not in settings:
        raise RecordError(folder / MANIFEST, None, "no run settings (task, format): not a polyvox run folder")
    graded_path = folder / GRADED
    records = read_jsonl(graded_path, GradedSample) if graded_path.exists() else read_jsonl(folder / ROLLOUTS, Sample)
    if not records:
        raise RecordError(graded_path if graded_path.exists() else folder / ROLLOUTS, None, "no records")
    notes, problems = [], {}
    try:
        opts = dict(settings.get("task_options") or {})
        loaded = tasks.load(settings["task"], data_dir, limit=settings.get("limit"), **opts)
        problems = {p.id: {"text": p.text, "gold": p.gold,
                           "label": " ".join(str(p.metadata[k]) for k in ("level", "subject", "source")
                                             if k in p.metadata)} for p in loaded}
    except Exception as exc:  # noqa: BLE001 — the traces are still worth showing
        notes.append(f"{name}: problem texts not available (task {settings['task']!r} under {data_dir}: {exc})")
    graded = [getattr(r, "correct", None) if graded_path.exists() else None for r in records]
    extracted = [getattr(r, "extracted", None) for r in records]
    if not graded_path.exists() and grade and problems:
        task = tasks.get(settings["task"])
        todo = [i for i, r in enumerate(records) if r.problem_id in problems]
        results = grading.grade_many(task.grader, [records[i].completion for i in todo],
                                     [problems[records[i].problem_id]["gold"] for i in todo], workers=1,
                                     options=grading.GradeOptions(**task.grade_options))
        for i, g in zip(todo, results):
            graded[i], extracted[i] = g.correct, g.extracted
    fmt = settings.get("format", "plain")
    rows = []
    for r, ok, ex in zip(records, graded, extracted):
        reasoning, final = split_trace(fmt, r.completion)
        rows.append({"system": name, "problem_id": r.problem_id, "sample_index": r.sample_index,
                     "completion": r.completion, "reasoning": reasoning, "final": final, "correct": ok,
                     "length": r.completion_tokens, "cap_hit": r.finish_reason == "length", "extracted": ex})
    return pd.DataFrame(rows), problems, notes


def _leading_number(text: str):
    m = re.search(r"-?\d+(?:/\d+)?(?:\.\d+)?", text.replace(",", ""))
    return m.group(0) if m else None


def published(data_dir="data", graded_categories=GRADED_CATEGORIES) -> Rollouts:
    """The published case study: 20 problems × {panel, thinking}, one trace each (see the module docstring)."""
    from . import grading

    path = Path(data_dir) / CASE_STUDY
    data = read_json(path)
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise RecordError(path, None, "expected an object with a non-empty list 'items'")
    systems = ("panel", "thinking")
    for i, it in enumerate(items):
        for key in ("id", "category_short", "problem", "expected", *systems):
            if key not in it:
                raise RecordError(path, None, f"items[{i}]: missing field {key!r}")
        for s in systems:
            if not isinstance(it[s], dict) or not isinstance(it[s].get("raw"), str):
                raise RecordError(path, None, f"items[{i}].{s}: expected an object with a string 'raw'")
    golds = {it["id"]: _leading_number(it["expected"]) for it in items
             if it["category_short"] in graded_categories and _leading_number(it["expected"])}
    grades = {}
    for s in systems:
        ids = list(golds)
        raws = [next(it for it in items if it["id"] == i)[s]["raw"] for i in ids]
        for i, g in zip(ids, grading.grade_many("math", raws, [golds[i] for i in ids], workers=1)):
            grades[(s, i)] = g
    rows = []
    for it in items:
        for s in systems:
            tr = it[s]
            raw = tr["raw"]
            g = grades.get((s, it["id"]))
            reasoning, final = split_trace("panel" if s == "panel" else "think", raw)
            final = tr.get("answer") if isinstance(tr.get("answer"), str) else final
            final = final.replace("<|im_end|>", "").strip()
            closing = "</answer>" if s == "panel" else "</think>"
            rows.append({"system": s, "problem_id": it["id"], "sample_index": 0, "completion": raw,
                         "reasoning": tr.get("reasoning") if isinstance(tr.get("reasoning"), str) else reasoning,
                         "final": final, "correct": None if g is None else g.correct,
                         "length": len(raw.split()), "cap_hit": closing not in raw,
                         "extracted": None if g is None else g.extracted})
    problems = {it["id"]: {"text": it["problem"], "gold": it["expected"], "label": it["category_short"]}
                for it in items}
    ro = Rollouts(pd.DataFrame(rows), problems, list(systems), "words", portable_path(path))
    ro.meta = data.get("metadata", {})
    return ro


# ------------------------------------------------------------------ rendering

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
    out = re.sub(r"PVMATHSPAN(\d+)X", lambda m: spans[int(m.group(1))], out)
    tag = "span" if inline else "div"
    return f"<{tag} class='mathjax_ignore tex2jax_ignore'>{out}</{tag}>"


STYLE = """<style>
.pv-explore{margin:0.5em 0 1.5em 0;max-width:100%}
.pv-problem{margin-bottom:0.6em}
.pv-pair{display:flex;flex-wrap:wrap;gap:1em}
.pv-col{flex:1 1 20em;min-width:0;max-width:100%}
.pv-sys{font-weight:bold;margin-bottom:0.3em}
.pv-facts{font-weight:normal}
.pv-final{border-left:3px solid #7a9;padding-left:0.6em;margin-bottom:0.6em;max-height:30em;overflow:auto}
.pv-md h1,.pv-md h2,.pv-md h3,.pv-md h4,.pv-md h5,.pv-md h6{font-size:1em;font-weight:bold;margin:0.6em 0 0.3em 0}
.pv-scroll{max-height:36em;overflow:auto;border:1px solid #ddd;padding:0.3em 0.6em;font-size:0.9em}
.pv-md{overflow-x:auto;max-width:100%}
.pv-md pre{white-space:pre-wrap}
.pv-display{display:block;overflow-x:auto;margin:0.4em 0}
.pv-explore mjx-container{max-width:100%;overflow-x:auto;overflow-y:hidden}
</style>"""


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
TABLE_STYLE = """<style>
.dt-container select.dt-input{min-width:4.5em;padding:0.15em 0.4em;color:inherit;background:inherit;
  border:1px solid #aaa;border-radius:3px;height:auto;font-size:0.9em;appearance:auto}
.dt-container select.dt-input option{color:#222;background:#fff}
.dt-container input.dt-input{border:1px solid #aaa;border-radius:3px;padding:0.15em 0.4em;color:inherit}
.dt-container table.dataTable thead th{cursor:pointer;white-space:normal;vertical-align:bottom}
.dt-container table.dataTable td{vertical-align:top}
.dt-container table.dataTable td.pv-text{min-width:22em}
.dt-container table.dataTable td.pv-gold{min-width:9em}
</style>"""


def mathjax_html() -> str:
    """A script that loads MathJax 3 (SVG output) from this environment, for static HTML without network.

    It does nothing where a MathJax is already loaded or inside Jupyter (which typesets
    outputs itself).
    """
    from importlib.resources import files

    try:
        src = (files("mathjax") / "static" / "mathjax" / "es5" / "tex-svg.js").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise RuntimeError("MathJax is not installed: pip install django-static-mathjax==3.2.2.1 "
                           f"(requirements.lock) ({exc})") from None
    config = {"tex": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]]},
              "options": {"ignoreHtmlClass": "tex2jax_ignore|mathjax_ignore|document",
                          "processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"},
              "svg": {"fontCache": "global"}}
    return ("<script>if (!(window.MathJax && window.MathJax.version) && !document.querySelector("
            "'.jp-LabShell, .jp-Notebook, #notebook-container')) {\n"
            f"window.MathJax = {json.dumps(config)};\n{src}\n}}</script>")


def init(connected: bool = False) -> None:
    """Once per notebook: itables' DataTables (embedded when not connected) and, for static HTML, MathJax."""
    from IPython.display import HTML, display
    from itables import init_notebook_mode

    init_notebook_mode(all_interactive=False, connected=connected)
    if not connected:
        display(HTML(mathjax_html()))
