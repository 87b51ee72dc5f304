"""RL configs: ``configs/rl/*.yaml``, read by :func:`polyvox.train.grpo.load_config`."""
from __future__ import annotations

import re
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from .errors import _show, validate
from .fields import Fraction, Group, Int, NonNeg, Pos, Rate, Seed, Strict, Text

_FOLDER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _task_name(name: str) -> str:
    from .. import tasks

    tasks.get(name)  # ValueError: unknown task 'x'; tasks: …
    return name


def _grader_name(name: str | None) -> str | None:
    from ..grading import GRADERS

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

    @field_validator("level", "levels")
    @classmethod
    def levels_of_the_world(cls, v, info: ValidationInfo):
        """The world's problems come in its levels only (1–5 and the olympiad tier): another level would
        train or evaluate on a level the world does not have (or on no problems at all)."""
        if v is None or info.data.get("task") != "world":
            return v
        import inspect

        from ..tasks import discover

        # the world task's levels, read from the task registry (its loader's default): core never
        # imports the study that registers it
        LEVELS = inspect.signature(discover()["world"].loader).parameters["levels"].default
        known = {str(x) for x in LEVELS}
        bad = [x for x in (v if isinstance(v, list) else [v]) if str(x) not in known]
        if bad:
            raise ValueError(f"the world has no level {bad[0]!r}; its levels: {', '.join(map(str, LEVELS))}")
        return v

    @model_validator(mode="after")
    def options_of_the_task(self):
        from .. import tasks

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

    @field_validator("init_adapter")
    @classmethod
    def an_adapter_folder(cls, v):
        """The adapter training starts from exists (a folder with adapter_config.json): checked here,
        before the run folder, its lock or its manifest is written."""
        from pathlib import Path

        if v is not None and not (Path(v) / "adapter_config.json").is_file():
            what = "no such folder" if not Path(v).exists() else \
                "not a folder" if not Path(v).is_dir() else "a folder without adapter_config.json"
            raise ValueError(f"expected an adapter folder (with adapter_config.json), got {_show(v)}: {what}")
        return v

    @model_validator(mode="after")
    def distinct_stage_names(self):
        names = [s.name for s in self.stages]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"stages: two stages named {dup[0]!r} would write one folder")
        return self


def check_rl(data: dict, source: str) -> RLFile:
    return validate(RLFile, data, source)  # type: ignore[return-value]
