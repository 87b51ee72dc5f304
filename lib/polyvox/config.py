"""Configuration files as typed models, read safely, and refused in one line before any work.

Every YAML file the library reads as configuration goes through :func:`load_yaml`:
at most :data:`MAX_BYTES` bytes, at most :data:`MAX_NODES` values once aliases are
expanded (a "billion laughs" alias bomb is refused by counting, before anything is
built), at most :data:`MAX_DEPTH` levels of nesting, no recursive aliases and no
duplicate keys (YAML would silently keep the last one). Its contents are then validated
by a pydantic model (``extra="forbid"``, strict types, ranges) and a failure is one line,
``FILE: key.path: expected …, got …`` (:func:`describe`).

The models describe exactly what the code reads:

- :class:`WorldScale`, :class:`PersonasScale`, :class:`CollabScale` (and its served form,
  :class:`CollabServedScale`): ``configs/<study>/<scale>.yaml``, read by
  :func:`polyvox.stages.load_scale` (:func:`check_scale`), which hands the pipelines a
  plain dict of the same shape as the file (unset optional keys stay unset);
- :class:`RLFile`: ``configs/rl/*.yaml``, read by :func:`polyvox.train.grpo.load_config`;
- :class:`Correction`: an entry of ``data/corrections.yml``;
- :func:`check_param_value`: a ``--params`` value against its chapter's default.

The command line's ``type=`` functions (:func:`integer`, :func:`number`, :func:`url`,
:func:`existing_dir`, :func:`existing_file`, :func:`env_name`, :func:`names`) live here
too, so the studies' commands use them without importing :mod:`polyvox.cli`: each raises
``argparse.ArgumentTypeError`` with a message starting ``must be …``.

Core: this module imports neither the studies, the book nor the command line.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import urllib.parse
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

MAX_BYTES = 1 << 20  # a configuration is a few kilobytes; the shipped ones are under 4 KB
MAX_NODES = 100_000  # values after alias expansion (the shipped files hold a few hundred)
MAX_DEPTH = 64  # levels of nesting


class ConfigError(ValueError):
    """A configuration file (or value) that cannot be used; the message is one line naming the file."""


# ---------------------------------------------------------------- safe YAML

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key, mark):
        self.key, self.mark = key, mark
        super().__init__(f"duplicate key {key!r}")


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """The safe loader, refusing a mapping that names one key twice."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise _DuplicateKey(key, key_node.start_mark)
                seen.add(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a scalar",
                                                        key_node.start_mark) from None
        return super().construct_mapping(node, deep)


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)


def _where(source: str, mark) -> str:
    return f"{source}:{mark.line + 1}" if mark is not None else source


def _check_shape(text: str, source: str, max_nodes: int, max_depth: int) -> None:
    """Walk the YAML events once (no objects built): refuse deep nesting, recursive aliases and
    documents whose aliases expand to more than ``max_nodes`` values."""
    sizes: dict[str, int] = {}  # anchor -> expanded size of its node
    stack: list[list] = []  # open collections: [size, anchor]
    total = 0

    def add(n: int, mark) -> None:
        nonlocal total
        if stack:
            stack[-1][0] += n
        else:
            total += n
        if total + sum(s[0] for s in stack) > max_nodes:
            raise ConfigError(f"{_where(source, mark)}: more than {max_nodes} values once YAML aliases are "
                              "expanded (an alias bomb?); a configuration is a few hundred")

    for ev in yaml.parse(text, Loader=_Base):
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([1, ev.anchor])
            if len(stack) > max_depth:
                raise ConfigError(f"{_where(source, ev.start_mark)}: nested more than {max_depth} levels deep")
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            size, anchor = stack.pop()
            if anchor is not None:
                sizes[anchor] = size
            add(size, ev.start_mark)
        elif isinstance(ev, yaml.ScalarEvent):
            if ev.anchor is not None:
                sizes[ev.anchor] = 1
            add(1, ev.start_mark)
        elif isinstance(ev, yaml.AliasEvent):
            if ev.anchor not in sizes:
                what = "refers to itself" if any(s[1] == ev.anchor for s in stack) else "is not defined"
                raise ConfigError(f"{_where(source, ev.start_mark)}: YAML alias *{ev.anchor} {what}")
            add(sizes[ev.anchor], ev.start_mark)


