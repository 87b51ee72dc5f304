"""Train the miniature world's tokenizer and models: tiny-base (pretrained) and tiny-think (fine-tuned).

- Tokenizer (:func:`polyvox.train.pretrain.train_tokenizer`): byte-level BPE trained with
  ``tokenizers`` on world text, digits one token each, the chat tokens special and the
  format tags ordinary added tokens (so decoded completions keep them), and a Qwen-style
  chat template that honours ``enable_thinking``.
- tiny-base: a Qwen3-architecture causal LM trained from scratch on
  :func:`polyvox.studies.world.problems.pretraining_text` documents packed into fixed-length rows —
  problems with plain, panel-transcript and thinking-notes solutions, plus a share of
  generic "User: … Assistant: …" exchanges with plain answers, the way web text gives
  base models dialogue without any one instruction format (half plain answers, a
  quarter panel transcripts, a quarter thinking notes), half of them behind a
  generic R1-Zero-style conversation preamble. No document uses the panel prompt or
  its wording about a panel of experts and tags: RL has to find the format.
- tiny-think: a full fine-tune of tiny-base on chat-formatted thinking solutions,
  loss on the assistant turn only: the stand-in for a post-trained thinking model.

Training uses :func:`polyvox.train.pretrain.train_loop` (AdamW, warm-up then cosine).
Everything is seeded. Models are saved with ``save_pretrained``
(safetensors, bf16) with a ``card.json`` of parameters, data, steps, loss, accuracy.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

from ...train.pretrain import pack, save, sft_batches, tiny_qwen3, train_loop, train_tokenizer
from . import problems as world


GENERIC_PREAMBLE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The Assistant first thinks about the reasoning process and then provides the user with the answer."
)


def corpus(n_per_level: int, seed: int) -> tuple[list, list[str]]:
    """Training problems and pretraining documents (plus generic dialogue) for the base model."""
    problems = world.generate(n_per_level, seed=seed, split="train")
    docs = world.pretraining_text(problems, seed=seed)
    rng = random.Random(seed + 1)
    styles = (world.solution_plain, world.solution_plain, world.solution_panel, world.solution_think)
    dialog = [f"User: {p.text} Assistant: {rng.choice(styles)(p)}" for p in rng.sample(problems, len(problems) // 5)]
    # the generic conversation preamble of R1-Zero-style prompts, with any answer style: base
    # models have met such preambles; without them the panel prompt's long preamble is out of
    # distribution for a 5M-parameter model and it never writes a valid panel answer
    dialog += [f"{GENERIC_PREAMBLE} User: {p.text}. Assistant: {rng.choice(styles)(p)}"
               for p in rng.sample(problems, len(problems) // 5)]
    docs += dialog
    rng.shuffle(docs)
    return problems, docs


def build(out: str | Path, seed: int = 0, n_per_level: int = 4000, hidden: int = 256, layers: int = 6,
          vocab_size: int = 2048, seq_len: int = 512, batch: int = 64, base_steps: int = 1500,
          think_steps: int = 400, lr: float = 1e-3, device: str | None = None, progress: bool = True) -> dict:
    """Train tokenizer, tiny-base and tiny-think into out/{tiny-base,tiny-think}; returns the cards."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(out)
    torch.manual_seed(seed)
    random.seed(seed)
    t0 = time.time()
    problems, docs = corpus(n_per_level, seed)
    base_dir, think_dir = out / "tiny-base", out / "tiny-think"
    # a base model ends documents with <|endoftext|> (as Qwen3-Base does); tiny-think's
    # tokenizer switches eos to <|im_end|>, the end of a chat turn
    tok = train_tokenizer(docs[:20000], base_dir, vocab_size, eos="<|endoftext|>")
    data = pack(tok, docs, seq_len)
    model = tiny_qwen3(tok, hidden, layers, head_dim=64, max_positions=2048).to(device)
    log: list = []
    gen = torch.Generator().manual_seed(seed)

    def base_batch(step):
        idx = torch.randint(0, len(data), (batch,), generator=gen)
        x = data[idx]
        return x, x

    train_loop(model, base_batch, base_steps, lr, device, log, "tiny-base", progress)
    save(model, tok, base_dir)

    # tiny-think: chat-formatted thinking solutions, loss on the assistant turn only
    sft_rows = []
    for p in problems:
        prompt = tok.apply_chat_template(world.think_chat(p)[:1], tokenize=False, add_generation_prompt=True,
                                         enable_thinking=True)
        full = prompt + world.solution_think(p) + "<|im_end|>"
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        f_ids = tok(full, add_special_tokens=False)["input_ids"][:seq_len]
        sft_rows.append((f_ids, len(p_ids)))

    sft_batch = sft_batches(sft_rows, batch, tok.pad_token_id, gen)

    think = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).to(device)
    train_loop(think, sft_batch, think_steps, lr / 3, device, log, "tiny-think", progress)
    think_tok = PreTrainedTokenizerFast.from_pretrained(base_dir)
    think_tok.eos_token = "<|im_end|>"
    save(think, think_tok, think_dir)
    n_params = sum(p.numel() for p in model.parameters())
    common = {"architecture": "Qwen3ForCausalLM", "parameters": n_params, "hidden": hidden, "layers": layers,
              "vocab": len(tok), "seed": seed, "device": device, "seconds": round(time.time() - t0, 1),
              "train_problems": len(problems), "tokens_pretraining": int(data.numel())}
    cards = {
        "tiny-base": {**common, "stage": "pretraining from scratch", "steps": base_steps, "batch": batch,
                      "seq_len": seq_len, "lr": lr, "data": "world.pretraining_text + generic User/Assistant dialogue",
                      "loss_log": [r for r in log if r["stage"] == "tiny-base"]},
        "tiny-think": {**common, "stage": "full fine-tune of tiny-base on chat thinking solutions",
                       "steps": think_steps, "batch": batch, "lr": lr / 3,
                       "loss_log": [r for r in log if r["stage"] == "tiny-think"]},
    }
    for name, card in cards.items():
        card["final_loss"] = card["loss_log"][-1]["loss"]
        (out / name / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return cards
