"""The miniature replication, stage by stage (issue 21's design): models → pilot → matched RL →
evaluations → bands (two draws) → hill-climbs.

Matched arms. Both arms start from tiny-base and are trained by one recipe — the same GRPO stages
(easy, then hard), steps, learning rate, LoRA rank, group, prompts, problems, cap and held-out set —
and differ only in the format (the raw panel prompt vs the thinking chat template) and its format
reward (tags valid vs a closed think block and a box): :func:`.arms.arm_differences` compares the two
RLConfigs the pipeline builds and lists what differs. No SFT warm-start: tiny-base already writes the
thinking format under the chat template (its pretraining holds thinking notes; on the shipped tiny-base,
14 of 16 level-2 samples at cap 400 were format-valid, and 1 of 16 under the panel prompt) and RL alone
learns the panel format from tiny-base (the recorded panel RL reached ≈ 90 % accuracy in 50 steps); a
warm-start on one arm only would bring back the confound, and an identical one on both is not needed.
The pilot records each arm's format-valid rate at the start, so this is checked at every scale.
tiny-think is still built by the models stage (the shipped model) but no stage reads it.

Layout of ``<out>`` (one folder per stage, each with its record: settings, inputs, status):
- ``models/``: tiny-base (and tiny-think), trained once;
- ``pilot/<arm>/samples``: each arm's starting point (tiny-base, its format) on every level at the
  scale's largest evaluation cap; ``pilot/summary.json``: lengths, accuracies (Wilson), derived cap
  (:mod:`.pilot`); a scale whose caps are below the pilot's 99th percentile is refused by every stage
  that samples after it;
- ``seed-<k>/rl-<arm>/``: LoRA GRPO from tiny-base, RL seed k, easy stage then hard stage;
- ``seed-<k>/eval/cap-<c>/<arm>/``: both arms' hard adapters on the same test problems at cap c (every
  cap of ``eval.caps`` for ``eval.sweep_seeds``, the first cap for the others);
- ``bands/<arm>/``, ``bands-redraw/<arm>/``: G samples per pool problem from the first seed's easy
  adapter of each arm, two independent draws (sampling seeds differ by :data:`REDRAW_OFFSET`);
- ``seed-<k>/hillclimb-<arm>/``: RL seed k on the problems in the arm's variance band in *both* draws,
  from the first seed's easy adapter of the arm (seeds vary the RL run alone); its held-out levels are
  chosen from the first draw (both arms' per-level accuracy in [20 %, 80 %]: :func:`.pilot.choose_levels`,
  chosen and dropped levels in the stage record). An empty band or no level that can move is refused
  unless the scale says ``bands.if_empty: whole-pool`` (smoke: random models, plumbing only — the cap
  check is then recorded, not enforced).

Each stage's record holds its cap hits (:mod:`.pilot`). Problem sets do not depend on the RL seed (each drawn
with ``problems_seed`` plus its offset, :data:`SEED_OFFSETS`), arithmetic-disjoint from every training set.

``run`` is a :class:`polyvox.stages.Pipeline`; each stage declares the folders it reads, so ``--parallel K``
(:mod:`polyvox.launch`) runs every seed's RL at once after the pilot. Scales: ``configs/world/<scale>.yaml``
(``smoke``: CPU plumbing; ``h200-v2``: this design on one H200; ``h200``: the settings of the earlier panel-only
recording, whose folder this pipeline refuses to add to: :mod:`.layout`), read by :func:`load_scale`.
"""
from __future__ import annotations

import json
from pathlib import Path

from ... import launch, metrics, runs, stages
from ...backends import BackendSpec, SamplingParams
from ...records import KIND_RL, RecordError, RunLock, append_jsonl, read_jsonl, read_manifest
from ...tasks import load as load_task
from ...train import grpo
from . import layout as _layout
from .seeding import MODELS, models_source_problems, seed_models  # noqa: F401 - the stage's work
from . import pilot as _pilot
from . import problems as _problems  # noqa: F401 - registers the "world" task even without entry points

