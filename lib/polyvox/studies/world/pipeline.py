"""The miniature replication, stage by stage: models → panel RL → evaluations → bands → hill-climbs.

Each stage writes into ``<out>/<stage>/`` and can be run alone
(``polyvox world run --stages STAGE --out DIR --scale SCALE``); ``run`` takes them in
order and skips a stage whose manifest says complete under the same settings (a stage
folder holding another scale's run is refused). Scales are YAML files,
``configs/world/<scale>.yaml`` (``smoke``: CPU, a minute, checks the plumbing, numbers
mean nothing; ``h200``: the recorded runs), read by :func:`load_scale` for both the
command and the chapter.

Sampling and grading go through the one run path (:func:`polyvox.runs.sample` /
:func:`polyvox.runs.grade`, task ``world``, grader ``integer``), so every sample
folder is resumable and its manifest carries its settings. Records:
- ``eval/<system>/`` a run folder (rollouts.jsonl, graded.jsonl, manifest.json),
- ``bands/<arm>/samples/`` a run folder; ``bands/<arm>/per_problem.jsonl`` (uid, source,
  n_samples, n_correct, band, in the published schema) and ``summary.json``,
- ``panel-rl/`` and ``hillclimb-<arm>/``: :func:`polyvox.train.grpo.train` output
  (train_log.jsonl, heldout_trajectory.jsonl, adapters, manifest with the config).
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from ... import metrics, runs
from ...backends import BackendSpec, SamplingParams
from ...records import RecordError, RunLock, append_jsonl, now_iso, read_json, read_jsonl, write_manifest
from ...tasks import load as load_task
from ...train import grpo

EVAL_LEVELS = (1, 2, 3, 4, 5, "olympiad")
POOL_LEVELS = (3, 4, 5, "olympiad")
STAGES = ("models", "panel-rl", "eval", "bands", "hillclimb-panel", "hillclimb-think")
SCALE_DIR = Path(__file__).resolve().parents[4] / "configs" / "world"  # the repository's configs/world/


def load_scale(scale: str | Path) -> dict:
    """A scale by name (configs/world/<name>.yaml) or YAML path; the dict records its name."""
    path = Path(scale)
    if path.suffix not in (".yaml", ".yml"):
        path = SCALE_DIR / f"{scale}.yaml"
    if not path.exists():
        names = sorted(p.stem for p in SCALE_DIR.glob("*.yaml"))
        raise ValueError(f"unknown world scale {scale!r}; scales: {', '.join(names)} (or a path to a YAML file)")
    data = yaml.safe_load(path.read_text())
    expected = {"models", "rl", "sampling", "eval", "bands"}
    if not isinstance(data, dict) or set(data) != expected:
        raise ValueError(f"{path}: expected the sections {', '.join(sorted(expected))}")
    return {"name": path.stem, **data}


def _world(levels, per_level: int, seed: int, split: str) -> dict:
    return {"levels": list(levels), "per_level": per_level, "seed": seed, "split": split}


def _stage_settings(s: dict, seed: int, *sections: str) -> dict:
    return json.loads(json.dumps({"scale": s["name"], "seed": seed, **{k: s[k] for k in sections}}))


def _begin(folder: Path, settings: dict) -> bool:
    """True when the stage is already complete with these settings; refuses another run's folder."""
    m = folder / "manifest.json"
    if not m.exists():
        return False
    old = read_json(m)
    if old.get("settings") not in (None, settings):
        changed = sorted(k for k in settings if old["settings"].get(k) != settings[k])
        raise ValueError(f"{folder}: holds a stage run with other settings ({', '.join(changed)}); use a new --out")
    return old.get("status") == "complete" and old.get("settings") == settings


def build_models(out: Path, s: dict, seed: int = 0) -> None:
    from .models import build

    m = s["models"]
    build(out / "models", seed=seed, n_per_level=m["n_per_level"], hidden=m["hidden"], layers=m["layers"],
          vocab_size=m["vocab"], seq_len=m["seq_len"], batch=m["batch"], base_steps=m["base_steps"],
          think_steps=m["think_steps"])


def _rl_config(out: Path, s: dict, seed: int, arm: str, folder: str, stages, heldout, init=None) -> grpo.RLConfig:
    r = s["rl"]
    model = out / "models" / ("tiny-base" if arm == "panel" else "tiny-think")
    return grpo.RLConfig(model=str(model), arm=arm, out=str(out / folder), init_adapter=str(init) if init else None,
                         stages=stages, lora_rank=r["lora_rank"], lora_alpha=2 * r["lora_rank"], group_size=r["group"],
                         prompts_per_step=r["prompts"], max_completion_length=s["sampling"]["max_tokens"],
                         eval_every=r["eval_every"], heldout=heldout, heldout_samples=r["heldout_samples"],
                         learning_rate=r["lr"], save_every=1000, seed=seed)


