"""One staged pipeline (issue 18, item 2): :class:`polyvox.stages.Pipeline` drives the world, personas and
collab studies.

- a stage's settings hold the digests of the manifests of the stages it reads: an upstream stage
  retrained (its manifest altered or written anew) makes what read it stale, and it runs again on a
  cleared folder; an unchanged upstream leaves it skipped; a record without digests (the shipped runs)
  is legacy: skipped when its own settings match;
- one writer per manifest: a stage folder hosting another run (GRPO's, a judge's) keeps that run's
  manifest.json as the run wrote it, the stage's record going to stage.json (the world pipeline
  rewrote GRPO's manifest);
- one stage-list syntax (``--stages a,b``) in every command;
- no behaviour keyed on a scale's name: an empty variance band falls back to the whole pool when the
  scale says so (``bands.if_empty``), whatever its name;
- every shipped recorded run is recognised, every stage of it skipped.
"""
from __future__ import annotations

import inspect
import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from polyvox import records, stages
from polyvox.records import RunLock, read_manifest, write_manifest

SCALE = {"name": "toy", "a": {"x": 1}, "b": {"y": 2}}


def toy(out: Path, calls: list, scale: dict = SCALE, hosted: bool = False) -> stages.Pipeline:
    """Two stages: ``a``, and ``b``, which reads ``a`` (a hosted run when ``hosted``: it writes its own manifest)."""
    def work_a():
        calls.append("a")
        (out / "a" / "a.txt").write_text("a\n")

    def work_b():
        calls.append("b")
        if hosted:
            with RunLock(out / "b"):
                write_manifest(out / "b", config={"steps": 1}, status="complete")
        (out / "b" / "b.txt").write_text((out / "a" / "a.txt").read_text())
        return {"made": 1}

    return stages.Pipeline("toy pipeline", out, scale, [
        stages.Stage("a", out / "a", stages.settings_of(scale, "a"), work_a),
        stages.Stage("b", out / "b", stages.settings_of(scale, "b"), work_b, (out / "a",),
                     hosts=records.KIND_RL if hosted else None)], ("a", "b"))


def test_an_unchanged_upstream_leaves_the_stages_skipped(tmp_path):
    calls = []
    toy(tmp_path, calls).run()
    assert calls == ["a", "b"]
    record = read_manifest(tmp_path / "b")
    assert record["settings"]["inputs"] == {"a": stages.manifest_digest(tmp_path / "a")}
    assert record["status"] == "complete" and record["made"] == 1 and record["stage"] == "b"
    toy(tmp_path, calls).run()
    assert calls == ["a", "b"]  # nothing redone
    assert read_manifest(tmp_path / "b") == record


@pytest.mark.parametrize("how", ["altered", "retrained"])
def test_a_retrained_upstream_makes_the_stages_reading_it_run_again(tmp_path, how):
    calls = []
    toy(tmp_path, calls).run()
    (tmp_path / "b" / "left-over.txt").write_text("from the stale run\n")
    if how == "altered":  # the upstream manifest written anew (another finish time, other results)
        write_manifest(tmp_path / "a", **{**read_manifest(tmp_path / "a"), "finished": "later"})
    else:  # its record gone: the upstream stage trains again and writes a new manifest
        (tmp_path / "a" / "manifest.json").unlink()
    pipe = toy(tmp_path, calls)
    assert pipe.state(pipe.stages[1]) == "stale"
    pipe.run()
    assert calls == ["a", "b"] + (["a"] if how == "retrained" else []) + ["b"]
    assert not (tmp_path / "b" / "left-over.txt").exists()  # a stale stage runs on a cleared folder
    assert read_manifest(tmp_path / "b")["settings"]["inputs"] == {"a": stages.manifest_digest(tmp_path / "a")}
    toy(tmp_path, calls).run(["b"])
    assert len(calls) == (4 if how == "retrained" else 3)  # now current: skipped


def test_a_record_without_digests_is_legacy_and_skipped_when_its_settings_match(tmp_path):
    calls = []
    toy(tmp_path, calls).run()
    m = read_manifest(tmp_path / "b")
    m["settings"].pop("inputs")  # as the shipped runs' records are
    write_manifest(tmp_path / "b", **m)
    write_manifest(tmp_path / "a", **{**read_manifest(tmp_path / "a"), "finished": "later"})
    toy(tmp_path, calls).run()
    assert calls == ["a", "b"]
    other = toy(tmp_path, calls, {**SCALE, "b": {"y": 3}})
    other.ignore = ("b",)  # past the root's check: the stage's own refuses
    with pytest.raises(ValueError, match=r"b: holds a stage run with other settings \(b.y\)"):
        other.run(["b"])


