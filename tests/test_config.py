"""polyvox.config: every shipped configuration validates (and reaches the pipelines unchanged); bad ones are
refused in one line naming the file and the key; YAML alias bombs, oversized and over-deep documents and
duplicate keys are refused by limits; the command line's type= functions (issue 17, items 14–15)."""
from __future__ import annotations

import argparse
import copy
import json
import re
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from polyvox import config
from polyvox.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SCALES = sorted((ROOT / "configs").glob("[wpc]*/*.yaml")) + sorted((ROOT / "data/runs").glob("*/scale.yaml"))
RL_CONFIGS = sorted((ROOT / "configs/rl").glob("*.yaml"))


def _loader(study: str):
    from polyvox.studies.collab.pipeline import load_scale as collab
    from polyvox.studies.personas.pipeline import load_scale as personas
    from polyvox.studies.world.pipeline import load_scale as world

    return {"world": world, "personas": personas, "collab": collab}[study]


def _study(path: Path) -> str:
    return path.parent.name if path.parent.parent.name == "configs" else "personas"  # data/runs/personas-h200


# ---------------------------------------------------------------- shipped configurations

def test_every_study_config_is_found():
    assert {_study(p) for p in SCALES} == {"world", "personas", "collab"} and len(SCALES) >= 11
    assert len(RL_CONFIGS) == 3


@pytest.mark.parametrize("path", SCALES, ids=[str(p.relative_to(ROOT)) for p in SCALES])
def test_every_shipped_scale_validates_and_reaches_the_pipeline_unchanged(path):
    raw = yaml.safe_load(path.read_text())
    s = _loader(_study(path))(path)
    expected = {"name": raw.get("name", path.stem), **{k: v for k, v in raw.items() if k != "name"}}
    # the same dict, key for key, in the same order, with the same types (so recorded settings still match)
    assert json.dumps(s) == json.dumps(expected)


@pytest.mark.parametrize("path", RL_CONFIGS, ids=[p.name for p in RL_CONFIGS])
def test_every_shipped_rl_config_validates_without_loading_anything(path):
    from polyvox.train import grpo

    assert grpo.check_config(path) == yaml.safe_load(path.read_text())


def test_the_shipped_corrections_validate(root):
    import importlib

    render = importlib.import_module("polyvox.book.render")
    items = render.load_corrections(root)
    assert len(items) >= 5 and all(re.fullmatch(r"\d{4}-\d\d-\d\d", c["date"]) for c in items)


def test_the_rl_model_has_exactly_rlconfigs_fields():
    import dataclasses

    from polyvox.train.grpo import RLConfig

    assert set(config.RLFile.model_fields) == {f.name for f in dataclasses.fields(RLConfig)} - {"reward_fn"}


def _fields(model) -> set[str]:
    out = set()
    for name, info in model.model_fields.items():
        out.add(name)
        for inner in config._models_in(info.annotation):
            out |= _fields(inner)
    return out


@pytest.mark.parametrize("study,model", [("world", config.WorldScale), ("personas", config.PersonasScale),
                                         ("collab", config.CollabScale)])
def test_the_scale_models_describe_what_the_study_reads(study, model):
    """Every key a model allows is read by the study's code, and every s["section"]["key"] the pipeline
    reads is a key the model checks: the model is neither wider nor narrower than the code."""
    src = "\n".join(p.read_text() for p in (ROOT / "lib/polyvox/studies" / study).glob("*.py"))
    unread = sorted(f for f in _fields(model) - {"name"} if f'"{f}"' not in src)
    assert not unread, f"{study}: keys allowed but never read: {unread}"
    # the pipeline and the modules holding its stages' work (personas: steps, judging)
    folder = ROOT / "lib/polyvox/studies" / study
    pipeline = "\n".join((folder / f"{m}.py").read_text() for m in ("pipeline", "steps", "judging")
                         if (folder / f"{m}.py").exists())
    sections = {name: config._models_in(info.annotation) for name, info in model.model_fields.items()}
    reads = re.findall(r'\bs\["(\w+)"\](?:\["(\w+)"\]|\.get\("(\w+)")?', pipeline)
    assert len(reads) > 10
    for section, key, got in reads:
        assert section in model.model_fields, f"pipeline reads s[{section!r}], which the model does not check"
        inner, key = sections[section], key or got
        if key and inner:
            assert key in inner[0].model_fields, f"pipeline reads s[{section!r}][{key!r}], not in the model"