def parse_yaml(text: str, source: str = "<text>", max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """YAML text → Python values, within the limits; errors are ConfigError naming ``source``."""
    try:
        _check_shape(text, source, max_nodes, max_depth)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is the safe loader
    except _DuplicateKey as exc:
        raise ConfigError(f"{_where(source, exc.mark)}: duplicate key {exc.key!r} (YAML would keep only the last)") \
            from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({' '.join(str(exc).split())})") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a date 2026-13-01
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{source}: not valid YAML ({' '.join(str(exc).split())})") from None


def load_yaml(path: os.PathLike | str, max_bytes: int = MAX_BYTES) -> Any:
    """A YAML file, read within the limits (size, values after aliases, depth, duplicate keys).

    A missing file raises the usual ``FileNotFoundError``; everything else wrong is a
    :class:`ConfigError` naming the file.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: a folder, not a YAML file")
    with open(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{path}: larger than {max_bytes} bytes; a configuration is a few kilobytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_yaml(text, str(path))


# ---------------------------------------------------------------- one-line errors

_PHRASES = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "string_type": "text", "bool_type": "true or false", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "date_type": "a date (YYYY-MM-DD)",
    "date_parsing": "a date (YYYY-MM-DD)", "date_from_datetime_parsing": "a date (YYYY-MM-DD)",
    "date_from_datetime_inexact": "a date (YYYY-MM-DD)", "none_required": "nothing (null)",
}


def _phrase(err: dict) -> str:
    t, ctx = err["type"], err.get("ctx") or {}
    if t in _PHRASES:
        return _PHRASES[t]
    if t == "greater_than_equal":
        return f"a value ≥ {ctx['ge']}"
    if t == "greater_than":
        return f"a value > {ctx['gt']}"
    if t == "less_than_equal":
        return f"a value ≤ {ctx['le']}"
    if t == "less_than":
        return f"a value < {ctx['lt']}"
    if t == "literal_error":
        return f"one of {ctx['expected']}"
    if t in ("too_short", "string_too_short"):
        n = ctx.get("min_length", 1)
        return "non-empty text" if t == "string_too_short" else f"at least {n} item{'s' * (n != 1)}"
    if t in ("too_long", "string_too_long"):
        n = ctx.get("max_length")
        return f"at most {n} item{'s' * (n != 1)}" if t == "too_long" else f"at most {n} characters"
    return err["msg"][0].lower() + err["msg"][1:]


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _loc(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models_in(a)]


def _walk(model: type[BaseModel] | None, loc) -> tuple[Any, type[BaseModel] | None]:
    """(the FieldInfo at loc if loc ends on a field, the model holding what is at loc)."""
    info, cls = None, model
    for i, part in enumerate(loc):
        if cls is not None and isinstance(part, str) and part in cls.model_fields:
            info = cls.model_fields[part]
            inner = _models_in(info.annotation)
            cls = inner[0] if len(inner) == 1 else None
            if i < len(loc) - 1:
                info = None
        else:  # a list index or a mapping's own key: the items' model, if any
            info = None
    return info, cls


def describe(exc: ValidationError, source: str, model: type[BaseModel] | None = None, prefix: str = "") -> str:
    """pydantic's errors as one line: ``SOURCE: key.path: expected …, got …`` (and how many more)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    head = f"{source}: {prefix + ': ' if prefix else ''}"
    used = 1
    if first["type"] in ("missing", "extra_forbidden"):
        parent = tuple(first["loc"][:-1])
        group = [e for e in errors if e["type"] in ("missing", "extra_forbidden") and tuple(e["loc"][:-1]) == parent]
        used = len(group)
        unknown = [str(e["loc"][-1]) for e in group if e["type"] == "extra_forbidden"]
        missing = [str(e["loc"][-1]) for e in group if e["type"] == "missing"]
        parts = []
        if unknown:
            parts.append(f"unknown key{'s' * (len(unknown) > 1)} {', '.join(unknown)}")
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        _, cls = _walk(model, parent)
        known = f" (keys: {', '.join(cls.model_fields)})" if cls is not None else ""
        line = head + (f"{_loc(parent)}: " if parent else "") + "; ".join(parts) + known
    else:
        info, _ = _walk(model, first["loc"])
        where = _loc(first["loc"])
        where = f"{where}: " if where else ""
        if first["type"] in ("value_error", "assertion_error"):
            msg = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
            got = first["input"]
            said = "got" in msg or repr(got) in msg or isinstance(got, dict)
            line = head + where + msg + ("" if said else f", got {_show(got)}")
        else:
            what = info.description if info is not None and info.description else _phrase(first)
            line = head + f"{where}expected {what}, got {_show(first['input'])}"
            got = first["input"]
            if first["type"] in ("float_type", "int_type") and isinstance(got, str) and _is_number(got):
                sci = re.fullmatch(r"([-+]?\d+)[eE]([-+]?\d+)", got.strip())
                line += (f" (YAML reads {got} as text: write {sci[1]}.0e{sci[2]})" if sci
                         else " (text, not a number: write it without quotes)")
    rest = len(errors) - used
    return line + (f" (and {rest} more problem{'s' * (rest > 1)})" if rest > 0 else "")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def validate(model: type[BaseModel], data: Any, source: str, prefix: str = "") -> BaseModel:
    """``model`` from ``data``, or a ConfigError whose message is :func:`describe`'s one line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, str(source), model, prefix)) from None


def _in_order(raw: Any, clean: Any) -> Any:
    """``clean`` (a model dump) with its keys in ``raw``'s order, so a dict keeps the file's shape."""
    if isinstance(raw, dict) and isinstance(clean, dict):
        return {k: _in_order(raw[k], clean[k]) for k in raw if k in clean} | \
            {k: v for k, v in clean.items() if k not in raw}
    if isinstance(raw, list) and isinstance(clean, list) and len(raw) == len(clean):
        return [_in_order(r, c) for r, c in zip(raw, clean)]
    return clean


def as_dict(model: BaseModel, raw: Any) -> dict:
    """The validated values as a plain dict of the file's shape (keys not given stay absent)."""
    return _in_order(raw, model.model_dump(mode="python", exclude_unset=True))


# ---------------------------------------------------------------- value types

def _url_ok(text: str) -> str | None:
    """None when ``text`` is an http(s) address with a host; else what is wrong."""
    if not isinstance(text, str) or not text or any(c.isspace() for c in text):
        return "an http(s) address without spaces"
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        return f"an http(s) address ({exc})"
    if parts.scheme not in ("http", "https"):
        return "an http(s) address (http:// or https://)"
    if not parts.hostname:
        return "an http(s) address with a host"
    return None


def _check_url(text: str) -> str:
    problem = _url_ok(text)
    if problem:
        raise ValueError(f"expected {problem}, got {_show(text)}")
    return text


_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env(text: str) -> str:
    if not _ENV.fullmatch(text):  # not echoed: a key pasted here instead of its variable's name stays out of logs
        raise ValueError("expected the name of an environment variable (letters, digits, _), "
                         "got something else (not repeated here: it may be the key itself)")
    return text


def _unique(values: list) -> list:
    dup = sorted({str(v) for v in values if values.count(v) > 1})
    if dup:
        raise ValueError(f"expected distinct values, got {', '.join(dup)} more than once")
    return values


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Int = Annotated[int, Field(description="an integer")]
Pos = Annotated[int, Field(ge=1, description="an integer ≥ 1")]
Seed = Annotated[int, Field(ge=0, description="an integer ≥ 0")]
Group = Annotated[int, Field(ge=2, description="an integer ≥ 2 (a group needs two samples to compare)")]
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False, description="a number > 0")]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False, description="a number ≥ 0")]
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False, description="a number in (0, 1]")]
Prob = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False, description="a number in [0, 1]")]
Text = Annotated[str, Field(min_length=1, description="non-empty text")]
Url = Annotated[str, Field(description="an http(s) address")]
Dtype = Annotated[Literal["float32", "bfloat16", "float16"], Field(description="float32, bfloat16 or float16")]
Seeds = Annotated[list[Seed], Field(min_length=1, description="a non-empty list of integers ≥ 0")]