EVAL_LEVELS = (1, 2, 3, 4, 5, "olympiad")
POOL_LEVELS = (3, 4, 5, "olympiad")
ARMS = ("panel", "think")
STAGES = ("models", "pilot", "rl-panel", "rl-think", "eval", "bands", "bands-redraw", "hillclimb-panel",
          "hillclimb-think")
# each problem set's seed is the scale's problems_seed plus its offset (one stream per set)
SEED_OFFSETS = {"rl-easy": 10, "rl-hard": 11, "rl-heldout": 12, "eval": 20, "pool": 30, "climb-heldout": 40,
                "pilot": 50}
REDRAW_OFFSET = 1000  # bands-redraw samples with the sampling seed plus this offset


def load_scale(scale: str | Path) -> dict:
    """A scale by name (configs/world/<name>.yaml) or YAML path; the dict records its name."""
    return stages.load_scale("world", scale, {"models", "rl", "sampling", "eval", "bands", "seeds", "problems_seed"},
                             {"climb"})


def climb_recipe(s: dict) -> dict:
    """The hill-climbs' recipe: the scale's optional ``climb`` section over the ``rl`` section's defaults.

    ``steps`` (rl.climb_steps), ``lr`` (rl.lr), ``prompts`` (rl.prompts), ``eval_every`` (rl.climb_eval_every, then
    rl.eval_every), ``seeds`` (the scale's seeds) and ``endpoint_evals``: the pre-declared endpoint, the mean of the
    last k held-out evaluations (1: the last one; the analysis reads it from the recorded scale)."""
    r, c = s["rl"], s.get("climb") or {}
    return {"steps": r["climb_steps"], "lr": c.get("lr", r["lr"]), "prompts": c.get("prompts", r["prompts"]),
            "eval_every": c.get("eval_every", r.get("climb_eval_every", r["eval_every"])),
            "seeds": list(c.get("seeds", s["seeds"])), "endpoint_evals": c.get("endpoint_evals", 1)}


def plumbing_only(s: dict) -> bool:
    """A smoke scale (random models): ``bands.if_empty: whole-pool``; its checks are recorded, not enforced."""
    return s["bands"].get("if_empty", "refuse") == "whole-pool"


def _seed_dir(out: Path, seed: int) -> Path:
    return out / f"seed-{seed}"


def _world(levels, per_level: int, seed: int, split: str) -> dict:
    return {"levels": list(levels), "per_level": per_level, "seed": seed, "split": split}


def problem_set(s: dict, name: str, levels, per_level: int, split: str) -> dict:
    """The task options of the problem set ``name`` (its seed: problems_seed + SEED_OFFSETS[name])."""
    return _world(levels, per_level, s["problems_seed"] + SEED_OFFSETS[name], split)


def build_models(out: Path, s: dict, seed: int = 0) -> None:
    from .models import build

    m = s["models"]
    build(out / "models", seed=m["seed"], n_per_level=m["n_per_level"], hidden=m["hidden"], layers=m["layers"],
          vocab_size=m["vocab"], seq_len=m["seq_len"], batch=m["batch"], base_steps=m["base_steps"],
          think_steps=m["think_steps"])


def _rl_config(out: Path, s: dict, seed: int, arm: str, folder: Path, rl_stages, heldout, init=None,
               climb: bool = False) -> grpo.RLConfig:
    """One recipe for both arms: only ``arm`` (the format and its format reward) and the folders differ.

    A hill-climb (``climb``) takes :func:`climb_recipe`'s learning rate, prompts per step and evaluation interval
    (by default the ``rl`` section's: ``rl.climb_eval_every``, then ``rl.eval_every`` — a held-out evaluation of
    the matched RL costs more completions than a training step, so the scale may space those out more than the
    climbs'), the same for both arms."""
    r = s["rl"]
    c = climb_recipe(s) if climb else {"lr": r["lr"], "prompts": r["prompts"], "eval_every": r["eval_every"]}
    return grpo.RLConfig(model=str(out / "models" / "tiny-base"), arm=arm, out=str(folder),
                         init_adapter=str(init) if init else None,
                         stages=rl_stages, lora_rank=r["lora_rank"], lora_alpha=2 * r["lora_rank"],
                         group_size=r["group"], prompts_per_step=c["prompts"],
                         max_completion_length=s["sampling"]["max_tokens"],
                         eval_every=c["eval_every"], heldout=heldout, heldout_samples=r["heldout_samples"],
                         learning_rate=c["lr"], save_every=1000, seed=seed)


