"""polyvox.studies.personas.analysis on the shipped recorded run (no training, no judge calls)."""
from pathlib import Path

import pandas as pd
import pytest

from polyvox.studies.personas import analysis as A

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "personas-h200"
ARMS, SEEDS = ("forward", "reverse"), (0, 1, 2)


def test_verdict_categories():
    assert A.verdict([0.3, 0.35], [0.2, 0.3], [0.4, 0.45], 0.05)[0] == "forward"
    assert A.verdict([0.7, 0.65], [0.6, 0.55], [0.8, 0.75], 0.05)[0] == "reverse"
    assert A.verdict([0.5, 0.52], [0.4, 0.45], [0.6, 0.6], 0.05)[0] == "none"
    assert A.verdict([0.3, 0.6], [0.2, 0.5], [0.4, 0.7], 0.05)[0] == "mixed"
    assert A.verdict([None], [None], [None], 0.05)[0] == "empty"


def test_convergence_rule_and_comparable_types():
    h = pd.DataFrame([
        {"arm": "forward", "seed": 0, "head": p, "validation": 1.2, "loss, first steps": 1.0, "loss, last steps": 0.01}
        for p in ("warm", "impersonal", "concise", "thorough")] + [
        {"arm": "reverse", "seed": 0, "head": "warm", "validation": 0.7, "loss, first steps": 1.0, "loss, last steps": 0.9},
        {"arm": "reverse", "seed": 0, "head": "impersonal", "validation": 1.1, "loss, first steps": 1.0, "loss, last steps": 0.1},
        {"arm": "reverse", "seed": 0, "head": "concise", "validation": 1.2, "loss, first steps": 1.0, "loss, last steps": 0.1},
        {"arm": "reverse", "seed": 0, "head": "thorough", "validation": 1.2, "loss, first steps": 1.0, "loss, last steps": 0.1}])
    c = A.convergence(h, val_tol=0.15, loss_drop=0.5)
    assert not c.set_index(["arm", "head"]).loc[("reverse", "warm"), "trained"]
    assert c["trained"].sum() == 7
    assert A.comparable_types(c, 0) == ["impersonal", "concise", "thorough", "impersonal+concise", "impersonal+thorough"]
    assert A.comparable_types(c, 0, strict=True) == ["impersonal", "concise", "thorough"]


@pytest.mark.skipif(not (RUN / "gen").exists(), reason="recorded run not shipped")
def test_truncation_matches_the_systems_files():
    tr = A.truncation(RUN, ARMS, SEEDS)  # raises if any answer is not its unit's text
    assert len(tr) == len(ARMS) * len(SEEDS) * 96 * len(A.SYSTEMS)
    assert not tr[tr["system"] == "base"]["truncated"].any()
    units = A.unit_cap_hits(RUN).set_index("unit")["cap hits"]
    head = tr[(tr["system"] == "head_thorough") & (tr["arm"] == "forward") & (tr["seed"] == 0)]
    assert units["forward-s0-thorough"] == head["truncated"].sum() > 0


@pytest.mark.skipif(not (RUN / "heads").exists(), reason="recorded run not shipped")
def test_head_training_reads_every_head():
    h = A.head_training(RUN, ARMS, SEEDS)
    assert len(h) == 24 and h["validation"].between(0, 2).all()
