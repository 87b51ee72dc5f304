"""Part III in miniature, stage by stage: models → pd → rl → eval.

Layout of ``<out>`` (one folder per stage, each with its record):
- a scale without ``seeds`` (the recorded runs): ``models/``, ``pd/``, ``rl/``, ``eval/``;
- a scale with ``seeds: [k, …]`` (issue 23: several seeds of everything after pool training):
  ``models/`` once, then for every seed k ``seed-<k>/pd/``, ``seed-<k>/rl/``, ``seed-<k>/eval/``, each
  reading the models and its own seed's earlier stages, so the seeds are independent jobs that
  ``--parallel K`` runs concurrently (:mod:`polyvox.launch`). A folder holds one layout (a seeded
  scale on an unseeded run's folder, or the reverse, is refused; ``--models <old>/models`` reuses
  its models in a new ``--out``). More seeds may be added to a scale later: the list is left out of
  every stage's settings and of the root's check, so recorded seeds and models stay complete.

Seeds (:func:`stage_seed`): seed k adds k to every random stream of the pd, rl and eval stages —
``data.seed`` + offset for PD's trace slips, PD and GRPO training and the order of the RL states,
the cascade's sampling seed and the solo and scheduler seeds. An unseeded scale is k = 0, so its
streams are exactly those of the recorded runs, and ``seed-0`` of a scale repeats them. The
problem sets (training, validation, test) and the models stage take ``data.seed`` alone: every
seed trains from the same models on the same questions and is evaluated on the same test set, so
seeds differ in the training and sampling randomness only.

``polyvox collab run --scale SCALE --out DIR`` (or :func:`run`) takes the stages in order, a
:class:`polyvox.stages.Pipeline`: each writes its folder and its record
(``manifest.json``: settings, upstream digests, status, seconds); a stage complete under the same
settings and inputs is skipped, one whose upstream stage was retrained runs again, one holding
another scale's stage is refused. Every folder the run would write is checked first — the root's
kind (``collab pipeline``, in ``<out>/manifest.json``) and scale, each stage's kind and settings —
so a refused run writes nothing; the run holds ``<out>``'s one-writer lock throughout and each
stage its own folder's. Within ``eval`` every system is a resumable trajectory run
(:func:`.scheduler.run`, :func:`.scheduler.run_solo`), so a killed evaluation resumes question by
question. Scales: ``configs/collab/<scale>.yaml`` (``smoke``: seconds, plumbing only; ``h200``:
the recorded runs, one H200; ``cpu``: that recipe with a smaller test set, for a CPU; ``full``:
the study's scale, documented, not run here). A scale with an ``endpoints`` section evaluates
OpenAI-compatible servers (``vllm serve`` of the Qwen3 agents with their PD/SLS LoRA adapters)
instead of the miniature pool; its training stages are then recorded as external (the adapters
were trained elsewhere; the miniature PD/RL functions take Hugging Face model paths unchanged).
Random streams: ``data.seed`` plus a named offset (:data:`TEST_SEED_OFFSET` …), plus the seed k in the pd,
rl and eval stages (above).

Stages
- ``models``: tokenizer and the four base models (:mod:`.models`). Before any training the scale's
  budgets are checked (:func:`.models.check_budgets`: a larger model never trains fewer steps or
  tokens; also a read-only check of the run, so a refused scale writes nothing); after training,
  each model alone on a validation split (:func:`validate_models`), recorded in
  ``models/validation.json`` and in the stage's record. When solo accuracy does not rise strictly
  with size with disjoint Wilson intervals between small and large, the run stops with one line if
  the scale says ``models.stop_if_unordered: true`` (a run-control key: it changes no output, so it
  is left out of the stage's settings, and a stopped run resumes with it changed; absent: false);
- ``pd``: protocol distillation per agent plus ``homo`` (:mod:`.models`): a LoRA adapter
  (``pd.mode: lora``, the default) or a full fine-tune (``pd.mode: full``, the recorded cpu run; the
  embedding rows of tokens the base models never trained on re-initialised first, :func:`.models.dead_tokens`);
  then each PD'd agent on the validation split's trace states (:func:`validate_pd`, :mod:`.validity`):
  the share of protocol-valid turns, recorded in ``pd/validity.json`` and the stage's record; below
  ``pd.valid_min`` (absent: 0.9) for any agent, the run stops with one line if :func:`stop_if_invalid`
  (``pd.stop_if_invalid``, absent: ``models.stop_if_unordered``; run control, as that key is);
- ``rl``: pyramid supervision, GRPO (:func:`polyvox.train.grpo.train`) with a LoRA adapter —
  continuing the PD adapter, or fresh on the fully fine-tuned PD model — on the states each
  agent meets in the traces, reward 0.35 × correct + 0.65 × step judge
  (:func:`.judge.pyramid_reward` as ``RLConfig.reward_fn``);
- ``eval``: on the test questions of both tasks, greedy: each single model alone
  (``solo-<m>``), small and mid sampled once more for the cascade's agreement check
  (``sample-<m>``), and the collaborations ``cl-base`` (no training stage), ``cl-pd``
  (PD only), ``cl`` (PD + RL) and ``homo`` (three copies of mid, PD adapter ``homo``).
Majority vote and the cascade are computed from the solo and sample records
(:mod:`.analysis`): their answers and costs are those of the calls they would make.
"""
from __future__ import annotations