RL_EASY_LEVELS, RL_HARD_LEVELS = (1, 2), (3, 4, 5)  # the matched RL's stages, as the study's GSM8K then MATH


def _rl_stages(s: dict) -> tuple[list, list]:
    n = s["models"]["n_per_level"] // 10
    easy = load_task("world", **problem_set(s, "rl-easy", RL_EASY_LEVELS, n, "train"))
    hard = load_task("world", **problem_set(s, "rl-hard", RL_HARD_LEVELS, n, "train"))
    per_level = s["rl"].get("rl_heldout_per_level", s["rl"]["heldout_per_level"])  # the climbs' is heldout_per_level
    heldout = load_task("world", **problem_set(s, "rl-heldout", (1, 2, 3, 4, 5), per_level, "test"))
    steps = s["rl"]["stage_steps"]
    return [grpo.Stage("easy", easy, steps[0]), grpo.Stage("hard", hard, steps[1])], heldout


def _per_step(s: dict, climb: bool = False) -> int:
    """Completions an RL step samples: prompts × group."""
    return (climb_recipe(s)["prompts"] if climb else s["rl"]["prompts"]) * s["rl"]["group"]


def read_pilot(out: Path) -> dict | None:
    path = out / "pilot" / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else None


def cap_check(out: Path, s: dict) -> dict:
    """The scale's caps against the pilot: refused in one line (a smoke scale: recorded only)."""
    summary = read_pilot(out)
    if summary is None and plumbing_only(s):
        return {"cap_check": "no pilot (plumbing only)"}
    if summary is None:
        raise ValueError(f"{out / 'pilot'}: no pilot summary; run the pilot stage first")
    problems = _pilot.cap_problems(s, summary)
    if problems and not plumbing_only(s):
        raise ValueError(problems[0])
    return {"pilot_derived_cap": summary["derived_cap"], "stage_caps": _pilot.stage_caps(s),
            "cap_check": problems or "ok"}


def rl(out: Path, s: dict, arm: str, seed: int = 0) -> dict:
    """An arm's matched RL run: LoRA GRPO from tiny-base, easy stage then hard stage."""
    checked = cap_check(out, s)
    folder = _seed_dir(out, seed) / f"rl-{arm}"
    rl_stages, heldout = _rl_stages(s)
    grpo.train(_rl_config(out, s, seed, arm, folder, rl_stages, heldout))
    return {**checked, "cap_hits": _pilot.rl_cap_hits(folder, s["sampling"]["max_tokens"], _per_step(s))}


# the systems as sampled: (model folder, adapter folder or None, format)
def _system(out: Path, arm: str, seed: int | None, stage: str = "hard"):
    adapter = None if seed is None else _seed_dir(out, seed) / f"rl-{arm}" / stage / "adapter"
    return out / "models/tiny-base", adapter, arm


def _sample_and_grade(system, folder: Path, s: dict, world: dict, n: int, seed: int, max_tokens: int) -> None:
    model, adapter, fmt = system
    sp = s["sampling"]
    backend = BackendSpec("transformers", str(model), str(adapter) if adapter else None,
                          {"batch_size": sp["batch_size"], "dtype": sp["dtype"]})
    runs.sample(folder, "world", fmt, backend, n, SamplingParams(max_tokens, 1.0), seed=seed,
                task_options=world, chunk=sp["batch_size"], progress=True)
    runs.grade(folder)


def pilot_settings(s: dict) -> dict:
    """What the pilot's samples depend on (not the caps it checks: a scale's caps may be raised after it)."""
    e, sp = s["eval"], s["sampling"]
    return {"cap": max(e["caps"]), "per_level": e["per_level"], "n": e["n"], "batch_size": sp["batch_size"],
            "dtype": sp["dtype"]}


