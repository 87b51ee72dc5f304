"""Scales: ``configs/<study>/<scale>.yaml`` of the miniature world (Part IV), the persona basis
(Part II) and collaboration (Part III, and its served form)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from .errors import _show, as_dict, validate
from .fields import (Dtype, Group, NonNeg, Pos, Prob, Rate, Seed, Seeds, Strict, Text, Url,
                     _check_env, _check_url, _check_url_no_credentials, _unique)


class WorldModels(Strict):
    seed: Seed
    n_per_level: Annotated[int, Field(ge=10, description="an integer ≥ 10 (panel RL trains on a tenth of it)")]
    hidden: Pos
    layers: Pos
    vocab: Annotated[int, Field(ge=64, description="an integer ≥ 64")]
    seq_len: Annotated[int, Field(ge=16, le=2048, description="an integer in 16 … 2048 (the models' positions)")]
    batch: Pos
    base_steps: Pos
    think_steps: Pos


class WorldRL(Strict):
    lora_rank: Pos
    group: Group
    prompts: Pos
    stage_steps: Annotated[list[Pos], Field(min_length=2, max_length=2,
                                            description="two integers ≥ 1 (the easy and the hard stage)")]
    climb_steps: Pos
    eval_every: Pos
    lr: Rate
    heldout_per_level: Pos
    heldout_samples: Pos
    # the matched RL's held-out problems per level (default heldout_per_level, which the climbs use) and how often a
    # hill-climb evaluates (default eval_every): the matched RL's held-out set only monitors training
    rl_heldout_per_level: Pos = None  # type: ignore[assignment]
    climb_eval_every: Pos = None  # type: ignore[assignment]


class WorldSampling(Strict):
    max_tokens: Pos
    batch_size: Pos
    dtype: Dtype


class WorldEval(Strict):
    per_level: Pos
    n: Pos
    caps: Annotated[list[Pos], Field(min_length=1, description="a non-empty list of token caps ≥ 1")]
    sweep_seeds: Annotated[list[Seed], Field(description="a list of the scale's seeds")]


class WorldBands(Strict):
    pool_per_level: Pos
    group: Group
    # an empty variance band: refuse to hill-climb (the default), or climb on the whole pool (a smoke
    # scale's random models have no band; the hill-climb folder then holds SMOKE_BAND_WAS_EMPTY)
    if_empty: Literal["refuse", "whole-pool"] = None  # type: ignore[assignment] - default refuse


class WorldClimb(Strict):
    """``climb``: the hill-climbs' own recipe, where it departs from the matched RL's (every key optional; absent:
    the ``rl`` section's value). Only the hill-climb stages read it, so a scale may add or change it after its
    RL, evaluations and bands are recorded (their settings do not include it); a recorded climb of other
    settings is still refused."""

    lr: Rate = None  # type: ignore[assignment] - default rl.lr
    prompts: Pos = None  # type: ignore[assignment] - prompts per step; default rl.prompts
    eval_every: Pos = None  # type: ignore[assignment] - default rl.climb_eval_every, then rl.eval_every
    # the climbs' RL seeds (default: the scale's seeds); every climb starts from the first seed's easy adapter,
    # so a climb seed needs no RL run of its own
    seeds: Seeds = None  # type: ignore[assignment]
    # the pre-declared endpoint: the mean of the last k held-out evaluations (k = 1: the last one)
    endpoint_evals: Pos = None  # type: ignore[assignment]

    @field_validator("seeds")
    @classmethod
    def distinct_seeds(cls, v):
        return _unique(v) if v is not None else v


class WorldScale(Strict):
    """configs/world/<scale>.yaml (read by polyvox.studies.world.pipeline)."""

    name: Text = None  # type: ignore[assignment] - a run's copy records its scale's name
    seeds: Seeds
    problems_seed: Seed
    models: WorldModels
    rl: WorldRL
    sampling: WorldSampling
    eval: WorldEval
    bands: WorldBands
    climb: WorldClimb = None  # type: ignore[assignment] - optional

    @field_validator("seeds")
    @classmethod
    def distinct_seeds(cls, v):
        return _unique(v)

    @model_validator(mode="after")
    def sweep_seeds_are_seeds(self):
        extra = [s for s in self.eval.sweep_seeds if s not in self.seeds]
        if extra:
            raise ValueError(f"eval.sweep_seeds: {extra} are not among the scale's seeds {self.seeds}")
        return self


# ---------------------------------------------------------------- scales: the persona basis (Part II)

class PersonasModel(Strict):
    path: Text


class PersonasWorld(Strict):
    n_users: Annotated[int, Field(ge=24, description="an integer ≥ 24 (8 preference types in each of 3 splits)")]
    per_user: Pos
    seed: Seed


class PersonasRouter(Strict):
    h: Pos
    epochs: Pos
    lr: Rate
    seed: Seed


_Rates = Annotated[list[Rate], Field(min_length=1, description="a non-empty list of numbers > 0")]
_Probs = Annotated[list[Prob], Field(min_length=1, description="a non-empty list of numbers in [0, 1]")]


class PersonasSweep(Strict):
    """``distill.sweep``: the validation sweep of issue 22 (:mod:`polyvox.studies.personas.steps`). Per arm,
    every point of the grid (the product of the lists given; an axis not given keeps the distill section's
    value) trains the four pole heads on the train users, scores them on validation users' prompts only,
    and the arm's test heads take the point picked on validation."""

    lr: _Rates = None  # type: ignore[assignment]
    steps: Annotated[list[Pos], Field(min_length=1, description="a non-empty list of integers ≥ 1")] = None  # type: ignore[assignment]
    temperature: _Rates = None  # type: ignore[assignment]
    jsd_beta: Annotated[list[Prob | None], Field(min_length=1, description="a non-empty list of numbers in "
                                                 "[0, 1] or null (the plain KLs)")] = None  # type: ignore[assignment]
    student_sample_fraction: _Probs = None  # type: ignore[assignment]
    seed: Seed = None  # type: ignore[assignment] - the sweep heads' seed, never a test seed; default: max(arms.seeds) + 1

    @field_validator("lr", "steps", "temperature", "jsd_beta", "student_sample_fraction")
    @classmethod
    def distinct(cls, v):
        return _unique(v)


class PersonasCap(Strict):
    """``distill.cap``: the generation cap's measurement (issue 22): the teacher (the base with each
    preference type's card) samples ``prompts`` train prompts up to ``ceiling`` tokens; the scale's
    ``generate.max_tokens`` must reach the 99th percentile of the longest type's answers."""

    prompts: Pos
    ceiling: Annotated[int, Field(ge=8, description="an integer ≥ 8 (the measurement's own token cap)")]


class PersonasDistill(Strict):
    """``distill``: the heads' recipe (:func:`polyvox.train.distill.train`). The remedy fields (issue 22)
    are optional; absent, they keep the recorded recipe's values: ``temperature`` 1 (the loss's τ),
    ``jsd_beta`` null (the plain forward and reverse KLs; a number β trains the reverse arm on GKD's
    generalized JSD(β) and the forward arm on its mirror JSD(1 − β)), ``student_sample_fraction`` 0
    (GKD's λ: the chance a step trains on the student's own samples); no ``sweep`` and no ``cap``."""

    top_k: Pos
    lora_rank: Pos
    lora_alpha: Pos
    lr: Rate
    steps: Pos
    batch: Pos
    save_every: Pos
    validation_prompts: Pos
    teacher_temperature: Rate
    temperature: Rate = None  # type: ignore[assignment] - default 1.0
    jsd_beta: Prob | None = None
    student_sample_fraction: Prob = None  # type: ignore[assignment] - default 0.0
    sweep: PersonasSweep = None  # type: ignore[assignment]
    cap: PersonasCap = None  # type: ignore[assignment]


class PersonasArms(Strict):
    losses: Annotated[list[Literal["forward", "reverse"]],
                      Field(min_length=1, description="a non-empty list of forward, reverse")]
    seeds: Seeds

    @field_validator("losses", "seeds")
    @classmethod
    def distinct(cls, v):
        return _unique(v)


class PersonasGenerate(Strict):
    backend: Literal["transformers", "vllm"] = None  # type: ignore[assignment] - default transformers
    max_tokens: Pos
    batch_size: Pos
    threads: Pos = None  # type: ignore[assignment] - default 1
    dtype: Dtype = None  # type: ignore[assignment] - default: bf16 on a GPU, fp32 on a CPU
    max_lora_rank: Pos = None  # type: ignore[assignment]
    max_model_len: Pos = None  # type: ignore[assignment]


class PersonasJudge(Strict):
    kind: Literal["rubric", "openai"] = None  # type: ignore[assignment] - default rubric
    chunk: Pos
    n_boot: Pos
    base_url: Url = None  # type: ignore[assignment]
    model: Text = None  # type: ignore[assignment]
    api_key_env: Text = None  # type: ignore[assignment]
    concurrency: Pos = None  # type: ignore[assignment]
    max_tokens: Pos = None  # type: ignore[assignment]

    checked_url = field_validator("base_url")(classmethod(lambda cls, v: _check_url_no_credentials(v)))
    checked_env = field_validator("api_key_env")(classmethod(lambda cls, v: _check_env(v)))

    @model_validator(mode="after")
    def kind_fields(self):
        llm = ("base_url", "model", "api_key_env", "concurrency", "max_tokens")
        if self.kind == "openai":
            missing = [k for k in ("model", "base_url") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"kind openai needs {' and '.join(missing)}")
        else:
            given = [k for k in llm if k in self.model_fields_set]
            if given:
                raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to kind: openai only "
                                 "(the rubric judge reads none of them)")
        return self


