"""Issue 22's wiring of the persona heads: the remedy fields reach the distillation and the stage settings,
the sweep's grid and pick rule, the JSD arms as mirror images, the generation cap's measurement and its
one-line refusal (the cap stage runs the shipped tiny-chat for real). The end-to-end run is
tests/test_personas.py::test_pipeline_smoke_end_to_end_and_resume."""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from polyvox import config
from polyvox.studies.personas import pipeline, steps, sweep
from polyvox.studies.personas import world as pw


def _smoke(**distill) -> dict:
    s = copy.deepcopy(pipeline.load_scale("smoke"))
    s["distill"].update(distill)
    return s


CAP = {"prompts": 8, "ceiling": 160}  # the smoke scale measures no cap (configs/personas/smoke.yaml says why)


def test_grid_is_the_product_of_the_swept_axes_in_order():
    s = _smoke(sweep={"lr": [1.0e-3, 2.0e-3], "temperature": [1.0, 2.0, 3.0]}, jsd_beta=0.5)
    g = steps.grid(s)
    assert len(g) == 6 and [p["lr"] for p in g] == [1.0e-3] * 3 + [2.0e-3] * 3
    assert [p["temperature"] for p in g[:3]] == [1.0, 2.0, 3.0]
    assert all(p["steps"] == s["distill"]["steps"] and p["jsd_beta"] == 0.5 and p["student_sample_fraction"] == 0.0
               for p in g)
    h200 = pipeline.load_scale("h200")  # the recorded form: one point, the recorded recipe, the remedy's defaults
    assert steps.grid(h200) == [{"lr": 2.0e-3, "steps": 60, "temperature": 1.0, "jsd_beta": None,
                                 "student_sample_fraction": 0.0}]


def test_jsd_arms_are_mirror_images():
    import torch

    from polyvox.train.distill_losses import atoms, divergence

    assert steps.loss_of("forward", None) == ("forward", None) and steps.loss_of("reverse", None) == ("reverse", None)
    assert steps.loss_of("reverse", 0.9) == ("jsd", 0.9) and steps.loss_of("forward", 0.9) == ("jsd", 0.1)
    torch.manual_seed(0)
    lq, lp, w, _, _ = atoms(torch.randn(4, 50), torch.randn(4, 50), 50)
    for beta in (0.1, 0.3, 0.9):
        # the forward arm's loss is the reverse arm's with teacher and student exchanged
        assert torch.allclose(divergence(lq, lp, w, "jsd", steps.loss_of("reverse", beta)[1]),
                              divergence(lp, lq, w, "jsd", steps.loss_of("forward", beta)[1]), atol=1e-6)
    assert not torch.allclose(divergence(lq, lp, w, "jsd", 0.9), divergence(lq, lp, w, "jsd", 0.1))


def test_pick_takes_most_trained_then_style_then_validation_then_the_earlier_point():
    r = lambda trained, style, val: {"trained": trained, "style_rate": style, "validation_score": val}  # noqa: E731
    assert sweep.pick([r(3, 1.0, 2.0), r(4, 0.5, 0.1)]) == 1
    assert sweep.pick([r(4, 0.9, 2.0), r(4, 0.95, 0.1)]) == 1
    assert sweep.pick([r(4, 0.9, 1.0), r(4, 0.9, 1.5)]) == 1
    assert sweep.pick([r(2, 0.9, 1.0), r(2, 0.9, 1.0)]) == 0
    with pytest.raises(ValueError, match="no sweep results"):
        sweep.pick([])


