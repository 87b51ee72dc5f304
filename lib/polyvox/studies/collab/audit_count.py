"""Recount the answer-projection audit (``data/collab/study_audit.json``) from a local copy of the
study's MATH CL ``evaluation.log``.

The shipped counts are **this project's hand tally** (``provenance.read`` in the JSON), not the
output of this module; this module is the independent recount. The book ships only counts: the
study's repository has no licence, so its log is not in this repository. Fetch the log yourself
(:data:`LOG_URL`, at the commit named in the JSON's ``provenance``; :func:`log_url` builds the
address from it) — nothing here downloads — then::

    python scripts/recount_collab_audit.py path/to/evaluation.log [--audit data/collab/study_audit.json]
    python -m polyvox.studies.collab.audit_count path/to/evaluation.log   (the same)

The log is a header of ``key: value`` lines (``problems``, ``correct``, ``EM``, ``F1``) followed by
one JSON object per problem with ``answer_source`` and ``em``. :func:`count` tallies rows and
correct rows (``em == 1``) per ``answer_source`` and reads the header's totals; :func:`compare`
lists every disagreement with the shipped JSON (empty: the shipped counts are reproduced).
The exit status is 0 when nothing disagrees, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

LOG_URL = ("https://github.com/SJTUFreshman/tmp_x7k9p4r2d8m5c/blob/1bf798bf99c850ec198d84b8f2f76a324dc75082/"
           "reproduction/results/MATH/CL/math_specific_sft_rl_20260830/logs/evaluation.log")


def log_url(provenance: dict) -> str:
    """The log's public address from the audit JSON's ``provenance`` (repository, commit, path)."""
    return f"https://github.com/{provenance['repository']}/blob/{provenance['commit']}/{provenance['path']}"


_HEADER = {"problems": ("problems", int), "correct": ("correct", int), "EM": ("em_percent", float),
           "F1": ("f1_percent", float)}


def count(text: str) -> dict:
    """Per-source rows/correct/wrong, totals, and the header's stated totals, from the log's text."""
    by = defaultdict(lambda: {"rows": 0, "correct": 0, "wrong": 0})
    header, ids = {}, []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            row = json.loads(line)
            if "answer_source" not in row:
                continue
            c = by[row["answer_source"]]
            c["rows"] += 1
            ok = int(row["em"]) == 1
            c["correct" if ok else "wrong"] += 1
            ids.append(row.get("problem_id"))
            continue
        m = re.match(r"^(problems|correct|EM|F1):\s*([0-9.]+)%?\s*$", line)
        if m:
            key, cast = _HEADER[m.group(1)]
            header[key] = cast(m.group(2))
    counts = {k: dict(v) for k, v in sorted(by.items())}
    return {"answer_source_counts": counts, "rows": sum(v["rows"] for v in counts.values()),
            "correct": sum(v["correct"] for v in counts.values()),
            "duplicate_ids": len(ids) - len(set(ids)), "header": header}


def compare(counted: dict, audit: dict) -> list[str]:
    """Every disagreement between a recount and the shipped audit JSON (empty list: they agree)."""
    bad = []
    want, got = audit["answer_source_counts"], counted["answer_source_counts"]
    for src in sorted(set(want) | set(got)):
        for k in ("rows", "correct", "wrong"):
            w, g = want.get(src, {}).get(k), got.get(src, {}).get(k)
            if w != g:
                bad.append(f"{src}.{k}: shipped {w}, counted {g}")
    for k in ("problems", "correct", "em_percent", "f1_percent"):
        w, g = audit["header"].get(k), counted["header"].get(k)
        if w != g:
            bad.append(f"header {k}: shipped {w}, log {g}")
    if counted["rows"] != counted["header"].get("problems"):
        bad.append(f"rows counted {counted['rows']} != header problems {counted['header'].get('problems')}")
    if counted["correct"] != counted["header"].get("correct"):
        bad.append(f"correct rows counted {counted['correct']} != header correct {counted['header'].get('correct')}")
    if counted["duplicate_ids"]:
        bad.append(f"{counted['duplicate_ids']} duplicate problem ids")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m polyvox.studies.collab.audit_count", description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path, help="local copy of the study's evaluation.log")
    ap.add_argument("--audit", type=Path, default=Path("data/collab/study_audit.json"), help="the shipped counts")
    a = ap.parse_args(argv)
    if not a.log.is_file():
        print(f"{a.log}: no such file — fetch the study's log first (nothing here downloads): {LOG_URL}", file=sys.stderr)
        return 2
    counted = count(a.log.read_text(encoding="utf-8"))
    audit = json.loads(a.audit.read_text())
    bad = compare(counted, audit)
    print(json.dumps({k: counted[k] for k in ("answer_source_counts", "rows", "correct", "header")}, indent=1))
    where = log_url(audit["provenance"]) if "provenance" in audit else LOG_URL
    print(f"recounted from {a.log}; the log's public copy: {where}")
    if bad:
        print(f"DISAGREES with {a.audit} (this project's hand tally):\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    print(f"agrees with {a.audit} (this project's hand tally)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