# ---------------------------------------------------------------- scales: the miniature world (Part IV)

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


class PersonasDistill(Strict):
    top_k: Pos
    lora_rank: Pos
    lora_alpha: Pos
    lr: Rate
    steps: Pos
    batch: Pos
    save_every: Pos
    validation_prompts: Pos
    teacher_temperature: Rate


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

    checked_url = field_validator("base_url")(classmethod(lambda cls, v: _check_url(v)))
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


# ---------------------------------------------------------------- scales: collaboration (Part III)

class CollabData(Strict):
    world_levels: Annotated[list[Annotated[int, Field(ge=1, le=5)]],
                            Field(min_length=1, description="a non-empty list of world levels 1 … 5")]
    world_per_level: Pos
    qa_n: Pos
    seed: Seed

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


class CollabPD(Strict):
    mode: Literal["lora", "full"] = None  # type: ignore[assignment] - default lora
    rank: Pos
    steps: Pos
    lr: Rate
    batch: Pos
    slip: Prob


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
    data: CollabData
    models: CollabModels
    pd: CollabPD
    rl: CollabRL
    eval: CollabEval


class Endpoint(Strict):
    model: Text
    base_url: Url
    api_key_env: Text = None  # type: ignore[assignment]
    concurrency: Pos = None  # type: ignore[assignment]

    checked_url = field_validator("base_url")(classmethod(lambda cls, v: _check_url(v)))
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


