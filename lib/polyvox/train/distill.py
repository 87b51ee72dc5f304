"""Context distillation into a LoRA head by top-k KL: teacher = base on one prompt, student = base + LoRA on another.

The persona study's heads (seed 002): the teacher is the base model with a persona card as
the system prompt, the student is the same base plus a LoRA head reading the user prompt
alone. Callers pass pairs of templated prompts (student prompt, teacher prompt); this module
knows nothing of personas.

Algorithm (one head):

1. Sequences. For each training pair the teacher samples one continuation ``y`` of its
   prompt (temperature ``teacher_temperature``, seeded, batched, once, before training; kept
   in ``sequences.jsonl``). Both losses train on the *same* teacher sequences, so the two
   objectives differ only in the divergence: the study's run21/run22 comparison holds
   "everything else identical".
2. Logits. At every response position t (the tokens of ``y`` and its end-of-turn), the
   teacher's next-token logits ``z_T`` come from ``teacher_prompt + y[:t]`` (adapter
   disabled, no gradient) and the student's ``z_S`` from ``student_prompt + y[:t]``.
3. Loss, averaged over response tokens, with K a set of k token ids per position:

   - ``forward`` (run21): K = the teacher's top-k. ``p = softmax(z_T[K])`` — the teacher
     renormalised over K — and ``log q = log_softmax(z_S)[K]`` — the student's full-vocabulary
     log-probabilities, *not* renormalised. Loss ``Σ_K p (log p − log q)``, which is ≥ 0 and
     also pushes student mass from outside K into K.
   - ``reverse`` (run22): K = the student's top-k (indices chosen without gradient).
     ``q = softmax(z_S[K])`` — the student renormalised over K, with gradient — and
     ``log p = log_softmax(z_T)[K]`` — the teacher's full-vocabulary log-probabilities.
     Loss ``Σ_K q (log q − log p)``.

   The sampled distribution (the first argument of the KL) is renormalised over its own
   top-k; the other is evaluated on the same ids at full-vocabulary normalisation. The
   share of the first distribution's mass inside K is logged (``topk_mass``): that is what
   k controls, so at a different vocabulary size k is scaled to keep this share near 1
   rather than to keep k / vocabulary fixed (256 of Qwen3's 151,669 ids would be < 2 ids of
   a 700-token vocabulary).
4. LoRA (PEFT) on the attention and MLP projections; AdamW, linear warm-up over 10% of the
   steps then constant; gradient clipping at 1.0.
5. Checkpoints every ``save_every`` steps (and the last) are scored by the caller's
   ``select_fn(model, step) -> float`` on validation; the best is copied to ``adapter/``
   (ties: the earlier step), as the study selected run21's step 60 on validation.

Departures from TRL's ``GKDTrainer`` (Agarwal et al., 2024): GKD's loss is the generalized
Jensen–Shannon divergence with coefficient β over the *full* vocabulary (β = 0 and 1 being
the forward and reverse KLs) and a mix of on-policy student samples (share λ) with fixed
data; here the divergence is a plain forward or reverse KL restricted to k ids as above
(no JSD, no full-vocabulary sum), the teacher and student read *different* prompts (context
distillation; GKD feeds both the same input), and the sequences are teacher samples only
(λ = 0 in GKD's terms) for both directions — an on-policy reverse KL would also change the
data, not only the divergence.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..adapters import save_adapter
from ..records import RunLock, append_jsonl, check_out_path, now_iso, portable_path, write_manifest
from ..statuses import RunStatus
from .logs import finite_or_null

LOSSES = ("forward", "reverse")
PATH_FIELDS = ("model", "out")  # written repo-relative into the manifest
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class DistillConfig:
    model: str
    out: str
    loss: str = "forward"  # forward (teacher's top-k) | reverse (student's top-k)
    top_k: int = 16
    lora_rank: int = 4
    lora_alpha: int = 8
    target_modules: list = field(default_factory=lambda: list(TARGETS))
    learning_rate: float = 1e-3
    steps: int = 100
    batch: int = 8
    max_new_tokens: int = 72
    teacher_temperature: float = 1.0
    save_every: int = 25
    seed: int = 0
    device: str = "cpu"


def topk_kl(student_logits, teacher_logits, k: int, loss: str):
    """Per-position top-k KL (see the module docstring) and the first distribution's mass in K."""
    import torch
    import torch.nn.functional as F

    if loss == "forward":
        with torch.no_grad():
            t_logp = F.log_softmax(teacher_logits.float(), -1)
            top_v, top_i = t_logp.topk(k, dim=-1)
            p_logp = F.log_softmax(top_v, -1)
            mass = top_v.exp().sum(-1)
        s_logp = F.log_softmax(student_logits.float(), -1).gather(-1, top_i)
        return (p_logp.exp() * (p_logp - s_logp)).sum(-1), mass
    if loss == "reverse":
        s_logp_full = F.log_softmax(student_logits.float(), -1)
        top_i = s_logp_full.detach().topk(k, dim=-1).indices
        top_v = s_logp_full.gather(-1, top_i)
        q_logp = F.log_softmax(top_v, -1)
        with torch.no_grad():
            t_logp = F.log_softmax(teacher_logits.float(), -1).gather(-1, top_i)
            mass = top_v.detach().exp().sum(-1)
        return (q_logp.exp() * (q_logp - t_logp)).sum(-1), mass
    raise ValueError(f"unknown loss {loss!r}; losses: {', '.join(LOSSES)}")


