"""Browse and compare rollouts: an explorer (search, quick filters, a table of problems × systems,
every row opening its traces side by side with a selector over all samples), from any run folder
or from the book's published records.

Works the same in the built book (static HTML, offline) and live in JupyterLab::

    from polyvox import explore
    explore.init()                        # once per notebook: math (and table) libraries, offline
    ro = explore.load("runs/my-sample")   # a run folder, a folder of run folders, or None
    ro.explorer()                         # the explorer (a= / b=: the two systems compared)
    ro.side_by_side("w1-3f2f8c348e", sample=3)   # one problem's traces as static HTML

``polyvox explore RUN`` (:func:`write_notebook`) writes ``RUN/explore.ipynb`` with these cells,
to open in JupyterLab without editing a tracked notebook.

The module keeps reading and showing apart: *loading* (:func:`load`, :func:`published`,
:func:`find_runs`) builds a :class:`Rollouts` (one row per sample in ``traces``); everything
after it (:meth:`Rollouts.table`, :func:`explorer_data`, :func:`explorer_html`,
:func:`render_markdown`) reads only that.

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
  run folder, named by its path below ``path``, grouped by benchmark (the run's task).
  ``load([p, q])`` or ``load({"a": p, "b": q})`` names them explicitly. Problem texts and
  golds come from the run's task (:func:`polyvox.tasks.load` with the run's task options,
  under ``data_dir``); a run without ``graded.jsonl`` is graded in memory with the task's
  grader (nothing is written). Length is the recorded ``completion_tokens``; a cap hit is
  ``finish_reason == "length"``; format validity is :func:`polyvox.formats.format_valid` of
  the run's format. Bad input raises :class:`polyvox.records.RecordError` naming the file.

What it shows
- :meth:`Rollouts.explorer`: self-contained HTML and vanilla JavaScript, the data embedded (no
  network): a search box, the page-length menu and the quick filters (:data:`QUICK_FILTERS`:
  A right B wrong, B right A wrong, systems disagree, wrong only, cap hit, invalid format;
  the same rules as :func:`quick_filter`) always shown; one table per benchmark (a menu when
  a folder holds several) with per system its correctness (with the graded answer, ``no
  answer`` when the grader found none) and length (cap hits, invalid formats), the problem
  text wrapped under each row; a click on a row opens the problem and systems A and B side by
  side, each with a selector over all its samples. Traces are embedded up to
  ``max_trace_mb`` (identical traces once); the page says how many problems' traces it holds.
- :meth:`Rollouts.table`: the same summary as a DataFrame; :meth:`Rollouts.show_table`
  renders it with itables (DataTables), offline.
- :meth:`Rollouts.side_by_side` / :meth:`Rollouts.compare`: one problem's (every problem's)
  traces as static HTML, any sample. Markdown and LaTeX rendered (markdown-it; math marked up
  as Sphinx does, ``<span class="math">\\(…\\)</span>``, typeset by MathJax); headings inside a
  trace become bold paragraphs, never page headings.

Math typesetting: :func:`init` embeds MathJax 3 (the SVG build from the ``django-static-mathjax``
package, Apache-2.0), so pages render math without network access. In static HTML it typesets
the page (standing aside when the page has a MathJax); in Jupyter, whose own MathJax typesets
an output only when it renders, it runs in a hidden frame and the explorer converts the math
it draws with it.
"""
from __future__ import annotations

import html
import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import formats
from .records import GradedSample, RecordError, Sample, portable_path, read_json, read_jsonl, read_manifest

ROLLOUTS, GRADED, MANIFEST = "rollouts.jsonl", "graded.jsonl", "manifest.json"
CASE_STUDY = "multipersona/reports/case_study/transcripts.json"
GRADED_CATEGORIES = ("two_route", "distractor", "multistep")
MAX_TRACE_MB = 16.0  # rendered trace HTML embedded in one explorer page (identical traces stored once)
NO_ANSWER = "no answer"  # graded, but the grader found no answer in the trace


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


def _missing(x) -> bool:
    """None, NaN or pandas' NA: no value (pandas turns a column of Nones into NaN)."""
    if x is None:
        return True
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def summarize(samples: pd.DataFrame) -> dict:
    """One system's samples of one problem: ``n``; ``graded`` and ``correct`` counts; ``answer``, the most
    frequent graded answer (None when nothing is graded or the grader found no answer; ties: the
    first seen); ``length`` (mean); ``cap`` (cap hits); ``invalid`` (samples failing the format check)."""
    graded = [(c, e) for c, e in zip(samples["correct"], samples["extracted"]) if not _missing(c)]
    counts: dict = {}
    for _, e in graded:
        key = None if _missing(e) else str(e).strip()
        counts[key] = counts.get(key, 0) + 1
    answer = max(counts, key=counts.get) if counts else None  # max keeps the first of equal counts
    fmt = samples["format_ok"] if "format_ok" in samples else pd.Series([None] * len(samples))
    return {"n": int(len(samples)), "graded": len(graded), "correct": sum(bool(c) for c, _ in graded),
            "answer": answer, "length": float(samples["length"].mean()), "cap": int(samples["cap_hit"].sum()),
            "invalid": int(sum(v is False or v == False for v in fmt if not _missing(v)))}  # noqa: E712