# ---------------------------------------------------------------- RL configs (configs/rl/*.yaml)

_FOLDER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _task_name(name: str) -> str:
    from . import tasks

    tasks.get(name)  # ValueError: unknown task 'x'; tasks: …
    return name


def _grader_name(name: str | None) -> str | None:
    from .grading import GRADERS

    if name is not None and name not in GRADERS:
        raise ValueError(f"unknown grader {name!r}; graders: {', '.join(sorted(GRADERS))}")
    return name


class TaskSpec(BaseModel):
    """A task by name and its ``tasks.load`` options (checked against the task's loader)."""

    model_config = ConfigDict(extra="allow", strict=True)
    task: Text
    limit: Pos = None  # type: ignore[assignment]
    level: Union[Int, Text, list[Union[Int, Text]]] = None  # type: ignore[assignment]
    ids: list[Text] = None  # type: ignore[assignment]
    per_level: Pos = None  # type: ignore[assignment]
    seed: Seed = None  # type: ignore[assignment]
    split: Literal["train", "test", "validation"] = None  # type: ignore[assignment]
    levels: list[Union[Annotated[int, Field(ge=1)], Text]] = None  # type: ignore[assignment]

    known_task = field_validator("task")(classmethod(lambda cls, v: _task_name(v)))

    @model_validator(mode="after")
    def options_of_the_task(self):
        from . import tasks

        task = tasks.get(self.task)
        # tasks.load's own arguments, and (in a stage) the stage's; everything else goes to the task's loader
        general = {"task", "limit", "level", "ids"} | (set(type(self).model_fields) - set(TaskSpec.model_fields))
        unknown = sorted(k for k in self.model_fields_set | set(self.model_extra or {})
                         if k not in general and k not in task.options)
        if unknown:
            raise ValueError(f"task {self.task} has no option {', '.join(unknown)}; "
                             f"options: {', '.join(task.options) or 'none'}")
        if self.level is not None and not task.levels:
            raise ValueError(f"task {self.task} has no levels (level applies to: "
                             f"{', '.join(sorted(t.name for t in tasks.TASKS.values() if t.levels))})")
        return self


class StageSpec(TaskSpec):
    name: Annotated[str, Field(pattern=_FOLDER.pattern, description="a folder name (letters, digits, _ . -)")]
    steps: Pos
    grading: Text = None  # type: ignore[assignment]

    known_grading = field_validator("grading")(classmethod(lambda cls, v: _grader_name(v)))


class RLFile(Strict):
    """configs/rl/*.yaml: polyvox.train.grpo.RLConfig's fields (but reward_fn) with stages and heldout as task specs.

    Defaults are RLConfig's: keys not given are left out, so the dataclass fills them."""

    model: Text
    arm: Literal["panel", "think"]
    out: Text
    stages: Annotated[list[StageSpec], Field(min_length=1, description="a non-empty list of stages")]
    heldout: TaskSpec | None = None
    init_adapter: Text | None = None
    lora_rank: Pos = None  # type: ignore[assignment]
    lora_alpha: Pos = None  # type: ignore[assignment]
    learning_rate: Rate = None  # type: ignore[assignment]
    group_size: Group = None  # type: ignore[assignment]
    prompts_per_step: Pos = None  # type: ignore[assignment]
    max_completion_length: Pos = None  # type: ignore[assignment]
    temperature: Rate = None  # type: ignore[assignment]
    tag_coef: NonNeg = None  # type: ignore[assignment]
    beta: NonNeg = None  # type: ignore[assignment]
    eval_every: Pos = None  # type: ignore[assignment]
    save_every: Pos = None  # type: ignore[assignment]
    heldout_samples: Pos = None  # type: ignore[assignment]
    heldout_grading: Text = None  # type: ignore[assignment]
    seed: Seed = None  # type: ignore[assignment]
    use_vllm: bool = None  # type: ignore[assignment]
    vllm_mode: Literal["colocate", "server"] = None  # type: ignore[assignment]
    vllm_gpu_memory_utilization: Fraction = None  # type: ignore[assignment]
    target_parameters: list[Text] | None = None
    gradient_accumulation_steps: Pos = None  # type: ignore[assignment]
    fast_generation: bool | None = None

    known_grading = field_validator("heldout_grading")(classmethod(lambda cls, v: _grader_name(v)))

    @model_validator(mode="after")
    def distinct_stage_names(self):
        names = [s.name for s in self.stages]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"stages: two stages named {dup[0]!r} would write one folder")
        return self


