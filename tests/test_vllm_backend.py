"""The vllm backend's own logic, on CPU without vLLM.

vLLM cannot be installed on this host (it needs CUDA), so the parts that call it run against a
small fake ``vllm`` package put in ``sys.modules`` by the ``fake_vllm`` fixture: an ``LLM`` that
records the engine's keyword arguments, the prompts, sampling parameters and LoRA requests it is
given, and answers with outputs shaped like vLLM's ``RequestOutput``; ``SamplingParams`` and
``LoRARequest`` as plain records. What the fake checks is polyvox's side only — the keyword
translation, the LoRA settings and ids, the environment set before import, the mapping of outputs
to completions. That vLLM 0.24 accepts all of it is checked on the GPU host by bench/vllm_bench.py.
The pure helpers (ranks, engine settings, the environment default, the one-line import error)
run without any fake.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from polyvox.backends import Request, SamplingParams
from polyvox.backends.vllm import (FLASHINFER_SAMPLER_ENV, LORA_RANKS, apply_vllm_env, lora_engine_kwargs,
                                   lora_rank_slot, vllm_sampling_kwargs)

ROOT = Path(__file__).resolve().parents[1]


def _adapter(folder: Path, rank: int) -> str:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
    (folder / "adapter_model.safetensors").write_bytes(b"")  # existence is what the backend checks
    return str(folder)


@pytest.fixture
def model_dir(tmp_path):
    m = tmp_path / "model"
    m.mkdir()
    (m / "config.json").write_text("{}")
    return str(m)


class _Tok:
    """Stands in for vLLM's tokenizer: one id per character; records add_special_tokens."""

    def __init__(self):
        self.special = []

    def encode(self, text, add_special_tokens=True):
        self.special.append(add_special_tokens)
        return [ord(c) % 251 for c in text] + ([1] if add_special_tokens else [])


class _Out:
    def __init__(self, text, token_ids, finish_reason):
        self.text, self.token_ids, self.finish_reason = text, token_ids, finish_reason


@pytest.fixture
def fake_vllm(monkeypatch):
    """A fake vllm package (see the module docstring); yields the record of what the engine saw."""
    seen = {"engines": [], "calls": []}

    class LLM:
        def __init__(self, **kwargs):
            seen["engines"].append({"kwargs": kwargs, "env": os.environ.get(FLASHINFER_SAMPLER_ENV)})
            self.tok, self.closed = _Tok(), False
            seen["tok"] = self.tok

        def get_tokenizer(self):
            return self.tok

        def generate(self, prompts, sampling_params, lora_request=None, use_tqdm=True):
            seen["calls"].append({"prompts": prompts, "params": sampling_params, "lora": lora_request})
            outs = []
            for p, sp in zip(prompts, sampling_params):
                finish = seen.get("finish", "stop")
                n = sp.kwargs["max_tokens"] if finish == "length" else 3
                outs.append(types.SimpleNamespace(prompt_token_ids=p["prompt_token_ids"],
                                                  outputs=[_Out("x" * n, list(range(n)), finish)]))
            return outs

        def shutdown(self):
            seen["shutdown"] = seen.get("shutdown", 0) + 1

    class VSP:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class LoRARequest:
        def __init__(self, lora_name, lora_int_id, lora_path):
            self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, VSP
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    for name, mod in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delenv(FLASHINFER_SAMPLER_ENV, raising=False)
    return seen


def test_sampling_kwargs_translation():
    kw = vllm_sampling_kwargs(SamplingParams(max_tokens=64, temperature=0.7, top_p=0.9, stop=("</answer>",)), seed=3)
    assert kw == {"n": 1, "temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "stop": ["</answer>"], "seed": 3,
                  "include_stop_str_in_output": False, "skip_special_tokens": True}
    assert vllm_sampling_kwargs(SamplingParams(), seed=0)["stop"] is None


def test_environment_default_and_callers_value_wins():
    env = {}
    assert apply_vllm_env(env) == {FLASHINFER_SAMPLER_ENV: "0"} and env[FLASHINFER_SAMPLER_ENV] == "0"
    env = {FLASHINFER_SAMPLER_ENV: "1"}
    assert apply_vllm_env(env) == {} and env[FLASHINFER_SAMPLER_ENV] == "1"


def test_environment_is_set_before_the_engine_starts(fake_vllm, model_dir):
    from polyvox.backends.vllm import VLLMBackend

    VLLMBackend(model_dir)
    assert fake_vllm["engines"][0]["env"] == "0"


def test_missing_vllm_is_one_clear_line(monkeypatch, model_dir):
    from polyvox.backends.vllm import VLLMBackend

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError, as on this host
    monkeypatch.delenv(FLASHINFER_SAMPLER_ENV, raising=False)  # the backend sets it: restored after the test
    with pytest.raises(ImportError) as err:
        VLLMBackend(model_dir)
    msg = str(err.value)
    assert "\n" not in msg and "requirements-gpu.txt" in msg and msg.startswith("the vllm backend needs vLLM")


def test_lora_rank_slots():
    assert [lora_rank_slot(r) for r in (1, 4, 8, 9, 16, 17, 32, 300, 512)] == [1, 8, 8, 16, 16, 32, 32, 320, 512]
    with pytest.raises(ValueError, match="above vLLM's largest"):
        lora_rank_slot(513)
    assert lora_rank_slot(4, ranks=(16, 8)) == 8 and LORA_RANKS[-1] == 512