def _teacher_sequences(model, tok, teacher_prompts: list[str], cfg: DistillConfig) -> list[list[int]]:
    """One sampled continuation per teacher prompt (token ids, ending with eos when it stopped)."""
    import torch

    eos = tok.eos_token_id
    out: list[list[int]] = [None] * len(teacher_prompts)  # type: ignore[list-item]
    side = tok.padding_side
    tok.padding_side = "left"
    try:
        for b in range(0, len(teacher_prompts), 64):
            chunk = teacher_prompts[b:b + 64]
            enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(cfg.device)
            torch.manual_seed(cfg.seed * 100003 + b)
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=cfg.max_new_tokens, do_sample=cfg.teacher_temperature > 0,
                                     temperature=cfg.teacher_temperature if cfg.teacher_temperature > 0 else None,
                                     top_p=None, top_k=None, pad_token_id=tok.pad_token_id, eos_token_id=eos)
            for i, row in enumerate(gen[:, enc["input_ids"].shape[1]:].tolist()):
                out[b + i] = row[: row.index(eos) + 1] if eos in row else row
    finally:
        tok.padding_side = side
    return out


def _batch(tok, prompts: list[str], seqs: list[list[int]], device: str):
    """Right-padded ids of prompt + sequence, and per-row indices of the logits that predict the sequence."""
    import torch

    p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    rows = [p + s for p, s in zip(p_ids, seqs)]
    width = max(map(len, rows))
    T = max(map(len, seqs))
    ids = torch.full((len(rows), width), tok.pad_token_id)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    pos = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T))
    for i, (p, r) in enumerate(zip(p_ids, rows)):
        ids[i, : len(r)] = torch.tensor(r)
        att[i, : len(r)] = 1
        n = len(seqs[i])
        pos[i, :n] = torch.arange(len(p) - 1, len(p) - 1 + n)
        mask[i, :n] = 1
    return ids.to(device), att.to(device), pos.to(device), mask.to(device)


KIND = "distill"  # the kind of run a head's folder holds (its manifest's ``kind``)


def manifest_settings(cfg: DistillConfig) -> dict:
    """The settings a head's manifest records: the config, with its paths as portable paths (never this
    machine's layout). A head whose manifest holds these settings and ``status: complete`` is done."""
    import json

    settings = {**asdict(cfg), **{k: portable_path(v) for k, v in asdict(cfg).items() if k in PATH_FIELDS and v}}
    return json.loads(json.dumps(settings))


def _check_out(out: Path) -> None:
    """Read-only: a head's folder is new, or holds a head (any settings: a head is trained whole)."""
    from ..stages import check_kind, foreign_files

    check_out_path(out)
    check_kind(out, KIND)
    if out.is_dir() and not (out / "manifest.json").exists():  # a head cut off mid-training
        other = [n for n in foreign_files(out, {"sequences.jsonl", "train_log.jsonl", "adapter"})
                 if not n.startswith("step-")]
        if other:
            raise ValueError(f"{out}: holds {other[0]} but no manifest.json: not a distilled head's folder; "
                             "use a new folder")


def _gather(logits, pos):
    return logits.gather(1, pos.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))


