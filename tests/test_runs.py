"""The one run path with a real tiny model: sample, resume, merge, grade, per-problem counts, the request cache."""
import json
import shutil

import pytest

from polyvox import runs
from polyvox.backends import SamplingParams, make_backend
from polyvox.cache import CachingBackend, CompletionCache, request_key
from polyvox.backends import Request
from polyvox.records import RecordError, Sample, read_jsonl

PARAMS = SamplingParams(max_tokens=6, temperature=1.0)


@pytest.fixture(scope="module")
def backend(tiny):
    return make_backend("transformers", str(tiny), batch_size=4)


def _run(out, backend, root, **kw):
    opts = dict(task="aime_panel", fmt="panel", backend=backend, n=2, params=PARAMS, limit=3,
                data_dir=root / "data", progress=False, chunk=4)
    opts.update(kw)
    return runs.sample(out, **opts)


def test_sample_writes_settings_with_the_models_identity_and_resumes(backend, tmp_path, root):
    out = _run(tmp_path / "run", backend, root)
    settings = json.loads((out / "manifest.json").read_text())["settings"]
    assert settings["backend"] == "transformers" and len(settings["weights_sha256"]) == 64
    assert settings["adapter_sha256"] is None and settings["chunk"] == 4
    assert str(tmp_path) not in json.dumps(settings)  # the model is named by its folder and weights hash
    before = (out / "rollouts.jsonl").read_bytes()
    _run(tmp_path / "run", backend, root)  # complete: nothing to add
    assert (out / "rollouts.jsonl").read_bytes() == before


def test_a_folder_with_records_but_no_settings_is_not_adopted(backend, tmp_path, root):
    out = tmp_path / "foreign"
    out.mkdir()
    (out / "rollouts.jsonl").write_text("")
    (out / "manifest.json").write_text(json.dumps({"status": "complete"}))
    with pytest.raises(ValueError, match="never adopts"):
        _run(out, backend, root)
    assert json.loads((out / "manifest.json").read_text()) == {"status": "complete"}


def test_merge_joins_shards_and_refuses_mixed_ones(backend, tmp_path, root):
    a = _run(tmp_path / "s0", backend, root, shard=0, nshards=2)
    b = _run(tmp_path / "s1", backend, root, shard=1, nshards=2)
    merged = runs.merge([a, b], tmp_path / "merged")
    assert len(read_jsonl(merged / "rollouts.jsonl", Sample)) == 3 * 2
    other = _run(tmp_path / "other", backend, root, shard=1, nshards=2, n=3)
    with pytest.raises(ValueError, match=r"another run \(n differ"):
        runs.merge([a, other], tmp_path / "mixed")
    with pytest.raises(RecordError, match="also in another shard"):
        runs.merge([a, a], tmp_path / "twice")
    with pytest.raises(ValueError, match="merge writes a new folder"):
        runs.merge([a, b], merged)


def test_grade_carries_problem_labels_and_counts_per_problem(backend, tmp_path, root):
    out = _run(tmp_path / "w", backend, root, task="world", n=3, limit=None,
               task_options={"levels": [1, 2], "per_level": 2, "seed": 5, "split": "test"})
    runs.grade(out, data_dir=root / "data")
    df = runs.graded_samples(out)
    assert set(df.level) == {1, 2} and len(df) == 12
    grading = json.loads((out / "manifest.json").read_text())["grading"]
    assert grading["grader"] == "integer" and grading["options"]["gold_as"] == "latex" and grading["records"] == 12
    counts = runs.per_problem_counts(out)
    assert list(counts.columns[:3]) == ["id", "n_samples", "n_correct"] and (counts.n_samples == 3).all()
    assert counts.n_correct.sum() == int(df.correct.sum())


def test_grade_refuses_duplicate_keys_naming_the_line(backend, tmp_path, root):
    out = _run(tmp_path / "dup", backend, root)
    lines = (out / "rollouts.jsonl").read_text().splitlines()
    (out / "rollouts.jsonl").write_text("\n".join(lines + [lines[0]]) + "\n")
    with pytest.raises(RecordError, match=rf"rollouts.jsonl:{len(lines) + 1}: duplicate key"):
        runs.grade(out, data_dir=root / "data")


class Counting:
    """A real backend whose calls are counted."""

    def __init__(self, inner):
        self.inner, self.name, self.requests = inner, inner.name, 0

    def prompt(self, fmt, text):
        return self.inner.prompt(fmt, text)

    def identity(self):
        return self.inner.identity()

    def generate(self, requests, params):
        self.requests += len(requests)
        return self.inner.generate(requests, params)


def test_cache_hit_miss_and_torn_line(backend, tmp_path, root):
    counted = Counting(backend)
    path = tmp_path / "cache.jsonl"
    _run(tmp_path / "a", counted, root, cache=path)
    assert counted.requests == 6
    first = (tmp_path / "a/rollouts.jsonl").read_text()
    _run(tmp_path / "b", counted, root, cache=path)  # same requests, new folder: all hits
    assert counted.requests == 6
    manifest = json.loads((tmp_path / "b/manifest.json").read_text())
    assert manifest["cache"] == {"hits": 6, "misses": 0}
    texts = lambda p: [json.loads(l)["completion"] for l in p.read_text().splitlines()]  # noqa: E731
    assert texts(tmp_path / "b/rollouts.jsonl") == [json.loads(l)["completion"] for l in first.splitlines()]
    # a torn last line (a crash mid-append) is cut; the other entries still answer
    with path.open("a") as fh:
        fh.write('{"key": "abc", "completion": {"te')
    cache = CompletionCache(path)
    assert len(cache.entries) == 6 and path.read_text().endswith("\n")
    # other sampling parameters are other keys: misses
    _run(tmp_path / "c", counted, root, cache=path, params=SamplingParams(max_tokens=5, temperature=1.0))
    assert counted.requests == 12