def answer_text(st: dict) -> str:
    """A summary's answer for display: the graded answer, ``no answer``, or ``not graded``."""
    if not st["graded"]:
        return "not graded"
    return NO_ANSWER if st["answer"] is None else st["answer"]


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
    benchmarks = {n: str(f["benchmark"].iloc[0]) for (n, _), f in zip(named, frames)}
    source = ", ".join(portable_path(p) for _, p in named) if isinstance(runs, (dict, list, tuple)) \
        else portable_path(_data_dir(runs))
    return Rollouts(traces, problems, [n for n, _ in named], "tokens", source, notes, benchmarks)


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
                     "length": r.completion_tokens, "cap_hit": r.finish_reason == "length", "extracted": ex,
                     "format_ok": format_ok(fmt, r.completion), "benchmark": str(settings["task"])})
    return pd.DataFrame(rows), problems, notes


def format_ok(fmt: str, completion: str):
    """The run format's validity check (:func:`polyvox.formats.format_valid`: panel tags in order;
    a closed think block then a boxed answer); None for ``plain``, which has no format to break."""
    return formats.format_valid(fmt, completion) if fmt in ("panel", "think") else None


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
                         "extracted": None if g is None else g.extracted,
                         "format_ok": format_ok("panel" if s == "panel" else "think", raw),
                         "benchmark": "case study"})
    problems = {it["id"]: {"text": it["problem"], "gold": it["expected"], "label": it["category_short"]}
                for it in items}
    ro = Rollouts(pd.DataFrame(rows), problems, list(systems), "words", portable_path(path),
                  benchmarks={s: "case study" for s in systems})
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
    # headings inside a trace are the model's, not the page's: bold paragraphs (no entries in the page's
    # or JupyterLab's table of contents); markdown-it escapes raw HTML, so every <hN> here is its own
    out = re.sub(r"<h([1-6])>(.*?)</h\1>", r"<p class='pv-h pv-h\1'><strong>\2</strong></p>", out, flags=re.S)
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


# ------------------------------------------------------------------ the explorer (search, quick filters, traces)

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
            f"<div class='pv-scrollx'><table class='pv-xtable'><thead></thead><tbody><tr><td>The explorer draws "
            f"this table with JavaScript: if this line stays, run the cell again (JupyterLab runs scripts of "
            f"trusted outputs only).</td></tr></tbody></table></div>"
            f"<div class='pv-bar pv-foot'><span class='pv-info'></span><span class='pv-pager'>"
            f"<button type='button' class='pv-btn pv-prev'>‹ previous</button> <span class='pv-page'></span> "
            f"<button type='button' class='pv-btn pv-next'>next ›</button></span></div>"
            f"<script type='application/json' id='{did}-data'>{_json_script(data)}</script>"
            f"<script>{EXPLORER_JS.replace('__PVID__', did)}</script></div>")


