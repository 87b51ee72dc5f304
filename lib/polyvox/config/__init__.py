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

Modules: :mod:`.loader` (the safe YAML loader and its limits), :mod:`.errors` (ConfigError and
the one-line messages), :mod:`.fields` (the value types the models share), :mod:`.scales`,
:mod:`.rl`, :mod:`.book` (corrections and ``--params`` values), :mod:`.cli_types`; every public
name is re-exported here, so ``polyvox.config.X`` reads as it always did.

Core: this package imports neither the studies, the book nor the command line.
"""
from .book import Correction, check_param_value
from .cli_types import env_name, existing_dir, existing_file, integer, names, number, url
from .errors import ConfigError, _models_in, as_dict, describe, validate  # noqa: F401 - _models_in: tests
from .fields import (Dtype, Fraction, Group, Int, NonNeg, Pos, Prob, Rate, Seed, Seeds, Strict, Text, Url)
from .loader import MAX_BYTES, MAX_DEPTH, MAX_NODES, load_yaml, parse_yaml
from .rl import RLFile, StageSpec, TaskSpec, check_rl
from .scales import (SCALES, CollabData, CollabEval, CollabModels, CollabPD, CollabRL, CollabScale, CollabServedScale,
                     CollabSize, CollabSizes, Endpoint, PersonasArms, PersonasDistill, PersonasGenerate, PersonasJudge,
                     PersonasModel, PersonasRouter, PersonasScale, PersonasWorld, ServedModels, ServedPD, ServedRL,
                     WorldBands, WorldEval, WorldModels, WorldRL, WorldSampling, WorldScale, check_scale, scale_model)

__all__ = [
    "MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "ConfigError", "parse_yaml", "load_yaml", "describe", "validate", "as_dict",
    "Strict", "Int", "Pos", "Seed", "Group", "Rate", "NonNeg", "Fraction", "Prob", "Text", "Url", "Dtype", "Seeds",
    "WorldModels", "WorldRL", "WorldSampling", "WorldEval", "WorldBands", "WorldScale",
    "PersonasModel", "PersonasWorld", "PersonasRouter", "PersonasDistill", "PersonasArms", "PersonasGenerate",
    "PersonasJudge", "PersonasScale",
    "CollabData", "CollabSize", "CollabSizes", "CollabModels", "CollabPD", "CollabRL", "CollabEval", "CollabScale",
    "Endpoint", "ServedModels", "ServedPD", "ServedRL", "CollabServedScale",
    "SCALES", "scale_model", "check_scale", "TaskSpec", "StageSpec", "RLFile", "check_rl",
    "Correction", "check_param_value",
    "integer", "number", "url", "env_name", "existing_dir", "existing_file", "names",
]
