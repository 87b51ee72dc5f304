"""Issue 22, item 4 wired into the persona pipeline: a scale's ``judge_model`` section, the stage judge-model
(the judge model and its calibration, a folder per setting) and the judge model's verdicts beside the rubric's;
old scales unchanged. The end-to-end run (both judges' tallies, a changed judge setting re-running the judge
model and its verdicts but not the heads) is tests/test_personas.py::test_pipeline_smoke_end_to_end_and_resume."""
from __future__ import annotations

import copy
import dataclasses
import json
import typing

import pytest
import yaml

from polyvox import config, stages
from polyvox.studies.personas import judge_model as M
from polyvox.studies.personas import judging, pipeline
from polyvox.studies.personas import world as pw


def _smoke(**judge_model) -> dict:
    s = copy.deepcopy(pipeline.load_scale("smoke"))
    s["judge_model"].update(judge_model)
    return s


def _folders(out, s) -> dict[str, str]:
    return {st.folder.relative_to(out).as_posix(): st.name for st in pipeline.pipeline(out, s).stages}


def test_the_section_resolves_to_the_presets_judge_settings(tmp_path):
    s = pipeline.load_scale("smoke")
    js = judging.judge_settings(s)
    assert js == dataclasses.replace(M.SIZES["smoke"], steps=20, lr=1.0e-2, n_users=24, per_user=2, pairs_per_prompt=2,
                                     held_n_users=24, held_per_user=1, world_seed=s["world"]["seed"])
    v2 = pipeline.load_scale("h200-v2")
    assert judging.judge_settings(v2) == M.SIZES["h200"] and judging.judge_settings(v2).device == "cuda"
    # the schema's sizes are the presets, and every key of the section is a JudgeSettings field
    section = config.scales.PersonasJudgeModel
    assert set(typing.get_args(section.model_fields["size"].annotation)) == set(M.SIZES)
    fields = {f.name for f in dataclasses.fields(M.JudgeSettings)}
    assert set(section.model_fields) - {"size"} == set(judging.JUDGE_KEYS) and set(judging.JUDGE_KEYS) <= fields
    # one folder per setting: the digest of the resolved settings
    folder = judging.judge_model_folder(tmp_path, s)
    assert folder == tmp_path / "judge-model" / f"smoke-{judging.settings_digest(js)}"
    assert judging.judge_model_folder(tmp_path, _smoke(steps=4)) != folder
    assert judging.judge_model_folder(tmp_path, _smoke(steps=20)) == folder


def test_the_stages_of_a_scale_with_and_without_judge_model(tmp_path):
    s = pipeline.load_scale("smoke")
    found = _folders(tmp_path, s)
    jm = judging.judge_model_folder(tmp_path, s).relative_to(tmp_path).as_posix()
    assert found[jm] == "judge-model" and found["judge"] == found["judge-by-model"] == "judge"
    order = list(found)
    assert order.index("systems") < order.index(jm) < order.index("judge") < order.index("judge-by-model")
    pipe = pipeline.pipeline(tmp_path, s)
    verdicts = pipe.stage_at("judge-by-model")
    assert verdicts.reads == (tmp_path / "systems", tmp_path / jm, tmp_path / "judge")
    # the verdicts' settings name no judge setting (a changed one is a new judge-model folder, an input)
    assert "judge_model" not in verdicts.settings
    assert pipe.stage_at(jm).settings["judge_model"] == dataclasses.asdict(judging.judge_settings(s))
    assert ("judge-by-model", ("systems", jm, "judge")) in pipe.graph()
    for name in ("h200", "cpu"):  # old scales: no section, no new stage, the judge stage's settings as recorded
        old = pipeline.load_scale(name)
        assert "judge_model" not in old and judging.judge_settings(old) is None
        found = _folders(tmp_path, old)
        assert "judge-by-model" not in found and not any(f.startswith("judge-model") for f in found)
        assert pipeline.pipeline(tmp_path, old).stage_at("judge").settings == stages.settings_of(old, "judge")


