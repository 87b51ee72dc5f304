"""Shared fixtures. The tiny model is built once per test run (session scope) and loaded back
through the real ``from_pretrained`` path by every test that needs one.

Tiers: ``make test-fast`` runs ``-m "not slow"``; a test is ``slow`` when it trains a model,
starts a server or executes notebooks (whole modules mark themselves with ``pytestmark``).
"""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Path:
    """A randomly initialised tiny Qwen3 model and its tokenizer, saved with save_pretrained."""
    from polyvox.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture(scope="session")
def lora(tiny, tmp_path_factory) -> Path:
    """A LoRA adapter for the tiny model whose B matrices are off zero, so it changes outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    out = tmp_path_factory.mktemp("lora")
    peft_model.save_pretrained(out)
    return out
