"""The hostile audit's cases for ``polyvox rl``, ``polyvox run``, ``book build`` and a personas scale
(/tmp/hostile-audit, failures 44 and 46–54, 59): each is refused before anything is written, in one
line that repeats no secret, or (a chapter that fails) reported in one stderr line.
"""
import json
from pathlib import Path

import pytest
import yaml
from _fixtures import make_book as book
from _hostile import refused, run_cli, snapshot

from polyvox import config
from polyvox.records import read_manifest

PASSWORD = "Zk4q9LmPw7xQ"
KEY = "PLAINkey0x7Q2mZ9vW4tR8"
CREDENTIAL_URLS = [f"http://alice:{PASSWORD}@127.0.0.1:9/v1", f"http://127.0.0.1:9/v1?api_key={KEY}"]


def make_book(root: Path, code: str = "print(n, rate, weights, base_url)") -> Path:
    """A one-chapter book (x/ch: parameters n = 1, rate = 0.5, weights = [0.5, 0.5], base_url, run_dir)."""
    return book(root, code, 'n = 1\nrate = 0.5\nweights = [0.5, 0.5]\nbase_url = "http://127.0.0.1:9/v1"\n'
                            'run_dir = "runs/x"')


# ---------------------------------------------------------------- check_param_value (58, 12–14)

@pytest.mark.parametrize("value, default", [
    (float("nan"), "0.5"), ([float("nan"), float("inf")], "[0.5, 0.5]"), ({"a": [1, float("-inf")]}, "None"),
    ([0.5, float("inf")], "None"), (float("nan"), "'text'"),
])
def test_check_param_value_refuses_non_finite_numbers_anywhere(value, default):
    problem = config.check_param_value("p", value, default)
    assert problem and "finite" in problem


@pytest.mark.parametrize("url", CREDENTIAL_URLS + [f"see https://u:{PASSWORD}@h/x", f"http://h/v1?token={KEY}&a=1"])
@pytest.mark.parametrize("wrap", [lambda u: u, lambda u: [u], lambda u: {"endpoint": u}])
def test_check_param_value_refuses_url_credentials_without_repeating_them(url, wrap):
    problem = config.check_param_value("base_url", wrap(url), '"http://127.0.0.1:9/v1"')
    assert problem and "environment" in problem
    assert PASSWORD not in problem and KEY not in problem


@pytest.mark.parametrize("value, default", [
    ("http://127.0.0.1:9/v1?model=m", '"x"'), ([0.1, 2], "[0.5, 0.5]"), (3, "1"), (2.5, "0.5"), ("plain", "None"),
])
def test_check_param_value_still_takes_ordinary_values(value, default):
    assert config.check_param_value("p", value, default) is None


# ---------------------------------------------------------------- polyvox run -p (49–52)

@pytest.mark.parametrize("param, expect", [
    ("n=lots", "-p n: expected an integer"),
    ("rate=.nan", "-p rate: expected finite"),
    ("weights=[.nan, .inf]", "-p weights: expected finite"),
    (f"base_url={CREDENTIAL_URLS[0]}", "environment"),
    (f"base_url={CREDENTIAL_URLS[1]}", "environment"),
])
def test_run_checks_every_param_before_the_chapter_runs(param, expect, tmp_path, monkeypatch):
    root = make_book(tmp_path / "book")
    monkeypatch.chdir(root)
    line = refused(["run", "x/ch", "-p", param, "--out", str(tmp_path / "o")], watch=[root, tmp_path], expect=expect)
    assert PASSWORD not in line and KEY not in line
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- book build --params (53, 54)

@pytest.mark.parametrize("params, expect", [
    ({"x/ch": {"weights": [float("nan"), float("inf")]}}, "expected finite"),
    ({"x/ch": {"base_url": CREDENTIAL_URLS[0]}}, "environment"),
    ({"all": {"base_url": CREDENTIAL_URLS[1]}}, "environment"),
])
def test_book_params_are_refused_before_any_chapter_runs(params, expect, tmp_path, monkeypatch):
    root = make_book(tmp_path / "book")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    monkeypatch.chdir(root)
    line = refused(["book", "build", "--no-html", "--params", str(path)], watch=[root], expect=expect)
    assert PASSWORD not in line and KEY not in line
    assert not (root / "_build").exists()


