"""The miniature replication, stage by stage: models → panel RL → evaluations → bands → hill-climbs.

Layout of ``<out>`` (one folder per stage, each with its record: settings, inputs, status):
- ``models/``: tiny-base and tiny-think, trained once (seed ``models.seed`` of the scale);
- ``seed-<k>/panel-rl/``: tiny-panel, LoRA GRPO from tiny-base, RL seed k;
- ``seed-<k>/eval/cap-<c>/<system>/``: tiny-panel and tiny-think on the same test problems at
  token cap c — every cap of ``eval.caps`` for the seeds in ``eval.sweep_seeds``, the first
  cap for the others (the cap sweep measures what the cap does instead of assuming it);
- ``bands/<arm>/``: G samples per pool problem for both arms, from the scale's first seed's
  easy-stage adapter (panel) and tiny-think; ``per_problem.jsonl`` in the published schema;
- ``bands-redraw/<arm>/``: the same pool and systems sampled again with other seeds, to
  measure how stable band membership is (the hill-climbs use the first draw);
- ``seed-<k>/hillclimb-<arm>/``: RL seed k on the arm's own band, from one fixed starting
  point (the first seed's easy adapter / tiny-think), so seeds vary the RL run alone. An empty
  band is refused unless the scale says ``bands.if_empty: whole-pool`` (smoke: random models).

Problem sets do not depend on the RL seed: every seed is evaluated on the same held-out,
test and pool problems, each set drawn with the scale's ``problems_seed`` plus its own offset
(:data:`SEED_OFFSETS`), and arithmetic-disjoint from every training set
(:func:`~.problems.expression_split`).

``run`` is a :class:`polyvox.stages.Pipeline` (one writer per folder and per manifest, validate
first, upstream digests): it goes seed by seed (models, then for each seed: panel RL,
evaluation, bands after the first seed, hill-climbs). The RL stages' folders hold GRPO's run
(its manifest.json is GRPO's); their stage record is ``stage.json``. ``<out>/manifest.json``
records the kind (``world pipeline``) and the scale. Scales are YAML files,
``configs/world/<scale>.yaml`` (``smoke``: CPU, a minute, checks the plumbing, numbers
mean nothing; ``h200``: the recorded runs), read by :func:`load_scale` for both the command
and the chapter. Sampling and grading go through the one run path
(:func:`polyvox.runs.sample` / :func:`polyvox.runs.grade`, task ``world``, grader ``integer``).
"""
from __future__ import annotations

import json
from pathlib import Path

from ... import launch, metrics, runs, stages
from ...backends import BackendSpec, SamplingParams
from ...records import KIND_RL, RecordError, RunLock, append_jsonl, read_jsonl, read_manifest
from ...tasks import load as load_task
from ...train import grpo
from . import problems as _problems  # noqa: F401 - registers the "world" task even without entry points

EVAL_LEVELS = (1, 2, 3, 4, 5, "olympiad")
POOL_LEVELS = (3, 4, 5, "olympiad")
STAGES = ("models", "panel-rl", "eval", "bands", "bands-redraw", "hillclimb-panel", "hillclimb-think")
# each problem set's seed is the scale's problems_seed plus its offset (one stream per set)
SEED_OFFSETS = {"rl-easy": 10, "rl-hard": 11, "rl-heldout": 12, "eval": 20, "pool": 30, "climb-heldout": 40}
REDRAW_OFFSET = 1000  # bands-redraw samples with the sampling seed plus this offset


def load_scale(scale: str | Path) -> dict:
    """A scale by name (configs/world/<name>.yaml) or YAML path; the dict records its name."""
    return stages.load_scale("world", scale, {"models", "rl", "sampling", "eval", "bands", "seeds", "problems_seed"})


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


def _rl_config(out: Path, s: dict, seed: int, arm: str, folder: Path, rl_stages, heldout, init=None) -> grpo.RLConfig:
    r = s["rl"]
    model = out / "models" / ("tiny-base" if arm == "panel" else "tiny-think")
    return grpo.RLConfig(model=str(model), arm=arm, out=str(folder), init_adapter=str(init) if init else None,
                         stages=rl_stages, lora_rank=r["lora_rank"], lora_alpha=2 * r["lora_rank"],
                         group_size=r["group"], prompts_per_step=r["prompts"],
                         max_completion_length=s["sampling"]["max_tokens"],
                         eval_every=r["eval_every"], heldout=heldout, heldout_samples=r["heldout_samples"],
                         learning_rate=r["lr"], save_every=1000, seed=seed)


