"""Training logs as records: a metric that is not a finite number is logged as null.

polyvox's JSONL is strict JSON (``records.append_jsonl`` refuses NaN and ±Infinity, which a
reader of the file could not parse); a trainer's metrics can be NaN (the standard deviation of
one reward, a loss that diverged), and the run should log that step, not stop on it. A null says
"no number here"; the key stays, so a reader sees which metric had none.
"""
from __future__ import annotations

import math


def finite_or_null(value):
    """``value`` with every float that is NaN or ±inf (at any depth) replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value