import json
from pathlib import Path

from ... import launch, stages
from ...backends import SamplingParams, make_backend
from ...records import Problem, read_manifest
from . import scheduler as sched
from .tasks import collab_qa, collab_world

STAGES = ("models", "pd", "rl", "eval")
PER_SEED = ("pd", "rl", "eval")  # with the scale's seeds: one folder per seed, seed-<k>/<stage>
AGENTS = ("small", "mid", "big")
MODELS = ("small", "mid", "big", "large")  # the base models; model i trains with data.seed + i
# offsets from data.seed, one random stream each
TEST_SEED_OFFSET = 100  # the test questions (the training questions take data.seed itself)
QA_SEED_OFFSET = 1  # a split's QA questions, beside its world questions
RL_STATES_SEED_OFFSET = 5  # the shuffle of the agents' states GRPO trains on
HOMO_SEED_OFFSET = 7  # homo's PD adapter (the agents' take data.seed + their index, 0 … 2)
CASCADE_SAMPLE_SEED = 1  # small's and mid's second, sampled answers for the cascade (the solo runs: seed 0)
# (pd, rl and eval add the stage's seed k to each of their streams: stage_seed)
STOP_KEY = "stop_if_unordered"  # models.<this>: a failed size ordering stops the run
PD_STOP_KEY = "stop_if_invalid"  # pd.<this>: too few protocol-valid turns after PD stop the run (absent: STOP_KEY's)
PD_MIN_KEY = "valid_min"  # pd.<this>: the share of valid turns PD must reach (absent: validity.VALID_MIN, 0.9)


def load_scale(scale: str | Path) -> dict:
    """configs/collab/<scale>.yaml, or a YAML path."""
    return stages.load_scale("collab", scale, {"data", "models", "pd", "rl", "eval"}, {"threads", "endpoints", "seeds"})


def seeds_of(s: dict) -> list[int | None]:
    """The scale's seeds, or ``[None]`` for a scale without ``seeds`` (the unseeded layout)."""
    return list(s["seeds"]) if s.get("seeds") is not None else [None]


def stage_seed(s: dict, seed: int | None) -> int:
    """The seed the pd, rl and eval stages of ``seed`` add their offsets to: ``data.seed`` + k
    (an unseeded scale: k = 0, the recorded runs' streams)."""
    return s["data"]["seed"] + (seed or 0)


def stage_folder(out: Path, stage: str, seed: int | None) -> Path:
    """``out/<stage>``; with a seed, a per-seed stage's ``out/seed-<k>/<stage>``."""
    return out / f"seed-{seed}" / stage if seed is not None and stage in PER_SEED else out / stage


_PROBLEMS: dict[str, list] = {}  # problem sets already drawn in this process, by their settings


