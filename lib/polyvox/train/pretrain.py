"""Training small causal LMs from scratch: a tokenizer trainer, packing, and a plain training loop.

- :func:`train_tokenizer`: byte-level BPE trained with ``tokenizers``, digits one token
  each (as Qwen's), the chat tokens special (dropped when decoding) and the format tags
  ordinary added tokens (as ``<think>`` is in Qwen3's tokenizer, so decoded completions
  keep them), and a Qwen-style chat template that honours ``enable_thinking``.
- :func:`pack`: documents joined with ``<|endoftext|>`` and cut into fixed-length rows.
- :func:`train_loop`: AdamW (β = 0.9, 0.95, weight decay 0.1), linear warm-up over 5%
  of the steps then cosine decay to zero, gradient clipping at 1.0, bf16 autocast on
  GPU. A plain PyTorch loop rather than ``Trainer``: the data are a few million tokens
  and the loop is the whole algorithm.
- :func:`save`: ``save_pretrained`` in bf16 (safetensors) with eos/pad set in the
  generation config.

Used by the test model (:mod:`polyvox.testing`) and the miniature world's models
(:mod:`polyvox.studies.world.models`).
"""
from __future__ import annotations

import math
from pathlib import Path

# chat tokens are special (dropped when decoding); the format tags are ordinary added
# tokens, as <think> is in Qwen3's tokenizer, so decoded completions keep them
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAGS = ["<think>", "</think>", "<mutipersonaDebate>", "</mutipersonaDebate>", "<answer>", "</answer>"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def train_tokenizer(texts: list[str], out: str | Path | None = None, vocab_size: int = 600,
                    eos: str = "<|im_end|>"):
    """Byte-level BPE on texts, digits one token each (as Qwen's), chat tokens special, tags ordinary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens(TAGS)  # ordinary added tokens: decoding keeps them (special tokens are dropped)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIAL[1:])
    fast.chat_template = CHAT_TEMPLATE
    if out is not None:
        fast.save_pretrained(out)
    return fast


def pack(tokenizer, docs: list[str], seq_len: int):
    import torch

    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids: list[int] = []
    for d in docs:
        ids += tokenizer(d, add_special_tokens=False)["input_ids"] + [eos]
    n = len(ids) // seq_len
    return torch.tensor(ids[: n * seq_len]).view(n, seq_len)


def sft_batches(rows: list[tuple[list[int], int]], batch: int, pad_id: int, generator):
    """A batch function for supervised fine-tuning with the loss on the reply only.

    ``rows`` are (token ids, prompt length); each call draws ``batch`` rows with ``generator``,
    right-pads them with ``pad_id`` and masks the prompt and the padding out of the labels (-100).
    """
    import torch

    def batch_fn(step):
        chosen = [rows[i] for i in torch.randint(0, len(rows), (batch,), generator=generator).tolist()]
        width = max(len(r[0]) for r in chosen)
        x = torch.full((batch, width), pad_id)
        y = torch.full((batch, width), -100)
        for i, (ids, n_prompt) in enumerate(chosen):
            x[i, : len(ids)] = torch.tensor(ids)
            y[i, n_prompt: len(ids)] = torch.tensor(ids[n_prompt:])
        return x, y
    return batch_fn


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def train_loop(model, batches_fn, steps: int, lr: float, device: str, log: list, label: str, progress=True):
    import torch
    from tqdm import tqdm

    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    bar = tqdm(range(steps), desc=label, disable=not progress)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, max(1, steps // 20))
        input_ids, labels = batches_fn(step)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=input_ids.to(device), labels=labels.to(device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == steps - 1:
            log.append({"stage": label, "step": step, "loss": loss.item()})
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()


def tiny_qwen3(tok, hidden: int, layers: int, head_dim: int, max_positions: int):
    """A randomly initialised Qwen3 causal LM for ``tok``: tied embeddings, FFN 3× hidden, one KV head
    per two query heads, ``hidden // head_dim`` query heads (at least one), eos/pad from the tokenizer."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    heads = max(1, hidden // head_dim)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=max(1, hidden // (2 * head_dim)),
                      head_dim=head_dim, max_position_embeddings=max_positions, tie_word_embeddings=True,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None,
                      rope_theta=10000.0)
    return Qwen3ForCausalLM(cfg)


def save(model, tok, path: Path) -> None:
    import torch

    path.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
    model.to(torch.float32)
    tok.save_pretrained(path)
