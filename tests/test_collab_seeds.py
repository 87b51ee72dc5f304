"""Part III's pipeline with seeds (issue 23, item 4: "at least 3 seeds of the whole pipeline after pool
training (PD, RL, evaluation), runs concurrent on the GPU"): a scale listing ``seeds`` trains the models
once and runs pd, rl and eval once per seed in ``seed-<k>/``, each seed reading the models and its own
earlier stages (so the launcher runs the seeds at once); a scale without seeds is the recorded layout,
unchanged. Seed k adds k to the pd, rl and eval stages' random streams; the problem sets stay."""
import json
import time
from pathlib import Path

import pytest
import yaml

from polyvox.records import read_jsonl
from polyvox.studies.collab import analysis, pipeline, verdicts

# the seeded smoke run (conftest.collab_seeded_run) is built once: both modules in one xdist group
pytestmark = pytest.mark.xdist_group("collab-seeded")

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs/collab/smoke.yaml"


def seeded_scale(folder: Path, seeds=(0, 1), name: str = "smoke-seeds") -> Path:
    """smoke.yaml with ``seeds`` added, as ``folder/<name>.yaml`` (the scale takes the file's name), its test set
    cut to 1 world question per level and 2 QA (5 questions: the eval stage is most of a seed's time)."""
    path = folder / f"{name}.yaml"
    scale = yaml.safe_load(SMOKE.read_text())
    scale["eval"].update(world_per_level=1, qa_n=2)
    path.write_text(yaml.safe_dump({**scale, "seeds": list(seeds)}, sort_keys=False))
    return path


# ---------------------------------------------------------------- 1. the stages of a seeded scale, read only

def test_a_seeded_scale_trains_the_models_once_and_each_seed_reads_its_own_stages(tmp_path):
    s = pipeline.load_scale(seeded_scale(tmp_path))
    p = pipeline.pipeline(tmp_path / "run", s)
    assert p.graph() == [("models", ()),
                         ("seed-0/pd", ("models",)), ("seed-0/rl", ("models", "seed-0/pd")),
                         ("seed-0/eval", ("models", "seed-0/pd", "seed-0/rl")),
                         ("seed-1/pd", ("models",)), ("seed-1/rl", ("models", "seed-1/pd")),
                         ("seed-1/eval", ("models", "seed-1/pd", "seed-1/rl"))]
    assert p.graph(["eval"]) == [("seed-0/eval", ()), ("seed-1/eval", ())]  # --stages eval: every seed's
    plain = pipeline.pipeline(tmp_path / "plain", {k: v for k, v in s.items() if k != "seeds"})
    unseeded = {st.name: st.settings for st in plain.stages}
    for st in p.stages:
        seed = int(st.folder.parent.name.removeprefix("seed-")) if st.name != "models" else None
        # a seed's settings are the unseeded stage's plus the seed; the models' carry none (one set for every seed)
        assert st.settings == ({**unseeded[st.name], "seed": seed} if seed is not None else unseeded["models"])
    # --models DIR: the seeds read their own stages only
    assert pipeline.pipeline(tmp_path / "run", s, tmp_path).graph(["pd", "rl"])[:2] == [
        ("seed-0/pd", ()), ("seed-0/rl", ("seed-0/pd",))]


def test_an_unseeded_scale_keeps_the_recorded_layout():
    p = pipeline.pipeline(ROOT / "data/runs/collab-h200", pipeline.load_scale("h200"))
    assert p.graph() == [("models", ()), ("pd", ("models",)), ("rl", ("models", "pd")),
                         ("eval", ("models", "pd", "rl"))]
    assert all("seed" not in st.settings for st in p.stages)
    assert all(p.state(st) == "done" for st in p.stages)  # the shipped recording is still complete, nothing reruns
    assert pipeline.seeds_of(pipeline.load_scale("h200")) == [None]
    assert [pipeline.stage_seed(pipeline.load_scale("h200"), k) for k in (None, 0, 2)] == [0, 0, 2]


def test_h200_ordered_runs_three_seeds():
    assert pipeline.load_scale("h200-ordered")["seeds"] == [0, 1, 2]


@pytest.mark.parametrize("seeds, message", [("[0, 0]", "expected distinct values"), ("[]", "seeds"),
                                            ("[-1]", "seeds")])
def test_bad_seeds_are_refused_in_one_line(tmp_path, seeds, message):
    path = tmp_path / "bad.yaml"
    path.write_text(SMOKE.read_text() + f"seeds: {seeds}\n")
    with pytest.raises(ValueError, match=message) as err:
        pipeline.load_scale(path)
    assert str(path) in str(err.value)


def _fake_stage(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"kind": "stage", "status": "complete",
                                                      "settings": {"scale": "smoke", "data": {}}}))


@pytest.mark.parametrize("seeded", [True, False])
def test_a_folder_holds_one_layout(tmp_path, seeded):
    out = tmp_path / "run"
    other = "pd" if seeded else "seed-0/pd"  # the other layout's stage
    _fake_stage(out / other)
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    s = pipeline.load_scale(seeded_scale(tmp_path) if seeded else "smoke")
    with pytest.raises(ValueError, match="a folder holds one layout; use a new --out") as err:
        pipeline.check(out, s)
    assert "\n" not in str(err.value)
    assert ("an unseeded run (pd/)" if seeded else "a seeded run (seed-0/)") in str(err.value)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before  # refused: nothing written


# ---------------------------------------------------------------- 2. seed_evals: a run's seeds for the chapter

