"""Were a world run's samples drawn from the prompts its arms were trained on?

Every sampled folder of a run (the pilot, each seed's evaluation at each cap, the band draws where their
records are kept) is checked with :func:`polyvox.runs.check_recorded_prompts`: each record's request hash and
the length of the prompt the model read, against the prompt this code renders for the problem through the
run's own tiny-base tokenizer — which is what GRPO's trainer feeds (``grpo.prompt_for``), so a match means the
arm was sampled on its training prompt. A mismatch is a run sampled by other prompt code: the thinking arm of
the recording of 2026-12-02/03 read its chat template applied twice in every sampled stage (fixed in
``formats.build_prompt``); its panel arm is unaffected (no template).

:func:`prompt_check` gives one row per folder; :func:`prompt_verdict` the sentence the chapter prints, computed
from those rows.
"""
from __future__ import annotations

from pathlib import Path

from . import layout

ARM_NAMES = {"panel": "panel", "think": "thinking"}


def _folders(root: Path):
    for arm in ("panel", "think"):
        yield "pilot", None, None, arm, root / "pilot" / arm / "samples"
    for seed_dir in sorted(root.glob("seed-*"), key=lambda p: int(p.name.split("-")[1])):
        seed = int(seed_dir.name.split("-")[1])
        for cap_dir in sorted((seed_dir / "eval").glob("cap-*"), key=lambda p: int(p.name.split("-")[1])):
            cap = int(cap_dir.name.split("-")[1])
            for system, arm in (("tiny-panel", "panel"), ("tiny-think", "think")):
                yield "eval", seed, cap, arm, layout.eval_folder(root, seed, cap, system)
    for draw in ("bands", "bands-redraw"):
        for arm in ("panel", "think"):
            yield draw, None, None, arm, root / draw / arm / "samples"


def prompt_check(root: str | Path, data_dir: str | Path = "data"):
    """One row per sampled folder of the matched run in ``root``: stage, seed, cap, arm, records checked, records
    whose prompt is not the arm's training prompt, and the first one's recorded and expected prompt length (or
    hash). A folder whose records were not shipped (the band draws keep their counts only) has ``checked`` 0 and
    says so in ``note``."""
    import pandas as pd
    from transformers import AutoTokenizer

    from ... import runs
    from ...jsonl import stored

    root = Path(root)
    tok = AutoTokenizer.from_pretrained(root / "models" / "tiny-base")
    rows, cache = [], {}
    for stage, seed, cap, arm, folder in _folders(root):
        if not (folder / "manifest.json").exists():
            continue
        row = {"stage": stage, "seed": seed, "cap": cap, "arm": ARM_NAMES[arm]}
        if not any(stored(folder / name).exists() for name in (runs.ROLLOUTS, runs.GRADED)):
            rows.append({**row, "checked": 0, "mismatched": 0, "recorded": None, "expected": None,
                         "note": "records not shipped (counts only)"})
            continue
        got = runs.check_recorded_prompts(folder, tok, data_dir, cache)
        first = got["first"]
        rows.append({**row, "checked": got["checked"], "mismatched": got["mismatched"],
                     "recorded": None if first is None else f"{first[2]} {first[3]}",
                     "expected": None if first is None else f"{first[2]} {first[4]}", "note": ""})
    table = pd.DataFrame(rows)
    return table.astype({"seed": "Int64", "cap": "Int64"}) if len(table) else table


def prompt_verdict(table) -> tuple[bool, str]:
    """(every checked record was sampled on its arm's training prompt, the sentence saying so or what differs)."""
    checked = table[table.checked > 0]
    bad = checked[checked.mismatched > 0]
    unchecked = table[table.checked == 0]
    tail = (f" The {', '.join(sorted(set(unchecked.stage)))} folders keep no per-sample records and cannot be "
            "checked here; they were sampled by the same code as the evaluations (their manifests name the same "
            "commit)." if len(unchecked) else "")
    if bad.empty:
        return True, (f"**Prompts checked:** all {int(checked.checked.sum()):,} sampled records of the pilot and the "
                      f"evaluations ({len(checked)} folders) read their arm's training prompt (request hash and "
                      f"rendered length match GRPO's).{tail}")
    arms = sorted(set(bad.arm))
    first = bad.iloc[0]
    return False, (f"**The {' and '.join(arms)} arm{'s' if len(arms) > 1 else ''} did not read {'their' if len(arms) > 1 else 'its'} "
                   f"training prompt in sampling:** {int(bad.mismatched.sum()):,} of {int(checked.checked.sum()):,} "
                   f"checked records ({len(bad)} of {len(checked)} folders: "
                   f"{', '.join(sorted(set(bad.stage)))}) were sampled from another prompt than the one GRPO trained on "
                   f"(first: {first.stage}, {first.recorded} where the training prompt has {first.expected.split()[-1]}). "
                   "Every number below that rests on those samples — the pilot's lengths, the evaluations, and the band "
                   f"draws made by the same code, with the climbs trained on those bands — describes that arm under a "
                   f"prompt it was not trained on, not the arm itself.{tail}")