# ---------------------------------------------------------------- a table of bad scales and RL configs

def _base(rel: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / rel).read_text())


def _set(path: str, value):
    def mutate(d):
        *keys, last = [int(k) if k.isdigit() else k for k in path.split(".")]
        for k in keys:
            d = d[k]
        if value is KeyError:
            del d[last]
        else:
            d[last] = value
    return mutate


BAD = [  # (study, base, mutation, words the one line must hold)
    ("world", "world/smoke.yaml", _set("seeds", "zero"), "seeds: expected a non-empty list of integers ≥ 0, got 'zero'"),
    ("world", "world/smoke.yaml", _set("seeds.1", True), "seeds[1]: expected an integer, got True"),
    ("world", "world/smoke.yaml", _set("rl.lr", KeyError), "rl: missing lr"),
    ("world", "world/smoke.yaml", _set("rl.lr", "1e-4"), "write 1.0e-4"),
    ("world", "world/smoke.yaml", _set("rl.group", 1), "rl.group: expected an integer ≥ 2"),
    ("world", "world/smoke.yaml", _set("rl.stage_steps", [1, 2, 3]), "rl.stage_steps: expected two integers"),
    ("world", "world/smoke.yaml", _set("rl.stage_steps.0", 0), "rl.stage_steps[0]: expected a value ≥ 1, got 0"),
    ("world", "world/smoke.yaml", _set("models.layers", 2.5), "models.layers: expected an integer ≥ 1, got 2.5"),
    ("world", "world/smoke.yaml", _set("sampling.batch_size", None), "sampling.batch_size: expected an integer ≥ 1"),
    ("world", "world/smoke.yaml", _set("sampling.dtype", KeyError), "sampling: missing dtype"),
    ("world", "world/smoke.yaml", _set("eval.sweep_seeds", [0, 5]), "eval.sweep_seeds: [5] are not among"),
    ("world", "world/smoke.yaml", _set("bands.pool_per_level", -3), "bands.pool_per_level"),
    ("world", "world/smoke.yaml", _set("rl", [1, 2]), "rl: expected a mapping, got [1, 2]"),
    ("world", "world/smoke.yaml", _set("models.extra", 1), "models: unknown key extra"),
    ("personas", "personas/smoke.yaml", _set("world.n_users", "lots"), "world.n_users: expected an integer ≥ 24"),
    ("personas", "personas/smoke.yaml", _set("world.per_user", 0), "world.per_user"),
    ("personas", "personas/smoke.yaml", _set("distill.lora_rank", -2), "distill.lora_rank: expected an integer ≥ 1"),
    ("personas", "personas/smoke.yaml", _set("distill.teacher_temperature", 0), "distill.teacher_temperature"),
    ("personas", "personas/smoke.yaml", _set("arms.losses", []), "arms.losses"),
    ("personas", "personas/smoke.yaml", _set("arms.losses", ["forward", "forward"]), "arms.losses: expected distinct"),
    ("personas", "personas/smoke.yaml", _set("generate.dtype", "fp8"), "generate.dtype"),
    ("personas", "personas/smoke.yaml", _set("generate.threads", 0), "generate.threads"),
    ("personas", "personas/smoke.yaml", _set("judge.kind", "gpt"), "judge.kind"),
    ("personas", "personas/full.yaml", _set("judge.api_key_env", "sk-abcdef123456"), "judge.api_key_env"),
    ("personas", "personas/full.yaml", _set("judge.base_url", "https://"), "judge.base_url"),
    ("personas", "personas/full.yaml", _set("judge.model", KeyError), "kind openai needs model"),
    ("collab", "collab/smoke.yaml", _set("models.seq_len", 4096), "models.seq_len"),
    ("collab", "collab/smoke.yaml", _set("models.sizes.huge", {"hidden": 32}), "models.sizes: unknown key huge"),
    ("collab", "collab/smoke.yaml", _set("pd.slip", 1.5), "pd.slip: expected a number in [0, 1]"),
    ("collab", "collab/smoke.yaml", _set("eval.max_retries", -1), "eval.max_retries"),
    ("collab", "collab/smoke.yaml", _set("data.world_levels", [1, 1]), "data.world_levels: expected distinct"),
    ("collab", "collab/cpu.yaml", _set("threads", "one"), "threads: expected an integer ≥ 1"),
    ("collab", "collab/full.yaml", _set("endpoints.solo.small.concurrency", 0), "endpoints.solo.small.concurrency"),
    ("collab", "collab/full.yaml", _set("endpoints.cl.huge", {"model": "m", "base_url": "http://h"}),
     "endpoints.cl: expected the agents"),
    ("collab", "collab/full.yaml", _set("rl.judge.base_url", "127.0.0.1:8004"), "rl.judge.base_url"),
    ("collab", "collab/full.yaml", _set("models.vocab", 700), "models: unknown key vocab"),
]