def problems(s: dict, split: str) -> list[Problem]:
    """The scale's ``train`` or ``test`` questions (world, then QA). Training: ``data.world_per_level`` per
    level and ``data.qa_n``, at ``data.seed``; test: ``eval``'s counts at ``data.seed`` + :data:`TEST_SEED_OFFSET`.

    Absent ``data.split_by`` (the recorded scales): world problems from the world's own split (a hash of the
    expression), QA from the person split (:func:`.tasks.qa_splits`), the test set a draw of distinct texts
    (an underlying problem may recur in several wordings). ``data.split_by: underlying`` (h200-ordered):
    every underlying problem has one split (:func:`.tasks.underlying_split`); training draws ``data``'s
    counts from the ``train`` partition, the test set holds each underlying problem of the ``test`` partition
    at most once (:func:`.models.held_out`: ``eval.world_per_level`` per level and ``eval.qa_n`` at most, level 1
    and QA holding fewer), so its questions are independent units for the power computation.

    A set depends only on ``data``, ``eval`` and ``split``: drawn once per process (the underlying split draws
    thousands of problems), a new list each call."""
    key = json.dumps({"data": s["data"], "eval": s["eval"], "split": split}, sort_keys=True, default=str)
    if key not in _PROBLEMS:
        _PROBLEMS[key] = _draw(s, split)
    return list(_PROBLEMS[key])


def _draw(s: dict, split: str) -> list[Problem]:
    d = s["data"] if split == "train" else s["eval"]
    seed = s["data"]["seed"] + (0 if split == "train" else TEST_SEED_OFFSET)
    if s["data"].get("split_by") == "underlying":
        if split != "train":
            from .models import held_out

            return held_out(s, split, seed)
        return (collab_world(levels=s["data"]["world_levels"], per_level=d["world_per_level"], seed=seed,
                             split=split, split_by="underlying")
                + collab_qa(n=d["qa_n"], seed=seed + QA_SEED_OFFSET, split=split))
    return (collab_world(levels=s["data"]["world_levels"], per_level=d["world_per_level"], seed=seed, split=split)
            + collab_qa(n=d["qa_n"], seed=seed + QA_SEED_OFFSET, split=split))


def n_test(s: dict) -> int:
    """The scale's test questions, counted from the set it draws (``eval``'s counts are caps for a scale that
    splits by the underlying problem, so ``levels × world_per_level + qa_n`` overstates those)."""
    return len(problems(s, "test"))


def _settings(s: dict, *sections) -> dict:
    picked = {k: s[k] for k in sections}
    if isinstance(picked.get("models"), dict):  # run control, not a setting the outputs depend on
        picked["models"] = {k: v for k, v in picked["models"].items() if k != STOP_KEY}
    if isinstance(picked.get("pd"), dict):
        picked["pd"] = {k: v for k, v in picked["pd"].items() if k not in (PD_STOP_KEY, PD_MIN_KEY)}
    return json.loads(json.dumps({"scale": s["name"], "data": s["data"], **picked}))


def stop_if_unordered(s: dict) -> bool:
    """Whether a failed size ordering on the validation split stops the run (the scale's
    ``models.stop_if_unordered``; absent: false)."""
    return bool(s["models"].get(STOP_KEY, False))


def stop_if_invalid(s: dict) -> bool:
    """Whether PD's validity check failing (:func:`validate_pd`) stops the run: the scale's ``pd.stop_if_invalid``,
    absent: :func:`stop_if_unordered` (a scale that stops on an unordered pool stops on an untaught protocol: the
    ordered pool's h200-ordered does, the cpu and smoke scales record the check and go on). Run control, as
    ``models.stop_if_unordered`` is (both keys are in the scale schema, polyvox.config.scales.CollabPD)."""
    v = s["pd"].get(PD_STOP_KEY)
    return stop_if_unordered(s) if v is None else bool(v)


def pd_valid_min(s: dict) -> float:
    """The share of protocol-valid turns on validation each PD'd agent must reach (``pd.valid_min``; absent 0.9)."""
    from .validity import VALID_MIN

    return float(s["pd"].get(PD_MIN_KEY, VALID_MIN))


