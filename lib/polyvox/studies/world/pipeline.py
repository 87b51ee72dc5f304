"""The miniature replication, stage by stage: models → panel RL → evaluations → bands → hill-climbs.

Layout of ``<out>`` (one folder per stage, each with a manifest holding its settings):
- ``models/``: tiny-base and tiny-think, trained once (seed ``models.seed`` of the scale);
- ``seed-<k>/panel-rl/``: tiny-panel, LoRA GRPO from tiny-base, RL seed k;
- ``seed-<k>/eval/cap-<c>/<system>/``: tiny-panel and tiny-think on the same test problems at
  token cap c — every cap of ``eval.caps`` for the seeds in ``eval.sweep_seeds``, the first
  cap for the others (the cap sweep measures what the cap does instead of assuming it);
- ``bands/<arm>/``: G samples per pool problem for both arms, from the first seed's
  easy-stage adapter (panel) and tiny-think; ``per_problem.jsonl`` in the published schema;
- ``bands-redraw/<arm>/``: the same pool and systems sampled again with other seeds, to
  measure how stable band membership is (the hill-climbs use the first draw);
- ``seed-<k>/hillclimb-<arm>/``: RL seed k on the arm's own band, from one fixed starting
  point (the first seed's easy adapter / tiny-think), so seeds vary the RL run alone.

Problem sets do not depend on the RL seed: every seed is evaluated on the same held-out,
test and pool problems (generated with the scale's ``problems_seed``), which are
arithmetic-disjoint from every training set (:func:`~.problems.expression_split`).

``run`` goes seed by seed (models, then for each seed: panel RL, evaluation, bands on the
first seed, hill-climbs), skipping a stage whose manifest says complete under the same
settings and refusing a folder that holds another scale's run. It checks every folder it would
write first (the root's kind and scale, the kind and settings of every stage it runs), writes nothing when one is refused, and holds ``<out>``'s one-writer lock for the whole
run; ``<out>/manifest.json`` records the kind (``world pipeline``) and the scale. Scales are YAML files,
``configs/world/<scale>.yaml`` (``smoke``: CPU, a minute, checks the plumbing, numbers
mean nothing; ``h200``: the recorded runs), read by :func:`load_scale` for both the command
and the chapter. Sampling and grading go through the one run path
(:func:`polyvox.runs.sample` / :func:`polyvox.runs.grade`, task ``world``, grader ``integer``).
"""
from __future__ import annotations

import json
from pathlib import Path

from ... import metrics, runs, stages
from ... import stages as _stages  # run() takes a parameter named stages
from ...backends import BackendSpec, SamplingParams
from ...records import KIND_RL, RecordError, RunLock, append_jsonl, now_iso, read_jsonl, read_manifest, write_manifest
from ...tasks import load as load_task
from ...train import grpo
from . import problems as _problems  # noqa: F401 - registers the "world" task even without entry points

EVAL_LEVELS = (1, 2, 3, 4, 5, "olympiad")
POOL_LEVELS = (3, 4, 5, "olympiad")
STAGES = ("models", "panel-rl", "eval", "bands", "bands-redraw", "hillclimb-panel", "hillclimb-think")


def load_scale(scale: str | Path) -> dict:
    """A scale by name (configs/world/<name>.yaml) or YAML path; the dict records its name."""
    return stages.load_scale("world", scale, {"models", "rl", "sampling", "eval", "bands", "seeds", "problems_seed"})


def _seed_dir(out: Path, seed: int) -> Path:
    return out / f"seed-{seed}"


def _world(levels, per_level: int, seed: int, split: str) -> dict:
    return {"levels": list(levels), "per_level": per_level, "seed": seed, "split": split}


def build_models(out: Path, s: dict, seed: int = 0) -> None:
    from .models import build

    m = s["models"]
    build(out / "models", seed=m["seed"], n_per_level=m["n_per_level"], hidden=m["hidden"], layers=m["layers"],
          vocab_size=m["vocab"], seq_len=m["seq_len"], batch=m["batch"], base_steps=m["base_steps"],
          think_steps=m["think_steps"])


def _rl_config(out: Path, s: dict, seed: int, arm: str, folder: Path, stages, heldout, init=None) -> grpo.RLConfig:
    r = s["rl"]
    model = out / "models" / ("tiny-base" if arm == "panel" else "tiny-think")
    return grpo.RLConfig(model=str(model), arm=arm, out=str(folder), init_adapter=str(init) if init else None,
                         stages=stages, lora_rank=r["lora_rank"], lora_alpha=2 * r["lora_rank"], group_size=r["group"],
                         prompts_per_step=r["prompts"], max_completion_length=s["sampling"]["max_tokens"],
                         eval_every=r["eval_every"], heldout=heldout, heldout_samples=r["heldout_samples"],
                         learning_rate=r["lr"], save_every=1000, seed=seed)