@pytest.mark.parametrize("study,base,mutate,words", BAD, ids=[f"{b[1]}:{b[3][:40]}" for b in BAD])
def test_a_bad_scale_is_one_line_naming_file_and_key(study, base, mutate, words, tmp_path):
    data = copy.deepcopy(_base(base))
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ValueError) as info:
        _loader(study)(path)
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{path}: ") and words in line, line


RL_BAD = [
    (_set("group_size", 0), "group_size: expected an integer ≥ 2"),
    (_set("prompts_per_step", 0), "prompts_per_step"),
    (_set("max_completion_length", -1), "max_completion_length"),
    (_set("eval_every", 0), "eval_every"),
    (_set("save_every", 0), "save_every"),
    (_set("gradient_accumulation_steps", 0), "gradient_accumulation_steps"),
    (_set("beta", -0.1), "beta: expected a number ≥ 0"),
    (_set("tag_coef", float("inf")), "tag_coef"),
    (_set("vllm_mode", "remote"), "vllm_mode"),
    (_set("target_parameters", "mlp"), "target_parameters"),
    (_set("stages.0.task", "chess"), "stages[0].task: unknown task 'chess'"),
    (_set("stages.0.grading", "exact"), "stages[0].grading: unknown grader 'exact'"),
    (_set("stages.0.per_level", "many"), "stages[0].per_level"),
    (_set("stages.0.split", "dev"), "stages[0].split"),
    (_set("heldout.task", "gsm8k"), "heldout: task gsm8k has no option"),
    (_set("heldout", [1]), "heldout"),
    (_set("out", ""), "out: expected non-empty text"),
]


@pytest.mark.parametrize("mutate,words", RL_BAD, ids=[w for _, w in RL_BAD])
def test_a_bad_rl_config_is_refused_before_any_problem_loads(mutate, words, tmp_path, monkeypatch):
    from polyvox import tasks
    from polyvox.train import grpo

    data = _base("rl/world-panel.yaml")
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setattr(tasks, "load", lambda *a, **k: pytest.fail("a problem set loaded before the check"))
    with pytest.raises(ValueError) as info:
        grpo.load_config(path)
    assert str(info.value).startswith(f"{path}: ") and words in str(info.value), str(info.value)


def test_the_error_line_has_the_promised_shape(tmp_path):
    data = _base("world/smoke.yaml")
    data["rl"]["lora_rank"] = -4
    data["bands"]["group"] = 0  # a second problem: counted, not listed
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        _loader("world")(path)
    assert str(info.value) == f"{path}: rl.lora_rank: expected an integer ≥ 1, got -4 (and 1 more problem)"


# ---------------------------------------------------------------- the YAML limits