EXPLORER_STYLE = """<style>
/* the book's table sheet (polyvox.css) styles .pv-table, .pv-text, .pv-num, .pv-group: the explorer uses other names */
.pv-x{margin:0.5em 0 1.5em 0;max-width:100%;font-size:0.92em;--pv-w:100%}
.pv-x .pv-bar{display:flex;flex-wrap:wrap;gap:0.4em 1em;align-items:center;margin:0.3em 0}
.pv-x .pv-ctl{display:inline-flex;gap:0.3em;align-items:center;white-space:nowrap;margin:0}
.pv-x .pv-searchbox{flex:1 1 14em}
.pv-x .pv-search{flex:1 1 auto;min-width:8em}
.pv-x select,.pv-x input{font:inherit;color:inherit;background:transparent;border:1px solid rgba(128,128,128,.6);
  border-radius:3px;padding:0.1em 0.3em;height:auto;appearance:auto;max-width:22em}
.pv-x select option{color:#222;background:#fff}
.pv-x .pv-btn{font:inherit;color:inherit;background:transparent;border:1px solid rgba(128,128,128,.6);
  border-radius:3px;padding:0.1em 0.55em;cursor:pointer;margin:0}
.pv-x .pv-btn[aria-pressed=true]{background:#2a7a55;border-color:#2a7a55;color:#fff}
.pv-x .pv-btn:disabled{opacity:0.45;cursor:default}
.pv-x .pv-count{opacity:0.75;font-size:0.9em}
.pv-x .pv-legend{margin:0.2em 0;font-size:0.92em}
.pv-x .pv-legend ul{margin:0.2em 0 0.4em 1em;padding:0}
.pv-x .pv-note{font-size:0.9em;opacity:0.85;margin:0.2em 0 0.4em 0}
.pv-x .pv-scrollx{overflow-x:auto;max-width:100%}
.pv-x table.pv-xtable{border-collapse:collapse;width:100%;margin:0;font-size:0.95em;display:table}
.pv-x .pv-xtable th,.pv-x .pv-xtable td{border:0;padding:0.2em 0.45em;vertical-align:top;text-align:left;
  background:transparent;white-space:normal}
.pv-x .pv-xtable thead th{border-bottom:2px solid rgba(128,128,128,.55);white-space:normal;overflow-wrap:normal;
  font-weight:bold}
.pv-x .pv-xtable th.pv-sort{cursor:pointer;user-select:none}
.pv-x .pv-xtable th.pv-sort::after{content:' ⇅';opacity:0.35;font-weight:normal}
.pv-x .pv-xtable th.pv-asc::after{content:' ▲';opacity:0.9}
.pv-x .pv-xtable th.pv-desc::after{content:' ▼';opacity:0.9}
.pv-x .pv-xtable th.pv-sys-head{text-align:center;border-bottom:1px solid rgba(128,128,128,.35)}
.pv-x tr.pv-row{cursor:pointer}
.pv-x tr.pv-row td{border-top:1px solid rgba(128,128,128,.3)}
.pv-x tr.pv-row:hover td,.pv-x tr.pv-row:hover + tr.pv-xtextrow td,.pv-x tr.pv-open td{background:rgba(120,150,200,.09)}
.pv-x tr.pv-xtextrow td{padding-top:0;cursor:pointer}
.pv-x .pv-fit{position:sticky;left:0;width:calc(var(--pv-w) - 1.2em);max-width:calc(var(--pv-w) - 1.2em);
  box-sizing:border-box;overflow-wrap:anywhere}
.pv-x .pv-xtext{max-height:4.6em;overflow:hidden;opacity:0.9}
.pv-x .pv-xtext p{margin:0 0 0.2em 0}
.pv-x .pv-xtable td.pv-id{white-space:nowrap;font-family:monospace}
.pv-x .pv-label,.pv-x .pv-sub{font-size:0.85em;opacity:0.75;font-family:inherit;white-space:normal}
.pv-x .pv-yes{color:#1c7c43;font-weight:bold}
.pv-x .pv-no{color:#b3261e;font-weight:bold}
.pv-x .pv-xtable td.pv-xnum{text-align:right;white-space:nowrap}
.pv-x .pv-flag{font-size:0.85em;color:#a4580b}
.pv-x tr.pv-detail > td{padding:0.4em 0.45em 1em 0.45em;border-top:1px dashed rgba(128,128,128,.5)}
.pv-x .pv-detail-in{border-left:3px solid rgba(120,150,200,.6);padding-left:0.7em}
.pv-x .pv-samplebar{display:flex;gap:0.3em;align-items:center;margin:0.2em 0 0.4em 0;flex-wrap:nowrap}
.pv-x .pv-samplebar select{flex:1 1 auto;min-width:0;max-width:none}
.pv-x .pv-foot{justify-content:space-between}
</style>"""