_Users = Annotated[int, Field(ge=24, description="an integer ≥ 24 (8 preference types in each of 3 splits)")]


class PersonasJudgeModel(Strict):
    """``judge_model`` (optional; issue 22, item 4): the tiny judge model
    (:mod:`polyvox.studies.personas.judge_model`) the stage judge-model trains and calibrates, and the stage
    judge asks beside the ``judge`` section's judge. ``size`` names a preset (``SIZES``: smoke, h200); every
    other key overrides the preset's field of that name (training users, pairs, steps, held-out split…)."""

    size: Literal["smoke", "h200"]
    steps: Pos = None  # type: ignore[assignment]
    lr: Rate = None  # type: ignore[assignment]
    seed: Seed = None  # type: ignore[assignment]
    batch: Pos = None  # type: ignore[assignment]
    n_users: _Users = None  # type: ignore[assignment] - training pairs: the training users among n_users
    per_user: Pos = None  # type: ignore[assignment]
    pairs_per_prompt: Pos = None  # type: ignore[assignment]
    held_split: Literal["validation", "test"] = None  # type: ignore[assignment] - the calibration's users
    held_n_users: _Users = None  # type: ignore[assignment]
    held_per_user: Pos = None  # type: ignore[assignment]
    held_pairs_per_prompt: Pos = None  # type: ignore[assignment]
    device: Literal["cpu", "cuda"] = None  # type: ignore[assignment] - default: the preset's