def test_nearest_rank_and_cap_summary():
    assert sweep.nearest_rank(range(1, 101)) == 99 and sweep.nearest_rank([7]) == 7
    assert sweep.nearest_rank(range(1, 11)) == 10  # 10 answers: the 99th percentile is the longest
    lengths = {"warm": [(30, True)] * 99 + [(40, True)], "thorough": [(80, True)] * 98 + [(120, False)] * 2}
    c = sweep.cap_summary(lengths, cap=100, ceiling=120)
    assert c["longest"] == "thorough" and c["p99"] == 120 and c["types"]["warm"]["p99"] == 30
    assert c["types"]["thorough"]["cap_hit_rate"] == 0.02 and c["cap_hit_rate"] == 0.01
    assert c["ceiling_hit_rate"] == 0.01


def _cap_file(out, summary):
    (out / "cap").mkdir(parents=True)
    (out / "cap" / "cap.json").write_text(json.dumps(summary))


def test_cap_refusal_names_the_field_and_the_percentile(tmp_path):
    s = _smoke(cap=CAP)
    s["generate"]["max_tokens"] = 112
    _cap_file(tmp_path, sweep.cap_summary({"warm+thorough": [(100, True)] * 100}, 112, 160))
    assert sweep.cap_refusal(tmp_path, s) is None
    s["generate"]["max_tokens"] = 64
    line = sweep.cap_refusal(tmp_path, s)
    assert "generate.max_tokens 64 is below the 99th percentile (100 tokens)" in line and "\n" not in line
    cut = tmp_path / "cut"
    _cap_file(cut, sweep.cap_summary({"thorough": [(160, False)] * 2 + [(50, True)] * 98}, 200, 160))
    assert "raise distill.cap.ceiling" in sweep.cap_refusal(cut, s)
    assert sweep.cap_refusal(cut, _smoke()) is None  # a scale without distill.cap measures nothing
    legacy = pipeline.load_scale("h200")  # no distill.cap: not measured, nothing refused
    assert sweep.cap_refusal(tmp_path, legacy) is None


def test_a_tempered_loss_needs_the_whole_vocabulary():
    steps.check_recipe(_smoke())  # top_k 699 = tiny-chat's vocabulary
    steps.check_recipe(_smoke(top_k=16, sweep={"lr": [1.0e-3]}))  # τ = 1 everywhere: any k
    with pytest.raises(ValueError, match=r"distill.top_k 16 with a loss temperature 2 > 1.*\(699\)"):
        steps.check_recipe(_smoke(top_k=16))


def _settings(s, folder):
    return next(st.settings for st in pipeline._stages(pipeline.Path("/x"), s) if st.folder.as_posix() == folder)


def test_stage_settings_carry_the_parameterisation_and_the_remedy_but_not_for_the_recorded_form():
    from polyvox.train.distill_losses import PARAMETERISATION

    h200 = pipeline.load_scale("h200")
    assert set(_settings(h200, "/x/heads/forward-s0")) == {"scale", "model", "world", "distill", "arm", "seed"}
    assert not [st for st in pipeline._stages(pipeline.Path("/x"), h200) if st.name in ("cap", "sweep")]
    s = _smoke(cap=CAP)
    got = _settings(s, "/x/heads/reverse-s0")
    assert got["parameterisation"] == PARAMETERISATION
    assert got["remedy"] == {"temperature": 1.0, "jsd_beta": None, "student_sample_fraction": 0.0}
    changed = _settings(_smoke(student_sample_fraction=0.5), "/x/heads/reverse-s0")
    assert changed["remedy"]["student_sample_fraction"] == 0.5 and changed != got
    names = [(st.name, st.folder.as_posix()) for st in pipeline._stages(pipeline.Path("/x"), s)]
    assert ("sweep", "/x/sweep/forward-1") in names and ("sweep", "/x/sweep/chosen") in names
    heads = next(st for st in pipeline._stages(pipeline.Path("/x"), s) if st.name == "heads")
    assert [f.as_posix() for f in heads.reads] == ["/x/cap", "/x/sweep/chosen"]


