"""Sampling with real parts: a tiny Qwen3 model built here, loaded with from_pretrained."""
import json
import signal
import subprocess
import sys
import time

import pytest

from polyvox import formats
from polyvox.records import Sample, read_jsonl
from polyvox.backends import Request, SamplingParams
from polyvox.backends.hf import TransformersBackend
from polyvox.backends.vllm import vllm_sampling_kwargs
from polyvox.runs import grade
from polyvox.testing import build_tiny_model


def _generate(backend, n=4, max_tokens=16):
    reqs = [Request(formats.panel_prompt(f"What is {i} plus 2?"), seed=7) for i in range(n)]
    return backend.generate(reqs, SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=("</answer>",)))


def test_transformers_backend_generates_with_counts(tiny):
    backend = TransformersBackend(str(tiny), batch_size=3)
    outs = _generate(backend)
    assert len(outs) == 4
    for c in outs:
        assert 0 < c.completion_tokens <= 16 and c.prompt_tokens > 50
        assert c.finish_reason in ("stop", "length") and c.latency_s > 0
    assert any(c.finish_reason == "length" for c in outs)  # a random model rarely stops within 16 tokens
    # batching and length-sorting do not change greedy outputs
    single = TransformersBackend(str(tiny), batch_size=1)
    assert [c.text for c in _generate(single)] == [c.text for c in outs]


@pytest.mark.slow  # ~8 s: builds and loads an adapter
def test_lora_adapter_changes_outputs(tiny, lora):
    base = [c.text for c in _generate(TransformersBackend(str(tiny)))]
    adapted = [c.text for c in _generate(TransformersBackend(str(tiny), adapter=str(lora)))]
    assert base != adapted


def test_adapter_for_another_base_is_refused(tiny, lora, tmp_path):
    other = build_tiny_model(tmp_path / "other", hidden=32)
    with pytest.raises(ValueError, match="does not fit this base"):
        TransformersBackend(str(other), adapter=str(lora))


def _sample_cmd(model, out, n=3, limit=4, chunk=2):
    return [sys.executable, "-m", "polyvox.cli", "sample", "--task", "aime_panel", "--format", "panel",
            "--model", str(model), "--n", str(n), "--limit", str(limit), "--max-tokens", "12",
            "--chunk", str(chunk), "--batch-size", "2", "--out", str(out)]


@pytest.mark.slow
def test_sigkill_then_rerun_gives_every_key_once(tiny, tmp_path, root):
    out = tmp_path / "run"
    proc = subprocess.Popen(_sample_cmd(tiny, out), cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rollouts = out / "rollouts.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (rollouts.exists() and rollouts.read_text().count("\n") >= 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = rollouts.read_text().count("\n")
    assert 2 <= partial < 12, "the kill should land mid-run"
    done = subprocess.run(_sample_cmd(tiny, out), cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    keys = [s.key for s in read_jsonl(rollouts, Sample)]
    assert len(keys) == 12 and len(set(keys)) == 12
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["settings"]["n"] == 3
    # a rerun with other settings into the same folder is refused
    other = subprocess.run(_sample_cmd(tiny, out, n=5), cwd=root, capture_output=True, text=True)
    assert other.returncode == 1 and "other settings (n)" in other.stderr


@pytest.mark.slow
def test_grade_run_and_malformed_line(tiny, tmp_path, root):
    out = tmp_path / "run"
    assert subprocess.run(_sample_cmd(tiny, out, n=1, limit=2), cwd=root, capture_output=True).returncode == 0
    graded = grade(out)
    assert len(read_jsonl(graded)) == 2
    lines = (out / "rollouts.jsonl").read_text().splitlines()
    (out / "rollouts.jsonl").write_text(lines[0] + "\n{oops\n")
    bad = subprocess.run([sys.executable, "-m", "polyvox.cli", "grade", str(out)], cwd=root, capture_output=True, text=True)
    assert bad.returncode == 1 and "rollouts.jsonl:2: malformed JSON" in bad.stderr


def test_vllm_parameter_translation():
    vllm = pytest.importorskip("vllm", reason="vLLM is not installed on this CPU host (GPU hosts: requirements-gpu.txt)")
    kw = vllm_sampling_kwargs(SamplingParams(max_tokens=64, temperature=0.7, top_p=0.9, stop=("</answer>",)), seed=3)
    sp = vllm.SamplingParams(**kw)
    assert (sp.max_tokens, sp.temperature, sp.top_p, sp.seed, sp.stop) == (64, 0.7, 0.9, 3, ["</answer>"])


def test_vllm_backend_says_what_is_missing():
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed; this checks the message on hosts without it")
    except ImportError:
        pass
    from polyvox.backends.vllm import VLLMBackend

    with pytest.raises(ImportError, match="requirements-gpu.txt"):
        VLLMBackend("x")


@pytest.mark.slow
def test_a_run_with_an_adapter_resumes_and_a_changed_adapter_is_refused(tiny, lora, tmp_path, root):
    import shutil

    adapter = tmp_path / "lora"
    shutil.copytree(lora, adapter)
    out = tmp_path / "run"
    cmd = _sample_cmd(tiny, out, n=1, limit=1) + ["--adapter", str(adapter)]
    assert subprocess.run(cmd, cwd=root, capture_output=True).returncode == 0
    again = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert len(read_jsonl(out / "rollouts.jsonl", Sample)) == 1
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["lora_alpha"] = cfg["lora_alpha"] * 2  # same path, other adapter
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    refused = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    assert refused.returncode == 1 and "other settings (adapter_sha256)" in refused.stderr