class PersonasMixes(Strict):
    """``mixes`` (optional; issue 22, item 3): each pair's mixing recipe tuned on validation
    (:mod:`polyvox.studies.personas.mixes`): the grid's weights on a pair's poles (``pole``) and, negated, on their
    opposites (``opposite``), how far below persona prompting's rate a mix may stay (``margin``) and the largest share
    of its validation replies it may cut at the cap (``max_cap_hits``)."""

    pole: Annotated[list[Annotated[float, Field(gt=0, le=8)]], Field(min_length=1, description="a non-empty list of weights in (0, 8]")]
    opposite: Annotated[list[Annotated[float, Field(ge=0, le=8)]], Field(min_length=1, description="a non-empty list of weights in [0, 8]")]
    margin: Prob
    max_cap_hits: Prob = None  # type: ignore[assignment] - absent: no cap-hit bound (the run recorded before 2026-12-03)

    @field_validator("pole", "opposite")
    @classmethod
    def distinct(cls, v):
        return _unique(v)


class PersonasScale(Strict):
    """configs/personas/<scale>.yaml and a run folder's scale.yaml (read by polyvox.studies.personas.pipeline)."""

    name: Text = None  # type: ignore[assignment]
    model: PersonasModel
    world: PersonasWorld
    router: PersonasRouter
    distill: PersonasDistill
    arms: PersonasArms
    generate: PersonasGenerate
    judge: PersonasJudge
    judge_model: PersonasJudgeModel = None  # type: ignore[assignment] - absent: the rubric (or judge's) verdicts only
    mixes: PersonasMixes = None  # type: ignore[assignment] - absent: the study's recipes (steps.RECIPES) alone


# ---------------------------------------------------------------- scales: collaboration (Part III)

class CollabData(Strict):
    world_levels: Annotated[list[Annotated[int, Field(ge=1, le=5)]],
                            Field(min_length=1, description="a non-empty list of world levels 1 … 5")]
    world_per_level: Pos
    qa_n: Pos
    seed: Seed
    # held-out sets by the underlying problem, each once (polyvox.studies.collab.pipeline.problems; absent: the
    # recorded scales' draws, the world's split by expression and QA's by person)
    split_by: Literal["underlying"] = None  # type: ignore[assignment]

    @field_validator("world_levels")
    @classmethod
    def distinct_levels(cls, v):
        return _unique(v)


class CollabSize(Strict):
    hidden: Annotated[int, Field(ge=32, multiple_of=32, description="a multiple of 32 (32-wide attention heads)")]
    layers: Pos
    intermediate: Pos
    steps: Pos


class CollabSizes(Strict):
    small: CollabSize
    mid: CollabSize
    big: CollabSize
    large: CollabSize