def validate_pd(out: Path, s: dict, models: Path, seed: int | None = None) -> dict:
    """Each PD'd agent (small, mid, big, homo) on the states it meets in the scripted traces of the validation
    split (:func:`.models.validation_problems`, the models stage's), greedy at ``eval.max_tokens``
    (:func:`.validity.validity_check`): ``out/validity.json``, and the fields the pd stage's record keeps; one
    line (a ValueError) when an agent's share of valid turns is below :func:`pd_valid_min` and
    :func:`stop_if_invalid`."""
    from ...backends import SamplingParams
    from .models import validation_problems
    from .validity import VALIDITY_SEED_OFFSET, validity_check

    e = s["eval"]
    train = problems(s, "train")
    val = validation_problems(s, problems(s, "test"), train)
    systems = eval_systems(models, out, out, s["pd"].get("mode", "lora") == "full")
    spec = {**systems["cl-pd"], "homo": systems["homo"]["mid"]}
    rec = validity_check(out, val, lambda a: _backend(*spec[a], e), SamplingParams(e["max_tokens"], 0.0),
                         stage_seed(s, seed) + VALIDITY_SEED_OFFSET, s["pd"]["slip"], pd_valid_min(s),
                         stop_if_invalid(s))
    return {"validity": {"ok": rec["ok"], "threshold": rec["threshold"], "share": rec["share"],
                         "agents": {a: r["share"] for a, r in rec["agents"].items()}, "questions": rec["questions"],
                         "file": "validity.json"}}


def validate_models(out: Path, s: dict, train: list[Problem]) -> dict:
    """Each trained base model in ``out`` alone on the validation split (:func:`.models.validation_problems`,
    disjoint from the test set by underlying problem), greedy as the eval stage runs solo; the check and
    its record, ``out/validation.json``, are :func:`.models.validation_check`'s. Returns the fields the
    stage's record keeps; raises one line when the ordering fails and :func:`stop_if_unordered`."""
    from .models import validation_check, validation_problems

    e = s["eval"]
    val = validation_problems(s, problems(s, "test"), train)
    rec = validation_check(out, s, val, lambda m: _backend(out / m, None, e), train=train, stop=stop_if_unordered(s))
    return {"validation": {"ordering_ok": rec["ordering_ok"], "ordering": rec["ordering"],
                           "questions": rec["questions"], "file": "validation.json"}}


def stage_models(out: Path, s: dict) -> dict:
    from .models import build_tokenizer, chat_rows, check_budgets, solo_pairs, train_base, truncate_mode
    from .traces import sft_examples

    check_budgets(s)  # before any training (the run's checks did so too; a launcher's worker comes here alone)
    m = s["models"]
    train = problems(s, "train")
    pairs = solo_pairs(train)
    texts = [u + " " + a for u, a in pairs] + [u + " " + a for ex in sft_examples(train[:400]).values()
                                                for u, a in ex]
    tok = build_tokenizer(out, texts, m["vocab"])
    truncate = truncate_mode(s)
    if truncate is not None:  # models.truncate: refuse — the pd stage's examples too, before any model trains
        for base in sorted({stage_seed(s, k) for k in seeds_of(s)}):  # each seed's slips draw other rows
            ex = sft_examples(train, seed=base, slip=s["pd"]["slip"])
            chat_rows(tok, pairs + [pair for a in AGENTS for pair in ex[a]], m["seq_len"], truncate)
    cards = {}
    for i, name in enumerate(MODELS):
        spec = dict(m["sizes"][name])
        steps = spec.pop("steps")
        cards[name] = train_base(out, name, spec, tok, pairs, m["seq_len"], m["batch"], steps, m["lr"],
                                 s["data"]["seed"] + i, truncate=truncate)
    (out / "params.json").write_text(json.dumps({k: c["parameters"] for k, c in cards.items()}, indent=1) + "\n")
    return validate_models(out, s, train)


