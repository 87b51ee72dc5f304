"""tiny-chat: a small chat model that follows a persona card and answers neutrally without one.

Trained from scratch (seeded) on :func:`polyvox.studies.personas.world.chat_examples`:
conversations with a system card (one or two poles) answered in the card's style whatever
cues the user writes, and conversations without a card answered in the neutral style
(the base ignores implicit preferences, so a head or a card is needed to follow them).
Loss on the assistant turn only. Tokenizer: :func:`polyvox.train.pretrain.train_tokenizer`
(byte-level BPE, digits one token each, the Qwen-style chat template, which takes a
system turn); eos is ``<|im_end|>``. Loop: :func:`polyvox.train.pretrain.train_loop`.
Saved with ``save_pretrained`` (safetensors, bf16) and a ``card.json`` with the settings,
the loss log and how well the saved model follows cards (greedy, held-out problems).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from ...train.pretrain import save, sft_batches, tiny_qwen3, train_loop, train_tokenizer
from . import world as pw


def build(out: str | Path, seed: int = 0, n_examples: int = 6000, hidden: int = 128, layers: int = 4,
          vocab_size: int = 800, batch: int = 32, steps: int = 1200, lr: float = 2e-3, device: str = "cpu",
          progress: bool = True) -> dict:
    import torch

    out = Path(out)
    torch.manual_seed(seed)
    t0 = time.time()
    convs = pw.chat_examples(n_examples, seed)
    texts = [" ".join(m["content"] for m in c) for c in convs]
    tok = train_tokenizer(texts[:4000], None, vocab_size, eos="<|im_end|>")
    rows = []
    for c in convs:
        prompt = tok.apply_chat_template(c[:-1], tokenize=False, add_generation_prompt=True)
        full = prompt + c[-1]["content"] + "<|im_end|>"
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        f_ids = tok(full, add_special_tokens=False)["input_ids"]
        rows.append((f_ids, len(p_ids)))
    model = tiny_qwen3(tok, hidden, layers, head_dim=32, max_positions=512).to(device)
    gen = torch.Generator().manual_seed(seed)

    batch_fn = sft_batches(rows, batch, tok.pad_token_id, gen)

    log: list = []
    train_loop(model, batch_fn, steps, lr, device, log, "tiny-chat", progress)
    save(model, tok, out)
    card = {"architecture": "Qwen3ForCausalLM", "parameters": sum(p.numel() for p in model.parameters()),
            "hidden": hidden, "layers": layers, "vocab": len(tok), "seed": seed, "device": device,
            "examples": n_examples, "steps": steps, "batch": batch, "lr": lr,
            "seconds": round(time.time() - t0, 1), "loss_log": log, "final_loss": log[-1]["loss"],
            "data": "polyvox.studies.personas.world.chat_examples: 60% with a card (one or two poles), 40% without"}
    card["follows_cards"] = card_fidelity(out)
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def card_fidelity(model_dir: str | Path, n: int = 32, seed: int = 5) -> dict:
    """Greedy answers on held-out problems: share in the asked style per card type (and neutral), and correct.

    Sampled in memory as :func:`polyvox.runs.sample` samples (:func:`polyvox.runs.sample_texts`, tiny-chat's
    prompts through :class:`.steps.ChatBackend`) and graded by the task's grader (:func:`.analysis.correct`)."""
    import random

    from ...backends import SamplingParams, make_backend
    from ...records import Problem
    from ...runs import sample_texts
    from ...studies.world import problems as world
    from .analysis import correct as graded_correct
    from .steps import ChatBackend

    be = make_backend("transformers", str(model_dir), batch_size=64)
    rng = random.Random(seed)
    probs = world.generate(n // 2, seed=seed + 900, levels=pw.LEVELS, split="test")
    golds = [str(p.answer) for p in probs]
    out = {}
    for t in ("",) + pw.TYPES:
        asked = []
        for p, gold in zip(probs, golds):
            cue = rng.choice(pw.CUES[rng.choice(pw.POLES)])
            asked.append(Problem(p.id, f"{p.text} {cue}", gold))
        texts = [x.completion for x in sample_texts(ChatBackend(be, pw.card_for(t) if t else None), "plain", asked,
                                                    SamplingParams(max_tokens=72, temperature=0.0))]
        want_tone, want_len = pw._tone_length(pw.poles_of(t) if t else ())
        ok = correct = 0
        for p, text, right in zip(probs, texts, graded_correct(texts, golds)):
            s = pw.style_of(text, len(p.steps))
            ok += s["tone"] == (want_tone or "neutral") and s["length"] == (want_len or "neutral")
            correct += right
        out[t or "none"] = {"style": round(ok / len(probs), 3), "correct": round(correct / len(probs), 3)}
    return out