@pytest.mark.parametrize("change, words", [
    ({"jsd_beta": 1.5}, "distill.jsd_beta: expected a value ≤ 1"),
    ({"sweep": {"jsd_beta": [0.5, 0.5]}}, "distill.sweep.jsd_beta: expected distinct values"),
    ({"sweep": {"temperature": []}}, "distill.sweep.temperature: expected a non-empty list"),
    ({"sweep": {"steps": [10], "warmup": [1]}}, "distill.sweep: unknown key warmup"),
    ({"cap": {"prompts": 4}}, "distill.cap: missing ceiling"),
])
def test_bad_remedy_fields_are_refused_in_one_line(tmp_path, change, words):
    raw = yaml.safe_load((pipeline.stages.CONFIG_DIR / "personas" / "smoke.yaml").read_text())
    raw["distill"].update(change)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(config.ConfigError) as e:
        pipeline.load_scale(path)
    assert str(path) in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow  # loads and samples the real tiny-chat
def test_the_cap_stage_measures_tiny_chat_and_a_short_cap_is_refused_before_the_sweep(tmp_path):
    """The real teacher (tiny-chat with each type's card): a cap under its longest persona's 99th
    percentile is refused in one line, and the refused run writes no sweep folder."""
    raw = yaml.safe_load((pipeline.stages.CONFIG_DIR / "personas" / "smoke.yaml").read_text())
    raw["distill"]["cap"] = {"prompts": 4, "ceiling": 160}
    raw["generate"]["max_tokens"] = 24
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    pipeline.run(out, path, ("cap",))
    cap = json.loads((out / "cap" / "cap.json").read_text())
    assert not cap["fits"] and cap["longest"] in pw.TYPES and cap["p99"] > 24 and cap["cap_hit_rate"] > 0
    rows = (out / "cap" / "lengths.jsonl").read_text().splitlines()
    assert len(rows) == 4 * len(pw.TYPES)
    with pytest.raises(ValueError, match=r"generate.max_tokens 24 is below the 99th percentile") as e:
        pipeline.run(out, path, ("sweep", "heads"))
    assert "\n" not in str(e.value) and not (out / "sweep").exists() and not (out / "heads").exists()
    raw["generate"]["max_tokens"] = cap["p99"]  # at the percentile: it fits, and the sweep may run
    path.write_text(yaml.safe_dump(raw))
    pipeline.run(tmp_path / "fits", path, ("cap",))
    fits = json.loads((tmp_path / "fits" / "cap" / "cap.json").read_text())
    assert fits["fits"] and fits["p99"] == cap["p99"] and fits["types"][fits["longest"]]["cap_hit_rate"] <= 0.01
    pipeline.check(tmp_path / "fits", pipeline.load_scale(path), ("sweep", "heads"))


def test_heads_without_a_measured_cap_or_a_pick_are_refused_before_anything_is_written(tmp_path):
    s = _smoke(cap=CAP)
    with pytest.raises(ValueError, match=r"cap\.json: missing: the scale 'smoke' measures its generation cap first"):
        pipeline.check(tmp_path / "a", s, ("heads",))
    del s["distill"]["cap"]
    with pytest.raises(ValueError, match=r"chosen\.json: missing: run the sweep stage before the heads"):
        pipeline.check(tmp_path / "b", s, ("heads", "generate"))
    pipeline.check(tmp_path / "c", s, ("sweep", "heads"))  # the sweep runs first in the same run
    assert not any(tmp_path.iterdir())


def test_the_sweep_seed_is_never_a_test_seed():
    s = _smoke()
    assert steps.sweep_seed(s) == max(s["arms"]["seeds"]) + 1
    s["distill"]["sweep"] = {**s["distill"]["sweep"], "seed": s["arms"]["seeds"][0]}
    with pytest.raises(ValueError, match=r"distill.sweep.seed 0 is one of arms.seeds"):
        steps.check_recipe(s)
    assert steps.sweep_seed(pipeline.load_scale("h200-v2")) not in pipeline.load_scale("h200-v2")["arms"]["seeds"]