@pytest.mark.slow  # over 3 s (the fast tier's budget: make test-fast under 60 s)
def test_judge_training_users_and_problems_are_never_the_scales_test_ones():
    for name in ("smoke", "h200-v2"):
        s = pipeline.load_scale(name)
        js = judging.judge_settings(s)
        train = pw.prompts(js.n_users, js.per_user, js.world_seed, "train")
        test = pw.prompts(s["world"]["n_users"], s["world"]["per_user"], s["world"]["seed"], "test")
        assert train and test
        assert not {p.user for p in train} & {p.user for p in test}
        assert not {p.problem.expression for p in train} & {p.problem.expression for p in test}


BAD = [  # (mutation of the smoke scale's judge_model, words the one line must hold)
    ({"size": "huge"}, "judge_model.size"),
    ({"steps": 0}, "judge_model.steps"),
    ({"layers": 3}, "judge_model"),
    ({"held_split": "train"}, "judge_model.held_split"),
    ({"n_users": 8}, "judge_model.n_users"),
    ({"device": "tpu"}, "judge_model.device"),
]


@pytest.mark.parametrize("change, words", BAD)
def test_a_bad_judge_model_field_is_one_line_naming_file_and_field(tmp_path, change, words):
    data = yaml.safe_load((pipeline.stages.CONFIG_DIR / "personas" / "smoke.yaml").read_text())
    data["judge_model"].update(change)
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError) as exc:
        pipeline.load_scale(path)
    line = str(exc.value)
    assert "\n" not in line and str(path) in line and words in line, line
    if "layers" in change:
        assert "layers" in line


def test_judging_needs_the_judge_model_first_and_a_gpu_for_the_h200_preset(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="run the judge-model stage first"):
        pipeline.check(out, pipeline.load_scale("smoke"), ["judge"])
    pipeline.check(out, pipeline.load_scale("smoke"), ["judge-model", "judge"])  # both in one run: fine
    pipeline.check(out, pipeline.load_scale("h200-v2"), ["router"])  # the GPU is needed by the judge stages only
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="judge_model.device is cuda .* no GPU is visible"):
            pipeline.check(out, pipeline.load_scale("h200-v2"), ["judge-model"])
        with pytest.raises(ValueError, match="no GPU"):
            pipeline.run(out, "h200-v2", ["judge-model"])
    assert not out.exists()  # refused before anything was written


def test_a_changed_judge_model_is_accepted_by_the_root_and_nothing_else_is(tmp_path):
    """The root records the scale; a rerun may change judge_model (a new folder of its own), nothing else."""
    s = pipeline.load_scale("smoke")
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"kind": stages.KIND_PERSONAS, "settings": stages.scale_settings(s)}))
    pipeline.check(out, _smoke(steps=5), ["router"])
    without = copy.deepcopy(s)
    del without["judge_model"]
    pipeline.check(out, without, ["router"])
    changed = copy.deepcopy(s)
    changed["judge"]["n_boot"] = 7
    with pytest.raises(ValueError, match="differs in judge.n_boot"):
        pipeline.check(out, changed, ["router"])


@pytest.mark.slow
def test_the_judge_model_stage_resumes_what_a_kill_left(tmp_path):
    """A training killed before its rename leaves a hidden partial folder (removed); a stage killed between
    training and calibration keeps the model and calibrates it; the record is strict JSON naming no machine path."""
    from polyvox.records import read_json

    s = _smoke(steps=3)
    out = tmp_path / "run"
    folder = judging.judge_model_folder(out, s)
    (folder / ".model.partial-killed").mkdir(parents=True)
    rec = judging.stage_judge_model(out, s)
    model = folder / "model"
    assert not list(folder.glob(".model.partial-*")) and M.is_complete(model)
    assert rec["calibration"]["pairs"] == 8 and rec["calibration"]["calls"] == 16
    assert rec["weights_sha256"] == M.read_manifest(model)["weights_sha256"]
    calibration = read_json(model / "calibration.json")  # the project's reader: no NaN or Infinity
    assert calibration["length_bins"][0]["lo"] is None and calibration["length_bins"][-1]["hi"] is None
    assert str(tmp_path) not in (model / "calibration.json").read_text()
    weights = (model / "model.safetensors").stat().st_mtime_ns
    (model / "calibration.json").unlink()
    assert judging.stage_judge_model(out, s) == rec
    assert (model / "model.safetensors").stat().st_mtime_ns == weights  # kept, not retrained