EXPLORER_JS = r"""(function () {
  var root = document.getElementById("__PVID__");
  if (!root || root.getAttribute("data-ready")) return;
  root.setAttribute("data-ready", "1");
  var D = JSON.parse(document.getElementById("__PVID__-data").textContent);
  var pool = D.pool, unit = D.unit;
  var S = {g: 0, q: "", f: {}, key: null, dir: 1, page: 0, len: D.page_length, open: null};
  function $(s) { return root.querySelector(s); }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]; });
  }
  function G() { return D.groups[S.g]; }
  D.groups.forEach(function (g) {  // what the search box matches: id, label, text, gold, the systems' answers
    g.rows.forEach(function (r, i) {
      r._i = i;
      r.search = [r.id, r.label, r.text, r.gold].concat(Object.keys(r.stats).map(function (s) {
        return r.stats[s].shown; })).join(" ").toLowerCase();
    });
  });
  function acc(st) { return st && st.graded ? st.correct / st.graded : null; }
  function anySys(r, g, f) { return g.systems.some(function (s) { return r.stats[s] && f(r.stats[s]); }); }
  // the quick filters: the same rules as polyvox.explore.quick_filter
  var PRED = {
    ab: function (r, g) { var x = acc(r.stats[g.a]), y = acc(r.stats[g.b]);
      return g.a !== g.b && x !== null && y !== null && x > y; },
    ba: function (r, g) { var x = acc(r.stats[g.b]), y = acc(r.stats[g.a]);
      return g.a !== g.b && x !== null && y !== null && x > y; },
    disagree: function (r, g) { var seen = {}, k = 0;
      g.systems.forEach(function (s) { var st = r.stats[s];
        if (st && st.graded) { var key = st.answer === null ? "\u0000" : "=" + st.answer;
          if (!(key in seen)) { seen[key] = 1; k++; } } });
      return k > 1; },
    wrong: function (r, g) { return anySys(r, g, function (st) { return st.graded > st.correct; }); },
    cap: function (r, g) { return anySys(r, g, function (st) { return st.cap > 0; }); },
    invalid: function (r, g) { return anySys(r, g, function (st) { return st.invalid > 0; }); }
  };
  function typeset(el) {
    if (!el) return;
    var P = window.PolyvoxMathJax;  // Jupyter: a private MathJax (explore.init) converts each math span
    if (P && P.startup && P.startup.promise) {
      P.startup.promise.then(function () {
        el.querySelectorAll("span.math").forEach(function (sp) {
          if (sp.getAttribute("data-pv-math") || sp.querySelector("mjx-container, svg")) return;
          var t = sp.textContent.trim(), display = t.slice(0, 2) === "\\[";
          sp.setAttribute("data-pv-math", "1");
          P.tex2svgPromise(t.replace(/^\\[\[(]/, "").replace(/\\[\])]$/, ""), {display: display}).then(function (node) {
            sp.textContent = "";
            sp.appendChild(document.importNode(node, true));
          }).catch(function () {});
        });
      });
      return;
    }
    var MJ = window.MathJax;  // a static page: its MathJax (explore.init's, or the page's own)
    if (MJ && MJ.startup && MJ.startup.promise) {
      MJ.startup.promise.then(function () { if (MJ.typesetPromise) return MJ.typesetPromise([el]); }).catch(function () {});
    } else if (document.readyState !== "complete") {  // a deferred MathJax (Sphinx's) runs before the load event
      window.addEventListener("load", function () { typeset(el); }, {once: true});
    }
  }
  function clearMath(el) {
    var MJ = window.MathJax;
    if (MJ && MJ.typesetClear && el) { try { MJ.typesetClear([el]); } catch (e) {} }
  }
  function cols(g) {
    var c = [{key: "id", title: "problem"}, {key: "gold", title: "gold"}];
    var many = g.rows.some(function (r) { return g.systems.some(function (s) { return r.stats[s] && r.stats[s].n > 1; }); });
    g.systems.forEach(function (s) {
      c.push({key: "c:" + s, title: many ? "correct" : "correct", sys: s});
      c.push({key: "l:" + s, title: (many ? "mean " : "") + unit, sys: s});
    });
    return c;
  }
  function sortVal(r, key) {
    if (key === "id") return r._i;
    if (key === "gold") return r.gold;
    var st = r.stats[key.slice(2)];
    if (!st) return null;
    return key[0] === "c" ? acc(st) : st.length;
  }
  function rowsNow() {
    var g = G(), words = S.q.toLowerCase().split(/\s+/).filter(Boolean);
    var on = Object.keys(S.f).filter(function (k) { return S.f[k]; });
    var rows = g.rows.filter(function (r) {
      return words.every(function (w) { return r.search.indexOf(w) >= 0; }) &&
        on.every(function (k) { return PRED[k](r, g); });
    });
    if (S.key) {
      rows = rows.slice().sort(function (x, y) {
        var a = sortVal(x, S.key), b = sortVal(y, S.key);
        if (a === null && b === null) return x._i - y._i;
        if (a === null) return 1;
        if (b === null) return -1;
        var c = typeof a === "string" ? a.localeCompare(b, undefined, {numeric: true}) : a - b;
        return c ? c * S.dir : x._i - y._i;
      });
    }
    return rows;
  }
  function fmtLen(x) { return Math.round(x).toString(); }
  function cellC(st) {
    if (!st) return "<td>—</td>";
    var top;
    if (!st.graded) top = "<span class='pv-sub'>not graded</span>";
    else if (st.n === 1) top = st.correct ? "<span class='pv-yes'>yes</span>" : "<span class='pv-no'>no</span>";
    else top = "<span class='" + (st.correct * 2 >= st.graded ? "pv-yes" : "pv-no") + "'>" + st.correct + "/" +
      st.graded + "</span>";
    var ans = st.graded ? "<div class='pv-sub'>" + esc(st.shown.length > 28 ? st.shown.slice(0, 27) + "…" : st.shown) +
      "</div>" : "";
    return "<td>" + top + ans + "</td>";
  }
  function cellL(st) {
    if (!st) return "<td class='pv-xnum'>—</td>";
    var flags = [];
    if (st.cap) flags.push(st.n === 1 ? "cap hit" : st.cap + " cap");
    if (st.invalid) flags.push(st.n === 1 ? "bad format" : st.invalid + " bad fmt");
    return "<td class='pv-xnum'>" + fmtLen(st.length) + (flags.length ? "<div class='pv-flag'>" + flags.join(", ") +
      "</div>" : "") + "</td>";
  }
  function sampleLabel(x) {
    var o = x.correct === null ? "not graded" : (x.correct ? "correct" : "wrong");
    return "sample " + x.i + " · " + o + " · " + x.length + " " + unit + (x.cap ? " · cap hit" : "") +
      (x.valid === false ? " · invalid format" : "");
  }
  function traceHtml(x) {
    var facts = [x.correct === null ? "not graded" : (x.correct ? "<span class='pv-yes'>correct</span>" :
      "<span class='pv-no'>wrong</span>"), x.length + " " + unit];
    if (x.cap) facts.push("<b>cut at the token cap</b>");
    if (x.valid === false) facts.push("invalid format");
    if (x.correct !== null) facts.push(x.answer === null ? "no answer" : "graded answer <code>" + esc(x.answer) + "</code>");
    var fin = x.final === null ? "<p><i>no final answer</i></p>" : pool[x.final];
    var rea = x.reasoning === null ? "" : "<details class='pv-reasoning' open><summary>Reasoning (" + x.words +
      " words)</summary><div class='pv-md pv-scroll'>" + pool[x.reasoning] + "</div></details>";
    return "<div class='pv-facts'>" + facts.join(" · ") + "</div><div class='pv-final'><i>Final answer</i>" +
      "<div class='pv-md'>" + fin + "</div></div>" + rea;
  }
  function column(side, sys, samples, pos) {
    var n = samples ? samples.length : 0;
    var h = "<div class='pv-col' data-side='" + side + "'><div class='pv-sys'>" + side.toUpperCase() + ": " +
      esc(sys) + " <span class='pv-sub'>· " + n + " sample" + (n === 1 ? "" : "s") + "</span></div>";
    if (!n) return h + "<p>no samples of this problem</p></div>";
    var opts = samples.map(function (x, j) {
      return "<option value='" + j + "'" + (j === pos ? " selected" : "") + ">" + esc(sampleLabel(x)) + "</option>"; });
    return h + "<div class='pv-samplebar'><button type='button' class='pv-btn pv-sprev' title='previous sample'>‹</button>" +
      "<select class='pv-sample' aria-label='sample of " + esc(sys) + "'>" + opts.join("") + "</select>" +
      "<button type='button' class='pv-btn pv-snext' title='next sample'>›</button></div><div class='pv-trace'>" +
      traceHtml(samples[pos]) + "</div></div>";
  }
  function detail(r, g) {
    var tr = g.traces[r.id];
    var head = "<div class='pv-problem'><b>Problem " + esc(r.id) + "</b>" + (r.label ? " · " + esc(r.label) : "") +
      "<div class='pv-md'>" + pool[r.problem] + "</div>" + (r.gold ? "<div><i>Gold:</i> " + esc(r.gold) + "</div>" : "") +
      "</div>";
    if (!tr) return head + "<p><b>Traces not on this page</b>: past the cap of " + D.embedded.cap_mb +
      " MB of rendered traces (see the note above the table).</p>";
    return head + "<div class='pv-pair'>" + column("a", g.a, tr[g.a], S.open.a) + column("b", g.b, tr[g.b], S.open.b) +
      "</div>";
  }
  function defaultPos(g, id) {
    var tr = g.traces[id] || {};
    var nb = (tr[g.b] || []).length;
    return {a: 0, b: g.a === g.b && nb > 1 ? 1 : 0};  // one system: its first two samples side by side
  }
  function render() {
    var g = G(), cs = cols(g);
    var rows = rowsNow(), n = rows.length, per = S.len > 0 ? S.len : Math.max(n, 1);
    var pages = Math.max(1, Math.ceil(n / per));
    if (S.page >= pages) S.page = pages - 1;
    var shown = rows.slice(S.page * per, S.page * per + per);
    // header: problem, gold, then per system its correctness and length
    var h1 = "<tr><th rowspan='2' class='pv-sort' data-key='id'>problem</th><th rowspan='2' class='pv-sort' data-key='gold'>gold</th>";
    g.systems.forEach(function (s) {  // long run names break after / _ - (never inside a word)
      h1 += "<th colspan='2' class='pv-sys-head'>" + esc(s).replace(/([\/_-])/g, "$1<wbr>") + "</th>"; });
    var h2 = "<tr>" + cs.slice(2).map(function (c) {
      return "<th class='pv-sort' data-key='" + esc(c.key) + "'>" + esc(c.title) + "</th>"; }).join("") + "</tr>";
    var thead = $("thead"), tbody = $("tbody");
    thead.innerHTML = h1 + "</tr>" + h2;
    thead.querySelectorAll("th.pv-sort").forEach(function (th) {
      if (th.getAttribute("data-key") === S.key) th.classList.add(S.dir > 0 ? "pv-asc" : "pv-desc"); });
    clearMath(tbody);
    var body = [];
    shown.forEach(function (r) {
      var open = S.open && S.open.id === r.id;
      var c = "<tr class='pv-row" + (open ? " pv-open" : "") + "' data-pid='" + esc(r.id) + "' tabindex='0'>" +
        "<td class='pv-id'>" + esc(r.id) + (r.label ? "<div class='pv-label'>" + esc(r.label) + "</div>" : "") +
        "</td><td>" + esc(r.gold.length > 40 ? r.gold.slice(0, 39) + "…" : r.gold) + "</td>";
      g.systems.forEach(function (s) { c += cellC(r.stats[s]) + cellL(r.stats[s]); });
      c += "</tr><tr class='pv-xtextrow" + (open ? " pv-open" : "") + "' data-pid='" + esc(r.id) + "'><td colspan='" +
        cs.length + "'><div class='pv-fit pv-xtext pv-md'>" + pool[r.problem] + "</div></td></tr>";
      if (open) c += "<tr class='pv-detail' data-pid='" + esc(r.id) + "'><td colspan='" + cs.length +
        "'><div class='pv-fit pv-detail-in'>" + detail(r, g) + "</div></td></tr>";
      body.push(c);
    });
    if (!shown.length) body.push("<tr><td colspan='" + cs.length + "'>No problem matches the search and filters.</td></tr>");
    tbody.innerHTML = body.join("");
    var total = g.rows.length;
    $(".pv-info").textContent = n ? "Showing " + (S.page * per + 1) + " to " + (S.page * per + shown.length) + " of " +
      n + " problems" + (n < total ? " (filtered from " + total + ")" : "") : "0 of " + total + " problems";
    $(".pv-page").textContent = "page " + (S.page + 1) + " of " + pages;
    $(".pv-prev").disabled = S.page === 0;
    $(".pv-next").disabled = S.page >= pages - 1;
    counts();
    fit();
    typeset(tbody);
  }
  function counts() {
    var g = G();
    root.querySelectorAll(".pv-filter").forEach(function (b) {
      var k = b.getAttribute("data-filter");
      var c = g.rows.filter(function (r) { return PRED[k](r, g); }).length;
      b.querySelector(".pv-count").textContent = "(" + c + ")";
      var needsPair = (k === "ab" || k === "ba") && g.a === g.b;
      var needsTwo = k === "disagree" && g.systems.length < 2;
      b.disabled = needsPair || needsTwo;
      if (b.disabled) { S.f[k] = false; b.title = needsPair ? "needs two different systems as A and B" :
        "needs two systems"; }
      b.setAttribute("aria-pressed", S.f[k] ? "true" : "false");
    });
  }
  function fit() {
    var box = $(".pv-scrollx");
    if (box) root.style.setProperty("--pv-w", box.clientWidth + "px");
  }
  function setSystems() {
    var g = G();
    ["a", "b"].forEach(function (side) {
      var sel = $(".pv-" + side);
      sel.innerHTML = g.systems.map(function (s) {
        return "<option" + (s === g[side] ? " selected" : "") + ">" + esc(s) + "</option>"; }).join("");
    });
  }
  function redrawTrace(col) {
    var g = G(), side = col.getAttribute("data-side"), tr = g.traces[S.open.id];
    var box = col.querySelector(".pv-trace");
    clearMath(box);
    box.innerHTML = traceHtml(tr[g[side]][S.open[side]]);
    col.querySelector(".pv-sample").value = String(S.open[side]);
    typeset(box);
  }
  // events
  var timer = null;
  $(".pv-search").addEventListener("input", function (ev) {
    clearTimeout(timer);
    timer = setTimeout(function () { S.q = ev.target.value; S.page = 0; render(); }, 120);
  });
  $(".pv-len").addEventListener("change", function (ev) { S.len = parseInt(ev.target.value, 10); S.page = 0; render(); });
  var grp = $(".pv-bench");
  if (grp) grp.addEventListener("change", function (ev) {
    S.g = parseInt(ev.target.value, 10); S.page = 0; S.key = null; S.open = null; setSystems(); render(); });
  ["a", "b"].forEach(function (side) {
    $(".pv-" + side).addEventListener("change", function (ev) {
      G()[side] = ev.target.value;
      if (S.open) { var p = defaultPos(G(), S.open.id); S.open.a = p.a; S.open.b = p.b; }
      render();
    });
  });
  root.querySelectorAll(".pv-filter").forEach(function (b) {
    b.addEventListener("click", function () { var k = b.getAttribute("data-filter"); S.f[k] = !S.f[k]; S.page = 0; render(); });
  });
  $(".pv-clear").addEventListener("click", function () { S.f = {}; S.page = 0; render(); });
  $(".pv-prev").addEventListener("click", function () { if (S.page > 0) { S.page--; render(); } });
  $(".pv-next").addEventListener("click", function () { S.page++; render(); });
  $("thead").addEventListener("click", function (ev) {
    var th = ev.target.closest("th.pv-sort");
    if (!th) return;
    var k = th.getAttribute("data-key");
    if (S.key === k) S.dir = -S.dir; else { S.key = k; S.dir = k === "id" || k === "gold" ? 1 : -1; }
    render();
  });
  function toggle(id) {
    if (S.open && S.open.id === id) S.open = null;
    else { var p = defaultPos(G(), id); S.open = {id: id, a: p.a, b: p.b}; }
    render();
  }
  var tbody = $("tbody");
  tbody.addEventListener("click", function (ev) {
    var col = ev.target.closest(".pv-col");
    if (col && ev.target.closest(".pv-sprev, .pv-snext")) {
      var side = col.getAttribute("data-side"), n = G().traces[S.open.id][G()[side]].length;
      S.open[side] = (S.open[side] + (ev.target.closest(".pv-snext") ? 1 : n - 1)) % n;
      redrawTrace(col);
      return;
    }
    if (ev.target.closest("tr.pv-detail")) return;
    var tr = ev.target.closest("tr.pv-row, tr.pv-xtextrow");
    if (tr) toggle(tr.getAttribute("data-pid"));
  });
  tbody.addEventListener("change", function (ev) {
    if (!ev.target.classList.contains("pv-sample")) return;
    var col = ev.target.closest(".pv-col");
    S.open[col.getAttribute("data-side")] = parseInt(ev.target.value, 10);
    redrawTrace(col);
  });
  tbody.addEventListener("keydown", function (ev) {
    var tr = ev.target.closest && ev.target.closest("tr.pv-row");
    if (tr && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); toggle(tr.getAttribute("data-pid")); }
  });
  if (window.ResizeObserver) new ResizeObserver(fit).observe($(".pv-scrollx"));
  else window.addEventListener("resize", fit);
  render();
})();"""