def panel_rl(out: Path, s: dict, seed: int = 0) -> None:
    """tiny-panel: LoRA GRPO from tiny-base on the raw panel prompt, easy stage then hard stage."""
    n, ps = s["models"]["n_per_level"] // 10, s["problems_seed"]
    easy = load_task("world", **_world((1, 2), n, ps + 10, "train"))
    hard = load_task("world", **_world((3, 4, 5), n, ps + 11, "train"))
    heldout = load_task("world", **_world((1, 2, 3, 4, 5), s["rl"]["heldout_per_level"], ps + 12, "test"))
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
    world = _world(EVAL_LEVELS, s["eval"]["per_level"], s["problems_seed"] + 20, "test")
    systems = _systems(out, seed)
    for cap in eval_caps(s, seed):
        for name, system in (("tiny-panel", systems["panel"]), ("tiny-think", systems["think"])):
            _sample_and_grade(system, _seed_dir(out, seed) / "eval" / f"cap-{cap}" / name, s, world,
                              s["eval"]["n"], seed, cap)


def bands(out: Path, s: dict, seed: int = 0, root: str = "bands") -> None:
    """G samples per pool problem for both arms; per-problem bands in the published schema."""
    world = _world(POOL_LEVELS, s["bands"]["pool_per_level"], s["problems_seed"] + 30, "train")
    group = s["bands"]["group"]
    systems = _systems(out, s["seeds"][0])
    for arm, system in (("panel", systems["panel-easy"]), ("think", systems["think"])):
        folder = out / root / arm
        _sample_and_grade(system, folder / "samples", s, world, group, seed, s["sampling"]["max_tokens"])
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


REDRAW_OFFSET = 1000


def band_ids(out: Path, arm: str) -> list[str]:
    path = out / "bands" / arm / "per_problem.jsonl"
    return [r["uid"] for r in read_jsonl(path) if r["band"] == "variance_band"]


def hillclimb(out: Path, s: dict, arm: str, seed: int = 0) -> None:
    """RL on the arm's own variance band; held-out hill-climb every eval_every steps."""
    ps = s["problems_seed"]
    pool = {p.id: p for p in load_task("world", **_world(POOL_LEVELS, s["bands"]["pool_per_level"], ps + 30, "train"))}
    ids = band_ids(out, arm)
    unknown = [i for i in ids if i not in pool]
    if unknown:
        raise RecordError(out / "bands" / arm / "per_problem.jsonl", None,
                          f"{len(unknown)} band problems are not in this scale's pool (e.g. {unknown[0]})")
    fallback = False
    if not ids:
        if s["name"] != "smoke":
            raise RuntimeError(f"{arm}: empty variance band; nothing to train on")
        ids, fallback = list(pool), True  # smoke runs check plumbing: random models have no band
    heldout = load_task("world", **_world(POOL_LEVELS, s["rl"]["heldout_per_level"], ps + 40, "test"))
    init = _seed_dir(out, s["seeds"][0]) / "panel-rl/easy/adapter" if arm == "panel" else None
    folder = _seed_dir(out, seed) / f"hillclimb-{arm}"
    grpo.train(_rl_config(out, s, seed, arm, folder,
                          [grpo.Stage("band", [pool[i] for i in ids], s["rl"]["climb_steps"])], heldout, init))
    if fallback:
        (folder / "SMOKE_BAND_WAS_EMPTY").write_text("trained on the whole pool\n")


# stage -> (function, the scale sections its outputs depend on, one run per seed?)
_STAGE_FNS = {
    "models": (build_models, ("models",), False),
    "panel-rl": (panel_rl, ("models", "rl", "sampling", "problems_seed"), True),
    "eval": (evaluate, ("models", "rl", "sampling", "eval", "problems_seed"), True),
    "bands": (bands, ("models", "rl", "sampling", "bands", "problems_seed"), False),
    "bands-redraw": (bands_redraw, ("models", "rl", "sampling", "bands", "problems_seed"), False),
    "hillclimb-panel": (lambda o, s, seed: hillclimb(o, s, "panel", seed),
                        ("models", "rl", "sampling", "bands", "problems_seed"), True),
    "hillclimb-think": (lambda o, s, seed: hillclimb(o, s, "think", seed),
                        ("models", "rl", "sampling", "bands", "problems_seed"), True),
}