def test_lora_engine_settings(tmp_path):
    heads = [_adapter(tmp_path / f"h{i}", 4) for i in range(3)]
    mix = _adapter(tmp_path / "mix", 16)
    assert lora_engine_kwargs([]) == {}
    assert lora_engine_kwargs(heads) == {"enable_lora": True, "max_lora_rank": 8, "max_loras": 3, "max_cpu_loras": 3}
    assert lora_engine_kwargs(heads + [mix])["max_lora_rank"] == 16
    many = [_adapter(tmp_path / f"m{i}", 4) for i in range(20)]
    kw = lora_engine_kwargs(many)
    assert (kw["max_loras"], kw["max_cpu_loras"]) == (16, 20)  # 16 on the GPU at once, all 20 kept on the CPU
    assert lora_engine_kwargs([], max_lora_rank=20) == {"enable_lora": True, "max_lora_rank": 32, "max_loras": 16,
                                                        "max_cpu_loras": 16}
    assert lora_engine_kwargs(heads, max_loras=2)["max_loras"] == 2
    with pytest.raises(ValueError, match="below the rank"):
        lora_engine_kwargs([mix], max_lora_rank=8)


def test_lora_requests_per_adapter_stable_and_deduplicated(fake_vllm, model_dir, tmp_path):
    from polyvox.backends.vllm import VLLMBackend

    a, b, c = (_adapter(tmp_path / n, r) for n, r in (("a", 32), ("b", 4), ("c", 16)))
    b_again = str(tmp_path / "a" / ".." / "b")  # another spelling of b's folder
    be = VLLMBackend(model_dir, a, adapters=[b, a, b_again])
    kw = fake_vllm["engines"][0]["kwargs"]
    assert (kw["enable_lora"], kw["max_lora_rank"], kw["max_loras"]) == (True, 32, 2)
    params = SamplingParams(max_tokens=5)
    reqs = [Request("p0", 1), Request("p1", 2, adapter=b_again), Request("p2", 3, adapter=c),
            Request("p3", 4, adapter=b)]
    be.generate(reqs, params)
    first = fake_vllm["calls"][-1]["lora"]
    assert [x.lora_int_id for x in first] == [1, 2, 3, 2]  # a is the default (1), b listed next (2), c new (3)
    assert first[1] is first[3]  # one LoRARequest per folder
    assert len({x.lora_name for x in first}) == 3 and first[0].lora_path == str(Path(a).resolve())
    be.generate(list(reversed(reqs)), params)
    assert [x.lora_int_id for x in fake_vllm["calls"][-1]["lora"]] == [2, 3, 2, 1]  # stable across calls
    assert [x is y for x, y in zip(fake_vllm["calls"][-1]["lora"], reversed(first))] == [True] * 4


def test_adapters_the_engine_cannot_serve_are_refused(fake_vllm, model_dir, tmp_path):
    from polyvox.backends.vllm import VLLMBackend

    small, big = _adapter(tmp_path / "small", 4), _adapter(tmp_path / "big", 64)
    with pytest.raises(ValueError, match="without LoRA"):
        VLLMBackend(model_dir).generate([Request("p", adapter=small)], SamplingParams())
    with pytest.raises(ValueError, match="above the engine's max_lora_rank 8"):
        VLLMBackend(model_dir, small).generate([Request("p", adapter=big)], SamplingParams())
    with pytest.raises(ValueError, match="no such adapter folder"):
        VLLMBackend(model_dir, small).generate([Request("p", adapter=str(tmp_path / "nope"))], SamplingParams())
    assert len(fake_vllm["calls"]) == 0  # refused before anything was sent


def test_no_adapter_sends_no_lora_and_outputs_map_to_completions(fake_vllm, model_dir):
    from polyvox.backends.vllm import VLLMBackend

    be = VLLMBackend(model_dir, max_model_len=512)
    assert "enable_lora" not in fake_vllm["engines"][0]["kwargs"]
    assert fake_vllm["engines"][0]["kwargs"]["max_model_len"] == 512
    params = SamplingParams(max_tokens=7, temperature=0.5, stop=("</answer>",))
    outs = be.generate([Request("abc", 11), Request("hello", 12), Request("abc", 13)], params)
    call = fake_vllm["calls"][-1]
    assert call["lora"] is None
    assert call["prompts"][0] == {"prompt_token_ids": [ord(c) % 251 for c in "abc"]}  # no special tokens added
    assert set(fake_vllm["tok"].special) == {False}
    assert [sp.kwargs["seed"] for sp in call["params"]] == [11, 12, 13]  # each request its own seed
    assert all(sp.kwargs["stop"] == ["</answer>"] and not sp.kwargs["include_stop_str_in_output"]
               for sp in call["params"])
    assert [(c.prompt_tokens, c.completion_tokens, c.finish_reason) for c in outs] == \
        [(3, 3, "stop"), (5, 3, "stop"), (3, 3, "stop")]
    fake_vllm["finish"] = "length"
    [c] = be.generate([Request("abc", 1)], params)
    assert (c.completion_tokens, c.finish_reason) == (7, "length")
    fake_vllm["finish"] = "abort"
    with pytest.raises(RuntimeError, match="'abort'"):
        be.generate([Request("abc", 1)], params)
    assert be.generate([], params) == []
    be.close()
    be.close()
    assert fake_vllm["shutdown"] == 1 and be.llm is None


def test_request_adapter_field():
    r = Request("p", 3)
    assert r.adapter is None and r.hash() == Request("p", 3).hash()
    assert Request("p", 3, adapter="x").hash() != r.hash() != Request("p", 3, adapter="y").hash()
    from polyvox.formats import Prompt

    assert Request.of(Prompt("t", (), False), 1, adapter="a").adapter == "a"


def test_bench_help():
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "vllm_bench.py"), "--help"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    for flag in ("--rounds", "--quick", "--out", "--systems"):
        assert flag in res.stdout
