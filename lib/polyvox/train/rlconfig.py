"""An RL config file (``configs/rl/*.yaml``) read into :class:`polyvox.train.grpo.RLConfig`.

Named from :mod:`polyvox.train.grpo` (``grpo.check_config``, ``grpo.load_config``), which imports
this module after defining its config classes; this module reaches them when called.
"""
from __future__ import annotations

from pathlib import Path

from .. import tasks


def _stage_problems(spec: dict, data_dir: str) -> tuple[list, str]:
    """Problems and grader of a config stage: a task by name with its options (tasks.load)."""
    spec = {k: v for k, v in spec.items() if k not in ("name", "steps", "grading")}
    if "task" not in spec:
        raise ValueError(f"a stage needs a task (e.g. task: world, or task: math_train); got {sorted(spec)}")
    name = spec.pop("task")
    return tasks.load(name, data_dir, **spec), tasks.get(name).grader


def check_config(path: str | Path) -> dict:
    """An RL config file read and checked, nothing loaded: its keys as given (see :func:`load_config`).

    Read within :func:`polyvox.config.load_yaml`'s limits; every key, type and range is checked by
    :class:`polyvox.config.RLFile` (tasks and their options by name, graders, ranges), so a wrong
    key is one line naming the file and the key, before any problem set or model loads.
    """
    import dataclasses

    from .. import config
    from .grpo import RLConfig

    raw = config.load_yaml(path)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping of RLConfig fields, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(RLConfig)}
    known = set(fields) - {"reward_fn"}
    unknown = sorted(map(str, set(raw) - known))
    if unknown:
        raise ValueError(f"{path}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for key in ("model", "arm", "out"):
        if not isinstance(raw.get(key), str):
            raise ValueError(f"{path}: {key} must be text, got {raw.get(key)!r}")
    for key, value in raw.items():
        default = fields[key].default
        if isinstance(default, (int, float)) and not isinstance(default, bool) and \
                (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{path}: {key} must be a number, got {value!r}")
    specs = raw.get("stages")
    if not isinstance(specs, list) or not specs or not all(isinstance(x, dict) for x in specs):
        raise ValueError(f"{path}: stages must be a non-empty list of mappings (name, steps, task …), got {specs!r}")
    for i, spec in enumerate(specs, start=1):
        if not isinstance(spec.get("name"), str) or not isinstance(spec.get("steps"), int) or spec["steps"] < 1:
            raise ValueError(f"{path}: stage {i} needs a name and steps ≥ 1, got {spec!r}")
    config.check_rl(raw, str(path))
    return raw


def load_config(path: str | Path, data_dir: str = "data") -> RLConfig:
    """YAML config: RLConfig fields, plus ``stages`` (each: name, steps, a ``task`` and its
    ``tasks.load`` options, e.g. ``level``/``limit`` or the world's ``levels``/``per_level``/
    ``seed``/``split``) and an optional ``heldout`` spec of the same shape. The whole file is
    checked first (:func:`check_config`): unknown keys, types and ranges are an error naming
    the file and the key, before any problem set loads."""
    from .grpo import RLConfig, Stage

    raw = dict(check_config(path))
    specs = raw.pop("stages")
    stages = []
    for spec in specs:
        probs, task = _stage_problems(spec, data_dir)
        stages.append(Stage(spec["name"], probs, spec["steps"], spec.get("grading", task)))
    held = raw.pop("heldout", None)
    heldout, held_grader = _stage_problems(held, data_dir) if held else ([], "integer")
    return RLConfig(stages=stages, heldout=heldout, **{"heldout_grading": held_grader, **raw})
