"""Part II in miniature, stage by stage: router → cap → sweep → heads (forward and reverse, seeds) → mixes →
generate → systems → judge-model → judge (cap and sweep only for a scale whose ``distill`` names them, mixes only
for one with a ``mixes`` section, judge-model only for one with a ``judge_model`` section: issue 22).

``polyvox personas run --scale SCALE --out DIR`` runs every stage in order, a
:class:`polyvox.stages.Pipeline` (validate first; one writer per folder and per manifest; a stage
complete under the same settings and inputs is skipped, one whose upstream stage was retrained
runs again). The root's kind is ``personas pipeline`` (``<out>/manifest.json``); a run recorded
before the root manifest is recognised by its copy of the scale, ``<out>/scale.yaml``, which is
checked against the scale. Scales are ``configs/personas/<scale>.yaml`` (``smoke``: about a minute,
plumbing only, issue 22's stages at toy size; ``h200``: the recorded runs, one H200; ``cpu``: the
same recipe on a CPU; ``h200-v2``: issue 22's run — cap, sweep, five seeds per arm — for one H200;
``full``: the study's scale, documented, not run here), read by :func:`load_scale` for the command
and the chapters. The stages' work is in :mod:`.steps`, :mod:`.sweep` and :mod:`.judging`.

- ``router/``: features of the base model (:func:`.router.features`), the MLP, its test picks
  (``test_pred.jsonl``: prob, selected, label) and ``metrics.json`` (per-axis accuracy, confusion).
- ``cap/`` and ``sweep/`` (:mod:`.sweep`): the teacher's answer lengths per persona and the generation
  cap's check (a cap below the longest persona's 99th percentile is refused before anything generates
  with it); per arm, every point of the validation sweep (``sweep/<arm>-<i>/``: learning rate × steps
  × remedy, the four pole heads scored on validation users only) and the pick (``sweep/chosen/``),
  which the arm's test heads use.
- ``heads/<arm>-s<seed>/<pole>/``: :func:`polyvox.train.distill.train` (teacher = base with the
  pole's card as system prompt, student = base + LoRA on the user prompt alone), the
  checkpoint selected on validation (greedy answers of validation users' prompts scored by the
  rubric for the pole); ``mix_<pair>/``: the study's recipes mixed exactly
  (:func:`polyvox.adapters.save_mix`). A head whose own manifest is complete under the same
  settings is kept when an interrupted arm-seed is resumed; a head cut off mid-training is
  retrained whole. Each head's ``train_log.jsonl`` holds every step's loss and gradient norms; the
  stage's record, per head, the loss's first and last value, the median gradient norms, the
  validation style rate and issue 22's trained rule (:func:`.steps.head_record`).
- ``mixes/<arm>-s<seed>/`` (:mod:`.mixes`): each pair's mixing recipe tuned on validation users' prompts
  until the mix shows both its styles at persona prompting's rate minus a margin (``tuning.json``: every
  candidate asked) and the chosen mixes ``mix_<pair>/``; generation answers with them as units
  ``<arm>-s<seed>-tuned-<pair>`` beside the study recipes', and a system's two-pole head is the tuned mix.
- ``gen/<unit>/``: greedy answers to the test prompts through the one run path
  (:func:`polyvox.runs.sample`, task ``personas``), one unit per adapter or card: ``base``,
  ``card-<type>`` (persona prompting), ``<arm>-s<seed>-<head or mix>``. Every system is an
  assembly of units: router_head for a prompt is the unit of the router's pick. (Runs recorded
  before ``gen/`` had a stage record count it complete when every unit's run is.)
- ``systems/<arm>-s<seed>.jsonl``: one row per test prompt with every system's answer (the
  shape of the study's ``systems_test.jsonl``), the router's pick and the true type.
- ``judge/``: the rubric judge's verdicts (:mod:`polyvox.judge`, both orders, cached) for each
  comparison of :func:`comparisons`, and ``tallies.json``; the stage's record is ``stage.json``.
- with ``judge_model`` (issue 22, item 4; :mod:`.judging`): ``judge-model/<size>-<digest>/`` (stage
  judge-model: the tiny judge model trained on the world's training users, ``model/``, and its calibration on
  held-out pairs, ``model/calibration.json``) and ``judge-by-model/`` (stage judge: the judge model's verdicts
  on the same comparisons, both orders, its ``tallies.json``, and both judges' tallies side by side in its
  ``stage.json``). The ``judge_model`` section may change between runs of one folder (:data:`ROOT_IGNORE`):
  the judge model of other settings is a new folder, and the verdicts that read the old one run again.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from ... import judge, launch, stages
from ...records import KIND_JUDGE, read_manifest
from . import mixes
from . import router as R  # noqa: F401 - the chapters read R.chat_prompt through this module
from .judging import (BY, MODEL_VERDICTS, comparisons, judge_model_folder, judge_settings, make_judge,  # noqa: F401
                      modelled_refusal, rubric_judge, stage_judge, stage_judge_by_model, stage_judge_model)
from .steps import (PAIRS, RECIPES, REMEDY, SYSTEMS, _prompts, check_recipe, grid, recipe, remedy_scale,  # noqa: F401
                    stage_generate, stage_heads, stage_router, stage_systems, units)
from .sweep import cap_refusal, check_picked, point_folder, stage_cap, stage_chosen, stage_point

STAGES = ("router", "cap", "sweep", "heads", "mixes", "generate", "systems", "judge-model", "judge")
RUN_ONLY = ("generate.threads",)  # scale keys that change no output: a rerun may change them
# what a rerun of a folder may change besides: judge_model, whose every setting has its own folder (judge-model/…),
# and mixes, whose settings are the mixes stages' own (the stages that read them run again when they change)
ROOT_IGNORE = (*RUN_ONLY, "judge_model", "mixes")


def load_scale(scale: str | Path) -> dict:
    """configs/personas/<scale>.yaml, or a YAML path (a run folder's scale.yaml keeps its name)."""
    return stages.load_scale("personas", scale, {"model", "world", "router", "distill", "arms", "generate", "judge"},
                             {"judge_model", "mixes"})


def _recognise(out: Path) -> bool:
    """A personas run recorded before the root manifest: its copy of the scale, scale.yaml."""
    return (out / "scale.yaml").is_file()


def _issue22(s: dict) -> dict:
    """What a scale naming issue 22's distill keys adds to its heads' and sweep's stage settings: the
    losses' parameterisation (:data:`polyvox.train.distill_losses.PARAMETERISATION`) and the remedy's
    fields with their defaults written out (:data:`.steps.REMEDY`), so a changed parameterisation or
    remedy is a changed stage. A scale of the recorded form (none of those keys: the shipped runs') adds nothing, so its
    recorded stage settings still match; its heads' own manifests record the parameterisation."""
    if not remedy_scale(s):
        return {}
    from ...train.distill_losses import PARAMETERISATION

    return {"parameterisation": PARAMETERISATION, "remedy": {k: recipe(s)[k] for k in REMEDY}}


def _issue22_stages(out: Path, s: dict) -> tuple[list[stages.Stage], tuple[Path, ...]]:
    """The cap and sweep stages of a scale with ``distill.cap`` / ``distill.sweep`` (:mod:`.sweep`), and the
    folders the heads then read."""
    settings, d, found, reads = stages.settings_of, s["distill"], [], ()
    if "cap" in d:
        found.append(stages.Stage("cap", out / "cap", settings(s, "model", "world", "distill",
                                                                max_tokens=s["generate"]["max_tokens"]),
                                  lambda: stage_cap(out, s)))
        reads += (out / "cap",)
    if "sweep" in d:
        points = [(arm, i) for arm in s["arms"]["losses"] for i in range(len(grid(s)))]
        found += [stages.Stage("sweep", point_folder(out, arm, i),
                               settings(s, "model", "world", "distill", arm=arm, point=i, **_issue22(s)),
                               lambda arm=arm, i=i: stage_point(out, s, arm, i), reads) for arm, i in points]
        found.append(stages.Stage("sweep", out / "sweep" / "chosen", settings(s, "model", "world", "distill", "arms"),
                                  lambda: stage_chosen(out, s), tuple(point_folder(out, a, i) for a, i in points)))
        reads += (out / "sweep" / "chosen",)
    return found, reads


def _stages(out: Path, s: dict) -> list[stages.Stage]:
    settings = stages.settings_of
    heads = [(arm, seed, out / "heads" / f"{arm}-s{seed}")
             for arm in s["arms"]["losses"] for seed in s["arms"]["seeds"]]
    generate = {k: v for k, v in s["generate"].items() if f"generate.{k}" not in RUN_ONLY}
    before, heads_read = _issue22_stages(out, s)
    judge_model = _judge_model_stages(out, s)  # [] or [the judge model, its verdicts]
    tuned = [] if not mixes.tuned(s) else [
        stages.Stage("mixes", mixes.folder(out, arm, seed),
                     settings(s, "model", "world", "mixes", arm=arm, seed=seed,
                              validation_prompts=s["distill"]["validation_prompts"],
                              max_tokens=s["generate"]["max_tokens"]),
                     lambda arm=arm, seed=seed: mixes.stage_mixes(out, s, arm, seed), (folder,))
        for arm, seed, folder in heads]

    def generated() -> bool:  # a run recorded before gen/ had a record: every unit's run complete
        return all(read_manifest(out / "gen" / u).get("status") == "complete" for u in units(out, s))

    return [stages.Stage("router", out / "router", settings(s, "model", "world", "router"),
                         lambda: stage_router(out, s)),
            *before,
            *[stages.Stage("heads", folder, settings(s, "model", "world", "distill", arm=arm, seed=seed, **_issue22(s)),
                           lambda arm=arm, seed=seed: stage_heads(out, s, arm, seed), heads_read)
              for arm, seed, folder in heads],
            *tuned,
            stages.Stage("generate", out / "gen", settings(s, "model", "world", "arms", generate=generate),
                         lambda: stage_generate(out, s), (*(f for _a, _s, f in heads), *(st.folder for st in tuned)),
                         legacy_done=generated),
            stages.Stage("systems", out / "systems", settings(s, "world", "arms"), lambda: stage_systems(out, s),
                         (out / "router", out / "gen")),
            *judge_model[:1],
            stages.Stage("judge", out / "judge", settings(s, "judge"), lambda: stage_judge(out, s),
                         (out / "systems",), hosts=KIND_JUDGE),
            *judge_model[1:]]


def _judge_model_stages(out: Path, s: dict) -> list[stages.Stage]:
    """For a scale with ``judge_model``: the judge model's stage and its verdicts (:mod:`.judging`), else none.
    The verdicts' settings hold no judge setting: which judge model they are is an input (its folder's digest)."""
    folder = judge_model_folder(out, s)
    if folder is None:
        return []
    trained = stages.settings_of(s, judge_model=dataclasses.asdict(judge_settings(s)))
    return [stages.Stage("judge-model", folder, trained, lambda: stage_judge_model(out, s)),
            stages.Stage("judge", out / MODEL_VERDICTS, stages.settings_of(s, "judge", verdicts="judge model"),
                         lambda: stage_judge_by_model(out, s), (out / "systems", folder, out / "judge"),
                         hosts=KIND_JUDGE)]


def pipeline(out: str | Path, s: dict) -> stages.Pipeline:
    out = Path(out)

    def older_scale(todo) -> None:  # a run recorded before the root manifest: its scale.yaml
        if not (out / "manifest.json").is_file() and (out / "scale.yaml").is_file():
            old = load_scale(out / "scale.yaml")
            changed = stages.changed_keys(stages.scale_settings(old), stages.scale_settings(s), ROOT_IGNORE)
            if changed:
                raise ValueError(f"{out}: holds a run of the scale {old['name']!r} (its scale.yaml); the scale "
                                 f"{s['name']!r} differs in {', '.join(changed)}; use a new --out")

    def judge_folder(todo) -> None:
        if "judge" in todo:
            judge.check_out(out / "judge")
        own = _judge_model_stages(out, s)
        if not own:
            return
        states = stages.Pipeline(stages.KIND_PERSONAS, out, s, own, STAGES)
        left = [st for st in own if states.state(st) != "done"]
        if "judge" in todo:
            judge.check_out(out / MODEL_VERDICTS)
            if "judge-model" not in todo and own[0] in left:
                raise ValueError(f"{own[0].folder}: missing: the scale {s['name']!r} judges with its judge_model "
                                 "(run the judge-model stage first)")
        if "judge" in todo and own[1] in left:  # the judge model's positions hold the judge prompts (modelled)
            line = modelled_refusal(out, s)
            if line:
                raise ValueError(line)
        if any(st.name in todo for st in left) and judge_settings(s).device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ValueError(f"scale {s['name']!r}: judge_model.device is cuda (the {judge_settings(s).size} "
                                 "preset's) and no GPU is visible; set judge_model.device: cpu to run it here")

    def recipe_and_cap(todo) -> None:  # issue 22: a tempered loss over the whole vocabulary; a cap that fits
        todo, d = set(todo), s["distill"]
        if {"sweep", "heads"} & todo:
            check_recipe(s)
        if {"sweep", "heads", "generate"} & todo and "cap" in d:
            if "cap" not in todo and not (out / "cap" / "cap.json").is_file():
                raise ValueError(f"{out / 'cap' / 'cap.json'}: missing: the scale {s['name']!r} measures its "
                                 "generation cap first (run the cap stage)")
            line = cap_refusal(out, s)
            if line:
                raise ValueError(line)
        if "heads" in todo and "sweep" in d and "sweep" not in todo:
            check_picked(out, s)

    def threads() -> None:  # every process that runs a stage (the launcher's workers too)
        import torch

        torch.set_num_threads(int(s["generate"].get("threads", 1)))

    def setup() -> None:  # under the lock, before the stages: the thread count, the run's copy of its scale
        threads()
        tmp = out / "scale.yaml.tmp"
        tmp.write_text(yaml.safe_dump(s, sort_keys=False))
        tmp.replace(out / "scale.yaml")

    return stages.Pipeline(stages.KIND_PERSONAS, out, s, _stages(out, s), STAGES, recognise=_recognise,
                           ignore=ROOT_IGNORE, checks=[older_scale, judge_folder, recipe_and_cap], setup=setup,
                           process_setup=threads)


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
