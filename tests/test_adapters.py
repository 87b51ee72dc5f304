"""Exact mixing by rank concatenation on the real tiny model with four real LoRA adapters.

Slow tier (loads and generates with real models), except the pickle refusal."""
import pytest
import torch

from polyvox import adapters as ad

RECIPES = {  # seed 002's recipes: weights on (warm, impersonal, concise, thorough)
    "warm+concise": (0.75, -0.25, 0.75, -0.25),
    "impersonal+concise": (-0.25, 0.75, 0.75, -0.25),
    "warm+thorough": (0.375, 0.125, -0.25, 0.75),
    "impersonal+thorough": (0.125, 0.375, -0.25, 0.75),
}
POLES = ("warm", "impersonal", "concise", "thorough")


def _base(tiny):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def heads(tiny, tmp_path_factory):
    """Four LoRA heads with off-zero B and different ranks/alphas (so scales differ)."""
    from peft import LoraConfig, get_peft_model

    out = {}
    for i, pole in enumerate(POLES):
        torch.manual_seed(i)
        model = get_peft_model(_base(tiny), LoraConfig(r=2 + i, lora_alpha=4 + 3 * i,
                                                       target_modules=["q_proj", "v_proj", "up_proj"]))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.3)
        path = tmp_path_factory.mktemp(pole)
        model.save_pretrained(path)
        out[pole] = path
    return out


@pytest.mark.slow
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_mix_delta_equals_weighted_sum(tiny, heads, recipe):
    model = ad.load_adapters(_base(tiny), heads)
    weights = dict(zip(POLES, RECIPES[recipe]))
    expected = ad.expected_delta(model, weights)
    ad.mix(model, weights, recipe)
    got = ad.delta_weights(model, recipe)
    assert set(got) == set(expected) and len(got) > 0
    for key in expected:
        assert torch.allclose(got[key], expected[key], atol=1e-6, rtol=1e-5), key
    assert model.peft_config[recipe].r == sum(2 + i for i in range(4))


@pytest.mark.slow
def test_generation_with_mix_equals_manually_merged_model(tiny, heads):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    weights = dict(zip(POLES, RECIPES["warm+thorough"]))
    model = ad.load_adapters(_base(tiny), heads)
    merged = ad.merged_copy(_base(tiny), ad.expected_delta(model, weights))
    ad.mix(model, weights, "mix")
    enc = tok(["What is 3 plus 4?", "What is 12 plus 9?"], return_tensors="pt", padding=True)
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        a = model.generate(**enc, **kw)
        b = merged.generate(**enc, **kw)
        la = model(**enc).logits
        lb = merged(**enc).logits
    assert torch.equal(a, b)
    assert torch.allclose(la, lb, atol=1e-4)
    # the mix really changes the model (otherwise the equality above says nothing)
    with torch.no_grad():
        assert not torch.allclose(_base(tiny)(**enc).logits, la, atol=1e-3)


@pytest.mark.slow
def test_saved_mix_loads_back_with_the_same_delta(tiny, heads, tmp_path):
    from peft import PeftModel

    weights = dict(zip(POLES, RECIPES["impersonal+concise"]))
    out = ad.save_mix(tiny, heads, weights, tmp_path / "mix")
    loaded = PeftModel.from_pretrained(_base(tiny), str(out))
    expected = ad.expected_delta(ad.load_adapters(_base(tiny), heads), weights)
    got = ad.delta_weights(loaded, "default")
    for key in expected:
        assert torch.allclose(got[key], expected[key], atol=1e-6), key
    assert (out / "adapter_model.safetensors").exists() and not list(out.glob("*.bin"))


@pytest.mark.slow
def test_refuses_an_existing_name(tiny, heads):
    model = ad.load_adapters(_base(tiny), heads)
    with pytest.raises(ad.AdapterError, match="already exists"):
        ad.mix(model, {"warm": 1.0, "concise": 1.0}, "warm")
    ad.mix(model, {"warm": 1.0, "concise": 1.0}, "m")
    with pytest.raises(ad.AdapterError, match="already exists"):
        ad.mix(model, {"warm": 0.5, "concise": 0.5}, "m")


@pytest.mark.slow
@pytest.mark.parametrize("flag,message", [("use_rslora", "rsLoRA"), ("use_dora", "DoRA")])
def test_refuses_rslora_and_dora(tiny, tmp_path, flag, message):
    from peft import LoraConfig, get_peft_model

    paths = {}
    for name in ("x", "y"):
        m = get_peft_model(_base(tiny), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], **{flag: True}))
        m.save_pretrained(tmp_path / name)
        paths[name] = tmp_path / name
    with pytest.raises(ad.AdapterError, match=message):
        ad.load_adapters(_base(tiny), paths)


def test_refuses_pickled_adapters(tmp_path):
    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "adapter_model.bin").write_bytes(b"\x80")
    with pytest.raises(ad.AdapterError, match="safetensors only"):
        ad.adapter_config(tmp_path)
