"""Part III's models stage checks what the pool can answer (issue 23): budgets that fall with size are
refused before anything is written, and after training each model alone on the validation split must
rise with size — recorded in models/validation.json, and a stop (one line) when the scale says so."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polyvox.studies.collab import pipeline

ROOT = Path(__file__).resolve().parents[1]


def test_inverted_budgets_are_refused_in_one_line_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "polyvox.studies.collab.cli", "collab", "run", "--scale", "h200", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("polyvox collab: scale h200: training budgets do not rise with size")
    assert "mid trains 400 steps, fewer than small's 500" in lines[0] and "large trains 250 steps" in lines[0]
    assert not out.exists()  # validate first, write second
    with pytest.raises(ValueError, match="^scale h200: training budgets"):
        pipeline.check(out, pipeline.load_scale("h200"), ["models"])
    pipeline.check(out, pipeline.load_scale("h200"), ["pd", "eval"])  # no models stage to run: nothing to refuse


def test_a_complete_models_stage_is_not_refused_for_its_budgets():
    # the recorded run trained under the inverted budgets; its models stage is done, so nothing would train
    pipeline.check(ROOT / "data/runs/collab-h200", pipeline.load_scale("h200"), ["models"])


def test_the_stop_key_is_run_control_not_a_setting():
    s = pipeline.load_scale("smoke")
    flagged = json.loads(json.dumps(s))
    flagged["models"][pipeline.STOP_KEY] = True
    assert pipeline._settings(flagged, "models") == pipeline._settings(s, "models")
    assert pipeline.stop_if_unordered(flagged) and not pipeline.stop_if_unordered(s)  # absent: false
    assert f"models.{pipeline.STOP_KEY}" in pipeline.RUN_ONLY


@pytest.mark.slow  # trains the four smoke models
def test_the_models_stage_validates_records_and_stops_by_the_scale_s_key(tmp_path):
    """Real training at smoke scale (3 steps a model: nothing is learned, so the ordering fails)."""
    out = tmp_path / "run"
    s = pipeline.load_scale("smoke")
    s["models"][pipeline.STOP_KEY] = True
    with pytest.raises(ValueError) as err:
        pipeline.pipeline(out, s).run(["models"])
    line = str(err.value)
    assert "\n" not in line and line.startswith("models stage: solo accuracy does not rise with size")
    assert line.endswith(f"(validation split, {out / 'models' / 'validation.json'})")
    rec = json.loads((out / "models" / "validation.json").read_text())
    assert rec["ordering_ok"] is False and rec["ordering"] in line and rec["questions"] == 9
    assert set(rec["solo"]) == {"small", "mid", "big", "large"} and all(v["n"] == 9 for v in rec["solo"].values())
    manifest = json.loads((out / "models" / "manifest.json").read_text())
    assert manifest["status"] == "running"  # stopped: the stage is not complete, pd cannot start from it
    cards = {m: (out / "models" / m / "card.json").stat().st_mtime_ns for m in ("small", "mid", "big", "large")}

    s["models"][pipeline.STOP_KEY] = False  # the same run resumed without the stop: nothing is retrained
    pipeline.pipeline(out, s).run(["models"])
    manifest = json.loads((out / "models" / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["validation"] == {"ordering_ok": False, "ordering": rec["ordering"], "questions": 9,
                                      "file": "validation.json"}
    assert {m: (out / "models" / m / "card.json").stat().st_mtime_ns for m in cards} == cards
    assert json.loads((out / "models" / "validation.json").read_text()) == rec
@pytest.mark.parametrize("scale, stops", [("smoke", False), ("cpu", False), ("h200-ordered", True), ("h200", False)])
def test_each_shipped_scale_says_whether_an_unordered_pool_stops_the_run(scale, stops):
    assert pipeline.stop_if_unordered(pipeline.load_scale(scale)) is stops
