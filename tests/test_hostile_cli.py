"""Bad configuration and bad command lines are refused before any work (issue 17, items 14–15).

Each case breaks one thing — a key of a shipped scale (world, personas, collab), an RL config,
a ``--params`` file, ``data/corrections.yml``, or one command-line number, address, path or
stage name — and runs ``polyvox`` in-process through the shared harness (:func:`_hostile.refused`):
non-zero exit, one stderr line naming the file and key (or the option), no traceback, and the
watched folders (the workspace the output folders would go in, the shipped configs, the mini
book) byte-identical with nothing added: the refusal came before any model loaded or any file
was written.

Before these rules, a renamed ``rl.lr`` trained the world's models and then failed with
``KeyError('lr')``; ``seeds: zero`` trained for seed "z"; ``n_users: lots``, ``group_size: 0``
and a negative LoRA rank ended in raw Python errors partway through; ``--n-boot 0`` became
2000; an unknown ``collab --stages`` name or a ``--models`` folder that does not exist were
found late (a hub error about repo ids). This module imports nothing new from the library, so
the table runs against older code too.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from _hostile import refused

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"

BOMB = ("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join(f"{x}: &{x} [{', '.join([f'*{p}'] * 9)}]\n" for p, x in zip("abcdef", "bcdefg")))


def _base(path: str) -> dict:
    return yaml.safe_load((CONFIGS / path).read_text())


def _set(*keys_value):
    """A mutation: set data[k1][k2]… = value (a missing last key is added)."""
    *keys, value = keys_value

    def mutate(d):
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return mutate


def _pop(*keys):
    def mutate(d):
        for k in keys[:-1]:
            d = d[k]
        d.pop(keys[-1])
    return mutate


def _rename(*keys_new):
    *keys, new = keys_new

    def mutate(d):
        for k in keys[:-1]:
            d = d[k]
        d[new] = d.pop(keys[-1])
    return mutate


def _apply(*fns):
    def mutate(d):
        for f in fns:
            f(d)
    return mutate


# (case id, study, shipped base, mutation or raw YAML text, extra argv, expected words in the one line)
# the stage subsets only make older code fail fast; a refusal comes before any stage is chosen
WORLD = [
    ("world-rl-lr-renamed", "world/smoke.yaml", _rename("rl", "lr", "learning_rate"), [], "rl: unknown key learning_rate"),
    ("world-seeds-zero", "world/smoke.yaml", _set("seeds", "zero"), ["--stages", "eval"], "seeds: expected"),
    ("world-seeds-empty", "world/smoke.yaml", _set("seeds", []), ["--stages", "eval"], "seeds: expected a non-empty"),
    ("world-seeds-twice", "world/smoke.yaml", _set("seeds", [0, 0]), ["--stages", "eval"], "seeds: expected distinct"),
    ("world-problems-seed-neg", "world/smoke.yaml", _set("problems_seed", -1), ["--stages", "eval"], "problems_seed"),
    ("world-hidden-neg", "world/smoke.yaml", _set("models", "hidden", -64), ["--stages", "eval"], "models.hidden"),
    ("world-n-per-level-5", "world/smoke.yaml", _set("models", "n_per_level", 5), ["--stages", "eval"],
     "models.n_per_level"),
    ("world-seq-len-4096", "world/smoke.yaml", _set("models", "seq_len", 4096), ["--stages", "eval"], "models.seq_len"),
    ("world-group-0", "world/smoke.yaml", _set("rl", "group", 0), ["--stages", "eval"], "rl.group"),
    ("world-lora-rank-neg", "world/smoke.yaml", _set("rl", "lora_rank", -4), ["--stages", "eval"], "rl.lora_rank"),
    ("world-lr-text", "world/smoke.yaml", _set("rl", "lr", "1e-4"), ["--stages", "eval"], "rl.lr: expected a number"),
    ("world-lr-0", "world/smoke.yaml", _set("rl", "lr", 0), ["--stages", "eval"], "rl.lr"),
    ("world-lr-nan", "world/smoke.yaml", _set("rl", "lr", float("nan")), ["--stages", "eval"], "rl.lr"),
    ("world-stage-steps-one", "world/smoke.yaml", _set("rl", "stage_steps", [2]), ["--stages", "eval"],
     "rl.stage_steps"),
    ("world-dtype", "world/smoke.yaml", _set("sampling", "dtype", "float64"), ["--stages", "eval"], "sampling.dtype"),
    ("world-caps-empty", "world/smoke.yaml", _set("eval", "caps", []), ["--stages", "eval"], "eval.caps"),
    ("world-sweep-seed-not-run", "world/smoke.yaml", _set("eval", "sweep_seeds", [7]), ["--stages", "eval"],
     "sweep_seeds"),
    ("world-bands-group-text", "world/smoke.yaml", _set("bands", "group", "8"), ["--stages", "eval"], "bands.group"),
    ("world-models-extra-key", "world/smoke.yaml", _set("models", "width", 3), ["--stages", "eval"],
     "models: unknown key width"),
    ("world-name-number", "world/smoke.yaml", _set("name", 7), ["--stages", "eval"], "name: expected"),
    ("world-alias-bomb", "world/smoke.yaml", "bomb", ["--stages", "eval"], "aliases are expanded"),
    ("world-huge", "world/smoke.yaml", "huge", ["--stages", "eval"], "larger than"),
    ("world-duplicate-section", "world/smoke.yaml", "duplicate", ["--stages", "eval"], "duplicate key 'rl'"),
    ("world-recursive-alias", "world/smoke.yaml", "recursive", ["--stages", "eval"], "refers to itself"),
    ("world-deep", "world/smoke.yaml", "deep", ["--stages", "eval"], "nested more than"),
    ("world-not-utf8", "world/smoke.yaml", "binary", ["--stages", "eval"], "not UTF-8"),
    ("world-not-a-mapping", "world/smoke.yaml", "- 1\n- 2\n", ["--stages", "eval"], "expected a mapping"),
]

PERSONAS = [
    ("personas-n-users-lots", "personas/smoke.yaml", _set("world", "n_users", "lots"), "world.n_users"),
    ("personas-n-users-8", "personas/smoke.yaml", _set("world", "n_users", 8), "world.n_users"),
    ("personas-lora-rank-neg", "personas/smoke.yaml", _set("distill", "lora_rank", -2), "distill.lora_rank"),
    ("personas-lr-renamed", "personas/smoke.yaml", _rename("distill", "lr", "learning_rate"),
     "distill: unknown key learning_rate"),
    ("personas-loss", "personas/smoke.yaml", _set("arms", "losses", ["forward", "sideways"]), "arms.losses"),
    ("personas-seeds-zero", "personas/smoke.yaml", _set("arms", "seeds", "zero"), "arms.seeds"),
    ("personas-openai-no-model", "personas/smoke.yaml", _set("judge", "kind", "openai"), "kind openai needs model"),
    ("personas-openai-bad-url", "personas/smoke.yaml",
     _apply(_set("judge", "kind", "openai"), _set("judge", "model", "m"), _set("judge", "base_url", "localhost:8000")),
     "judge.base_url"),
    ("personas-rubric-with-url", "personas/smoke.yaml", _set("judge", "base_url", "http://127.0.0.1:8000"),
     "kind: openai only"),
    ("personas-generate-backend", "personas/smoke.yaml", _set("generate", "backend", "openai"), "generate.backend"),
    ("personas-router-lr-0", "personas/smoke.yaml", _set("router", "lr", 0), "router.lr"),
    ("personas-n-boot-0", "personas/smoke.yaml", _set("judge", "n_boot", 0), "judge.n_boot"),
    ("personas-model-path-number", "personas/smoke.yaml", _set("model", "path", 7), "model.path"),
    ("personas-alias-bomb", "personas/smoke.yaml", "bomb", "aliases are expanded"),
]

COLLAB = [
    ("collab-rl-group-0", "collab/smoke.yaml", _set("rl", "group", 0), "rl.group"),
    ("collab-pd-rank-neg", "collab/smoke.yaml", _set("pd", "rank", -8), "pd.rank"),
    ("collab-no-large", "collab/smoke.yaml", _pop("models", "sizes", "large"), "models.sizes: missing large"),
    ("collab-level-7", "collab/smoke.yaml", _set("data", "world_levels", [7]), "data.world_levels"),
    ("collab-threads-0", "collab/smoke.yaml", _set("threads", 0), "threads: expected an integer ≥ 1"),
    ("collab-pd-mode", "collab/smoke.yaml", _set("pd", "mode", "half"), "pd.mode"),
    ("collab-cascade-temp", "collab/smoke.yaml", _set("eval", "cascade_temperature", -1), "eval.cascade_temperature"),
    ("collab-hidden-40", "collab/smoke.yaml", _set("models", "sizes", "small", "hidden", 40), "small.hidden: expected"),
    ("collab-rl-lr-renamed", "collab/smoke.yaml", _rename("rl", "lr", "learning_rate"), "rl: unknown key learning_rate"),
    ("collab-solo-no-large", "collab/full.yaml", _pop("endpoints", "solo", "large"), "endpoints.solo"),
    ("collab-endpoint-url", "collab/full.yaml", _set("endpoints", "cl", "small", "base_url", "htp://x"),
     "endpoints.cl.small.base_url"),
    ("collab-duplicate-key", "collab/smoke.yaml", "duplicate-pd", "duplicate key 'pd'"),
]

RL = [
    ("rl-group-size-0", _set("group_size", 0), "group_size"),
    ("rl-lora-rank-neg", _set("lora_rank", -8), "lora_rank"),
    ("rl-lr-0", _set("learning_rate", 0), "learning_rate"),
    ("rl-arm", _set("arm", "debate"), "arm: expected one of"),
    ("rl-two-easy-stages", _set("stages", 1, "name", "easy"), "two stages named 'easy'"),
    ("rl-vllm-share", _set("vllm_gpu_memory_utilization", 1.5), "vllm_gpu_memory_utilization"),
    ("rl-stage-option", _set("stages", 0, "levles", [1]), "no option levles"),
    ("rl-stage-name-path", _set("stages", 1, "name", "../x"), "stages[1].name"),
    ("rl-heldout-per-level-0", _set("heldout", "per_level", 0), "heldout.per_level"),
    ("rl-grader", _set("heldout_grading", "exact"), "unknown grader 'exact'"),
    ("rl-temperature-neg", _set("temperature", -1), "temperature: expected a number > 0"),
    ("rl-use-vllm-text", _set("use_vllm", "yes please"), "use_vllm"),
    ("rl-seed-neg", _set("seed", -1), "seed: expected an integer ≥ 0"),
    ("rl-alias-bomb", "bomb", "aliases are expanded"),
    ("rl-duplicate-key", "duplicate-lora", "duplicate key 'lora_rank'"),
]

# --params against the mini book's one chapter x/ch (parameters: n = 1, flag = False, label = "a")
PARAMS = [
    ("params-int-text", "x/ch: {n: lots}\n", "n: expected an integer"),
    ("params-all-float", "all: {n: 1.5}\n", "n: expected an integer"),
    ("params-bool-text", "x/ch: {flag: yes please}\n", "flag: expected true or false"),
    ("params-label-number", "x/ch: {label: 3}\n", "label: expected text"),
    ("params-alias-bomb", BOMB + "x/ch: {label: x}\n", "aliases are expanded"),
    ("params-duplicate", "x/ch: {n: 1}\nx/ch: {n: 2}\n", "duplicate key 'x/ch'"),
    ("params-huge", "# " + "x" * (1 << 20) + "\nx/ch: {n: 1}\n", "larger than"),
]

CORRECTIONS = [
    ("corr-date-word", {"date": "yesterday"}, "date: expected a date"),
    ("corr-url-no-host", {"url": "https://"}, "url: expected an http(s) address with a host"),
    ("corr-chapter-misspelt", {"chapters": ["book/x/chh"]}, "book/x/chh is not a chapter"),
    ("corr-date-month-13", "- {date: 2026-13-01, chapters: [], claimed: c, stands: s, source: x}\n", "corrections.yml"),
    ("corr-duplicate-key", "- {date: 2026-01-01, date: 2026-01-02, chapters: [], claimed: c, stands: s, source: x}\n",
     "duplicate key 'date'"),
    ("corr-alias-bomb", "".join("- " + line.split(": ", 1)[1] + "\n" for line in BOMB.splitlines()), "aliases are expanded"),
]


def _sample(out, *extra):
    return ["sample", "--task", "aime_panel", "--format", "panel", "--model", str(out / "no-model"), "--n", "1",
            "--out", str(out / "new-run"), *extra]


def _judge(ws, *extra):
    f = ws / "systems.jsonl"
    return ["judge", "tally", "--a", f"{f}:base", "--b", f"{f}:head", "--out", str(ws / "verdicts"), *extra]


# (case id, argv builder (workspace) -> argv, expected words)
CLI = [
    ("sample-concurrency-0", lambda w: _sample(w, "--concurrency", "0"), "--concurrency must be an integer ≥ 1"),
    ("sample-concurrency-neg", lambda w: _sample(w, "--concurrency", "-1"), "--concurrency must be"),
    ("sample-concurrency-text", lambda w: _sample(w, "--concurrency", "lots"), "--concurrency must be"),
    ("sample-chunk-text", lambda w: _sample(w, "--chunk", "many"), "--chunk must be"),
    ("sample-url-no-scheme", lambda w: _sample(w, "--base-url", "localhost:8000"), "--base-url must be"),
    ("sample-url-ftp", lambda w: _sample(w, "--base-url", "ftp://host"), "--base-url must be"),
    ("sample-url-no-host", lambda w: _sample(w, "--base-url", "http://"), "--base-url must be"),
    ("sample-url-port", lambda w: _sample(w, "--base-url", "http://host:99999"), "--base-url must be"),
    ("sample-url-space", lambda w: _sample(w, "--base-url", "http://a b"), "--base-url must be"),
    ("sample-key-env", lambda w: _sample(w, "--api-key-env", "my-key"), "--api-key-env must be"),
    ("judge-concurrency-0", lambda w: _judge(w, "--concurrency", "0"), "--concurrency must be an integer ≥ 1"),
    ("judge-concurrency-neg", lambda w: _judge(w, "--concurrency", "-1"), "--concurrency must be"),
    ("judge-concurrency-text", lambda w: _judge(w, "--concurrency", "many"), "--concurrency must be"),
    ("judge-chunk-0", lambda w: _judge(w, "--chunk", "0"), "--chunk must be an integer ≥ 1"),
    ("judge-chunk-neg", lambda w: _judge(w, "--chunk", "-1"), "--chunk must be"),
    ("judge-chunk-text", lambda w: _judge(w, "--chunk", "x"), "--chunk must be"),
    ("judge-attempts-0", lambda w: _judge(w, "--max-attempts", "0"), "--max-attempts must be an integer ≥ 1"),
    ("judge-attempts-neg", lambda w: _judge(w, "--max-attempts", "-1"), "--max-attempts must be"),
    ("judge-attempts-text", lambda w: _judge(w, "--max-attempts", "x"), "--max-attempts must be"),
    ("judge-max-tokens-0", lambda w: _judge(w, "--max-tokens", "0"), "--max-tokens must be"),
    ("judge-n-boot-0", lambda w: _judge(w, "--n-boot", "0"), "--n-boot must be an integer ≥ 1"),
    ("judge-n-boot-neg", lambda w: _judge(w, "--n-boot", "-1"), "--n-boot must be"),
    ("judge-n-boot-text", lambda w: _judge(w, "--n-boot", "lots"), "--n-boot must be"),
    ("judge-url", lambda w: _judge(w, "--judge", "openai", "--model", "m", "--base-url", "not a url"),
     "--base-url must be"),
    ("judge-key-env", lambda w: _judge(w, "--api-key-env", "sk-not-a-name"), "--api-key-env must be"),
    ("judge-spec-no-system", lambda w: ["judge", "tally", "--a", str(w / "systems.jsonl"), "--b", "x:y",
                                        "--out", str(w / "verdicts")], "--a must be FILE:SYSTEM"),
    ("judge-spec-missing-file", lambda w: _judge(w) + ["--a", f"{w / 'nope.jsonl'}:base"], "--a must be FILE:SYSTEM"),
    ("judge-run-missing", lambda w: ["judge", "tally", "--run", str(w / "no-run")], "--run must be"),
    ("judge-run-not-a-run", lambda w: ["judge", "tally", "--run", str(w)], "--run must be a personas run folder"),
    ("judge-run-bad-scale", lambda w: ["judge", "tally", "--run", str(w / "bad-run")],
     "bad-run/scale.yaml: judge.n_boot"),
    ("judge-by-empty-label", lambda w: _judge(w, "--by", "pick_size,,preference"), "--by must be"),
    ("judge-openai-no-model", lambda w: _judge(w, "--judge", "openai"), "needs --model"),
    ("world-seeds-neg", lambda w: ["world", "run", "--out", str(w / "o"), "--seeds", "-1"], "--seeds must be"),
    ("world-seeds-text", lambda w: ["world", "run", "--out", str(w / "o"), "--seeds", "zero"], "--seeds must be"),
    ("world-seeds-none", lambda w: ["world", "run", "--out", str(w / "o"), "--stages", "eval", "--seeds"],
     "--seeds: expected at least one"),
    ("world-stages-none", lambda w: ["world", "run", "--out", str(w / "o"), "--stages"],
     "--stages: expected one argument"),
    ("world-stages-unknown", lambda w: ["world", "run", "--out", str(w / "o"), "--stages", "eval,evals"],
     "unknown stage(s) evals"),
    ("world-stages-spaced", lambda w: ["world", "run", "--out", str(w / "o"), "--stages", "eval", "bands"],
     "unrecognized arguments: bands"),
    ("personas-stages-unknown", lambda w: ["personas", "run", "--out", str(w / "o"), "--stages", "router,bogus"],
     "unknown stage(s) bogus"),
    ("personas-stages-empty-name", lambda w: ["personas", "run", "--out", str(w / "o"), "--stages", "judge,"],
     "unknown stage(s) ''"),
    ("collab-stages-unknown", lambda w: ["collab", "run", "--out", str(w / "o"), "--stages", "models,bogus"],
     "unknown stage(s) bogus"),
    ("collab-models-missing", lambda w: ["collab", "run", "--out", str(w / "o"), "--stages", "pd",
                                         "--models", str(w / "no-models")], "--models must be an existing folder"),
    ("collab-models-file", lambda w: ["collab", "run", "--out", str(w / "o"), "--stages", "pd",
                                      "--models", str(w / "systems.jsonl")], "--models must be a folder"),
    ("collab-models-empty", lambda w: ["collab", "run", "--out", str(w / "o"), "--stages", "pd",
                                       "--models", str(w / "empty")], "lacks small, mid, big, large"),
    ("rl-config-missing", lambda w: ["rl", "--config", str(w / "nope.yaml")], "--config: No such file"),
    ("rl-config-folder", lambda w: ["rl", "--config", str(w / "empty")], "--config must be a file"),
    ("params-missing", lambda w: ["book", "build", "--no-html", "--params", str(w / "nope.yaml")],
     "--params: No such file"),
    ("run-param-twice", lambda w: ["run", "panel/length", "-p", "data_dir=data", "-p", "data_dir=x",
                                   "--out", str(w / "o")], "-p data_dir is given twice"),
    ("run-param-bomb", lambda w: ["run", "panel/length", "-p",
                                  "data_dir=[&a [1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], "
                                  "&c [*b,*b,*b,*b,*b,*b,*b,*b,*b], &d [*c,*c,*c,*c,*c,*c,*c,*c,*c], "
                                  "&e [*d,*d,*d,*d,*d,*d,*d,*d,*d], &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]]",
                                  "--out", str(w / "o")], "alias"),
]


def _raw(kind: str, base: dict) -> str | bytes:
    text = yaml.safe_dump(base, sort_keys=False)
    if kind == "bomb":
        return BOMB + text
    if kind == "huge":
        return "# " + "x" * (1 << 20) + "\n" + text
    if kind == "duplicate":
        return text + yaml.safe_dump({"rl": base["rl"]})
    if kind == "duplicate-pd":
        return text + yaml.safe_dump({"pd": base["pd"]})
    if kind == "duplicate-lora":
        return text + "lora_rank: 8\n"
    if kind == "recursive":
        return text + "extra: &r [1, *r]\n"
    if kind == "deep":
        return text + "extra: " + "[" * 200 + "]" * 200 + "\n"
    if kind == "binary":
        return text.encode() + b"note: \xff\xfe\n"
    return kind


def _write(path: Path, base: dict, change) -> Path:
    if callable(change):
        data = copy.deepcopy(base)
        change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    else:
        raw = _raw(change, base)
        path.write_bytes(raw) if isinstance(raw, bytes) else path.write_text(raw)
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """The workspace: broken copies of the shipped configs, a systems file, an empty folder."""
    w = tmp_path_factory.mktemp("hostile")
    (w / "empty").mkdir()
    (w / "systems.jsonl").write_text(json.dumps({"prompt_id": "p1", "responses": {"base": "a", "head": "b"}}) + "\n")
    (w / "bad-run").mkdir()  # a personas run folder whose recorded scale.yaml was edited badly
    _write(w / "bad-run/scale.yaml", {"name": "smoke", **_base("personas/smoke.yaml")}, _set("judge", "n_boot", "lots"))
    for case, base, change, *_ in WORLD + PERSONAS + COLLAB:
        _write(w / f"{case}.yaml", _base(base), change)
    rl = _base("rl/world-panel.yaml")
    rl.update(model=str(w / "no-model"), out=str(w / "rl-out"))
    for case, change, _ in RL:
        _write(w / f"{case}.yaml", rl, change)
    return w


def _mini_book(root: Path) -> Path:
    import nbformat

    (root / "book").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "_config.yml").write_text("title: t\nexecute:\n  execute_notebooks: 'off'\n")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/x/ch\n")
    (root / "book/intro.md").write_text("# intro\n")
    (root / "notebooks/x").mkdir(parents=True)
    params = nbformat.v4.new_code_cell('n = 1\nflag = False\nlabel = "a"')
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# ch"), params,
                                         nbformat.v4.new_code_cell("print(n, flag, label)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "notebooks/x/ch.ipynb")
    return root


@pytest.mark.parametrize("case,base,change,extra,expect", WORLD, ids=[c[0] for c in WORLD])
def test_a_bad_world_scale_is_refused_before_any_work(case, base, change, extra, expect, ws):
    line = refused(["world", "run", "--out", ws / f"out-{case}", "--scale", ws / f"{case}.yaml", *extra],
                   watch=[ws, CONFIGS], expect=expect)
    assert f"{case}.yaml" in line  # the file is named


@pytest.mark.parametrize("case,base,change,expect", PERSONAS, ids=[c[0] for c in PERSONAS])
def test_a_bad_personas_scale_is_refused_before_any_work(case, base, change, expect, ws):
    line = refused(["personas", "run", "--out", ws / f"out-{case}", "--scale", ws / f"{case}.yaml",
                    "--stages", "judge"], watch=[ws, CONFIGS], expect=expect)
    assert f"{case}.yaml" in line


@pytest.mark.parametrize("case,base,change,expect", COLLAB, ids=[c[0] for c in COLLAB])
def test_a_bad_collab_scale_is_refused_before_any_work(case, base, change, expect, ws):
    # a served scale's training stages are recorded as external: --stages models fails fast on older code
    stage = "models" if "full" in base else "eval"
    line = refused(["collab", "run", "--out", ws / f"out-{case}", "--scale", ws / f"{case}.yaml", "--stages", stage],
                   watch=[ws, CONFIGS], expect=expect)
    assert f"{case}.yaml" in line


@pytest.mark.parametrize("case,change,expect", RL, ids=[c[0] for c in RL])
def test_a_bad_rl_config_is_refused_before_any_work(case, change, expect, ws):
    line = refused(["rl", "--config", ws / f"{case}.yaml"], watch=[ws, CONFIGS], expect=expect)
    assert f"{case}.yaml" in line


@pytest.mark.parametrize("case,text,expect", PARAMS, ids=[c[0] for c in PARAMS])
def test_a_bad_params_file_is_refused_before_any_chapter_runs(case, text, expect, tmp_path, monkeypatch):
    book = _mini_book(tmp_path / "book")
    params = tmp_path / "params.yaml"
    params.write_text(text)
    monkeypatch.chdir(book)
    line = refused(["book", "build", "--no-html", "--params", params], watch=[tmp_path], expect=expect)
    assert "params.yaml" in line


@pytest.mark.parametrize("case,change,expect", CORRECTIONS, ids=[c[0] for c in CORRECTIONS])
def test_a_bad_correction_is_refused_before_the_book_is_touched(case, change, expect, tmp_path, monkeypatch):
    book = _mini_book(tmp_path / "book")
    good = {"date": "2026-01-01", "chapters": ["book/x/ch"], "claimed": "c", "stands": "s", "source": "x",
            "url": "https://example.org/x"}
    text = yaml.safe_dump([{**good, **change}]) if isinstance(change, dict) else change
    (book / "data/corrections.yml").write_text(text)
    monkeypatch.chdir(book)
    line = refused(["book", "build", "--no-html"], watch=[tmp_path], expect=expect)
    assert "corrections.yml" in line


@pytest.mark.parametrize("case,argv,expect", CLI, ids=[c[0] for c in CLI])
def test_a_bad_command_line_value_is_refused_as_it_is_parsed(case, argv, expect, ws, monkeypatch):
    monkeypatch.chdir(ROOT)
    refused(argv(ws), watch=[ws, CONFIGS], expect=expect)


def test_no_expected_phrase_is_in_its_own_file_name():
    """A case's phrase must come from the refusal, not from the file name the line also holds."""
    for group in (WORLD, PERSONAS, COLLAB, RL, PARAMS, CORRECTIONS, CLI):
        for case in group:
            assert case[-1].lower() not in f"{case[0]}.yaml".lower(), case[0]