# ---------------------------------------------------------------- book build: a failing chapter (59)

def test_book_build_reports_failures_in_one_line_without_a_progress_bar(tmp_path, monkeypatch):
    """The report of several failed chapters (messages over several lines) is one stderr line, and the
    progress bar is off when stderr is not a terminal."""
    import polyvox.book
    from polyvox.book.build import BuildReport, ExecutionFailure

    seen = {}

    def fake_build(**kw):
        seen.update(kw)
        return BuildReport(failures=[ExecutionFailure("x/a", "cell 2 raised\nRuntimeError: broke"),
                                     ExecutionFailure("x/b", "cell 3 raised ValueError")])

    monkeypatch.setattr(polyvox.book, "build", fake_build)
    rc, _out, err = run_cli(["book", "build", "--no-html"])
    assert rc == 1
    assert seen["progress"] is False
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "x/a failed" in lines[0] and "x/b failed" in lines[0] and "HTML not built" in lines[0]


@pytest.mark.slow  # executes a chapter (papermill)
def test_a_failing_chapter_is_one_stderr_line(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book", code="raise RuntimeError('chapter broke')")
    monkeypatch.chdir(root)
    rc, _out, err = run_cli(["book", "build", "--no-html"])
    assert rc == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "chapter x/ch failed" in lines[0] and "chapter broke" in lines[0]


# ---------------------------------------------------------------- personas scale (44)

@pytest.mark.parametrize("url", CREDENTIAL_URLS)
def test_a_personas_judge_url_with_credentials_is_refused(url):
    data = config.load_yaml(Path(__file__).resolve().parents[1] / "configs/personas/smoke.yaml")
    data["judge"] = {**data["judge"], "kind": "openai", "model": "judge", "base_url": url}
    with pytest.raises(config.ConfigError) as exc:
        config.check_scale("personas", data, "creds.yaml")
    line = str(exc.value)
    assert "judge.base_url" in line and "api_key_env" in line and "\n" not in line
    assert PASSWORD not in line and KEY not in line


def test_personas_run_with_url_credentials_writes_nothing(tmp_path):
    data = config.load_yaml(Path(__file__).resolve().parents[1] / "configs/personas/smoke.yaml")
    data["judge"] = {**data["judge"], "kind": "openai", "model": "judge", "base_url": CREDENTIAL_URLS[0]}
    scale = tmp_path / "creds.yaml"
    scale.write_text(yaml.safe_dump(data))
    line = refused(["personas", "run", "--scale", str(scale), "--out", str(tmp_path / "p"), "--stages", "judge"],
                   watch=[tmp_path], expect="api_key_env")
    assert PASSWORD not in line
    assert not (tmp_path / "p").exists()


# ---------------------------------------------------------------- polyvox rl (46, 47, 48, 57)

def _rl_config(tmp_path: Path, **changes) -> Path:
    raw = {"model": "data/models/tiny-base", "arm": "panel", "out": str(tmp_path / "out"), "group_size": 2,
           "prompts_per_step": 1, "max_completion_length": 8,
           "stages": [{"name": "easy", "task": "world", "levels": [1], "per_level": 2, "steps": 1}]}
    raw.update(changes)
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("levels", [[9], [1, "olympiad", 6], ["hard"]])
def test_rl_world_levels_are_the_worlds(levels, tmp_path):
    path = _rl_config(tmp_path, stages=[{"name": "s", "task": "world", "levels": levels, "steps": 1}])
    line = refused(["rl", "--config", str(path)], watch=[tmp_path], expect="stages[0].levels")
    assert "olympiad" in line


def test_rl_world_heldout_level_is_the_worlds(tmp_path):
    path = _rl_config(tmp_path, heldout={"task": "world", "level": 7})
    refused(["rl", "--config", str(path)], watch=[tmp_path], expect="heldout.level")


def test_rl_world_levels_of_the_world_are_taken(tmp_path):
    from polyvox.train import grpo

    path = _rl_config(tmp_path, stages=[{"name": "s", "task": "world", "levels": [1, 5, "olympiad"], "steps": 1}])
    assert grpo.check_config(path)["stages"][0]["levels"] == [1, 5, "olympiad"]


def test_rl_missing_init_adapter_is_refused_before_any_write(tmp_path):
    path = _rl_config(tmp_path, init_adapter=str(tmp_path / "no-such-adapter"))
    refused(["rl", "--config", str(path)], watch=[tmp_path], expect="init_adapter")
    (tmp_path / "empty").mkdir()
    path = _rl_config(tmp_path, init_adapter=str(tmp_path / "empty"))
    refused(["rl", "--config", str(path)], watch=[tmp_path], expect="adapter_config.json")


def test_rl_refuses_a_sample_run_folder_and_changes_nothing(tmp_path):
    from polyvox.train import grpo

    run = tmp_path / "run"
    run.mkdir()
    manifest = {"kind": "sample", "status": "complete", "settings": {"task": "world", "format": "panel"}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="holds a sample run"):
        grpo.train(grpo.RLConfig(model="data/models/tiny-base", arm="panel", out=str(run)))
    assert snapshot(tmp_path) == before
    # and through the CLI, in one line, before any model loads
    path = _rl_config(tmp_path, out=str(run))
    refused(["rl", "--config", str(path)], watch=[tmp_path], expect="holds a sample run")


@pytest.mark.slow  # moved out of the fast tier (over 1.5 s on 2 cores)
def test_a_failure_in_rl_training_is_recorded_as_failed(tmp_path, monkeypatch):
    """An exception after the manifest is written leaves ``status: failed`` (kind rl) with its one-line error."""
    from polyvox.train import grpo

    model = Path(__file__).resolve().parents[1] / "data/models/tiny-base"
    if not (model / "tokenizer_config.json").exists():
        pytest.skip("data/models/tiny-base is not built here")

    def broken(*a, **kw):
        raise RuntimeError("the GPU\nfell over")

    monkeypatch.setattr(grpo, "_stages", broken)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="fell over"):
        grpo.train(grpo.RLConfig(model=str(model), arm="panel", out=str(out)))
    m = read_manifest(out)
    assert m["kind"] == "rl" and m["status"] == "failed"
    assert m["error"] == "RuntimeError: the GPU fell over"
    # the folder is an RL run's: a second attempt may write into it
    grpo._check_rl_folder(out)