def stage_pd(out: Path, s: dict, models: Path, seed: int | None = None) -> dict:
    """PD of each agent and ``homo`` (:func:`.models.train_pd`; in a full fine-tune the embedding rows of the
    tokens the base models never trained on are re-initialised first, :func:`.models.dead_tokens`), then the
    validity check on the validation split (:func:`validate_pd`), whose fields the stage's record keeps."""
    from .models import solo_pairs, train_pd, truncate_mode
    from .traces import sft_examples

    p = s["pd"]
    base = stage_seed(s, seed)
    truncate = truncate_mode(s)  # models.truncate applies to PD's rows too (the same seq_len)
    train = problems(s, "train")
    ex = sft_examples(train, seed=base, slip=p["slip"])
    solo = solo_pairs(train)  # the base models' rows: the tokens they trained on
    for i, a in enumerate(AGENTS):
        train_pd(models / a, out / a, ex[a], s["models"]["seq_len"], p["batch"], p["steps"], p["lr"], p["rank"],
                 base + i, mode=p.get("mode", "lora"), truncate=truncate, base_pairs=solo)
    every = [pair for a in AGENTS for pair in ex[a]]
    train_pd(models / "mid", out / "homo", every, s["models"]["seq_len"], p["batch"], p["steps"], p["lr"],
             p["rank"], base + HOMO_SEED_OFFSET, mode=p.get("mode", "lora"), truncate=truncate, base_pairs=solo)
    return validate_pd(out, s, models, seed)


def rl_problems(s: dict, agent: str, n: int, seed: int | None = None) -> list[Problem]:
    """The states ``agent`` meets in the traces of training questions, as Problems for GRPO (their traces and
    order drawn at :func:`stage_seed` + :data:`RL_STATES_SEED_OFFSET`; the questions are every seed's)."""
    import random

    from .traces import coordination_trace

    rng = random.Random(stage_seed(s, seed) + RL_STATES_SEED_OFFSET)
    out = []
    for p in problems(s, "train"):
        for t in coordination_trace(p, rng, s["pd"]["slip"]):
            if t["agent"] == agent and not t["slipped"]:
                out.append(Problem(f"{p.id}-{agent}-{len(out)}", t["prompt"], p.gold, dict(p.metadata)))
    rng.shuffle(out)
    return out[:n]


def stage_rl(out: Path, s: dict, models: Path, pd: Path, seed: int | None = None) -> None:
    from ...train import grpo
    from .judge import pyramid_reward

    r = s["rl"]
    full = s["pd"].get("mode", "lora") == "full"
    for a in AGENTS:
        # from the PD adapter on the base model, or a fresh LoRA on the fully fine-tuned PD model
        cfg = grpo.RLConfig(model=str(pd / a if full else models / a), arm="think", out=str(out / a),
                            init_adapter=None if full else str(pd / a),
                            stages=[grpo.Stage("pyramid", rl_problems(s, a, r["problems"], seed), r["steps"])],
                            lora_rank=s["pd"]["rank"], lora_alpha=2 * s["pd"]["rank"], group_size=r["group"],
                            prompts_per_step=r["prompts"], max_completion_length=r["max_tokens"],
                            learning_rate=r["lr"], eval_every=10 ** 6, save_every=10 ** 6, seed=stage_seed(s, seed),
                            reward_fn=pyramid_reward)
        grpo.train(cfg, progress=False)


def _backend(model: Path, adapter: Path | None, e: dict):
    return make_backend("transformers", str(model), str(adapter) if adapter else None,
                        batch_size=e["batch_size"], dtype="float32")


def eval_systems(models: Path, pd: Path, rl: Path, full: bool = False) -> dict:
    """CL systems: agent name → (model folder, adapter folder or None)."""
    if full:  # PD fine-tuned whole models; RL adapters on top of them
        return {"cl-base": {a: (models / a, None) for a in AGENTS},
                "cl-pd": {a: (pd / a, None) for a in AGENTS},
                "cl": {a: (pd / a, rl / a / "pyramid" / "adapter") for a in AGENTS},
                "homo": {a: (pd / "homo", None) for a in AGENTS}}
    return {"cl-base": {a: (models / a, None) for a in AGENTS},
            "cl-pd": {a: (models / a, pd / a) for a in AGENTS},
            "cl": {a: (models / a, rl / a / "pyramid" / "adapter") for a in AGENTS},
            "homo": {a: (models / "mid", pd / "homo") for a in AGENTS}}


def _endpoint(spec: dict):
    """An OpenAI-compatible agent (full scale): served name, base URL, optional key variable."""
    return make_backend("openai", spec["model"], base_url=spec["base_url"], api_key_env=spec.get("api_key_env"),
                        concurrency=spec.get("concurrency", 16))