def test_cache_key_covers_identity_request_and_params():
    ident = {"backend": "transformers", "model": "m", "weights_sha256": "w", "adapter_sha256": None}
    base = request_key(ident, Request("p", 1), PARAMS)
    assert base == request_key(dict(ident), Request("p", 1), PARAMS)
    assert base != request_key({**ident, "weights_sha256": "v"}, Request("p", 1), PARAMS)
    assert base != request_key({**ident, "adapter_sha256": "a"}, Request("p", 1), PARAMS)
    assert base != request_key(ident, Request("p", 2), PARAMS)
    assert base != request_key(ident, Request("p", 1, True, {"enable_thinking": False}), PARAMS)
    assert base != request_key(ident, Request("p", 1), SamplingParams(max_tokens=7))


def test_a_retrained_model_in_the_same_folder_is_a_new_identity(tiny, tmp_path):
    from polyvox.backends import model_identity

    copy = tmp_path / "m"
    shutil.copytree(tiny, copy)
    before = model_identity(str(copy))
    assert before["weights_sha256"] == model_identity(str(tiny))["weights_sha256"]  # same weights, any folder
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert model_identity(str(copy))["weights_sha256"] != before["weights_sha256"]


def test_caching_backend_passes_prompts_through(backend, tmp_path):
    cached = CachingBackend(backend, tmp_path / "c.jsonl")
    assert cached.prompt("think", "hi") == backend.prompt("think", "hi")
    assert cached.identity() == backend.identity()


class Reworded(Counting):
    """The same model, with another prompt code (a changed template): what a resume after a prompt fix would use."""

    def prompt(self, fmt, text):
        p = self.inner.prompt(fmt, text)
        return type(p)("Answer carefully.\n" + p.text, p.stop, p.chat, dict(p.template_kwargs))


def test_a_resume_refuses_a_folder_sampled_from_other_prompts(backend, tmp_path, root):
    """The settings do not name the prompt code, so the records' prompt hashes do: a folder cut short (a kill) and
    resumed by code that builds other prompts is refused, naming the file and line, before anything is written;
    the same code resumes it."""
    out = _run(tmp_path / "run", backend, root)
    lines = (out / "rollouts.jsonl").read_text().splitlines()
    (out / "rollouts.jsonl").write_text("\n".join(lines[:3]) + "\n")  # three of six samples survive
    manifest = (out / "manifest.json").read_bytes()
    reworded = Reworded(backend)
    assert {pid for _, pid, _, _, _ in runs.prompt_mismatches(out / "rollouts.jsonl", {
        json.loads(l)["problem_id"]: reworded.prompt("panel", "x") for l in lines[:3]})} == \
        {json.loads(l)["problem_id"] for l in lines[:3]}
    with pytest.raises(RecordError, match=r"rollouts.jsonl:1: problem .* sampled from another prompt than this code "
                                          r"builds .*3 such records"):
        _run(out, reworded, root)
    assert (out / "manifest.json").read_bytes() == manifest and reworded.requests == 0
    _run(out, backend, root)  # the code that sampled it completes it
    assert len((out / "rollouts.jsonl").read_text().splitlines()) == 6
    assert runs.prompt_mismatches(out / "rollouts.jsonl", {}) == []


class TemplatedTwice(Counting):
    """The prompt code before the fix: a think prompt templated here and marked as a chat request, so the local
    backend templated it again (same text, same request hash; a longer rendered prompt)."""

    def prompt(self, fmt, text):
        p = self.inner.prompt(fmt, text)
        return type(p)(p.text, p.stop, True, dict(p.template_kwargs))


def test_recorded_prompts_are_checked_by_what_the_model_read(backend, tmp_path, root):
    """check_recorded_prompts: a folder sampled through a doubly templated prompt has the same request hashes as
    the right one, but every record's prompt length differs from the prompt this code renders; a folder sampled by
    this code has none; and a resume of the doubled folder is refused."""
    doubled = _run(tmp_path / "doubled", TemplatedTwice(backend), root, fmt="think")
    right = _run(tmp_path / "right", backend, root, fmt="think")
    got = runs.check_recorded_prompts(doubled, backend.tokenizer, root / "data")
    assert got["checked"] == 6 and got["mismatched"] == 6 and got["first"][2] == "prompt_tokens"
    assert got["first"][3] > got["first"][4]  # the doubled prompt is the longer one
    assert runs.check_recorded_prompts(right, backend.tokenizer, root / "data")["mismatched"] == 0
    hashes = lambda p: [json.loads(l)["prompt_hash"] for l in (p / "rollouts.jsonl").read_text().splitlines()]  # noqa: E731
    assert hashes(doubled) == hashes(right)
    lines = (doubled / "rollouts.jsonl").read_text().splitlines()
    (doubled / "rollouts.jsonl").write_text("\n".join(lines[:2]) + "\n")
    with pytest.raises(RecordError, match=r"rollouts.jsonl:1: .*\(prompt_tokens \d+, now \d+; 2 such records\)"):
        _run(doubled, backend, root, fmt="think")