def mathjax_html() -> str:
    """A script that loads MathJax 3 (SVG output) from this environment, for pages without network.

    - Static HTML (the book): MathJax is loaded into the page and typesets it, unless the page has a
      MathJax already or a script that loads one (Sphinx's, deferred, on pages with math).
    - Jupyter typesets an output once, when it renders, with its own MathJax, which cannot typeset what
      the explorer draws later. There the same MathJax runs privately in a hidden frame
      (``window.PolyvoxMathJax``, nothing typeset on its own) and the explorer converts its math with it.
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
    private = {**config, "svg": {"fontCache": "local"}, "startup": {"typeset": False}}
    return ("<script>(function () {\n"
            "  var jupyter = !!document.querySelector('.jp-LabShell, .jp-Notebook, #notebook-container');\n"
            "  var mj = window.MathJax;\n"
            "  // a static page: load MathJax unless the page has one, loaded or still to come (Sphinx defers its own)\n"
            "  if (!jupyter) { if (!(mj && mj.version) && !document.querySelector('script[src*=\"mathjax\" i]'))\n"
            "    window.__pvLoadMathJax = true; return; }\n"
            "  if (window.PolyvoxMathJax) return;\n"
            "  var me = document.currentScript, text = me ? me.textContent : '';\n"
            "  var begin = text.lastIndexOf('/*PV-MJ-' + 'BEGIN*/'), end = text.lastIndexOf('/*PV-MJ-' + 'END*/');\n"
            "  if (begin < 0 || end < begin) return;\n"
            "  var frame = document.createElement('iframe');\n"
            "  frame.style.display = 'none'; frame.setAttribute('aria-hidden', 'true'); frame.title = 'MathJax';\n"
            "  document.body.appendChild(frame);\n"
            "  var s = frame.contentDocument.createElement('script');\n"
            f"  s.textContent = 'window.MathJax = ' + {json.dumps(json.dumps(private))} + ';\\n' + text.slice(begin, end);\n"
            "  frame.contentDocument.head.appendChild(s);\n"
            "  window.PolyvoxMathJax = frame.contentWindow.MathJax;\n"
            "})();\n"
            "if (window.__pvLoadMathJax) { delete window.__pvLoadMathJax;\n"
            f"window.MathJax = {json.dumps(config)};\n/*PV-MJ-BEGIN*/\n{src}\n/*PV-MJ-END*/\n}}</script>")


def init(connected: bool = False, tables: bool = True) -> None:
    """Once per notebook: MathJax for the explorer and static pages (embedded: no network) and, with
    ``tables``, itables' DataTables for :meth:`Rollouts.show_table` (embedded when not connected)."""
    from IPython.display import HTML, display

    if tables:
        from itables import init_notebook_mode

        init_notebook_mode(all_interactive=False, connected=connected)
    if not connected:
        display(HTML(mathjax_html()))