def check_rl(data: dict, source: str) -> RLFile:
    return validate(RLFile, data, source)  # type: ignore[return-value]


# ---------------------------------------------------------------- corrections (data/corrections.yml)

class Correction(Strict):
    """One entry of data/corrections.yml (the book's banners and its Corrections page)."""

    date: Annotated[date, Field(strict=False, description="a date (YYYY-MM-DD)")]
    chapters: list[Text]
    claimed: Text
    stands: Text
    source: Text
    study: str = None  # type: ignore[assignment]
    what: str = None  # type: ignore[assignment]
    url: Url = None  # type: ignore[assignment]
    status: Literal["withdrawn", "revised"] = None  # type: ignore[assignment]

    checked_url = field_validator("url")(classmethod(lambda cls, v: _check_url(v)))


# ---------------------------------------------------------------- --params values

def check_param_value(name: str, value: Any, default_source: str) -> str | None:
    """None when ``value`` may replace a parameter whose default is written ``default_source``
    (papermill's inspection), else what it must be: an int default takes integers, a float
    default numbers, a bool default true/false, a text default text, a list default a list;
    a ``None`` default (or one that is not a literal) takes anything."""
    import ast

    try:
        default = ast.literal_eval(default_source)
    except (ValueError, SyntaxError, TypeError):
        return None
    if default is None:
        return None
    if isinstance(default, bool):
        ok, what = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        what = "a finite number"
    elif isinstance(default, str):
        ok, what = isinstance(value, str), "text"
    elif isinstance(default, (list, tuple)):
        ok, what = isinstance(value, list), "a list"
    elif isinstance(default, dict):
        ok, what = isinstance(value, dict), "a mapping"
    else:
        return None
    return None if ok else f"expected {what} (its default is {default_source}), got {_show(value)}"


# ---------------------------------------------------------------- command-line types

def integer(minimum: int, maximum: int | None = None):
    """argparse ``type=``: an integer ≥ minimum (≤ maximum)."""
    what = f"an integer ≥ {minimum}" if maximum is None else f"an integer in {minimum} … {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} (invalid int value: {text!r})") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


def number(minimum: float, maximum: float | None = None, above: bool = False, what: str | None = None):
    """argparse ``type=``: a finite number ≥ minimum (> minimum when ``above``), ≤ maximum
    (``what``: the words for it, e.g. "a fraction in [0, 1]")."""
    if what is None and maximum is None:
        what = f"a number {'>' if above else '≥'} {minimum:g}"
    elif what is None:
        what = f"a number in {'(' if above else '['}{minimum:g}, {maximum:g}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} (invalid float value: {text!r})") from None
        if not math.isfinite(value) or value < minimum or (above and value == minimum) \
                or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    parse.__name__ = "float"
    return parse


def url(text: str) -> str:
    """argparse ``type=``: an http(s) address with a host."""
    problem = _url_ok(text)
    if problem:
        raise argparse.ArgumentTypeError(f"must be {problem}, got {text!r}")
    return text


def env_name(text: str) -> str:
    """argparse ``type=``: the name of an environment variable."""
    if not _ENV.fullmatch(text):  # not echoed: it may be the key itself
        raise argparse.ArgumentTypeError("must be the name of an environment variable (letters, digits, _), "
                                         "not the key itself or other text")
    return text


def existing_dir(text: str) -> str:
    """argparse ``type=``: a folder that exists."""
    p = Path(text)
    if not text or not p.exists():
        raise argparse.ArgumentTypeError(f"must be an existing folder; no such folder: {text!r}")
    if not p.is_dir():
        raise argparse.ArgumentTypeError(f"must be a folder, got the file {text!r}")
    return text


def existing_file(text: str) -> str:
    """argparse ``type=``: a file that exists (the message says "No such file or directory" as the OS does)."""
    p = Path(text)
    if not text or not p.exists():
        raise argparse.ArgumentTypeError(f"No such file or directory: {text!r}")
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"must be a file, got the folder {text!r}")
    return text


def names(choices, what: str = "stage", sep: str | None = ","):
    """argparse ``type=``: one name of ``choices`` (``sep=None``), or a ``sep``-separated list of them (a tuple).

    ``choices`` may be a callable returning them, so a study's list is imported only when the argument is given."""
    def parse(text: str):
        known = tuple(choices() if callable(choices) else choices)
        items = [x.strip() for x in text.split(sep)] if sep else [text]
        bad = [x or "''" for x in items if x not in known]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {what}(s) {', '.join(bad)}; {what}s: {', '.join(known)}")
        return tuple(items) if sep else items[0]

    parse.__name__ = what
    return parse