def stage_eval(out: Path, s: dict, models: Path, pd: Path, rl: Path, only: list[str] | None = None,
               seed: int | None = None) -> None:
    """Every system on the test questions (the same for every seed); ``seed`` k adds k to the solo, cascade
    and scheduler seeds, and is recorded in each system's settings (an unseeded run's records have none)."""
    e = s["eval"]
    test = problems(s, "test")
    settings = {**_settings(s, "eval"), **({"seed": seed} if seed is not None else {})}
    shift = seed or 0  # k, added to each sampling seed (0: the recorded runs' seeds)
    greedy = SamplingParams(e["max_tokens"], 0.0)
    served = s.get("endpoints") or {}

    def solo_backend(m):
        return _endpoint(served["solo"][m]) if served else _backend(models / m, None, e)

    for m in MODELS:
        if only and f"solo-{m}" not in only:
            continue
        sched.run_solo(out / f"solo-{m}", test, m, solo_backend(m), greedy, settings, seed=shift)
    for m in ("small", "mid"):
        if only and f"sample-{m}" not in only:
            continue
        sched.run_solo(out / f"sample-{m}", test, m, solo_backend(m),
                       SamplingParams(e["max_tokens"], e["cascade_temperature"]), settings,
                       seed=CASCADE_SAMPLE_SEED + shift)
    systems = ({k: v for k, v in served.items() if k != "solo"} if served
               else eval_systems(models, pd, rl, s["pd"].get("mode", "lora") == "full"))
    for system, spec in systems.items():
        if only and system not in only:
            continue
        agents = ({a: _endpoint(x) for a, x in spec.items()} if served
                  else {a: _backend(mdl, ad, e) for a, (mdl, ad) in spec.items()})
        sc = sched.Scheduler(agents, "small", t_max=e["t_max"], max_retries=e["max_retries"], params=greedy,
                             seed=stage_seed(s, seed))
        sched.run(out / system, test, sc, {**settings, "system": system})


SECTIONS = {"models": ("models",), "pd": ("models", "pd"), "rl": ("models", "pd", "rl"),
            "eval": ("models", "pd", "rl", "eval")}
RUN_ONLY = ("threads", f"models.{STOP_KEY}", f"pd.{PD_STOP_KEY}", f"pd.{PD_MIN_KEY}")  # scale keys that change no output: a rerun may change them
# more seeds may be added to a scale (new seed-<k> folders): the list changes no recorded stage
ROOT_IGNORE = (*RUN_ONLY, "seeds")
EXTERNAL = "full scale: this stage's models are served at the scale's endpoints"


def _recognise(out: Path) -> bool:
    """A collab run recorded before the root manifest: a stage manifest with the scale's data settings."""
    folders = [out / stage for stage in STAGES] + [d / stage for d in sorted(out.glob("seed-*")) for stage in PER_SEED]
    for folder in folders:
        settings = read_manifest(folder).get("settings") if (folder / "manifest.json").is_file() else None
        if isinstance(settings, dict) and "scale" in settings and "data" in settings:
            return True
    return False


def _stage(out: Path, s: dict, stage: str, models: Path, seed: int | None = None) -> stages.Stage:
    folder = stage_folder(out, stage, seed)
    pd, rl = stage_folder(out, "pd", seed), stage_folder(out, "rl", seed)
    # the trained models a stage reads are models/ (unless --models names others), its seed's pd/ and rl/
    reads = {"models": (), "pd": (out / "models",), "rl": (out / "models", pd), "eval": (out / "models", pd, rl)}[stage]
    reads = tuple(r for r in reads if r != out / "models" or models == out / "models")

    def work():  # the stage functions are looked up when the stage runs (tests replace them)
        if s.get("endpoints") and stage != "eval":
            return {"note": EXTERNAL}
        return {"models": lambda: stage_models(folder, s), "pd": lambda: stage_pd(folder, s, models, seed),
                "rl": lambda: stage_rl(folder, s, models, pd, seed),
                "eval": lambda: stage_eval(folder, s, models, pd, rl, seed=seed)}[stage]()

    # a seed's stages record it; the models stage, and every stage of an unseeded scale, record none
    settings = {**_settings(s, *SECTIONS[stage]), **({"seed": seed} if seed is not None and stage in PER_SEED else {})}
    return stages.Stage(stage, folder, settings, work, reads)