# ------------------------------------------------------------------ a notebook to explore a run live

NOTEBOOK = "explore.ipynb"


def write_notebook(run, out=None, data_dir="data", force: bool = False) -> Path:
    """Write a JupyterLab notebook that explores ``run`` (a run folder or a folder of run folders) and
    return its path: ``out``, else :func:`default_notebook` (``<run>/explore.ipynb``; for the
    checkout's shipped records under ``data/``, ``runs/explore-<name>.ipynb``). No tracked file is
    edited; open it with ``jupyter lab <path>`` (``--allow-root`` when running as root).

    The notebook names the run relative to itself (it keeps working when the run folder moves with it)
    and ``data_dir`` (the benchmarks the run's task reads) as an absolute path. The run is checked
    first (:func:`find_runs`: a folder without runs raises :class:`RecordError`); an existing notebook is
    kept (it may hold the reader's own cells) unless ``force``.
    """
    import os

    import nbformat

    run = Path(run)
    find_runs(run)
    out = Path(out) if out is not None else default_notebook(run)
    if out.suffix != ".ipynb":
        raise ValueError(f"{out}: the notebook's name must end in .ipynb")
    if out.exists() and not force:
        return out
    data = _data_dir(data_dir).resolve()
    rel = Path(os.path.relpath(run.resolve(), out.resolve().parent)).as_posix()
    v4 = nbformat.v4
    cells = [
        v4.new_markdown_cell(
            f"# Explore `{run.resolve().name}`\n\n"
            "Written by `polyvox explore`; this file is yours (not tracked; `polyvox explore --force` writes it "
            "anew). Run all cells (*Run ▸ Run All Cells*). In the explorer: type in the search box, click a quick "
            "filter, choose systems A and B, click a row to open both traces and pick any sample."),
        v4.new_code_cell(f"RUN = {rel!r}  # the run folder (or a folder of run folders), relative to this notebook\n"
                         f"DATA = {str(data)!r}  # the benchmarks the run's task reads", metadata={"tags": ["parameters"]}),
        v4.new_code_cell("from polyvox import explore\n\n"
                         "explore.init(tables=False)  # math typesetting (MathJax) from this environment, offline\n"
                         "ro = explore.load(RUN, data_dir=DATA)\n"
                         "for note in ro.notes:\n    print(note)\n"
                         "ro.explorer(page_length=10)  # a=..., b=...: the two systems compared; max_trace_mb=..."),
        v4.new_markdown_cell("The same numbers as a pandas DataFrame, one row per problem "
                             "(`ro.traces` holds every sample):"),
        v4.new_code_cell("ro.table()"),
        v4.new_markdown_cell("One problem's traces as static HTML, any sample: "
                             "`ro.side_by_side(problem_id, a, b, sample=3)`."),
    ]
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    nbformat.write(nb, str(tmp))
    os.replace(tmp, out)
    return out


