"""A request that would run past the model's positions is refused before sampling, on the shipped tiny model."""
from __future__ import annotations

from pathlib import Path

import pytest

from polyvox.backends.base import Request, SamplingParams
from polyvox.backends.hf import TransformersBackend, check_positions

ROOT = Path(__file__).resolve().parents[1]


class _Config:
    max_position_embeddings = 16


class _Model:
    config = _Config()


@pytest.mark.parametrize("lengths, max_tokens, refused", [
    ([3, 5], 11, False),   # 5 + 11 = 16: the last position is the model's last
    ([3, 5], 12, True),    # 17 > 16
    ([17], 0, True),       # the prompt alone is too long
    ([], 100, False),      # nothing to check
])
def test_prompt_plus_max_tokens_against_the_positions(lengths, max_tokens, refused):
    ids = [[0] * n for n in lengths]
    if refused:
        with pytest.raises(ValueError, match="pass the model's 16 positions"):
            check_positions(_Model(), ids, max_tokens)
    else:
        check_positions(_Model(), ids, max_tokens)


def test_a_model_without_a_positions_field_is_not_checked():
    check_positions(object(), [[0] * 10_000], 10_000)


@pytest.mark.slow
def test_the_backend_refuses_before_sampling_on_tiny_chat():
    be = TransformersBackend(str(ROOT / "data/models/tiny-chat"), device="cpu")
    positions = be.model.config.max_position_embeddings
    with pytest.raises(ValueError, match=f"pass the model's {positions} positions"):
        be.generate([Request("Hello there.", seed=0)], SamplingParams(max_tokens=positions, temperature=1.0))
    out = be.generate([Request("Hello there.", seed=0)], SamplingParams(max_tokens=4, temperature=1.0))
    assert len(out) == 1
