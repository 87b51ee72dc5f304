"""The tiny Qwen3-architecture model and tokenizer that tests build (once per test run) and load back.

The tokenizer is a byte-level BPE trained with `tokenizers` on a small text
(problems in the panel and thinking formats), with the chat and tag tokens as
special tokens and a Qwen-style chat template that honours ``enable_thinking``.
The model is randomly initialised (seeded): it generates text of the right
shape, not sense. Both are saved with ``save_pretrained`` (safetensors) and
loaded back through the real ``from_pretrained`` path.
"""
from __future__ import annotations

from pathlib import Path

from .train.pretrain import train_tokenizer


def corpus() -> list[str]:
    from .formats import panel_prompt

    lines = []
    for a in range(2, 40):
        for b in range(2, 12):
            q = f"What is {a} plus {b}?"
            lines.append(panel_prompt(q) + f"<mutipersonaDebate> Expert 1: {a} + {b} = {a + b}. "
                         f"Expert 2: I agree. </mutipersonaDebate> <answer>{a + b}</answer>")
            lines.append(f"<think> {a} times {b} is {a * b}. </think> The answer is \\boxed{{{a * b}}}.")
    return lines


def build_tiny_model(out: str | Path, seed: int = 0, vocab_size: int = 600, hidden: int = 64, layers: int = 2) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fast = train_tokenizer(corpus(), out, vocab_size)
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(fast), hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4,
                      max_position_embeddings=2048, tie_word_embeddings=True,
                      eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, bos_token_id=None)
    model = Qwen3ForCausalLM(cfg)
    model.generation_config.eos_token_id = fast.eos_token_id
    model.generation_config.pad_token_id = fast.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    return out
