"""The miniature pool: one tokenizer, four tiny Qwen3 models, protocol-distillation adapters.

- Tokenizer: :func:`polyvox.train.pretrain.train_tokenizer` on solo solutions and traces
  of both tasks (byte-level BPE, digits one token each, the Qwen-style chat template).
- Base models (``small``, ``mid``, ``big`` and the single ``large`` reference), Qwen3
  architecture trained from scratch, sizes chosen in the scale file so their parameter
  counts stand roughly as the study's 1.7 : 4 : 8 : 14. Each is trained on chat-formatted
  solo solutions (:func:`.traces.solo`), loss on the assistant turn only — the stand-in
  for an instruction-tuned Qwen3 that has never seen the protocol.
- Protocol distillation (PD): SFT of each agent on its turns of the coordination traces
  (:func:`.traces.sft_examples`), loss on the turn only — a LoRA adapter (``mode: lora``,
  all linear layers) or a full fine-tune (``mode: full``; the recorded cpu run, because a
  rank-8 LoRA plateaued at a loss near 2.2 and never learned the action tag in its first
  attempt); ``homo``: ``mid`` trained on all three roles' turns (the prompt names the
  role), for the homogeneous pool.
Training: :func:`polyvox.train.pretrain.train_loop` (AdamW, warm-up then cosine), seeded.
Saved with ``save_pretrained`` (safetensors; base models in bf16) with a ``card.json``.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

from ...adapters import save_adapter
from ...train.pretrain import save, sft_batches, train_loop, train_tokenizer
from .traces import solo

MODELS = ("small", "mid", "big", "large")


def chat_rows(tok, pairs: list[tuple[str, str]], seq_len: int) -> list[tuple[list[int], int]]:
    rows = []
    for user, answer in pairs:
        prompt = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=True)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        f_ids = tok(prompt + answer + "<|im_end|>", add_special_tokens=False)["input_ids"][:seq_len]
        rows.append((f_ids, len(p_ids)))
    return rows


def batcher(rows, batch: int, pad_id: int, seed: int):
    """Reply-only-loss SFT batches over (ids, prompt length) rows (:func:`polyvox.train.pretrain.sft_batches`)."""
    import torch

    return sft_batches(rows, batch, pad_id, torch.Generator().manual_seed(seed))


def kv_heads(hidden: int) -> int:
    """Key/value heads: at most hidden // 64, and a divisor of the query heads (hidden // 32)."""
    heads = max(1, hidden // 32)
    return max(d for d in range(1, heads + 1) if heads % d == 0 and d <= max(1, hidden // 64))


def build_tokenizer(out: Path, texts: list[str], vocab: int):
    """Train the tokenizer, or load the one an interrupted run of this stage already saved."""
    if (out / "tokenizer" / "tokenizer.json").exists():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(out / "tokenizer")
    return train_tokenizer(texts, out / "tokenizer", vocab, eos="<|im_end|>")


def device() -> str:
    """Where the pool trains: the GPU when there is one (bf16 autocast in ``train_loop``), else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def train_base(out: Path, name: str, spec: dict, tok, pairs, seq_len: int, batch: int, steps: int, lr: float,
               seed: int, progress: bool = False) -> dict:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    done = out / name / "card.json"
    if done.exists():  # an interrupted models stage keeps the models it finished (same spec and steps)
        card = json.loads(done.read_text())
        if all(card.get(k) == v for k, v in spec.items()) and card.get("steps") == steps and card.get("lr") == lr:
            return card
    torch.manual_seed(seed)
    h = spec["hidden"]
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=h, intermediate_size=spec["intermediate"],
                      num_hidden_layers=spec["layers"], num_attention_heads=max(1, h // 32),
                      num_key_value_heads=kv_heads(h), head_dim=32, max_position_embeddings=1024,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None, rope_theta=10000.0)
    dev = device()
    model = Qwen3ForCausalLM(cfg).to(dev)
    log: list = []
    t0 = time.time()
    rows = chat_rows(tok, pairs, seq_len)
    train_loop(model, batcher(rows, batch, tok.pad_token_id, seed), steps, lr, dev, log, name, progress)
    save(model, tok, out / name)
    n = sum(p.numel() for p in model.parameters())
    card = {"name": name, "parameters": n, **spec, "vocab": len(tok), "steps": steps, "batch": batch, "lr": lr,
            "examples": len(rows), "seed": seed, "device": dev, "seconds": round(time.time() - t0, 1),
            "final_loss": log[-1]["loss"], "loss_log": log,
            "stage": "trained from scratch on chat-formatted solo solutions (assistant turn only)"}
    (out / name / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def train_pd(base_dir: Path, out_dir: Path, pairs, seq_len: int, batch: int, steps: int, lr: float, rank: int,
             seed: int, progress: bool = False, mode: str = "lora") -> dict:
    """SFT of one agent on its trace turns: a LoRA adapter (``mode="lora"``) or a full fine-tune
    (``mode="full"``, saved as a model folder in bf16); writes a card."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(base_dir)
    dev = device()
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).to(dev)
    if mode == "lora":
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    log: list = []
    t0 = time.time()
    rows = chat_rows(tok, pairs, seq_len)
    random.Random(seed).shuffle(rows)
    train_loop(model, batcher(rows, batch, tok.pad_token_id, seed), steps, lr, dev, log, out_dir.name, progress)
    if mode == "lora":
        save_adapter(model, out_dir)
    else:
        save(model, tok, out_dir)
    card = {"base": base_dir.name, "mode": mode, "rank": rank if mode == "lora" else None, "steps": steps, "batch": batch, "lr": lr, "examples": len(rows),
            "device": dev, "seconds": round(time.time() - t0, 1), "final_loss": log[-1]["loss"], "loss_log": log,
            "stage": f"protocol distillation: {'LoRA SFT' if mode == 'lora' else 'full fine-tune'} on this agent's "
                     "coordination-trace turns"}
    (out_dir / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def solo_pairs(problems) -> list[tuple[str, str]]:
    return [(p.text, solo(p)) for p in problems]