def _layout(out: Path, s: dict) -> None:
    """Refuse a folder holding the other layout's stages (see the module docstring)."""
    if s.get("seeds") is not None:
        other = [st + "/" for st in PER_SEED if (out / st / "manifest.json").is_file()]
        what = f"an unseeded run ({', '.join(other)})"
    else:
        other = sorted({f.parent.parent.name + "/" for f in out.glob("seed-*/*/manifest.json")})
        what = f"a seeded run ({', '.join(other)})"
    if other:
        want = "lists seeds (seed-<k>/ folders)" if s.get("seeds") is not None else "lists no seeds"
        raise ValueError(f"{out}: holds {what}; the scale {s['name']!r} {want}: a folder holds one layout; use a new "
                         f"--out (--models {out / 'models'} reuses its trained models)")


def order(s: dict) -> list[tuple[str, int | None]]:
    """(stage, seed) in the order a serial run takes them: the models, then seed by seed its pd, rl and eval
    (an interrupted run leaves whole seeds behind); unseeded: the four stages, seed None."""
    return [("models", None)] + [(st, k) for k in seeds_of(s) for st in PER_SEED]


def pipeline(out: str | Path, s: dict, models_dir: str | Path | None = None) -> stages.Pipeline:
    out = Path(out)
    models = Path(models_dir) if models_dir else out / "models"

    def models_exist(todo) -> None:
        if models_dir is not None and not Path(models_dir).is_dir():
            raise ValueError(f"{models_dir}: no such folder of trained base models (--models)")

    def threads() -> None:  # every process that runs a stage (the launcher's workers too)
        if s.get("threads"):
            import torch

            # a small model on a shared CPU: more intra-op threads than free cores make each step
            # ~40× slower (OpenMP threads spin waiting for one another); the scale pins the count
            torch.set_num_threads(int(s["threads"]))

    def budgets(todo) -> None:  # validate first: a scale whose budgets fall with size trains nothing
        from .models import check_budgets

        if "models" in todo and not s.get("endpoints") and p.state(p.stages[0]) != "done":
            check_budgets(s)

    def one_layout(todo) -> None:
        _layout(out, s)

    p = stages.Pipeline(stages.KIND_COLLAB, out, s, [_stage(out, s, st, models, k) for st, k in order(s)], STAGES,
                        recognise=_recognise, ignore=ROOT_IGNORE, checks=[models_exist, one_layout, budgets],
                        setup=threads, process_setup=threads)
    return p


def check(out: str | Path, s: dict, todo=STAGES, models_dir: str | Path | None = None) -> None:
    """Read-only: ``out`` may take a run of scale ``s`` over the stages ``todo`` (see the module docstring)."""
    pipeline(out, s, models_dir).check(todo)


def run(out: str | Path, scale: str | Path = "smoke", todo=STAGES, models_dir: str | Path | None = None,
        parallel: int | None = None, gpus: list[str] | None = None, mps: bool = False) -> dict:
    """Run the stages ``todo`` in order into their folders (skipping complete ones); returns seconds per stage
    folder (``models``, ``pd`` … or, with the scale's seeds, ``seed-<k>/pd`` …).

    Validate first, write second: the stage names, the scale, the root and the stage folders are
    checked before anything is written; the run holds ``out``'s one-writer lock throughout.
    ``parallel``: through :mod:`polyvox.launch` (each stage in a worker process, that many per GPU); an
    unseeded run's four stages read one another, so they still run one after another — the pool's models
    are trained within one stage; a seeded run's seeds, each reading only the models, run concurrently.
    """
    s = load_scale(scale)
    p = pipeline(out, s, models_dir)
    if parallel is None:
        return p.run(todo)
    return launch.run_pipeline(p, todo, f"{__name__}:pipeline", {"out": str(out), "s": s, "models_dir":
                               str(models_dir) if models_dir else None}, per_gpu=parallel, gpus=gpus, mps=mps)
