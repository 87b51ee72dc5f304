"""Pairwise judging: both A/B orders, free ties, plan / run / tally, a rubric and an LLM judge.

Inputs are *systems files*: JSONL, one row per prompt — ``prompt_id``, ``prompt`` (what the
judge is shown), ``preference`` (the label the judge reads), ``gold`` (optional), any labels
to break tallies down by, and ``responses`` ({system: text}). A side of a comparison is
``FILE:SYSTEM``. A comparison of A against B covers the prompts both files hold.

Protocol (seed 002's, run21's judge_compare):

- every pair is judged twice, A shown first then B shown first; the outcome from A's side
  is W or L only when both orders agree, T otherwise; identical texts are free ties (no
  call is made);
- win rate = (W + T/2)/n with a 95% percentile bootstrap CI over prompts
  (:func:`polyvox.metrics.bootstrap_ci`); with ``groups=`` (a label such as ``user``) the
  bootstrap resamples whole groups instead (:func:`cluster_bootstrap_ci`), for prompts that
  cluster (several prompts per user);
- a verdict that cannot be parsed is retried with another seed up to ``max_attempts``
  times and then recorded as ``unparseable``: tallies count such prompts separately and
  leave them out of n — never as a tie. ``run --retry-unparseable`` asks again;
- tallies are broken down by any row label (the router's pick, the true preference type).

Cache and resume: ``<out>/verdicts.jsonl`` holds one line per judge call, keyed by sha256
over (judge identity, prompt id, prompt, preference, the text shown first, the text shown
second) — the order is part of the key, the system names are not, so the same two texts met
in another comparison are not paid twice. Lines are appended (flushed, fsynced) after each
chunk of calls; a torn last line is cut on open; a later line for the same key is accepted
only when it replaces an ``unparseable`` one. A run killed at any point therefore loses at
most the chunk in flight and a rerun duplicates nothing. :func:`plan` counts the calls still
to make before :func:`run` spends them.

One writer, one kind: ``<out>`` holds a judge run only (``kind: judge`` in its manifest; a
folder of a sample run, a pipeline or a stage is refused, and so is one holding other files
but no manifest). :func:`run` validates first — the folder, both systems files (every row:
an object with string ``prompt_id``, ``prompt``, ``preference`` and ``responses`` of string
texts) and every recorded verdict (its ``key``, a ``choice`` of :data:`RECORDED`) — and
writes second, under the folder's :class:`~polyvox.records.RunLock`, so a refused or
concurrent run changes nothing; a bad line is an error naming the file and line. :func:`plan`
and :func:`tally` only read. The manifest records each side as ``FILE:SYSTEM`` with the file
as :func:`~polyvox.records.portable_path` writes it, never this machine's absolute path.

Judges share one interface (``identity()``, ``ask(calls) -> [raw text]``, ``parse(raw)``):
:class:`RubricJudge` scores each text with a program (free, exact, order-blind) and
:class:`LLMJudge` asks any :mod:`polyvox.backends` backend — an OpenAI-compatible endpoint
with its key from the environment — with the template :data:`JUDGE_TEMPLATE`.

Length control (:func:`length_controlled`), after AlpacaEval 2: regress each prompt's score
(W 1, T ½, L 0) on the length difference (words of A − words of B, divided by its standard
deviation) with a logistic link, and report σ(intercept) — the win rate predicted at zero
length difference — with a bootstrap CI. AlpacaEval 2's GLM also has model and instruction
terms; with two fixed systems and one label per prompt, the length term is the one left.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from .records import (KIND_JUDGE, RecordError, RunLock, append_jsonl, check_out_path, iter_jsonl, now_iso,
                      portable_path, read_manifest, repair_truncated_tail, write_manifest)

VERDICTS = "verdicts.jsonl"
CHOICES = ("A", "B", "tie")
RECORDED = CHOICES + ("unparseable",)  # what a verdict line's ``choice`` may hold
# what a verdicts folder holds besides its manifest (tallies.json: the personas pipeline's judge stage)
FOLDER_FILES = {VERDICTS, "manifest.json", ".lock", "tallies.json", "manifest.json.tmp"}

JUDGE_TEMPLATE = (
    "You compare two answers to a user's request.\n"
    "The user's preference: {preference}.\n"
    "Request: {prompt}\n\n"
    "Answer A: {first}\n\n"
    "Answer B: {second}\n\n"
    "Which answer is correct and better suits the user's preference? "
    "Reply with [[A]], [[B]] or [[tie]]."
)


@dataclass(frozen=True)
class Call:
    prompt_id: str
    prompt: str
    preference: str
    first: str
    second: str
    row: dict = field(default_factory=dict, compare=False, hash=False)  # the systems row (gold, labels)


class Judge(Protocol):
    name: str

    def identity(self) -> dict: ...

    def ask(self, calls: list[Call], attempt: int) -> list[str]: ...

    def parse(self, raw: str) -> str | None: ...


class RubricJudge:
    """A program judge: ``score(text, row) -> float``; the higher-scored text wins, equal scores tie."""

    name = "rubric"

    def __init__(self, score: Callable[[str, dict], float], version: str):
        self.score, self.version = score, version

    def identity(self) -> dict:
        return {"judge": "rubric", "version": self.version}

    def ask(self, calls: list[Call], attempt: int = 0) -> list[str]:
        out = []
        for c in calls:
            a, b = self.score(c.first, c.row), self.score(c.second, c.row)
            out.append("[[A]]" if a > b + 1e-9 else "[[B]]" if b > a + 1e-9 else "[[tie]]")
        return out

    def parse(self, raw: str) -> str | None:
        return parse_verdict(raw)


class LLMJudge:
    """A judge model behind any backend (``openai`` for an OpenAI-compatible endpoint): greedy, seeded."""

    name = "llm"

    def __init__(self, backend, template: str = JUDGE_TEMPLATE, max_tokens: int = 16, seed: int = 0):
        self.backend, self.template, self.max_tokens, self.seed = backend, template, max_tokens, seed

    def identity(self) -> dict:
        return {"judge": "llm", **self.backend.identity(), "max_tokens": self.max_tokens,
                "template_sha256": hashlib.sha256(self.template.encode()).hexdigest()[:16]}

    def ask(self, calls: list[Call], attempt: int = 0) -> list[str]:
        from .backends import Request, SamplingParams

        reqs = [Request(self.template.format(preference=c.preference, prompt=c.prompt, first=c.first,
                                             second=c.second), seed=self.seed + attempt, chat=True)
                for c in calls]
        return [c.text for c in self.backend.generate(reqs, SamplingParams(self.max_tokens, 0.0))]

    def parse(self, raw: str) -> str | None:
        return parse_verdict(raw)


_VERDICT = re.compile(r"\[\[\s*(A|B|tie)\s*\]\]", re.I)


def parse_verdict(raw: str) -> str | None:
    """'A', 'B' or 'tie' from ``[[A]]``/``[[B]]``/``[[tie]]`` (or a bare reply of just that word); else None."""
    found = {m.group(1).upper() if m.group(1).lower() != "tie" else "tie" for m in _VERDICT.finditer(raw or "")}
    if len(found) == 1:
        return found.pop()
    bare = (raw or "").strip().strip(".").strip()
    return {"a": "A", "b": "B", "tie": "tie"}.get(bare.lower())


# ---------------------------------------------------------------- systems files and comparisons

def read_systems(path: str | Path) -> dict[str, dict]:
    """A systems file by prompt id; a malformed row is an error naming the file and line."""
    rows = {}
    for line, obj in iter_jsonl(path):
        if not isinstance(obj, dict):
            raise RecordError(path, line, f"expected a JSON object (a systems row), got {type(obj).__name__}")
        for k in ("prompt_id", "prompt", "preference", "responses"):
            if k not in obj:
                raise RecordError(path, line, f"missing field {k!r} for a systems row")
        for k in ("prompt_id", "prompt", "preference"):
            if not isinstance(obj[k], str):
                raise RecordError(path, line, f"field {k!r} should be a string, got {type(obj[k]).__name__}")
        if not obj["prompt_id"]:
            raise RecordError(path, line, "empty prompt_id")
        responses = obj["responses"]
        if not isinstance(responses, dict):
            raise RecordError(path, line, f"field 'responses' should be an object {{system: text}}, "
                                          f"got {type(responses).__name__}")
        bad = next((k for k, v in responses.items() if not isinstance(v, str)), None)
        if bad is not None:
            raise RecordError(path, line, f"response of system {bad!r} should be a string, "
                                          f"got {type(responses[bad]).__name__}")
        if obj["prompt_id"] in rows:
            raise RecordError(path, line, f"duplicate prompt_id {obj['prompt_id']!r}")
        rows[obj["prompt_id"]] = obj
    if not rows:
        raise RecordError(path, None, "no systems rows")
    return rows


def parse_side(spec: str) -> tuple[Path, str]:
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"expected FILE:SYSTEM, got {spec!r}")
    path, system = spec.rsplit(":", 1)
    if not path.strip() or not system.strip():
        raise ValueError(f"expected FILE:SYSTEM with both parts named, got {spec!r}")
    return Path(path), system


def portable_side(spec: str) -> str:
    """``FILE:SYSTEM`` as a manifest records it: the file as :func:`polyvox.records.portable_path` writes it
    (anything else, e.g. an older manifest's odd entry, is kept as it is)."""
    try:
        path, system = parse_side(spec)
    except ValueError:
        return spec
    return f"{portable_path(path)}:{system}"


@dataclass
class Pair:
    prompt_id: str
    row: dict  # A's row (prompt, preference, labels)
    a: str
    b: str


def pairs(a_spec: str, b_spec: str) -> list[Pair]:
    """The prompts both sides answer, in A's file order."""
    (fa, sa), (fb, sb) = parse_side(a_spec), parse_side(b_spec)
    ra, rb = read_systems(fa), (read_systems(fb) if fb != fa else None)
    rb = rb if rb is not None else ra
    for f, rows, system in ((fa, ra, sa), (fb, rb, sb)):
        if not any(system in r["responses"] for r in rows.values()):
            names = sorted({k for r in rows.values() for k in r["responses"]})
            raise ValueError(f"{f}: no row answers as system {system!r}; systems: {', '.join(names) or 'none'}")
    out = []
    for pid, row in ra.items():
        if pid not in rb or sa not in row["responses"] or sb not in rb[pid]["responses"]:
            continue
        if rb[pid]["prompt"] != row["prompt"]:
            raise ValueError(f"prompt {pid!r} differs between {fa} and {fb}")
        out.append(Pair(pid, row, row["responses"][sa], rb[pid]["responses"][sb]))
    if not out:
        raise ValueError(f"no prompt is answered by both {a_spec} and {b_spec}")
    return out


def _calls(p: Pair) -> tuple[Call, Call]:
    mk = lambda x, y: Call(p.prompt_id, p.row["prompt"], p.row["preference"], x, y, p.row)  # noqa: E731
    return mk(p.a, p.b), mk(p.b, p.a)


def call_key(identity: dict, c: Call) -> str:
    blob = json.dumps([identity, c.prompt_id, c.prompt, c.preference, c.first, c.second], sort_keys=True,
                      ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def check_out(out: str | Path) -> Path:
    """Read-only: ``out`` may hold verdicts — a new or empty folder, or one holding a judge run.

    A folder of another kind (a sample run, a pipeline) is refused, and so is one holding files
    but no manifest: a folder holds one kind of run.
    """
    from .stages import check_kind  # knows the pipelines' older manifests too

    out = check_out_path(out)
    check_kind(out, KIND_JUDGE)
    if out.is_dir() and not (out / "manifest.json").exists():
        other = sorted(p.name for p in out.iterdir() if p.name not in FOLDER_FILES)
        if other:
            raise ValueError(f"{out}: holds {other[0]}{' …' if len(other) > 1 else ''} but no manifest.json: "
                             "not a judge run folder; a folder holds one kind of run: use a new folder")
    return out


def _verdict(path: Path, line: int, obj) -> dict:
    if not isinstance(obj, dict):
        raise RecordError(path, line, f"expected a JSON object (a verdict), got {type(obj).__name__}")
    key = obj.get("key")
    if not isinstance(key, str) or not re.fullmatch(r"[0-9a-f]{64}", key):
        raise RecordError(path, line, "a verdict needs its 'key' (64 hex digits, the call's sha256), got "
                                      + (repr(key)[:40] if key is not None else "none"))
    if obj.get("choice") not in RECORDED:
        raise RecordError(path, line, f"choice {obj.get('choice')!r} is not one of {', '.join(RECORDED)}")
    return obj


def load_cache(out: str | Path, repair: bool = True) -> dict[str, dict]:
    """The recorded calls by key; a parsed record may replace an unparseable one, nothing else repeats.

    Every line is checked (a JSON object with its key and a choice of :data:`RECORDED`); a bad
    line is an error naming the file and line. ``repair``: cut a torn last line (a writer
    killed mid-append) from the file; without it (plan, tally: read-only) the torn line is skipped.
    """
    path = Path(out) / VERDICTS
    if not path.exists():
        return {}
    if repair:
        repair_truncated_tail(path)
    cache: dict[str, dict] = {}
    for line, obj in iter_jsonl(path, tolerate_truncated_tail=not repair):
        obj = _verdict(path, line, obj)
        old = cache.get(obj["key"])
        if old is not None and old["choice"] != "unparseable":
            raise RecordError(path, line, f"duplicate verdict for key {obj['key'][:12]}…")
        cache[obj["key"]] = obj
    return cache


def _todo(ps: list[Pair], judge: Judge, cache: dict, retry_unparseable: bool) -> list[Call]:
    ident, seen, todo = judge.identity(), set(), []
    for p in ps:
        if p.a == p.b:
            continue
        for c in _calls(p):
            k = call_key(ident, c)
            rec = cache.get(k)
            if k in seen or (rec is not None and not (retry_unparseable and rec["choice"] == "unparseable")):
                continue
            seen.add(k)
            todo.append(c)
    return todo


def plan(a_spec: str, b_spec: str, out: str | Path, judge: Judge, retry_unparseable: bool = False) -> dict:
    """What ``run`` would do: prompts, free ties (identical texts), calls cached, calls still to make (read-only)."""
    out = check_out(out)
    ps = pairs(a_spec, b_spec)
    cache = load_cache(out, repair=False)
    todo = _todo(ps, judge, cache, retry_unparseable)
    identical = sum(p.a == p.b for p in ps)
    return {"prompts": len(ps), "identical": identical, "calls_needed": 2 * (len(ps) - identical),
            "cached": 2 * (len(ps) - identical) - len(todo), "to_make": len(todo)}


def _manifest_fields(out: Path, a_spec: str, b_spec: str, ident: dict, max_attempts: int) -> dict:
    old = read_manifest(out)
    comparisons = {tuple(portable_side(x) if isinstance(x, str) else x for x in c)
                   for c in old.get("comparisons", []) if isinstance(c, (list, tuple)) and len(c) == 2}
    comparisons.add((portable_side(a_spec), portable_side(b_spec)))
    judges = {json.dumps(j, sort_keys=True) for j in old.get("judges", [])} | {json.dumps(ident, sort_keys=True)}
    return {"kind": KIND_JUDGE, "comparisons": [list(c) for c in sorted(comparisons)],
            "judges": [json.loads(j) for j in sorted(judges)],
            "protocol": {"orders": "both", "fold": "W/L only when both orders agree, else T",
                         "identical_texts": "free tie", "max_attempts": max_attempts}}


def run(a_spec: str, b_spec: str, out: str | Path, judge: Judge, chunk: int = 32, max_attempts: int = 3,
        retry_unparseable: bool = False, progress: bool = False) -> dict:
    """Make the missing calls (both orders), appending after each chunk; returns counts and throughput.

    Validate first, write second: the folder's kind, both systems files and every recorded
    verdict are read before anything is written, so a refused run leaves no trace. One writer
    per folder (:class:`polyvox.records.RunLock`): a second ``run`` on the same folder is refused.
    """
    if chunk < 1 or max_attempts < 1:
        raise ValueError(f"chunk and max_attempts must be at least 1, got {chunk} and {max_attempts}")
    out = check_out(out)
    ps = pairs(a_spec, b_spec)
    ident = judge.identity()
    load_cache(out, repair=False)  # a malformed verdicts file is refused before the lock is taken
    _manifest_fields(out, a_spec, b_spec, ident, max_attempts)
    with RunLock(out):
        check_out(out)  # again under the lock: another writer may have written meanwhile
        cache = load_cache(out)
        todo = _todo(ps, judge, cache, retry_unparseable)
        fields = _manifest_fields(out, a_spec, b_spec, ident, max_attempts)
        write_manifest(out, **fields, status="running", updated=now_iso())
        t0, made, unparseable = time.perf_counter(), 0, 0
        for b in range(0, len(todo), chunk):
            batch = todo[b:b + chunk]
            results: list = [None] * len(batch)
            pending = list(range(len(batch)))
            attempt = 0
            while pending and attempt < max_attempts:
                t_call = time.perf_counter()
                raws = judge.ask([batch[i] for i in pending], attempt)
                if len(raws) != len(pending):
                    raise RuntimeError(f"judge {ident.get('judge')}: {len(raws)} replies to {len(pending)} calls")
                latency = (time.perf_counter() - t_call) / len(pending)
                still = []
                for i, raw in zip(pending, raws):
                    choice = judge.parse(raw)
                    if choice is not None and choice not in CHOICES:
                        raise RuntimeError(f"judge {ident.get('judge')}: parse gave {choice!r}, not one of "
                                           f"{', '.join(CHOICES)}")
                    results[i] = (choice or "unparseable", raw, attempt + 1, latency)
                    if choice is None:
                        still.append(i)
                pending, attempt = still, attempt + 1
            records = []
            for c, (choice, raw, attempts, latency) in zip(batch, results):
                unparseable += choice == "unparseable"
                records.append({"key": call_key(ident, c), "judge": ident.get("judge"), "prompt_id": c.prompt_id,
                                "first_sha": hashlib.sha256(c.first.encode()).hexdigest()[:16],
                                "second_sha": hashlib.sha256(c.second.encode()).hexdigest()[:16],
                                "choice": choice, "raw": (raw or "")[:500], "attempts": attempts,
                                "latency_s": round(latency, 4)})
            append_jsonl(out / VERDICTS, records)
            made += len(batch)
            if progress:
                print(f"judge: {made}/{len(todo)} calls", flush=True)
        seconds = time.perf_counter() - t0
        write_manifest(out, **fields, status="complete", updated=now_iso())
    return {"calls_made": made, "unparseable": unparseable, "seconds": round(seconds, 3),
            "verdicts_per_s": round(made / seconds, 2) if made and seconds > 0 else None}


# ---------------------------------------------------------------- tally

def outcomes(a_spec: str, b_spec: str, out: str | Path, judge: Judge) -> "pd.DataFrame":  # noqa: F821
    """One row per prompt: outcome W/L/T from A's side (U: an order unparseable; M: not judged yet),
    both orders' choices, word counts and the row's labels."""
    import pandas as pd

    out = check_out(out)
    ident, cache = judge.identity(), load_cache(out, repair=False)
    rows = []
    for p in pairs(a_spec, b_spec):
        labels = {k: v for k, v in p.row.items() if k not in ("responses", "prompt") and isinstance(v, (str, int, float))}
        base = {**labels, "prompt_id": p.prompt_id, "words_a": len(p.a.split()), "words_b": len(p.b.split())}
        if p.a == p.b:
            rows.append({**base, "outcome": "T", "ab": "identical", "ba": "identical"})
            continue
        ab, ba = (cache.get(call_key(ident, c)) for c in _calls(p))
        if ab is None or ba is None:
            rows.append({**base, "outcome": "M", "ab": None, "ba": None})
            continue
        x, y = ab["choice"], ba["choice"]
        if "unparseable" in (x, y):
            outcome = "U"
        elif x == "A" and y == "B":
            outcome = "W"
        elif x == "B" and y == "A":
            outcome = "L"
        else:
            outcome = "T"
        rows.append({**base, "outcome": outcome, "ab": x, "ba": y})
    return pd.DataFrame(rows)


SCORE = {"W": 1.0, "T": 0.5, "L": 0.0}


def cluster_bootstrap_ci(values, groups, n_boot: int = 2000, alpha: float = 0.05,
                         seed: int = 0) -> tuple[float, float, float]:
    """Percentile bootstrap of a mean that resamples whole clusters: (mean, low, high).

    ``values`` holds one number per item (a prompt's score), ``groups`` its cluster (the user who
    wrote it). Each replicate draws as many clusters as there are, with replacement, keeps every
    item of each drawn cluster and takes the mean over those items (clusters of unequal size weigh
    by their size). Clusters are numbered in order of first appearance, so with one item per
    cluster the draws — and the interval — are those of :func:`polyvox.metrics.bootstrap_ci` with
    the same seed.
    """
    x = np.asarray(values, dtype=np.float64)
    g = np.asarray(groups)
    if len(x) == 0:
        raise ValueError("cluster_bootstrap_ci: no items")
    if len(g) != len(x):
        raise ValueError(f"cluster_bootstrap_ci: {len(x)} values but {len(g)} group labels")
    _, first, inverse = np.unique(g, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # cluster ids in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    cid = rank[inverse.reshape(-1)]
    k = len(order)
    sums = np.bincount(cid, weights=x, minlength=k)
    sizes = np.bincount(cid, minlength=k).astype(np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, k, size=(n_boot, k))
    stats = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    lo, hi = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return float(x.mean()), float(lo), float(hi)


def summarize(df, n_boot: int = 2000, seed: int = 0, groups: str | None = None) -> dict:
    """Counts and win rate (W + T/2)/n with a 95% bootstrap CI: over prompts, or, with ``groups``
    (a column of ``df``, e.g. ``"user"``), over clusters of prompts (:func:`cluster_bootstrap_ci`)."""
    from .metrics import bootstrap_ci

    counts = {k: int((df["outcome"] == k).sum()) for k in ("W", "T", "L", "U", "M")}
    scored = df[df["outcome"].isin(list(SCORE))]
    n = len(scored)
    row = {"n": n, **{k: counts[k] for k in "WTL"}, "unparseable": counts["U"], "missing": counts["M"]}
    if groups is not None:
        if groups not in df.columns:
            raise ValueError(f"no label {groups!r} to resample by; labels: "
                             f"{', '.join(c for c in df.columns if c not in ('outcome', 'ab', 'ba'))}")
        row["clusters"] = int(scored[groups].nunique())
    if n == 0:
        return {**row, "win_rate": None, "ci_low": None, "ci_high": None}
    scores = scored["outcome"].map(SCORE).to_numpy()
    if groups is None:
        wr, lo, hi = bootstrap_ci(scores, n_boot=n_boot, seed=seed)
    else:
        wr, lo, hi = cluster_bootstrap_ci(scores, scored[groups].to_numpy(), n_boot=n_boot, seed=seed)
    return {**row, "win_rate": wr, "ci_low": lo, "ci_high": hi}


def tally(a_spec: str, b_spec: str, out: str | Path, judge: Judge, by: tuple[str, ...] = (),
          n_boot: int = 2000, groups: str | None = None) -> dict:
    """Overall and per-label win rates of A over B, with the length-controlled view. ``groups``: a
    row label whose values cluster prompts (e.g. ``"user"``); the win rates' CIs then resample whole
    clusters (the length-controlled CI still resamples prompts)."""
    df = outcomes(a_spec, b_spec, out, judge)
    result = {"a": a_spec, "b": b_spec, "overall": summarize(df, n_boot, groups=groups),
              "length_controlled": length_controlled(df, n_boot=min(n_boot, 500)),
              "by": {}}
    for label in by:
        if label not in df.columns:
            raise ValueError(f"no label {label!r} in the systems rows; labels: "
                             f"{', '.join(c for c in df.columns if c not in ('outcome', 'ab', 'ba'))}")
        result["by"][label] = {str(v): summarize(g, n_boot, groups=groups) for v, g in df.groupby(label, sort=True)}
    return result


def _logistic_intercept(x: np.ndarray, y: np.ndarray, iters: int = 50, ridge: float = 1e-6) -> tuple[float, float]:
    """Fit y ~ σ(b0 + b1 x) (fractional y allowed) by Newton's method; returns (b0, b1)."""
    X = np.column_stack([np.ones_like(x), x])
    beta = np.zeros(2)
    for _ in range(iters):
        p = 1 / (1 + np.exp(-X @ beta))
        w = np.clip(p * (1 - p), 1e-9, None)
        grad = X.T @ (y - p) - ridge * beta
        hess = (X * w[:, None]).T @ X + ridge * np.eye(2)
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.abs(step).max() < 1e-10:
            break
    return float(beta[0]), float(beta[1])


def length_controlled(df, n_boot: int = 500, seed: int = 0) -> dict:
    """Win rate at zero length difference (logistic regression of the score on standardised length difference)."""
    scored = df[df["outcome"].isin(list(SCORE))]
    if len(scored) < 3:
        return {"win_rate": None, "ci_low": None, "ci_high": None, "slope": None}
    y = scored["outcome"].map(SCORE).to_numpy(dtype=float)
    d = (scored["words_a"] - scored["words_b"]).to_numpy(dtype=float)
    sd = d.std()
    x = d / sd if sd > 0 else np.zeros_like(d)
    sig = lambda b: 1 / (1 + np.exp(-b))  # noqa: E731
    # Extreme fits (perfect separation) are clipped by the ridge; the intercept stays finite.
    b0, b1 = _logistic_intercept(x, y, ridge=1e-3)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        i = rng.integers(0, len(y), len(y))
        boots.append(sig(_logistic_intercept(x[i], y[i], iters=30, ridge=1e-3)[0]))
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return {"win_rate": float(sig(b0)), "ci_low": float(lo), "ci_high": float(hi), "slope": float(b1),
            "length_sd_words": float(sd)}


def as_table(result: dict) -> str:
    """A text table of a tally (what ``polyvox judge tally`` prints)."""
    def fmt(s):
        if s["win_rate"] is None:
            return f"n={s['n']:>4}  —"
        return (f"n={s['n']:>4}  W {s['W']:>4}  T {s['T']:>4}  L {s['L']:>4}  "
                f"win {100 * s['win_rate']:5.1f}% [{100 * s['ci_low']:.0f},{100 * s['ci_high']:.0f}]"
                + (f"  unparseable {s['unparseable']}" if s["unparseable"] else "")
                + (f"  missing {s['missing']}" if s["missing"] else ""))

    lines = [f"{result['a']}  vs  {result['b']}", f"  overall            {fmt(result['overall'])}"]
    lc = result["length_controlled"]
    if lc["win_rate"] is not None:
        lines.append(f"  length-controlled  win {100 * lc['win_rate']:5.1f}% [{100 * lc['ci_low']:.0f},"
                     f"{100 * lc['ci_high']:.0f}]  (slope {lc['slope']:+.2f} per sd of length difference)")
    for label, groups in result["by"].items():
        lines.append(f"  by {label}:")
        for v, s in groups.items():
            lines.append(f"    {v:<22} {fmt(s)}")
    return "\n".join(lines)