def test_a_hosted_run_keeps_its_manifest_and_the_stage_records_beside_it(tmp_path):
    """The run a stage folder hosts writes its manifest.json alone; the stage's record is stage.json."""
    calls = []
    toy(tmp_path, calls, hosted=True).run()
    hosted = (tmp_path / "b" / "manifest.json").read_text()
    assert "settings" not in json.loads(hosted) and json.loads(hosted)["config"] == {"steps": 1}
    record = json.loads((tmp_path / "b" / stages.STAGE_RECORD).read_text())
    assert record["status"] == "complete"
    assert record["settings"]["inputs"] == {"a": stages.manifest_digest(tmp_path / "a")}
    toy(tmp_path, calls, hosted=True).run()
    assert calls == ["a", "b"] and (tmp_path / "b" / "manifest.json").read_text() == hosted
    (tmp_path / "a" / "manifest.json").unlink()  # retrain a: the hosted run is stale, cleared, redone
    toy(tmp_path, calls, hosted=True).run()
    assert calls == ["a", "b", "a", "b"]


class Writers:
    """Who writes each manifest.json and stage.json: the first caller outside polyvox.records."""

    def __init__(self, monkeypatch):
        self.by_path: dict[str, set] = defaultdict(set)
        real = os.replace

        def replace(src, dst, *a, **kw):
            if Path(dst).name in ("manifest.json", stages.STAGE_RECORD):
                caller = next(f for f in inspect.stack()[1:] if f.filename != records.__file__)
                self.by_path[str(dst)].add(f"{Path(caller.filename).name}:{caller.function}")
            return real(src, dst, *a, **kw)

        monkeypatch.setattr(os, "replace", replace)


@pytest.mark.slow  # moved out of the fast tier (over 1.5 s on 2 cores)
def test_every_world_manifest_has_one_writer(tmp_path, monkeypatch):
    """GRPO's manifest in an RL stage folder was rewritten by the pipeline (two writers); now each
    manifest is written by one function, and the RL stages' records are stage.json."""
    from polyvox.studies.world import pipeline as W

    def fake_grpo(cfg, progress=True):  # as grpo.train writes its folder: under its lock, its own manifest
        with RunLock(cfg.out):
            write_manifest(cfg.out, config={"arm": cfg.arm, "stages": [s.name for s in cfg.stages]}, status="running")
            write_manifest(cfg.out, config={"arm": cfg.arm, "stages": [s.name for s in cfg.stages]}, status="complete")

    def fake_samples(out, s, seed=0, root="bands"):
        folder = (W._seed_dir(out, seed) / "eval") if root is None else out / root
        write_manifest(folder / "x" / "samples", kind="sample", settings={"task": "world", "format": "panel"})
        for arm in ("panel", "think"):
            (out / "bands" / arm).mkdir(parents=True, exist_ok=True)
            (out / "bands" / arm / "per_problem.jsonl").write_text("")

    monkeypatch.setattr(W.grpo, "train", fake_grpo)
    monkeypatch.setattr(W, "build_models", lambda out, s, seed=0: (out / "models" / "tiny-base").mkdir(parents=True))
    monkeypatch.setattr(W, "evaluate", lambda out, s, seed=0: fake_samples(out, s, seed, None))
    monkeypatch.setattr(W, "bands", fake_samples)
    monkeypatch.setattr(W, "run_pilot", lambda out, s, seed=0: fake_samples(out, s, seed, "pilot"))
    writers = Writers(monkeypatch)
    W.run(tmp_path / "w", "smoke")
    assert writers.by_path, "no manifest written"
    several = {p: w for p, w in writers.by_path.items() if len(w) > 1}
    assert not several, several
    rl = tmp_path / "w" / "seed-0" / "rl-panel"
    assert read_manifest(rl)["status"] == "complete" and "settings" not in read_manifest(rl)
    assert writers.by_path[str(rl / "manifest.json")] == {"test_stages.py:fake_grpo"}
    assert writers.by_path[str(rl / stages.STAGE_RECORD)] == {"stages.py:write"}
    record = json.loads((rl / stages.STAGE_RECORD).read_text())
    assert record["status"] == "complete" and set(record["settings"]["inputs"]) == {"models", "pilot"}
    climb = json.loads((tmp_path / "w" / "seed-1" / "hillclimb-panel" / stages.STAGE_RECORD).read_text())
    assert set(climb["settings"]["inputs"]) == {"models", "pilot", "bands", "bands-redraw", "seed-0/rl-panel"}
    before = {p: Path(p).read_bytes() for p in writers.by_path if "seed-" in p}
    W.run(tmp_path / "w", "smoke")  # a rerun skips every stage: no stage record or run manifest rewritten
    assert {p: Path(p).read_bytes() for p in before} == before