def test_the_table_is_big_enough():
    n = len(WORLD) + len(PERSONAS) + len(COLLAB) + len(RL) + len(PARAMS) + len(CORRECTIONS) + len(CLI)
    assert n >= 50, n


def test_the_good_configs_of_the_table_pass(tmp_path, monkeypatch):
    """The breakage is the only difference: each base, written back unbroken, is accepted by the loaders."""
    from polyvox.studies.collab.pipeline import load_scale as collab_scale
    from polyvox.studies.personas.pipeline import load_scale as personas_scale
    from polyvox.studies.world.pipeline import load_scale as world_scale
    from polyvox.train.grpo import check_config

    for load, base in ((world_scale, "world/smoke.yaml"), (personas_scale, "personas/smoke.yaml"),
                       (collab_scale, "collab/smoke.yaml"), (collab_scale, "collab/full.yaml")):
        path = _write(tmp_path / base.replace("/", "-"), _base(base), lambda d: None)
        assert load(path)["name"] == path.stem
    rl = _base("rl/world-panel.yaml")
    rl.update(model=str(tmp_path / "no-model"), out=str(tmp_path / "rl-out"))
    assert check_config(_write(tmp_path / "rl.yaml", rl, lambda d: None))["model"] == str(tmp_path / "no-model")