def panel_rl(out: Path, s: dict, seed: int = 0) -> None:
    """tiny-panel: LoRA GRPO from tiny-base on the raw panel prompt, easy stage then hard stage."""
    n = s["models"]["n_per_level"] // 10
    easy = load_task("world", **_world((1, 2), n, seed + 10, "train"))
    hard = load_task("world", **_world((3, 4, 5), n, seed + 11, "train"))
    heldout = load_task("world", **_world((1, 2, 3, 4, 5), s["rl"]["heldout_per_level"], seed + 12, "test"))
    steps = s["rl"]["stage_steps"]
    grpo.train(_rl_config(out, s, seed, "panel", "panel-rl",
                          [grpo.Stage("easy", easy, steps[0]), grpo.Stage("hard", hard, steps[1])], heldout))


# the systems as sampled: (model folder, adapter folder or None, format)
def _systems(out: Path) -> dict:
    return {"panel": (out / "models/tiny-base", out / "panel-rl/hard/adapter", "panel"),
            "think": (out / "models/tiny-think", None, "think"),
            "panel-easy": (out / "models/tiny-base", out / "panel-rl/easy/adapter", "panel")}


def _sample_and_grade(system, folder: Path, s: dict, world: dict, n: int, seed: int) -> None:
    model, adapter, fmt = system
    sp = s["sampling"]
    backend = BackendSpec("transformers", str(model), str(adapter) if adapter else None,
                          {"batch_size": sp["batch_size"], "dtype": sp["dtype"]})
    runs.sample(folder, "world", fmt, backend, n, SamplingParams(sp["max_tokens"], 1.0), seed=seed,
                task_options=world, chunk=sp["batch_size"], progress=True)
    runs.grade(folder)


def evaluate(out: Path, s: dict, seed: int = 0) -> None:
    """tiny-panel (panel prompt) and tiny-think (chat, thinking) on the same test problems, n samples each."""
    world = _world(EVAL_LEVELS, s["eval"]["per_level"], seed + 20, "test")
    systems = _systems(out)
    for name, system in (("tiny-panel", systems["panel"]), ("tiny-think", systems["think"])):
        _sample_and_grade(system, out / "eval" / name, s, world, s["eval"]["n"], seed)


def bands(out: Path, s: dict, seed: int = 0) -> None:
    """G samples per pool problem for both arms; per-problem bands in the published schema."""
    world = _world(POOL_LEVELS, s["bands"]["pool_per_level"], seed + 30, "train")
    group = s["bands"]["group"]
    systems = _systems(out)
    for arm, system in (("panel", systems["panel-easy"]), ("think", systems["think"])):
        folder = out / "bands" / arm
        _sample_and_grade(system, folder / "samples", s, world, group, seed)
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


def band_ids(out: Path, arm: str) -> list[str]:
    path = out / "bands" / arm / "per_problem.jsonl"
    return [r["uid"] for r in read_jsonl(path) if r["band"] == "variance_band"]


def hillclimb(out: Path, s: dict, arm: str, seed: int = 0) -> None:
    """RL on the arm's own variance band; held-out hill-climb every eval_every steps."""
    pool = {p.id: p for p in load_task("world", **_world(POOL_LEVELS, s["bands"]["pool_per_level"], seed + 30, "train"))}
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
    heldout = load_task("world", **_world(POOL_LEVELS, s["rl"]["heldout_per_level"], seed + 40, "test"))
    init = out / "panel-rl/easy/adapter" if arm == "panel" else None
    grpo.train(_rl_config(out, s, seed, arm, f"hillclimb-{arm}",
                          [grpo.Stage("band", [pool[i] for i in ids], s["rl"]["climb_steps"])], heldout, init))
    if fallback:
        (out / f"hillclimb-{arm}" / "SMOKE_BAND_WAS_EMPTY").write_text("trained on the whole pool\n")


# stage -> (function, the scale sections its outputs depend on)
_STAGE_FNS = {
    "models": (build_models, ("models",)),
    "panel-rl": (panel_rl, ("models", "rl", "sampling")),
    "eval": (evaluate, ("models", "rl", "sampling", "eval")),
    "bands": (bands, ("models", "rl", "sampling", "bands")),
    "hillclimb-panel": (lambda o, s, seed: hillclimb(o, s, "panel", seed), ("models", "rl", "sampling", "bands")),
    "hillclimb-think": (lambda o, s, seed: hillclimb(o, s, "think", seed), ("models", "rl", "sampling", "bands")),
}


def run(out: str | Path, scale: str | Path = "smoke", stages=STAGES, seed: int = 0) -> Path:
    """Run the stages in order into out/, skipping those already complete with the same settings."""
    out = Path(out)
    s = load_scale(scale)
    unknown = [st for st in stages if st not in _STAGE_FNS]
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}; stages: {', '.join(STAGES)}")
    with RunLock(out):
        for stage in stages:
            _run_stage(out, s, seed, stage)
    return out


def _run_stage(out: Path, s: dict, seed: int, stage: str) -> None:
    fn, sections = _STAGE_FNS[stage]
    settings = _stage_settings(s, seed, *sections)
    folder = out / stage
    if _begin(folder, settings):
        return
    started = now_iso()
    fn(out, s, seed)
    # the RL stages' manifest (written by grpo.train) keeps its config; the stage adds its settings
    extra = {k: v for k, v in read_json(folder / "manifest.json").items() if k not in ("settings", "status")} \
        if (folder / "manifest.json").exists() else {}
    write_manifest(folder, **{**extra, "settings": settings, "status": "complete", "stage": stage,
                              "started": extra.get("started", started), "finished": now_iso()})