def test_the_hill_climb_on_an_empty_band_follows_the_scale_not_its_name(tmp_path, monkeypatch):
    from polyvox.studies.world import pipeline as W

    trained = []
    monkeypatch.setattr(W.grpo, "train", lambda cfg, progress=True: trained.append(len(cfg.stages[0].problems)))
    for arm in ("panel", "think"):
        (tmp_path / "bands" / arm).mkdir(parents=True)
        (tmp_path / "bands" / arm / "per_problem.jsonl").write_text(json.dumps(
            {"uid": "x", "source": "level-3", "n_samples": 8, "n_correct": 0, "band": "always_wrong"}) + "\n")
    smoke = W.load_scale("smoke")
    assert smoke["bands"]["if_empty"] == "whole-pool"
    W.hillclimb(tmp_path, {**smoke, "name": "any-name"}, "think", 0)
    assert trained == [4 * smoke["bands"]["pool_per_level"]]
    assert (tmp_path / "seed-0" / "hillclimb-think" / "SMOKE_BAND_WAS_EMPTY").is_file()
    refuse = {**smoke, "bands": {k: v for k, v in smoke["bands"].items() if k != "if_empty"}}
    with pytest.raises(RuntimeError, match="empty variance band"):
        W.hillclimb(tmp_path, refuse, "panel", 0)  # named smoke, but the scale does not say whole-pool


def test_seed_offsets_are_named():
    from polyvox.studies.collab import pipeline as C
    from polyvox.studies.world import pipeline as W

    assert len(set(W.SEED_OFFSETS.values())) == len(W.SEED_OFFSETS)
    s = W.load_scale("smoke")
    assert W.problem_set(s, "pool", W.POOL_LEVELS, 1, "train")["seed"] == s["problems_seed"] + W.SEED_OFFSETS["pool"]
    offsets = (C.TEST_SEED_OFFSET, C.QA_SEED_OFFSET, C.RL_STATES_SEED_OFFSET, C.HOMO_SEED_OFFSET)
    assert len(set(offsets)) == len(offsets) and C.HOMO_SEED_OFFSET >= len(C.MODELS)


@pytest.mark.parametrize("study, good, bad", [("world", "models,eval", "nope"),
                                              ("personas", "router,judge", "nope"),
                                              ("collab", "pd,eval", "nope")])
def test_every_command_takes_one_stage_list_syntax(study, good, bad, capsys):
    from polyvox.cli import build_parser

    parser = build_parser()
    argv = [study, "run", "--out", "o", "--stages"]
    assert parser.parse_args(argv + [good]).stages == tuple(good.split(","))
    for refused, says in ((good.replace(",", " ").split(), "unrecognized arguments"),
                          ([f"{good.split(',')[0]},{bad}"], f"unknown stage(s) {bad}")):
        with pytest.raises(SystemExit):
            parser.parse_args(argv + refused)
        assert says in capsys.readouterr().err


# the shipped world run (of the earlier design, which the world pipeline no longer writes and refuses, or of the
# matched design, every stage done at its own scale): tests/test_folders.py::
# test_the_shipped_world_run_is_read_and_takes_stages_of_its_own_scale_alone
@pytest.mark.parametrize("study, folder, seeds", [("personas", "personas-h200", None),
                                                  ("collab", "collab-h200", None)])
def test_every_stage_of_a_shipped_run_is_skipped(root, study, folder, seeds):
    """A rerun over a shipped folder finds every stage complete (legacy records: no digests) and runs none."""
    from importlib import import_module

    P = import_module(f"polyvox.studies.{study}.pipeline")
    out = root / "data/runs" / folder
    pipe = P.pipeline(out, P.load_scale("h200"), **({"seeds": seeds} if seeds else {}))
    pipe.check()
    assert {st.folder.relative_to(out).as_posix(): pipe.state(st) for st in pipe.stages} == \
        {st.folder.relative_to(out).as_posix(): "done" for st in pipe.stages}


def test_no_pipeline_shadows_the_stages_module():
    from polyvox.studies.collab import pipeline as C
    from polyvox.studies.personas import pipeline as P
    from polyvox.studies.world import pipeline as W

    for mod in (C, P, W):
        assert "stages" not in inspect.signature(mod.run).parameters and mod.stages is stages