def run_pilot(out: Path, s: dict, seed: int = 0) -> dict:
    """Both arms' starting points on every level at the largest evaluation cap; pilot/summary.json."""
    cap = max(s["eval"]["caps"])
    world = problem_set(s, "pilot", EVAL_LEVELS, s["eval"]["per_level"], "test")
    folders = {}
    for arm in ARMS:
        folders[arm] = out / "pilot" / arm / "samples"
        _sample_and_grade(_system(out, arm, None), folders[arm], s, world, s["eval"]["n"], seed, cap)
    summary = _pilot.summarize(folders, cap)
    chosen, dropped = _pilot.pilot_levels(summary)
    summary.update(levels_in_range=chosen, levels_dropped=dropped, cap_problems=_pilot.cap_problems(s, summary))
    (out / "pilot" / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return {"derived_cap": summary["derived_cap"], "cap_problems": summary["cap_problems"],
            "levels_in_range": chosen}


def eval_caps(s: dict, seed: int) -> list[int]:
    caps = s["eval"]["caps"]
    return list(caps) if seed in s["eval"]["sweep_seeds"] else list(caps[:1])


def evaluate(out: Path, s: dict, seed: int = 0) -> dict:
    """Both arms' hard adapters of seed ``seed`` on the same test problems at each cap."""
    checked = cap_check(out, s)
    world = problem_set(s, "eval", EVAL_LEVELS, s["eval"]["per_level"], "test")
    hits = {}
    for cap in eval_caps(s, seed):
        for arm in ARMS:
            folder = _seed_dir(out, seed) / "eval" / f"cap-{cap}" / arm
            _sample_and_grade(_system(out, arm, seed), folder, s, world, s["eval"]["n"], seed, cap)
            hits[f"cap-{cap}/{arm}"] = _pilot.sample_cap_hits(folder)
    return {**checked, "cap_hits": hits}


def _pool(s: dict) -> dict:
    return problem_set(s, "pool", POOL_LEVELS, s["bands"]["pool_per_level"], "train")


def bands(out: Path, s: dict, seed: int = 0, root: str = "bands") -> dict:
    """G samples per pool problem for both arms (the first seed's easy adapters); per-problem bands."""
    checked = cap_check(out, s)
    group = s["bands"]["group"]
    hits, accuracy = {}, {}
    for arm in ARMS:
        folder = out / root / arm
        _sample_and_grade(_system(out, arm, s["seeds"][0], "easy"), folder / "samples", s, _pool(s), group, seed,
                          s["sampling"]["max_tokens"])
        counts = runs.per_problem_counts(folder / "samples")
        rows = [{"uid": r.id, "source": f"level-{r.level}", "n_samples": int(r.n_samples),
                 "n_correct": int(r.n_correct), "band": metrics.variance_band(int(r.n_correct), int(r.n_samples))}
                for r in counts.itertuples()]
        tmp = folder / "per_problem.jsonl.tmp"
        tmp.unlink(missing_ok=True)
        append_jsonl(tmp, rows)
        tmp.replace(folder / "per_problem.jsonl")
        summary = {"arm": arm, "n_problems": len(rows), "n_samples_per_problem": group,
                   "bands": {b: sum(r["band"] == b for r in rows) for b in metrics.BANDS},
                   "accuracy_per_level": _pilot.band_accuracy(rows)}
        (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        hits[arm], accuracy[arm] = _pilot.sample_cap_hits(folder / "samples"), summary["accuracy_per_level"]
    return {**checked, "cap_hits": hits, "accuracy_per_level": accuracy}


def bands_redraw(out: Path, s: dict, seed: int = 0) -> dict:
    """The same draw again with other sampling seeds (seed + REDRAW_OFFSET), into ``bands-redraw/``: a problem
    enters a hill-climb only if it is in the arm's variance band in both draws."""
    return bands(out, s, seed + REDRAW_OFFSET, root="bands-redraw")


def band_ids(out: Path, arm: str, root: str = "bands") -> list[str]:
    path = out / root / arm / "per_problem.jsonl"
    return [r["uid"] for r in read_jsonl(path) if r["band"] == "variance_band"]


def stable_band(out: Path, arm: str) -> tuple[list[str], dict]:
    """The problems in the arm's variance band in both draws (first draw's order), and how stable it is."""
    first, second = band_ids(out, arm), set(band_ids(out, arm, "bands-redraw"))
    both = [i for i in first if i in second]
    union = len(set(first) | second)
    return both, {"first_draw": len(first), "second_draw": len(second), "both": len(both),
                  "jaccard": len(both) / union if union else None}


def climb_levels(out: Path) -> tuple[list[str], dict[str, str]]:
    """The held-out levels a hill-climb can move: both climb starts' first-draw accuracy in [20 %, 80 %]."""
    acc = {arm: _pilot.band_accuracy(read_jsonl(out / "bands" / arm / "per_problem.jsonl")) for arm in ARMS}
    return _pilot.choose_levels(acc)


def hillclimb(out: Path, s: dict, arm: str, seed: int = 0) -> dict:
    """RL on the arm's stable variance band, held-out levels that can move, every eval_every steps.

    An empty band or no movable level is an error, unless the scale's ``bands.if_empty`` is
    ``whole-pool``: the climb then trains on the whole pool (its folder holds ``SMOKE_BAND_WAS_EMPTY``)
    or evaluates on every pool level."""
    pool = {p.id: p for p in load_task("world", **_pool(s))}
    ids, stability = stable_band(out, arm) if (out / "bands-redraw" / arm).is_dir() else (band_ids(out, arm), {})
    unknown = [i for i in ids if i not in pool]
    if unknown:
        raise RecordError(out / "bands" / arm / "per_problem.jsonl", None,
                          f"{len(unknown)} band problems are not in this scale's pool (e.g. {unknown[0]})")
    folder = _seed_dir(out, seed) / f"hillclimb-{arm}"
    if not ids:
        if not plumbing_only(s):
            raise RuntimeError(f"{arm}: empty variance band; nothing to train on (bands.if_empty: refuse)")
        ids = list(pool)
        with RunLock(folder):
            (folder / "SMOKE_BAND_WAS_EMPTY").write_text("trained on the whole pool\n")
    levels, dropped = climb_levels(out) if (out / "bands" / ARMS[1]).is_dir() else ([], {})
    if not levels:
        if not plumbing_only(s):
            raise RuntimeError(f"{arm}: no held-out level with both arms' starting accuracy in [20 %, 80 %] "
                               f"({'; '.join(f'{k}: {v}' for k, v in dropped.items())})")
        levels = [str(lv) for lv in POOL_LEVELS]
    checked = cap_check(out, s)
    chosen = [lv if lv == "olympiad" else int(lv) for lv in levels]
    heldout = load_task("world", **problem_set(s, "climb-heldout", chosen, s["rl"]["heldout_per_level"], "test"))
    init = _seed_dir(out, s["seeds"][0]) / f"rl-{arm}" / "easy" / "adapter"
    grpo.train(_rl_config(out, s, seed, arm, folder,
                          [grpo.Stage("band", [pool[i] for i in ids], climb_recipe(s)["steps"])], heldout, init,
                          climb=True))
    return {**checked, "band": stability, "band_problems": len(ids), "heldout_levels": levels,
            "heldout_levels_dropped": dropped,
            "cap_hits": _pilot.rl_cap_hits(folder, s["sampling"]["max_tokens"], _per_step(s, climb=True))}


# stage -> the scale sections its outputs depend on
SECTIONS = {"models": ("models",), "pilot": ("models", "problems_seed"),  # and pilot_settings(s)
            **{f"rl-{a}": ("models", "rl", "sampling", "problems_seed") for a in ARMS},
            "eval": ("models", "rl", "sampling", "eval", "problems_seed"),
            **{st: ("models", "rl", "sampling", "bands", "problems_seed")
               for st in ("bands", "bands-redraw", "hillclimb-panel", "hillclimb-think")}}
PER_SEED = ("rl-panel", "rl-think", "eval", "hillclimb-panel", "hillclimb-think")  # one folder per RL seed
RL_STAGES = ("rl-panel", "rl-think", "hillclimb-panel", "hillclimb-think")  # their folder hosts an RL run


def stage_folder(out: Path, stage: str, seed: int) -> Path:
    return _seed_dir(out, seed) / stage if stage in PER_SEED else out / stage


def _reads(out: Path, s: dict, stage: str, seed: int) -> tuple[Path, ...]:
    """The folders a stage reads: the models, the pilot (caps), the RL runs it samples or starts from, the bands."""
    base = (out / "models", out / "pilot")
    firsts = tuple(stage_folder(out, f"rl-{a}", s["seeds"][0]) for a in ARMS)
    both = (out / "bands", out / "bands-redraw")
    return {"models": (), "pilot": (out / "models",), "rl-panel": base, "rl-think": base,
            "eval": base + tuple(stage_folder(out, f"rl-{a}", seed) for a in ARMS),
            "bands": base + firsts, "bands-redraw": base + firsts,
            "hillclimb-panel": base + both + firsts[:1], "hillclimb-think": base + both + firsts[1:]}[stage]


def _work(out: Path, s: dict, stage: str, seed: int, models_from=None):
    def work():  # looked up when the stage runs (tests replace them)
        if stage == "models" and models_from is not None:
            return seed_models(out, s, *models_from)
        fns = {"models": build_models, "pilot": run_pilot, "rl-panel": lambda o, x, k: rl(o, x, "panel", k),
               "rl-think": lambda o, x, k: rl(o, x, "think", k), "eval": evaluate, "bands": bands,
               "bands-redraw": bands_redraw, "hillclimb-panel": lambda o, x, k: hillclimb(o, x, "panel", k),
               "hillclimb-think": lambda o, x, k: hillclimb(o, x, "think", k)}
        return fns[stage](out, s, seed)
    return work


def _stage(out: Path, s: dict, stage: str, seed: int, models_from=None) -> stages.Stage:
    # a stage run once (models, pilot, bands) records no seed; the bands sample with the scale's first seed
    extra = {"pilot": pilot_settings(s)} if stage == "pilot" else {}
    # the climb section, when the scale has one, is part of the climbs' settings alone
    sections = SECTIONS[stage] + (("climb",) if stage.startswith("hillclimb") and s.get("climb") else ())
    settings = stages.settings_of(s, *sections, seed=seed if stage in PER_SEED else None, **extra)
    return stages.Stage(stage, stage_folder(out, stage, seed), settings, _work(out, s, stage, seed, models_from),
                        _reads(out, s, stage, seed), hosts=KIND_RL if stage in RL_STAGES else None)


def _recognise(out: Path) -> bool:
    """A world run written before kinds were recorded: a stage manifest naming one of the stages."""
    found = [out / st / "manifest.json" for st in ("models", "pilot", "bands", "bands-redraw")]
    found += [d / st / "manifest.json" for d in out.glob("seed-*") for st in STAGES]
    return any(f.is_file() and read_manifest(f.parent).get("stage") in STAGES for f in found)


def _seeds(s: dict, seeds) -> list[int]:
    """The seeds to run (default: the scale's RL seeds, then the climb seeds that are not RL seeds)."""
    known = list(dict.fromkeys([*s["seeds"], *climb_recipe(s)["seeds"]]))
    seeds = list(seeds) if seeds is not None else known
    bad = [x for x in seeds if x not in known]
    if bad:
        raise ValueError(f"seed(s) {bad} are not in the scale's seeds {s['seeds']}"
                         + (f" or its climb seeds {climb_recipe(s)['seeds']}" if s.get("climb") else ""))
    if not seeds:
        raise ValueError("no seeds to run")
    return seeds


def pipeline(out: str | Path, s: dict, seeds=None, models_from=None) -> stages.Pipeline:
    """The world pipeline of scale ``s`` over ``seeds`` (default: the scale's), seed by seed, so that an
    interrupted run leaves whole seeds behind: models and pilot, then per seed both arms' RL and their
    evaluation, the bands after the first seed's, then the hill-climbs.

    ``models_from``: (models folder, models stage record folder): the models stage copies models trained with
    this scale's models settings (:func:`seed_models`; refused in one line before any stage runs otherwise)."""
    out, seeds = Path(out), _seeds(s, seeds)
    if models_from is not None:
        models_from = tuple(str(x) for x in models_from)
    first = s["seeds"][0]
    climbing = climb_recipe(s)["seeds"]
    order = [("models", first), ("pilot", first)]
    first_rl = next((k for k in seeds if k in s["seeds"]), None)  # the bands follow the first RL seed run
    for k in seeds:  # a climb seed that is not an RL seed has climbs alone (they start from the first seed)
        if k in s["seeds"]:
            order += [("rl-panel", k), ("rl-think", k), ("eval", k)]
            order += [("bands", first), ("bands-redraw", first)] if k == first_rl else []
        order += [("hillclimb-panel", k), ("hillclimb-think", k)] if k in climbing else []

    def first_seed(todo) -> None:  # the bands and hill-climbs start from the first seed's adapters
        old = read_manifest(out).get("settings") if (out / "manifest.json").is_file() else None
        if isinstance(old, dict) and old.get("seeds") and old["seeds"][0] != first:
            raise ValueError(f"{out}: holds a run whose first seed is {old['seeds'][0]}; the scale {s['name']!r} "
                             f"starts at seed {first} (the bands and hill-climbs start from the first "
                             "seed); use a new --out")

    def design(todo) -> None:  # a folder of the earlier panel-only design takes no stage of this one
        _layout.refuse_other(out)

    def seeded(todo) -> None:  # models to copy must be this scale's
        if models_from is not None and "models" in todo:
            problems = models_source_problems(s, *models_from)
            if problems:
                raise ValueError(problems[0])

    def caps(todo) -> None:  # a pilot already run: a scale whose caps are below it is refused before any work
        summary = read_pilot(out)
        if summary is not None and not plumbing_only(s) and set(todo) - {"models", "pilot"}:
            _pilot.check_caps(s, summary)

    # more seeds may be added to a scale (new seed folders): its seeds change no recorded output; a climb section
    # changes the climbs alone, whose own settings are checked stage by stage
    return stages.Pipeline(stages.KIND_WORLD, out, s, [_stage(out, s, st, k, models_from) for st, k in order], STAGES,
                           recognise=_recognise, ignore=("seeds", "climb"), checks=[design, seeded, first_seed, caps], root={"seeds": seeds})


def check(out: str | Path, s: dict, todo=STAGES, seeds=None, models_from=None) -> None:
    """Read-only: every folder a run of scale ``s`` over the stages ``todo`` and ``seeds`` writes may take it."""
    pipeline(out, s, seeds, models_from).check(todo)


def run(out: str | Path, scale: str | Path = "smoke", todo=STAGES, seeds=None, parallel: int | None = None,
        gpus: list[str] | None = None, mps: bool = False, models_from=None) -> Path:
    """Run the stages ``todo`` into out/, seed by seed, skipping those already complete (resumable).

    ``parallel``: run the stages as a job graph, that many worker processes per GPU at once
    (:mod:`polyvox.launch`; under ``torchrun`` each rank takes its share on its own GPU)."""
    s = load_scale(scale)
    models_from = None if models_from is None else [str(x) for x in models_from]  # JSON for the launcher's workers
    p = pipeline(out, s, seeds, models_from)
    if parallel is None:
        p.run(todo)
    else:
        launch.run_pipeline(p, todo, f"{__name__}:pipeline", {"out": str(out), "s": s, "seeds": seeds,
                                                               "models_from": models_from},
                            per_gpu=parallel, gpus=gpus, mps=mps)
    return Path(out)
