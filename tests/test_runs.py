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
