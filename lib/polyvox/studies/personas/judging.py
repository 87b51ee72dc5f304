"""The persona pipeline's judge stage: the rubric (or an LLM) judge over every comparison, and ``tallies.json``.

The stage's folder, ``judge/``, holds a judge run (:mod:`polyvox.judge`): its manifest.json is the
judge run's alone; the stage's record is ``judge/stage.json`` (:class:`polyvox.stages.Pipeline`).
"""
from __future__ import annotations

import json
from pathlib import Path

from ... import judge
from ...records import RunLock
from . import world as pw

BY = ("pick_size", "preference")  # the row labels tallies break down by


def rubric_judge() -> judge.RubricJudge:
    return judge.RubricJudge(lambda text, row: pw.rubric_score(text, row["preference"], row["gold"], row["n_steps"]),
                             version="personas-rubric-1")


def comparisons(s: dict, systems_dir: str | Path) -> list[tuple[str, str, str]]:
    """(name, A spec, B spec): run21's tables for every arm and seed, and forward vs reverse head to head."""
    d = Path(systems_dir)
    out = []
    for arm in s["arms"]["losses"]:
        for seed in s["arms"]["seeds"]:
            f = d / f"{arm}-s{seed}.jsonl"
            for a, b in (("router_head", "router_persona"), ("router_head", "base"),
                         ("oracle_head", "oracle_persona"), ("oracle_head", "base"),
                         ("router_persona", "base"), ("oracle_persona", "base")) + tuple(
                             ("router_head", f"head_{p}") for p in pw.POLES):
                out.append((f"{arm}-s{seed}: {a} vs {b}", f"{f}:{a}", f"{f}:{b}"))
    losses = s["arms"]["losses"]
    if "forward" in losses and "reverse" in losses:
        for seed in s["arms"]["seeds"]:
            for system in ("router_head", "oracle_head"):
                out.append((f"s{seed}: reverse {system} vs forward {system}",
                            f"{d / f'reverse-s{seed}.jsonl'}:{system}", f"{d / f'forward-s{seed}.jsonl'}:{system}"))
    return out


def make_judge(spec: dict):
    """The judge a scale names: ``rubric`` (free, exact) or ``openai`` (an LLM behind an OpenAI-compatible endpoint)."""
    if spec.get("kind", "rubric") == "rubric":
        return rubric_judge()
    from ...backends.openai import OpenAIBackend

    backend = OpenAIBackend(spec["model"], base_url=spec["base_url"], api_key_env=spec.get("api_key_env"),
                            concurrency=spec.get("concurrency", 8))
    return judge.LLMJudge(backend, max_tokens=spec.get("max_tokens", 16))


def stage_judge(out: Path, s: dict) -> dict:
    """Judge every comparison (cached: a rerun pays nothing twice), write ``tallies.json``; returns the
    stage record's fields: the comparisons (files relative to the run folder) and the calls made."""
    folder = out / "judge"
    j = make_judge(s["judge"])
    tallies, calls = [], 0
    specs = comparisons(s, out / "systems")
    for name, a, b in specs:
        calls += judge.run(a, b, folder, j, chunk=s["judge"]["chunk"])["calls_made"]
        t = judge.tally(a, b, folder, j, by=BY, n_boot=s["judge"]["n_boot"])
        tallies.append({"name": name, **t})

    def rel(spec: str) -> str:  # FILE:SYSTEM with the file relative to the run folder (systems/…)
        path, system = judge.parse_side(spec)
        return f"{path.relative_to(out).as_posix()}:{system}"

    for t in tallies:
        t["a"], t["b"] = rel(t["a"]), rel(t["b"])
    with RunLock(folder):
        (folder / "tallies.json").write_text(json.dumps(tallies, indent=1) + "\n")
    return {"comparisons": sorted([rel(a), rel(b)] for _name, a, b in specs), "calls_made": calls}