def default_notebook(run) -> Path:
    """Where ``polyvox explore RUN`` writes: ``RUN/explore.ipynb``; for a run under the checkout's ``data/``
    (shipped records, tracked, and inputs of the book's cache) ``runs/explore-<its path below data>.ipynb``
    (``runs/`` is git-ignored), so exploring them adds nothing to ``data/``."""
    run = Path(run)
    try:
        from .book.build import find_root

        root = find_root(run.resolve())
    except Exception:  # noqa: BLE001 — outside a checkout: next to the run
        return run / NOTEBOOK
    data, here = (root / "data").resolve(), run.resolve()
    if here != data and data not in here.parents:
        return run / NOTEBOOK
    name = "-".join(here.relative_to(data).parts) or "data"
    return root / "runs" / f"explore-{name}.ipynb"


def open_command(notebook) -> str:
    """The command that opens a notebook in this environment's JupyterLab (``--allow-root`` when root)."""
    import os
    import shlex
    import sys

    jupyter = Path(sys.executable).parent / "jupyter"
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    return f"{shlex.quote(str(jupyter))} lab {shlex.quote(str(notebook))}" + (" --allow-root" if root else "")


def explore_command(run, out=None, data_dir="data", force: bool = False) -> list[str]:
    """``polyvox explore RUN``: write the notebook (:func:`write_notebook`); the lines to print."""
    target = Path(out) if out is not None else default_notebook(run)
    kept = target.exists() and not force
    path = write_notebook(run, out=out, data_dir=data_dir, force=force)
    return [f"notebook: {path}" + (" (already there: kept; --force writes it anew)" if kept else ""),
            f"open it in JupyterLab, then Run ▸ Run All Cells: {open_command(path)}"]