BOMB = ("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join(f"{x}: &{x} [{', '.join([f'*{p}'] * 9)}]\n" for p, x in zip("abcdefgh", "bcdefghi")))


def test_an_alias_bomb_is_refused_by_counting_not_by_running_out_of_memory(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)  # 9^9 ≈ 387 million strings once expanded
    tracemalloc.start()
    t0 = time.time()
    with pytest.raises(ConfigError, match=r"bomb.yaml:\d+: more than 100000 values once YAML aliases are expanded"):
        config.load_yaml(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert time.time() - t0 < 2 and peak < 20 << 20


@pytest.mark.parametrize("text,words", [
    ("a: &r [1, *r]\n", "alias *r refers to itself"),
    ("a: *nowhere\n", "YAML alias *nowhere is not defined"),
    ("a: " + "[" * 65 + "]" * 65 + "\n", "nested more than 64 levels deep"),
    ("a: 1\nb: 2\na: 3\n", "s.yaml:3: duplicate key 'a'"),
    ("a: {x: 1, x: 2}\n", "duplicate key 'x'"),
    ("? [1, 2]\n: x\n", "a mapping key must be a scalar"),
    ("a: !!python/object:os.system x\n", "not valid YAML"),
    ("a: [unclosed\n", "not valid YAML"),
    ("d: 2026-13-01\n", "not valid YAML (month must be in 1..12)"),
])
def test_yaml_that_is_not_a_plain_document_is_refused(text, words, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        config.load_yaml(path)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_size_limit_and_what_stays_allowed(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"a: 1\n" + b"#" * (config.MAX_BYTES - 5))  # exactly the limit
    assert config.load_yaml(path) == {"a": 1}
    path.write_bytes(b"a: 1\n" + b"#" * (config.MAX_BYTES - 4))
    with pytest.raises(ConfigError, match="larger than 1048576 bytes"):
        config.load_yaml(path)
    # small anchors and merge keys are ordinary YAML and stay allowed
    path.write_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\nlist: [*b, *b]\n")
    assert config.load_yaml(path) == {"base": {"x": 1, "y": 2}, "other": {"x": 1, "y": 3},
                                      "list": [{"x": 1, "y": 2}] * 2}
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        config.load_yaml(path)
    with pytest.raises(FileNotFoundError):
        config.load_yaml(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="a folder"):
        config.load_yaml(tmp_path)


# ---------------------------------------------------------------- corrections and --params

def _corrections(root: Path, items) -> None:
    (root / "data").mkdir(exist_ok=True)
    (root / "data/corrections.yml").write_text(yaml.safe_dump(items))


GOOD = {"date": "2026-01-01", "chapters": ["book/panel/length"], "claimed": "c", "stands": "s", "source": "x"}


@pytest.mark.parametrize("change,words", [
    ({"date": "soon"}, "entry 1: date: expected a date (YYYY-MM-DD), got 'soon'"),
    ({"date": "2026-02-30"}, "entry 1: date"),
    ({"url": "https://"}, "entry 1: url: expected an http(s) address with a host"),
    ({"url": "http://exa mple.org"}, "entry 1: url"),
])
def test_a_correction_needs_a_real_date_and_address(change, words, tmp_path):
    import importlib

    render = importlib.import_module("polyvox.book.render")
    _corrections(tmp_path, [{**GOOD, **change}])
    with pytest.raises(render.BookError) as info:
        render.load_corrections(tmp_path)
    assert words in str(info.value)


def test_a_correction_must_name_chapters_of_the_book(tmp_path, root):
    import importlib
    import shutil

    render = importlib.import_module("polyvox.book.render")
    _corrections(tmp_path, [{**GOOD, "chapters": ["book/panel/lenght"]}])
    assert render.load_corrections(tmp_path)  # no _toc.yml: nothing to check against
    for name in ("_toc.yml", "_config.yml"):
        shutil.copy(root / name, tmp_path / name)
    shutil.copytree(root / "notebooks", tmp_path / "notebooks")
    with pytest.raises(render.BookError, match="book/panel/lenght is not a chapter of the book"):
        render.load_corrections(tmp_path)
    _corrections(tmp_path, [GOOD])
    assert render.load_corrections(tmp_path)[0]["chapters"] == ["book/panel/length"]


@pytest.mark.parametrize("value,default,ok", [
    (3, "1", True), ("lots", "1", False), (True, "1", False), (1.5, "1", False),
    (2, "0.5", True), (0.1, "0.5", True), ("x", "0.5", False), (float("nan"), "0.5", False),
    (True, "False", True), ("yes", "False", False), (1, "False", False),
    ("runs/x", '"data"', True), (5, '"data"', False),
    ([1], '["a"]', True), ("a", '["a"]', False),
    ("anything", "None", True), (7, "None", True), ({"a": 1}, "some_call()", True),
])
def test_a_params_value_must_match_its_default(value, default, ok):
    assert (config.check_param_value("p", value, default) is None) == ok


def test_a_params_file_is_checked_against_the_chapters(root, tmp_path):
    from polyvox.book.build import BookError, load_params_file

    path = tmp_path / "p.yaml"
    for text, words in (("panel/dispersion: {head_chars: lots}\n", "panel/dispersion: head_chars: expected an integer"),
                        ("all: {generate: 'yes'}\n", "all: generate: expected true or false"),
                        ("panel/length: {data_dir: 5}\n", "panel/length: data_dir: expected text"),
                        ("panel/length: {1: x}\n", "1 is not a parameter name"),
                        ("panel/length: {}\npanel/length: {}\n", "duplicate key 'panel/length'")):
        path.write_text(text)
        with pytest.raises(BookError, match=re.escape(words)):
            load_params_file(path, root)
    path.write_text("all: {data_dir: data}\npanel/dispersion: {head_chars: 500}\n")
    assert load_params_file(path, root) == {"all": {"data_dir": "data"}, "panel/dispersion": {"head_chars": 500}}


# ---------------------------------------------------------------- command-line types

@pytest.mark.parametrize("parse,text,result", [
    (config.integer(1), "3", 3), (config.integer(1), "0", "must be an integer ≥ 1, got 0"),
    (config.integer(1), "-1", "got -1"), (config.integer(1), "x", "invalid int value: 'x'"),
    (config.integer(0), "0", 0), (config.integer(1, 4), "5", "must be an integer in 1 … 4"),
    (config.number(0), "0", 0.0), (config.number(0), "-0.5", "must be a number ≥ 0"),
    (config.number(0), "nan", "must be a number ≥ 0, got nan"), (config.number(0), "inf", "got inf"),
    (config.number(0, 1, above=True), "0", "must be a number in (0, 1]"), (config.number(0, 1, above=True), "1", 1.0),
    (config.number(0, 1, what="a fraction in [0, 1]"), "1.5", "must be a fraction in [0, 1], got 1.5"),
    (config.url, "http://127.0.0.1:8000", "http://127.0.0.1:8000"), (config.url, "https://api.x.org/v1", "https://api.x.org/v1"),
    (config.url, "localhost:8000", "http:// or https://"), (config.url, "http://", "with a host"),
    (config.url, "http://h:x", "an http(s) address"), (config.url, "", "must be an http(s) address"),
    (config.env_name, "OPENAI_API_KEY", "OPENAI_API_KEY"), (config.env_name, "sk-secret", "not the key itself"),
    (config.names(("a", "b")), "a,b", ("a", "b")), (config.names(("a", "b")), "a,c", "unknown stage(s) c"),
    (config.names(lambda: ("a",)), "a", ("a",)), (config.names(("a", "b")), "a b", "unknown stage(s) a b"),
])
def test_the_command_line_types(parse, text, result):
    if isinstance(result, str) and (result.startswith(("must", "got", "unknown", "invalid")) or " " in result):
        with pytest.raises(argparse.ArgumentTypeError) as info:
            parse(text)
        assert result in str(info.value) and (text not in str(info.value) or parse is not config.env_name)
    else:
        assert parse(text) == result


def test_paths_on_the_command_line(tmp_path):
    (tmp_path / "f").write_text("x")
    assert config.existing_dir(str(tmp_path)) == str(tmp_path)
    assert config.existing_file(str(tmp_path / "f")) == str(tmp_path / "f")
    for parse, text, words in ((config.existing_dir, tmp_path / "nope", "no such folder"),
                               (config.existing_dir, tmp_path / "f", "must be a folder"),
                               (config.existing_file, tmp_path / "nope", "No such file or directory"),
                               (config.existing_file, tmp_path, "must be a file")):
        with pytest.raises(argparse.ArgumentTypeError, match=words):
            parse(str(text))


def test_parse_kv_reads_values_within_the_limits():
    from polyvox.cli import parse_kv

    assert parse_kv(["a=1", "b=x", "c=[1, 2]", "d="]) == {"a": 1, "b": "x", "c": [1, 2], "d": ""}
    with pytest.raises(ValueError, match="-p a is given twice"):
        parse_kv(["a=1", "a=2"])
    bomb = "[" + ", ".join(f"&{x} [" + ", ".join([f"*{p}" if p else "1"] * 9) + "]"
                           for p, x in zip([None, *"abcdefg"], "abcdefgh")) + "]"
    with pytest.raises(ValueError, match="-p a: not a YAML value .*alias"):
        parse_kv([f"a={bomb}"])