def stage_folder(out: Path, stage: str, seed: int) -> Path:
    return _seed_dir(out, seed) / stage if _STAGE_FNS[stage][2] else out / stage


RL_STAGES = ("panel-rl", "hillclimb-panel", "hillclimb-think")  # their folder is an RL run's (grpo.train)


def _stage_settings(s: dict, stage: str, seed: int) -> dict:
    _fn, sections, per_seed = _STAGE_FNS[stage]
    return stages.settings_of(s, *sections, seed=seed if per_seed else None)


def _kinds(stage: str) -> tuple[str, ...]:
    return (stages.KIND_STAGE, KIND_RL) if stage in RL_STAGES else (stages.KIND_STAGE,)


def _recognise(out: Path) -> bool:
    """A world run written before kinds were recorded: a stage manifest naming one of the stages."""
    found = [out / st / "manifest.json" for st in ("models", "bands", "bands-redraw")]
    found += [d / st / "manifest.json" for d in out.glob("seed-*") for st in STAGES]
    return any(f.is_file() and read_manifest(f.parent).get("stage") in STAGES for f in found)


def check(out: Path, s: dict, order: list[tuple[str, int]]) -> None:
    """Read-only: every folder a run of scale ``s`` over ``order`` ((stage, seed) pairs) writes may take it."""
    # more seeds may be added to a scale (new seed folders); the first seed's adapters feed the bands
    stages.check_root(out, stages.KIND_WORLD, s, _recognise, ignore=("seeds",))
    old = read_manifest(out).get("settings") if (out / "manifest.json").is_file() else None
    if isinstance(old, dict) and old.get("seeds") and old["seeds"][0] != s["seeds"][0]:
        raise ValueError(f"{out}: holds a run whose first seed is {old['seeds'][0]}; the scale {s['name']!r} starts "
                         f"at seed {s['seeds'][0]} (the bands and hill-climbs start from the first seed); "
                         "use a new --out")
    for stage, seed in order:
        stages.check_stage(stage_folder(out, stage, seed), _stage_settings(s, stage, seed), _kinds(stage))


def run(out: str | Path, scale: str | Path = "smoke", stages=STAGES, seeds=None) -> Path:
    """Run the stages into out/, seed by seed, skipping those already complete with the same settings."""
    out = Path(out)
    s = load_scale(scale)
    unknown = [st for st in stages if st not in _STAGE_FNS]
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}; stages: {', '.join(STAGES)}")
    seeds = list(seeds) if seeds is not None else list(s["seeds"])
    bad = [x for x in seeds if x not in s["seeds"]]
    if bad:
        raise ValueError(f"seed(s) {bad} are not in the scale's seeds {s['seeds']}")
    if not seeds:
        raise ValueError("no seeds to run")
    order = [("models", seeds[0])] if "models" in stages else []
    for k in seeds:  # seed by seed, so that an interrupted run leaves whole seeds behind
        order += [(st, k) for st in ("panel-rl", "eval") if st in stages]
        if k == seeds[0]:
            order += [(st, k) for st in ("bands", "bands-redraw") if st in stages]
        order += [(st, k) for st in ("hillclimb-panel", "hillclimb-think") if st in stages]
    check(out, s, order)  # validate first: a refused run writes nothing
    with RunLock(out):
        check(out, s, order)  # again under the lock: another writer may have finished meanwhile
        root = {"kind": _stages.KIND_WORLD, "scale": s["name"], "settings": _stages.scale_settings(s)}
        write_manifest(out, **root, status="running", stages=list(stages), seeds=seeds, updated=now_iso())
        for stage, seed in order:
            _run_stage(out, s, seed, stage)
        write_manifest(out, **root, status="stages complete", stages=list(stages), seeds=seeds, updated=now_iso())
    return out


def _run_stage(out: Path, s: dict, seed: int, stage: str) -> None:
    fn, sections, per_seed = _STAGE_FNS[stage]
    settings = _stage_settings(s, stage, seed)
    folder = stage_folder(out, stage, seed)
    if stages.stage_done(folder, settings, _kinds(stage)):
        return
    started = now_iso()
    fn(out, s, seed)
    # the RL stages' manifest (written by grpo.train) keeps its config and kind; the stage adds its settings
    extra = {k: v for k, v in read_manifest(folder).items() if k not in ("settings", "status")}
    kind = {} if stage in RL_STAGES else {"kind": stages.KIND_STAGE}
    write_manifest(folder, **{**kind, **extra, "settings": settings, "status": "complete", "stage": stage,
                              "started": extra.get("started", started), "finished": now_iso()})
