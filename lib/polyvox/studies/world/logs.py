"""A world run's trainer logs as the chapter reads them: :func:`read_log` (the last attempt of an RL run, in both
layouts a run folder can hold) and :func:`collapse` (the rules by which an RL run's training collapsed)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .run_tables import records


def _split_attempts(rows: list[dict]) -> list[list[dict]]:
    parts: list[list[dict]] = [[]]
    for r in rows:
        if parts[-1] and r["step"] < parts[-1][-1]["step"]:
            parts.append([])
        parts[-1].append(r)
    return [p for p in parts if p]


def read_log(folder: str | Path, name: str) -> tuple[pd.DataFrame, int]:
    """(the last attempt's records, how many attempts were made) of ``<folder>/<name>``.

    An interrupted RL run started again into the same folder leaves earlier attempts: GRPO keeps them
    beside the log as ``<stem>.attempt-<n>.jsonl`` (the log itself is then one attempt); recordings made
    before that appended the new attempt to the same file, where a step that goes back marks it. When
    the last attempt did not evaluate step 0 (the starting model, unchanged: a fresh LoRA adds zero),
    step 0 is taken from the first attempt.
    """
    folder, stem = Path(folder), Path(name).stem
    found = [*folder.glob(f"{stem}.attempt-*.jsonl"), *folder.glob(f"{stem}.attempt-*.jsonl.gz")]  # or stored gzipped
    earlier = sorted({p.name.removesuffix(".gz"): folder / p.name.removesuffix(".gz") for p in found}.values(),
                     key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    parts = [a for p in earlier for a in _split_attempts(records(p))] + _split_attempts(records(folder / name))
    if not parts:
        raise ValueError(f"{folder / name}: no records")
    last = parts[-1]
    if last[0].get("step") != 0 and parts[0][0].get("step") == 0:
        last = parts[0][:1] + last
    return pd.DataFrame(last), len(parts)


COLLAPSE_WINDOW = 50  # steps before the final ones whose median accuracy a collapse by accuracy is measured against


def collapse(log: pd.DataFrame, tail: int = 3, window: int = COLLAPSE_WINDOW) -> tuple[int, str] | None:
    """(first step, rule) of a collapse of an RL run's training batches, or None. Two rules:

    - **format**: a final run of at least ``tail`` logged steps with no valid format (the policy stopped
      writing answers the reward can read); ``never valid`` when that run is the whole log;
    - **accuracy**: a final run of at least ``tail`` steps whose training accuracy is below half the median
      accuracy of the ``window`` steps before it (the policy still writes the format but stopped being
      right). This rule was added after seeing such a run (a thinking-arm RL seed of an unkept recording of
      issue 21's design fell from 0.97 to 0.03 in its last 7 of 200 steps with its format still valid), so
      it was written knowing one case it catches; it flags no run of the shipped panel-only recording.
    """
    def final_run(bad: np.ndarray) -> int | None:
        if len(bad) < tail or not bad[-tail:].all():
            return None
        i = len(bad) - 1
        while i > 0 and bad[i - 1]:
            i -= 1
        return i

    i = final_run((log.format_valid == 0).to_numpy())
    if i is not None:
        return int(log.step.iloc[i]), "never valid" if i == 0 else "format"
    if "accuracy" not in log:
        return None
    acc = log.accuracy.to_numpy(dtype=float)
    for i in range(len(acc) - tail, 0, -1):  # the longest final run below half the median of the steps before it
        before = acc[max(0, i - window):i]
        if not (acc[i:] < 0.5 * np.median(before)).all():
            start = i + 1
            break
    else:
        start = 1 if len(acc) > tail else None
    if start is None or len(acc) - start < tail or start < 1:
        return None
    before = acc[max(0, start - window):start]
    if np.median(before) > 0 and (acc[start:] < 0.5 * np.median(before)).all():
        return int(log.step.iloc[start]), "accuracy"
    return None


def collapse_step(log: pd.DataFrame, tail: int = 3) -> int | None:
    """The first step of a collapse by either rule of :func:`collapse`, or None."""
    c = collapse(log, tail)
    return None if c is None else c[0]