def test_rl_manifests_written_before_kinds_are_still_rl_folders(tmp_path):
    from polyvox.train import grpo

    (tmp_path / "manifest.json").write_text(json.dumps({"config": {"stages": []}, "status": "running"}))
    grpo._check_rl_folder(tmp_path)


def test_a_collab_endpoint_with_url_credentials_is_refused_before_any_work(root, tmp_path):
    # audit case 45: collab endpoints' base_url carried user:pass@ and ?api_key= into manifests and stderr
    import yaml

    from _hostile import refused

    scale = yaml.safe_load((root / "configs/collab/full.yaml").read_text())
    for system in scale["endpoints"].values():
        for endpoint in system.values():
            endpoint["base_url"] = "http://alice:Zk4q9LmPw7xQ@127.0.0.1:9/v1?api_key=PLAINkey0x7Q2mZ9vW4tR8"
    path = tmp_path / "creds.yaml"
    path.write_text(yaml.safe_dump(scale))
    line = refused(["collab", "run", "--scale", str(path), "--out", str(tmp_path / "c"), "--stages", "eval"],
                   watch=[tmp_path], expect="credentials")
    assert "Zk4q9LmPw7xQ" not in line and "PLAINkey0x7Q2mZ9vW4tR8" not in line


def test_null_means_absent_for_any_parameter():
    # adapter=null samples the bare base: a text default still takes null (the Re-running page's CPU example)
    from polyvox.config import check_param_value

    assert check_param_value("adapter", None, '"scasella91/qwen3-30b-a3b-multipersona-debate-lora"') is None
    assert check_param_value("adapter", 3, '"scasella91/qwen3-30b-a3b-multipersona-debate-lora"') is not None