def panel_rl(out: Path, s: dict, seed: int = 0) -> None:
    """tiny-panel: LoRA GRPO from tiny-base on the raw panel prompt, easy stage then hard stage."""
    n = s["models"]["n_per_level"] // 10
    easy = load_task("world", **problem_set(s, "rl-easy", (1, 2), n, "train"))
    hard = load_task("world", **problem_set(s, "rl-hard", (3, 4, 5), n, "train"))
    heldout = load_task("world", **problem_set(s, "rl-heldout", (1, 2, 3, 4, 5), s["rl"]["heldout_per_level"], "test"))
    steps = s["rl"]["stage_steps"]
    grpo.train(_rl_config(out, s, seed, "panel", _seed_dir(out, seed) / "panel-rl",
                          [grpo.Stage("easy", easy, steps[0]), grpo.Stage("hard", hard, steps[1])], heldout))


# the systems as sampled: (model folder, adapter folder or None, format)
def _systems(out: Path, seed: int) -> dict:
    rl = _seed_dir(out, seed) / "panel-rl"
    return {"panel": (out / "models/tiny-base", rl / "hard/adapter", "panel"),
            "think": (out / "models/tiny-think", None, "think"),
            "panel-easy": (out / "models/tiny-base", rl / "easy/adapter", "panel")}


def _sample_and_grade(system, folder: Path, s: dict, world: dict, n: int, seed: int, max_tokens: int) -> None:
    model, adapter, fmt = system
    sp = s["sampling"]
    backend = BackendSpec("transformers", str(model), str(adapter) if adapter else None,
                          {"batch_size": sp["batch_size"], "dtype": sp["dtype"]})
    runs.sample(folder, "world", fmt, backend, n, SamplingParams(max_tokens, 1.0), seed=seed,
                task_options=world, chunk=sp["batch_size"], progress=True)
    runs.grade(folder)


def eval_caps(s: dict, seed: int) -> list[int]:
    caps = s["eval"]["caps"]
    return list(caps) if seed in s["eval"]["sweep_seeds"] else list(caps[:1])


def evaluate(out: Path, s: dict, seed: int = 0) -> None:
    """tiny-panel (panel prompt) and tiny-think (chat, thinking) on the same test problems at each cap."""
    world = problem_set(s, "eval", EVAL_LEVELS, s["eval"]["per_level"], "test")
    systems = _systems(out, seed)
    for cap in eval_caps(s, seed):
        for name, system in (("tiny-panel", systems["panel"]), ("tiny-think", systems["think"])):
            _sample_and_grade(system, _seed_dir(out, seed) / "eval" / f"cap-{cap}" / name, s, world,
                              s["eval"]["n"], seed, cap)


def _pool(s: dict) -> dict:
    return problem_set(s, "pool", POOL_LEVELS, s["bands"]["pool_per_level"], "train")