class CollabModels(Strict):
    vocab: Annotated[int, Field(ge=64, description="an integer ≥ 64")]
    seq_len: Annotated[int, Field(ge=16, le=1024, description="an integer in 16 … 1024 (the models' positions)")]
    batch: Pos
    lr: Rate
    sizes: CollabSizes
    # a failed size ordering on the validation split stops the run (polyvox.studies.collab.pipeline; default false)
    stop_if_unordered: bool = None  # type: ignore[assignment]
    # refuse: a training row (base or PD) past seq_len is an error, not cut, and the models declare seq_len positions
    # (polyvox.studies.collab.models.chat_rows, .positions); absent: the recorded scales' silent cut, 1,024 positions
    truncate: Literal["refuse"] = None  # type: ignore[assignment]


class CollabPD(Strict):
    mode: Literal["lora", "full"] = None  # type: ignore[assignment] - default lora
    rank: Pos
    steps: Pos
    lr: Rate
    batch: Pos
    slip: Prob
    # run control (not in the stage settings): stop the run when PD leaves an agent below valid_min protocol-valid
    # turns on the validation split (absent: models.stop_if_unordered's choice, and 0.9)
    stop_if_invalid: bool = None  # type: ignore[assignment]
    valid_min: Prob = None  # type: ignore[assignment]


class CollabRL(Strict):
    steps: Pos
    group: Group
    prompts: Pos
    problems: Pos
    lr: Rate
    max_tokens: Pos


class CollabEval(Strict):
    world_per_level: Pos
    qa_n: Pos
    t_max: Pos
    max_retries: Seed
    max_tokens: Pos
    cascade_temperature: NonNeg
    batch_size: Pos


class CollabScale(Strict):
    """configs/collab/<scale>.yaml, the miniature pool trained here (read by polyvox.studies.collab.pipeline)."""

    name: Text = None  # type: ignore[assignment]
    threads: Pos = None  # type: ignore[assignment] - torch intra-op threads (default: torch's)
    # the pd, rl and eval stages once per seed, in seed-<k>/ (polyvox.studies.collab.pipeline); absent: once, unseeded
    seeds: Seeds = None  # type: ignore[assignment]
    data: CollabData
    models: CollabModels
    pd: CollabPD
    rl: CollabRL
    eval: CollabEval

    @field_validator("seeds")
    @classmethod
    def distinct_seeds(cls, v):
        return _unique(v)


class Endpoint(Strict):
    model: Text
    base_url: Url
    api_key_env: Text = None  # type: ignore[assignment]
    concurrency: Pos = None  # type: ignore[assignment]

    checked_url = field_validator("base_url")(classmethod(lambda cls, v: _check_url_no_credentials(v)))
    checked_env = field_validator("api_key_env")(classmethod(lambda cls, v: _check_env(v)))


class ServedModels(Strict):
    note: Text


class ServedPD(Strict):
    rank: Pos
    slip: Prob


class ServedRL(Strict):
    reward: Text
    judge: Endpoint


class CollabServedScale(Strict):
    """A collab scale with ``endpoints``: OpenAI-compatible agents evaluated as served (configs/collab/full.yaml);
    its training stages are recorded as external, so models, pd and rl document what was served."""

    name: Text = None  # type: ignore[assignment]
    threads: Pos = None  # type: ignore[assignment]
    data: CollabData
    models: ServedModels
    pd: ServedPD
    rl: ServedRL
    eval: CollabEval
    endpoints: dict[Text, dict[Text, Endpoint]]

    @model_validator(mode="before")
    @classmethod
    def agents_of_each_system(cls, data):
        # solo holds every model alone (large too); each other entry is a system of the three agents
        if isinstance(data, dict) and isinstance(data.get("endpoints"), dict):
            eps = data["endpoints"]
            if "solo" not in eps:
                raise ValueError("endpoints: missing solo (the single models: small, mid, big, large)")
            for name, spec in eps.items():
                want = {"small", "mid", "big", "large"} if name == "solo" else {"small", "mid", "big"}
                if not isinstance(spec, dict) or set(spec) != want:
                    got = sorted(spec) if isinstance(spec, dict) else _show(spec)
                    raise ValueError(f"endpoints.{name}: expected the agents {', '.join(sorted(want))}, got {got}")
        return data


SCALES: dict[str, type[BaseModel]] = {"world": WorldScale, "personas": PersonasScale, "collab": CollabScale}


def scale_model(study: str, data: dict) -> type[BaseModel] | None:
    """The model a study's scale is checked against (collab: the served form when it names endpoints)."""
    if study == "collab" and isinstance(data, dict) and "endpoints" in data:
        return CollabServedScale
    return SCALES.get(study)


def check_scale(study: str, data: dict, source: str) -> dict:
    """A scale's sections validated by its study's model, as a plain dict of the file's shape."""
    model = scale_model(study, data)
    if model is None:
        return data
    return as_dict(validate(model, data, source), data)
