"""Making a comparison's judge calls: :func:`plan` counts them (read-only), :func:`run` makes the missing ones."""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from ..records import KIND_JUDGE, RunLock, append_jsonl, now_iso, read_manifest, write_manifest
from ..statuses import Choice, RunStatus
from .judges import Call, Judge
from .records import CHOICES, VERDICTS, Pair, _calls, call_key, check_out, load_cache, pairs, portable_side


def _todo(ps: list[Pair], judge: Judge, cache: dict, retry_unparseable: bool) -> list[Call]:
    ident, seen, todo = judge.identity(), set(), []
    for p in ps:
        if p.a == p.b:
            continue
        for c in _calls(p):
            k = call_key(ident, c)
            rec = cache.get(k)
            if k in seen or (rec is not None and not (retry_unparseable and rec["choice"] == Choice.UNPARSEABLE)):
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
    A run with nothing left to do on a complete folder that already records this comparison and
    judge writes nothing (its manifest stays byte-identical).
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
        old = read_manifest(out)
        if not todo and old.get("status") == RunStatus.COMPLETE and all(old.get(k) == v for k, v in fields.items()):
            # nothing left to do and the manifest already says so: a rerun writes nothing
            return {"calls_made": 0, "unparseable": 0, "seconds": 0.0, "verdicts_per_s": None}
        write_manifest(out, **fields, status=RunStatus.RUNNING, updated=now_iso())
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
                    results[i] = (choice or Choice.UNPARSEABLE, raw, attempt + 1, latency)
                    if choice is None:
                        still.append(i)
                pending, attempt = still, attempt + 1
            records = []
            for c, (choice, raw, attempts, latency) in zip(batch, results):
                unparseable += choice == Choice.UNPARSEABLE
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
        write_manifest(out, **fields, status=RunStatus.COMPLETE, updated=now_iso())
    return {"calls_made": made, "unparseable": unparseable, "seconds": round(seconds, 3),
            "verdicts_per_s": round(made / seconds, 2) if made and seconds > 0 else None}