def bands(out: Path, s: dict, seed: int = 0, root: str = "bands") -> None:
    """G samples per pool problem for both arms; per-problem bands in the published schema."""
    group = s["bands"]["group"]
    systems = _systems(out, s["seeds"][0])
    for arm, system in (("panel", systems["panel-easy"]), ("think", systems["think"])):
        folder = out / root / arm
        _sample_and_grade(system, folder / "samples", s, _pool(s), group, seed, s["sampling"]["max_tokens"])
        counts = runs.per_problem_counts(folder / "samples")
        rows = [{"uid": r.id, "source": f"level-{r.level}", "n_samples": int(r.n_samples),
                 "n_correct": int(r.n_correct), "band": metrics.variance_band(int(r.n_correct), int(r.n_samples))}
                for r in counts.itertuples()]
        tmp = folder / "per_problem.jsonl.tmp"
        tmp.unlink(missing_ok=True)
        append_jsonl(tmp, rows)
        tmp.replace(folder / "per_problem.jsonl")
        summary = {"arm": arm, "n_problems": len(rows), "n_samples_per_problem": group,
                   "bands": {b: sum(r["band"] == b for r in rows) for b in metrics.BANDS}}
        (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def bands_redraw(out: Path, s: dict, seed: int = 0) -> None:
    """The same draw again with other sampling seeds (seed + REDRAW_OFFSET), into ``bands-redraw/``.

    The hill-climbs train on the first draw only. The second, independent draw measures how
    stable band membership is: a problem that scored 7/8 once may be 8/8 the next time, and a
    band chosen on one draw of G samples is partly selected on noise.
    """
    bands(out, s, seed + REDRAW_OFFSET, root="bands-redraw")


def band_ids(out: Path, arm: str) -> list[str]:
    path = out / "bands" / arm / "per_problem.jsonl"
    return [r["uid"] for r in read_jsonl(path) if r["band"] == "variance_band"]


def hillclimb(out: Path, s: dict, arm: str, seed: int = 0) -> None:
    """RL on the arm's own variance band; held-out hill-climb every eval_every steps.

    An empty band is an error, unless the scale's ``bands.if_empty`` is ``whole-pool``: the climb then
    trains on the whole pool and its folder holds ``SMOKE_BAND_WAS_EMPTY``."""
    pool = {p.id: p for p in load_task("world", **_pool(s))}
    ids = band_ids(out, arm)
    unknown = [i for i in ids if i not in pool]
    if unknown:
        raise RecordError(out / "bands" / arm / "per_problem.jsonl", None,
                          f"{len(unknown)} band problems are not in this scale's pool (e.g. {unknown[0]})")
    folder = _seed_dir(out, seed) / f"hillclimb-{arm}"
    if not ids:
        if s["bands"].get("if_empty", "refuse") != "whole-pool":
            raise RuntimeError(f"{arm}: empty variance band; nothing to train on (bands.if_empty: refuse)")
        ids = list(pool)
        with RunLock(folder):
            (folder / "SMOKE_BAND_WAS_EMPTY").write_text("trained on the whole pool\n")
    heldout = load_task("world", **problem_set(s, "climb-heldout", POOL_LEVELS, s["rl"]["heldout_per_level"], "test"))
    init = _seed_dir(out, s["seeds"][0]) / "panel-rl/easy/adapter" if arm == "panel" else None
    grpo.train(_rl_config(out, s, seed, arm, folder,
                          [grpo.Stage("band", [pool[i] for i in ids], s["rl"]["climb_steps"])], heldout, init))


# stage -> the scale sections its outputs depend on
SECTIONS = {"models": ("models",), "panel-rl": ("models", "rl", "sampling", "problems_seed"),
            "eval": ("models", "rl", "sampling", "eval", "problems_seed"),
            **{st: ("models", "rl", "sampling", "bands", "problems_seed")
               for st in ("bands", "bands-redraw", "hillclimb-panel", "hillclimb-think")}}
PER_SEED = ("panel-rl", "eval", "hillclimb-panel", "hillclimb-think")  # one folder per RL seed
RL_STAGES = ("panel-rl", "hillclimb-panel", "hillclimb-think")  # their folder hosts an RL run (grpo.train)


def stage_folder(out: Path, stage: str, seed: int) -> Path:
    return _seed_dir(out, seed) / stage if stage in PER_SEED else out / stage


def _reads(out: Path, s: dict, stage: str, seed: int) -> tuple[Path, ...]:
    """The folders a stage reads: the models, the panel RL run it starts from or samples, the bands."""
    first = stage_folder(out, "panel-rl", s["seeds"][0])
    return {"models": (), "panel-rl": (out / "models",), "eval": (out / "models", stage_folder(out, "panel-rl", seed)),
            "bands": (out / "models", first), "bands-redraw": (out / "models", first),
            "hillclimb-panel": (out / "models", out / "bands", first),
            "hillclimb-think": (out / "models", out / "bands")}[stage]


def _work(out: Path, s: dict, stage: str, seed: int):
    def work():  # looked up when the stage runs (tests replace them)
        fns = {"models": build_models, "panel-rl": panel_rl, "eval": evaluate, "bands": bands,
               "bands-redraw": bands_redraw, "hillclimb-panel": lambda o, x, k: hillclimb(o, x, "panel", k),
               "hillclimb-think": lambda o, x, k: hillclimb(o, x, "think", k)}
        fns[stage](out, s, seed)
    return work


def _stage(out: Path, s: dict, stage: str, seed: int) -> stages.Stage:
    # a stage run once (models, bands) records no seed; the bands sample with the scale's first seed
    settings = stages.settings_of(s, *SECTIONS[stage], seed=seed if stage in PER_SEED else None)
    return stages.Stage(stage, stage_folder(out, stage, seed), settings, _work(out, s, stage, seed),
                        _reads(out, s, stage, seed), hosts=KIND_RL if stage in RL_STAGES else None)


def _recognise(out: Path) -> bool:
    """A world run written before kinds were recorded: a stage manifest naming one of the stages."""
    found = [out / st / "manifest.json" for st in ("models", "bands", "bands-redraw")]
    found += [d / st / "manifest.json" for d in out.glob("seed-*") for st in STAGES]
    return any(f.is_file() and read_manifest(f.parent).get("stage") in STAGES for f in found)


def _seeds(s: dict, seeds) -> list[int]:
    seeds = list(seeds) if seeds is not None else list(s["seeds"])
    bad = [x for x in seeds if x not in s["seeds"]]
    if bad:
        raise ValueError(f"seed(s) {bad} are not in the scale's seeds {s['seeds']}")
    if not seeds:
        raise ValueError("no seeds to run")
    return seeds


def pipeline(out: str | Path, s: dict, seeds=None) -> stages.Pipeline:
    """The world pipeline of scale ``s`` over ``seeds`` (default: the scale's), seed by seed, so that an
    interrupted run leaves whole seeds behind: models, then per seed panel RL and evaluation, the bands
    after the first seed's, then the hill-climbs."""
    out, seeds = Path(out), _seeds(s, seeds)
    order = [("models", s["seeds"][0])]
    for k in seeds:
        order += [("panel-rl", k), ("eval", k)] + ([("bands", s["seeds"][0]), ("bands-redraw", s["seeds"][0])]
                                                   if k == seeds[0] else [])
        order += [("hillclimb-panel", k), ("hillclimb-think", k)]

    def first_seed(todo) -> None:  # the bands and hill-climbs start from the first seed's adapters
        old = read_manifest(out).get("settings") if (out / "manifest.json").is_file() else None
        if isinstance(old, dict) and old.get("seeds") and old["seeds"][0] != s["seeds"][0]:
            raise ValueError(f"{out}: holds a run whose first seed is {old['seeds'][0]}; the scale {s['name']!r} "
                             f"starts at seed {s['seeds'][0]} (the bands and hill-climbs start from the first "
                             "seed); use a new --out")

    # more seeds may be added to a scale (new seed folders): its seeds change no recorded output
    return stages.Pipeline(stages.KIND_WORLD, out, s, [_stage(out, s, st, k) for st, k in order], STAGES,
                           recognise=_recognise, ignore=("seeds",), checks=[first_seed], root={"seeds": seeds})


def check(out: str | Path, s: dict, todo=STAGES, seeds=None) -> None:
    """Read-only: every folder a run of scale ``s`` over the stages ``todo`` and ``seeds`` writes may take it."""
    pipeline(out, s, seeds).check(todo)


def run(out: str | Path, scale: str | Path = "smoke", todo=STAGES, seeds=None, parallel: int | None = None,
        gpus: list[str] | None = None, mps: bool = False) -> Path:
    """Run the stages ``todo`` into out/, seed by seed, skipping those already complete (resumable).

    ``parallel``: run the stages as a job graph, that many worker processes per GPU at once
    (:mod:`polyvox.launch`; under ``torchrun`` each rank takes its share on its own GPU)."""
    s = load_scale(scale)
    p = pipeline(out, s, seeds)
    if parallel is None:
        p.run(todo)
    else:
        launch.run_pipeline(p, todo, f"{__name__}:pipeline", {"out": str(out), "s": s, "seeds": seeds},
                            per_gpu=parallel, gpus=gpus, mps=mps)
    return Path(out)