def train(cfg: DistillConfig, student_prompts: list[str], teacher_prompts: list[str],
          select_fn: Callable | None = None, progress: bool = True) -> dict:
    """Distil one head into cfg.out (checkpoints step-N/, the selected adapter/, logs, manifest).

    One writer per head folder (:class:`polyvox.records.RunLock`); a folder holding another kind of
    run is refused before anything in it is removed."""
    if cfg.loss not in LOSSES:
        raise ValueError(f"unknown loss {cfg.loss!r}; losses: {', '.join(LOSSES)}")
    if len(student_prompts) != len(teacher_prompts) or not student_prompts:
        raise ValueError("distill: need as many student prompts as teacher prompts (and at least one)")
    out = Path(cfg.out)
    _check_out(out)  # validate first: a folder of another kind is refused before anything is removed
    with RunLock(out):
        _check_out(out)
        # a head is trained whole: the stage's manifest says whether it is done
        for p in out.iterdir():
            if p.name != ".lock":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        return _train(cfg, out, student_prompts, teacher_prompts, select_fn, progress)


def _train(cfg: DistillConfig, out: Path, student_prompts: list[str], teacher_prompts: list[str],
           select_fn: Callable | None, progress: bool) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = now_iso()
    torch.manual_seed(cfg.seed)
    tok = AutoTokenizer.from_pretrained(cfg.model, trust_remote_code=False)
    base = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32, trust_remote_code=False,
                                                use_safetensors=True).to(cfg.device)
    base.eval()
    if cfg.top_k > base.config.vocab_size:
        raise ValueError(f"top_k {cfg.top_k} exceeds the vocabulary ({base.config.vocab_size})")
    t0 = time.perf_counter()
    seqs = _teacher_sequences(base, tok, teacher_prompts, cfg)
    seq_seconds = time.perf_counter() - t0
    append_jsonl(out / "sequences.jsonl", [{"index": i, "teacher_prompt": tp, "student_prompt": sp,
                                            "sequence": tok.decode(s, skip_special_tokens=True), "tokens": len(s)}
                                           for i, (sp, tp, s) in enumerate(zip(student_prompts, teacher_prompts, seqs))])
    model = get_peft_model(base, LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha,
                                            target_modules=list(cfg.target_modules), lora_dropout=0.0,
                                            init_lora_weights=True))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.learning_rate,
                            weight_decay=0.0)
    warm = max(1, cfg.steps // 10)
    gen = torch.Generator().manual_seed(cfg.seed)
    scores: dict[int, float] = {}
    step_times = []
    bar = tqdm(range(1, cfg.steps + 1), desc=f"distill {cfg.loss}", disable=not progress)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = cfg.learning_rate * min(1.0, step / warm)
        t_step = time.perf_counter()
        idx = torch.randint(0, len(seqs), (cfg.batch,), generator=gen).tolist()
        sq = [seqs[i] for i in idx]
        s_ids, s_att, s_pos, mask = _batch(tok, [student_prompts[i] for i in idx], sq, cfg.device)
        t_ids, t_att, t_pos, _ = _batch(tok, [teacher_prompts[i] for i in idx], sq, cfg.device)
        model.train()
        with torch.no_grad(), model.disable_adapter():
            t_logits = _gather(model(input_ids=t_ids, attention_mask=t_att).logits, t_pos)
        s_logits = _gather(model(input_ids=s_ids, attention_mask=s_att).logits, s_pos)
        per_tok, mass = topk_kl(s_logits, t_logits, cfg.top_k, cfg.loss)
        loss = (per_tok * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_times.append(time.perf_counter() - t_step)
        row = {"step": step, "loss": round(loss.item(), 6),
               "topk_mass": round(((mass * mask).sum() / mask.sum()).item(), 6),
               "seconds": round(step_times[-1], 4)}
        bar.set_postfix(loss=f"{row['loss']:.4f}")
        if step % cfg.save_every == 0 or step == cfg.steps:
            model.eval()
            save_adapter(model, out / f"step-{step}")
            if select_fn is not None:
                with torch.no_grad():
                    scores[step] = float(select_fn(model, step))
                row["validation"] = scores[step]
        append_jsonl(out / "train_log.jsonl", [finite_or_null(row)])  # a NaN loss logs as null
    best = max(scores, key=lambda s: (scores[s], -s)) if scores else cfg.steps
    shutil.copytree(out / f"step-{best}", out / "adapter")
    summary = {"selected_step": best, "validation": {str(k): v for k, v in scores.items()},
               "step_seconds_mean": round(sum(step_times) / len(step_times), 4),
               "step_seconds_median": round(sorted(step_times)[len(step_times) // 2], 4),
               "teacher_sequence_seconds": round(seq_seconds, 2),
               "mean_sequence_tokens": round(sum(map(len, seqs)) / len(seqs), 2), "examples": len(seqs)}
    write_manifest(out, kind=KIND, settings=manifest_settings(cfg), started=started, finished=now_iso(),
                   status=RunStatus.COMPLETE, **summary)
    return summary

