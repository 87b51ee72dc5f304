"""Part II in miniature, stage by stage: router → heads (forward and reverse, seeds) → generate → systems → judge.

``polyvox personas run --scale SCALE --out DIR`` runs every stage in order, a
:class:`polyvox.stages.Pipeline` (validate first; one writer per folder and per manifest; a stage
complete under the same settings and inputs is skipped, one whose upstream stage was retrained
runs again). The root's kind is ``personas pipeline`` (``<out>/manifest.json``); a run recorded
before the root manifest is recognised by its copy of the scale, ``<out>/scale.yaml``, which is
checked against the scale. Scales are ``configs/personas/<scale>.yaml`` (``smoke``: seconds,
plumbing only; ``h200``: the recorded runs, one H200; ``cpu``: the same recipe on a CPU; ``full``:
the study's scale, documented, not run here), read by :func:`load_scale` for the command and the
chapters. The stages' work is in :mod:`.steps` and :mod:`.judging`.

- ``router/``: features of the base model (:func:`.router.features`), the MLP, its test picks
  (``test_pred.jsonl``: prob, selected, label) and ``metrics.json`` (per-axis accuracy, confusion).
- ``heads/<arm>-s<seed>/<pole>/``: :func:`polyvox.train.distill.train` (teacher = base with the
  pole's card as system prompt, student = base + LoRA on the user prompt alone), the
  checkpoint selected on validation (greedy answers of validation users' prompts scored by the
  rubric for the pole); ``mix_<pair>/``: the study's recipes mixed exactly
  (:func:`polyvox.adapters.save_mix`). A head whose own manifest is complete under the same
  settings is kept when an interrupted arm-seed is resumed; a head cut off mid-training is
  retrained whole.
- ``gen/<unit>/``: greedy answers to the test prompts through the one run path
  (:func:`polyvox.runs.sample`, task ``personas``), one unit per adapter or card: ``base``,
  ``card-<type>`` (persona prompting), ``<arm>-s<seed>-<head or mix>``. Every system is an
  assembly of units: router_head for a prompt is the unit of the router's pick. (Runs recorded
  before ``gen/`` had a stage record count it complete when every unit's run is.)
- ``systems/<arm>-s<seed>.jsonl``: one row per test prompt with every system's answer (the
  shape of the study's ``systems_test.jsonl``), the router's pick and the true type.
- ``judge/``: the rubric judge's verdicts (:mod:`polyvox.judge`, both orders, cached) for each
  comparison of :func:`comparisons`, and ``tallies.json``; the stage's record is ``stage.json``.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from ... import judge, launch, stages
from ...records import KIND_JUDGE, read_manifest
from . import router as R  # noqa: F401 - the chapters read R.chat_prompt through this module
from .judging import BY, comparisons, make_judge, rubric_judge, stage_judge  # noqa: F401 - public names
from .steps import (PAIRS, RECIPES, SYSTEMS, _prompts, stage_generate, stage_heads, stage_router,  # noqa: F401
                    stage_systems, units)

STAGES = ("router", "heads", "generate", "systems", "judge")
RUN_ONLY = ("generate.threads",)  # scale keys that change no output: a rerun may change them


def load_scale(scale: str | Path) -> dict:
    """configs/personas/<scale>.yaml, or a YAML path (a run folder's scale.yaml keeps its name)."""
    return stages.load_scale("personas", scale, {"model", "world", "router", "distill", "arms", "generate", "judge"})


def _recognise(out: Path) -> bool:
    """A personas run recorded before the root manifest: its copy of the scale, scale.yaml."""
    return (out / "scale.yaml").is_file()


def _stages(out: Path, s: dict) -> list[stages.Stage]:
    settings = stages.settings_of
    heads = [(arm, seed, out / "heads" / f"{arm}-s{seed}")
             for arm in s["arms"]["losses"] for seed in s["arms"]["seeds"]]
    generate = {k: v for k, v in s["generate"].items() if f"generate.{k}" not in RUN_ONLY}

    def generated() -> bool:  # a run recorded before gen/ had a record: every unit's run complete
        return all(read_manifest(out / "gen" / u).get("status") == "complete" for u in units(out, s))

    return [stages.Stage("router", out / "router", settings(s, "model", "world", "router"),
                         lambda: stage_router(out, s)),
            *[stages.Stage("heads", folder, settings(s, "model", "world", "distill", arm=arm, seed=seed),
                           lambda arm=arm, seed=seed: stage_heads(out, s, arm, seed)) for arm, seed, folder in heads],
            stages.Stage("generate", out / "gen", settings(s, "model", "world", "arms", generate=generate),
                         lambda: stage_generate(out, s), tuple(f for _a, _s, f in heads), legacy_done=generated),
            stages.Stage("systems", out / "systems", settings(s, "world", "arms"), lambda: stage_systems(out, s),
                         (out / "router", out / "gen")),
            stages.Stage("judge", out / "judge", settings(s, "judge"), lambda: stage_judge(out, s),
                         (out / "systems",), hosts=KIND_JUDGE)]


def pipeline(out: str | Path, s: dict) -> stages.Pipeline:
    out = Path(out)

    def older_scale(todo) -> None:  # a run recorded before the root manifest: its scale.yaml
        if not (out / "manifest.json").is_file() and (out / "scale.yaml").is_file():
            old = load_scale(out / "scale.yaml")
            changed = stages.changed_keys(stages.scale_settings(old), stages.scale_settings(s), RUN_ONLY)
            if changed:
                raise ValueError(f"{out}: holds a run of the scale {old['name']!r} (its scale.yaml); the scale "
                                 f"{s['name']!r} differs in {', '.join(changed)}; use a new --out")

    def judge_folder(todo) -> None:
        if "judge" in todo:
            judge.check_out(out / "judge")

    def threads() -> None:  # every process that runs a stage (the launcher's workers too)
        import torch

        torch.set_num_threads(int(s["generate"].get("threads", 1)))

    def setup() -> None:  # under the lock, before the stages: the thread count, the run's copy of its scale
        threads()
        tmp = out / "scale.yaml.tmp"
        tmp.write_text(yaml.safe_dump(s, sort_keys=False))
        tmp.replace(out / "scale.yaml")

    return stages.Pipeline(stages.KIND_PERSONAS, out, s, _stages(out, s), STAGES, recognise=_recognise,
                           ignore=RUN_ONLY, checks=[older_scale, judge_folder], setup=setup, process_setup=threads)


def check(out: str | Path, s: dict, todo=STAGES) -> None:
    """Read-only: ``out`` may take a run of scale ``s`` over the stages ``todo`` (see the module docstring)."""
    pipeline(out, s).check(todo)


def run(out: str | Path, scale: str | Path = "cpu", todo=STAGES, parallel: int | None = None,
        gpus: list[str] | None = None, mps: bool = False) -> Path:
    """Every stage of ``todo`` for a scale into ``out``, skipping what is complete (resumable).

    Validate first, write second: the stage names, the scale, the root and every stage folder are
    checked before ``out`` is created or its ``scale.yaml`` written; the run holds ``out``'s lock.
    ``parallel``: the heads (arm × seed) and the other stages as a job graph, that many worker
    processes per GPU at once (:mod:`polyvox.launch`).
    """
    s = load_scale(scale)
    if parallel is None:
        pipeline(out, s).run(todo)
    else:
        launch.run_pipeline(pipeline(out, s), todo, f"{__name__}:pipeline", {"out": str(out), "s": s},
                            per_gpu=parallel, gpus=gpus, mps=mps)
    return Path(out)
