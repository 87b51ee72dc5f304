"""What differs between Part IV's two arms (issue 21, item 1), computed from the configurations the
pipeline builds, for the chapter to print: :func:`arm_differences`.

The two RLConfigs of the matched RL stage are built exactly as :func:`.pipeline.rl` builds them (same
scale, seed and problem sets) and compared field by field — stages with their steps and problem ids,
held-out problem ids, learning rate, LoRA rank and alpha, group, prompts, cap, seed, tag coefficient —
leaving out the output folders. The arm field selects the format and its format reward
(:func:`polyvox.train.grpo.reward`), so a matched pair differs in exactly those two lines.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

FORMAT_REWARD = {"panel": "correct + tag_coef × (tags_valid − 1)", "think": "correct + tag_coef × (think_valid − 1)"}


def _recipe(cfg) -> dict:
    d = dataclasses.asdict(cfg)
    d["stages"] = [(st.name, st.steps, st.grading, [p.id for p in st.problems]) for st in cfg.stages]
    d["heldout"] = [p.id for p in cfg.heldout]
    return {k: v for k, v in d.items() if k not in ("out", "init_adapter")}  # folders: each arm its own


def arm_differences(s: dict, seed: int | None = None, out: str | Path = "<out>") -> list[str]:
    """What differs between the two arms' RL runs at scale ``s``, computed from the RLConfigs the pipeline
    builds for the matched RL stage: one line per difference. (The hill-climbs use the same
    recipe with ``rl.climb_steps`` from each arm's own first-seed adapter on its own stable band: the band
    differs by design, as in the study.)"""
    from .pipeline import ARMS, _rl_config, _rl_stages

    seed = s["seeds"][0] if seed is None else seed
    out = Path(out)
    rl_stages, heldout = _rl_stages(s)
    cfgs = {arm: _rl_config(out, s, seed, arm, out / arm, rl_stages, heldout) for arm in ARMS}
    a, b = (_recipe(cfgs[arm]) for arm in ARMS)
    lines = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            if key == "arm":
                lines += [f"format: {a[key]} vs {b[key]}",
                          f"format reward: {FORMAT_REWARD[a[key]]} vs {FORMAT_REWARD[b[key]]}"]
            else:
                lines.append(f"{key}: {a.get(key)!r} vs {b.get(key)!r}")
    return lines