def test_seed_evals_lists_each_layout(tmp_path):
    assert analysis.seed_evals(ROOT / "data/runs/collab-h200") == {None: ROOT / "data/runs/collab-h200/eval"}
    seeded = tmp_path / "seeded"
    for k in (10, 2, 0):  # numeric order; a seed without its eval yet is listed
        (seeded / f"seed-{k}" / "pd").mkdir(parents=True)
    (seeded / "seed-x").mkdir()  # not a seed folder
    (seeded / "models").mkdir()
    assert analysis.seed_evals(seeded) == {k: seeded / f"seed-{k}" / "eval" for k in (0, 2, 10)}
    (seeded / "eval").mkdir()
    with pytest.raises(ValueError, match="holds both an unseeded run"):
        analysis.seed_evals(seeded)
    with pytest.raises(ValueError, match="not a collab pipeline run"):
        analysis.seed_evals(tmp_path / "seeded" / "seed-x")
    with pytest.raises(ValueError, match="no such run folder"):
        analysis.seed_evals(tmp_path / "absent")


# ---------------------------------------------------------------- 3. a real run of two seeds (slow tier)

@pytest.fixture
def seeded_run(collab_seeded_run):
    """smoke with seeds [0, 1], run once per test process (conftest.collab_seeded_run, shared with
    test_collab_seed_verdicts): (out, scale path, seconds per stage, wall seconds)."""
    return collab_seeded_run


def _records(eval_dir: Path, system: str) -> list[dict]:
    return sorted(read_jsonl(eval_dir / system / "trajectories.jsonl"), key=lambda r: r["id"])


def _texts(records: list[dict]) -> list:
    """What each question's turns wrote (their timings aside)."""
    return [[t["text"] for t in r["turns"]] for r in records]


@pytest.mark.slow
def test_two_seeds_run_every_stage_on_one_test_set_with_their_own_randomness(seeded_run):
    out, path, times, _ = seeded_run
    assert list(times) == ["models", "seed-0/pd", "seed-0/rl", "seed-0/eval", "seed-1/pd", "seed-1/rl", "seed-1/eval"]
    for folder in times:
        m = json.loads((out / folder / "manifest.json").read_text())
        assert m["status"] == "complete" and m["settings"].get("seed") == (None if folder == "models" else
                                                                           int(folder[5]))
    assert not any((out / st).exists() for st in ("pd", "rl", "eval"))
    evals = analysis.seed_evals(out)
    assert list(evals) == [0, 1]
    s = pipeline.load_scale(path)
    test_ids = sorted(p.id for p in pipeline.problems(s, "test"))
    for system in ("solo-small", "solo-large", "sample-small", "sample-mid", "cl", "cl-pd", "cl-base", "homo"):
        a, b = _records(evals[0], system), _records(evals[1], system)
        assert [r["id"] for r in a] == [r["id"] for r in b] == test_ids  # one test set for every seed
    # the seed varies what the seed's stages draw: the cascade's samples, PD's and GRPO's training
    assert _texts(_records(evals[0], "sample-small")) != _texts(_records(evals[1], "sample-small"))
    cards = [json.loads((out / f"seed-{k}/pd/small/card.json").read_text()) for k in (0, 1)]
    assert cards[0]["loss_log"] != cards[1]["loss_log"]
    solo = [json.loads((evals[k] / "solo-small/manifest.json").read_text())["settings"] for k in (0, 1)]
    assert (solo[0]["seed"], solo[1]["seed"]) == (0, 1)


@pytest.mark.slow
def test_a_rerun_skips_every_stage_and_an_added_seed_leaves_the_recorded_ones_complete(seeded_run, tmp_path):
    out, path, times, _ = seeded_run
    ids = {f: json.loads((out / f / "manifest.json").read_text())["run_id"] for f in times}
    t0 = time.time()
    again = pipeline.run(out, path)
    assert again == times and time.time() - t0 < 10
    assert {f: json.loads((out / f / "manifest.json").read_text())["run_id"] for f in times} == ids
    # seeds [0, 1, 2] on the same folder: the root accepts it, the models and two seeds are done, seed 2 is to run
    more = pipeline.load_scale(seeded_scale(tmp_path, (0, 1, 2)))
    more["name"] = pipeline.load_scale(path)["name"]
    p = pipeline.pipeline(out, more)
    p.check()
    assert {st.folder.relative_to(out).as_posix(): p.state(st) for st in p.stages} == {
        **{f: "done" for f in times}, "seed-2/pd": "todo", "seed-2/rl": "todo", "seed-2/eval": "todo"}
    # the chapter reads an unseeded run: a seeded one is one line, not a traceback
    with pytest.raises(ValueError, match=r"a seeded run \(seeds 0, 1: seed-<k>/eval\)") as err:
        verdicts.recorded(out, out / "models")
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_the_launcher_runs_the_seeds_concurrently_and_reproduces_them(seeded_run, tmp_path):
    out, path, _, _ = seeded_run
    # the serial run's models (--models): the two seeds' PD and RL stages are the jobs, two workers run them at once
    # (the evaluation, most of a seed's time, draws by the same seed rule: the serial test covers it)
    times = pipeline.run(tmp_path / "run", path, ("pd", "rl"), models_dir=out / "models", parallel=2)
    assert sorted(times) == ["seed-0/pd", "seed-0/rl", "seed-1/pd", "seed-1/rl"]
    for k in (0, 1):  # a seed's training is its seed's, whichever process ran it
        for agent in ("small", "mid"):
            card = lambda run: json.loads((run / f"seed-{k}/pd/{agent}/card.json").read_text())["loss_log"]  # noqa: E731
            assert card(tmp_path / "run") == card(out)
            log = lambda run: [{key: v for key, v in r.items() if "time" not in key}  # noqa: E731
                               for r in read_jsonl(run / f"seed-{k}/rl/{agent}/train_log.jsonl")]
            assert log(tmp_path / "run") == log(out)
