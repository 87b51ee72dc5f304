"""The panel study's protocol, and fresh runs of it that chapters read like the published records.

:func:`protocol` and the ``PUBLISHED_*`` constants hold the published setup (seed
000): which benchmark, format, sample count and token cap each system used.
:func:`generate` samples and grades both systems on both benchmarks into
``run_dir/<bench>/<system>/`` through the one run path (:mod:`polyvox.runs`,
resumable); :func:`run_counts` and :func:`run_samples` read such a folder back in
the shape of :func:`polyvox.studies.panel.published.eval_counts`, so the chapter
code is the same for published records and new checkpoints.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ... import runs
from ...metrics import wilson_interval

BENCH_TASK = {"math_l5": ("math500", {"level": 5}), "aime": ("aime_panel", {})}


@dataclass(frozen=True)
class SystemRun:
    name: str  # "panel" | "thinking"
    format: str
    model: str
    adapter: str | None
    n: int
    max_tokens: int


def protocol(base_model: str, adapter: str | None, thinking_model: str, n_panel: dict, n_thinking: dict,
             panel_max_tokens: dict, thinking_max_tokens: int) -> dict[str, list[SystemRun]]:
    """Per benchmark, the two systems as the study ran them (override any field by argument)."""
    return {bench: [SystemRun("panel", "panel", base_model, adapter, n_panel[bench], panel_max_tokens[bench]),
                    SystemRun("thinking", "think", thinking_model, None, n_thinking[bench], thinking_max_tokens)]
            for bench in BENCH_TASK}


# The published setup: MATH-500 L5 panel n = 8 (4,096 tokens), thinking n = 4; AIME n = 16
# both, panel 8,192 tokens; thinking 16,384 everywhere; temperature 1.0.
PUBLISHED_N_PANEL = {"math_l5": 8, "aime": 16}
PUBLISHED_N_THINKING = {"math_l5": 4, "aime": 16}
PUBLISHED_PANEL_MAX_TOKENS = {"math_l5": 4096, "aime": 8192}
PUBLISHED_THINKING_MAX_TOKENS = 16384


def generate(run_dir: str | Path, systems: dict[str, list[SystemRun]], backend: str = "transformers",
             temperature: float = 1.0, seed: int = 0, limit: int | None = None, data_dir="data",
             backend_kwargs: dict | None = None, progress: bool = True) -> Path:
    """Sample and grade every (benchmark, system) into run_dir/<bench>/<system>; resumes."""
    from ...backends import SamplingParams, make_backend

    run_dir = Path(run_dir)
    loaded: dict[tuple, object] = {}
    for bench, systems_of_bench in systems.items():
        task, options = BENCH_TASK[bench]
        for s in systems_of_bench:
            key = (s.model, s.adapter)
            if key not in loaded:
                loaded.clear()  # one model in memory at a time
                loaded[key] = make_backend(backend, s.model, s.adapter, **(backend_kwargs or {}))
            out = run_dir / bench / s.name
            runs.sample(out, task, s.format, loaded[key], s.n, SamplingParams(s.max_tokens, temperature), seed=seed,
                        limit=limit, data_dir=data_dir, task_options=options, progress=progress)
            runs.grade(out, data_dir)
    return run_dir


def run_samples(run_dir: str | Path, bench: str, system: str) -> pd.DataFrame:
    """Graded samples of one system on one benchmark: one row per sample."""
    return runs.graded_samples(Path(run_dir) / bench / system)


def run_counts(run_dir: str | Path, bench: str, system: str) -> pd.DataFrame:
    """Per-problem n_samples / n_correct of a run, in the published records' shape."""
    g = runs.per_problem_counts(run_samples(run_dir, bench, system))[["id", "n_samples", "n_correct"]]
    n, c = int(g.n_samples.sum()), int(g.n_correct.sum())
    g.attrs["summary"] = {"avg_hit_rate": c / n, "wilson_ci95": list(wilson_interval(c, n)), "source": str(run_dir)}
    return g
