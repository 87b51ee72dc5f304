"""Context distillation into a LoRA head: teacher = base on one prompt, student = base + LoRA on another.

The persona study's heads (seed 002): the teacher is the base model with a persona card as
the system prompt, the student is the same base plus a LoRA head reading the user prompt
alone. Callers pass pairs of templated prompts (student prompt, teacher prompt); this module
knows nothing of personas.

Algorithm (one head):

1. Sequences. For each training pair the teacher samples one continuation ``y`` of its
   prompt (temperature ``teacher_temperature``, seeded, batched, once, before training; kept
   in ``sequences.jsonl``). Every loss trains on the *same* teacher sequences. With
   ``student_sample_fraction`` λ > 0 (GKD's student data fraction), each step instead draws,
   with probability λ (seeded), its batch's sequences from the student itself (adapter on,
   student prompt, the same temperature), as GKD does per batch; the step log says which
   (``on_policy``).
2. Logits. At every response position t (the tokens of ``y`` and its end-of-turn), the
   teacher's next-token logits ``z_T`` come from ``teacher_prompt + y[:t]`` (adapter
   disabled, no gradient) and the student's ``z_S`` from ``student_prompt + y[:t]``.
3. Loss, averaged over response tokens (:mod:`polyvox.train.distill_losses`): both models'
   distributions over the full vocabulary at the shared temperature ``temperature`` (τ),
   coarsened on the *same* atoms — the ids of (teacher's top-k) ∪ (student's top-k) plus one
   ``rest`` atom holding every other id's mass — and ``loss`` is ``forward`` KL(p ‖ q),
   ``reverse`` KL(q ‖ p) or ``jsd``: GKD's generalized JSD with coefficient ``beta`` (Agarwal et
   al., 2024, arXiv:2306.13649, Eq. 1; β = 0 the forward and β = 1 the reverse KL, TRL's
   convention). **Why this parameterisation**: forward and reverse then differ only in the
   direction of the divergence between the same two distributions — the first version
   renormalised the teacher over its top-k for forward but the student over its own top-k for
   reverse, so the two arms differed in more than direction (issue 22). Both distributions stay
   normalised over the whole vocabulary (student mass outside K is penalised in both
   directions), and the loss is the exact full-vocabulary divergence when K covers the
   vocabulary. The step log records the teacher's (``topk_mass``) and the student's
   (``student_mass``) share inside K.
4. LoRA (PEFT) on the attention and MLP projections; AdamW, linear warm-up over 10% of the
   steps then constant; gradient clipping at 1.0. Each step logs ``grad_norm`` (the total LoRA
   gradient norm before clipping), ``first_token_grad_norm`` (the mean over the batch of the
   norm of the gradient of the first response token's loss w.r.t. its logits) and
   ``first_token_max_p`` (the student's mean max probability there): at a near-one-hot first
   token the reverse KL's gradient vanishes (see :mod:`.distill_losses`).
5. Checkpoints every ``save_every`` steps (and the last) are scored by the caller's
   ``select_fn(model, step)`` on validation: a number, or a mapping with the number as ``score``
   and more finite numbers, logged beside it as ``validation_<key>`` (the persona heads log their
   style rate, ``validation_style``); the best score's checkpoint is copied to ``adapter/``
   (ties: the earlier step), as the study selected run21's step 60 on validation.

Remedy for the reverse KL (issue 22): the first response token of tiny-chat's student is near
one-hot (max p 0.9999) on a different id from the teacher's for the warm and impersonal cards,
where reverse's logit gradient is ~0.001 against forward's ~1.4 (:func:`.distill_losses.first_token_report`).
GKD's JSD(β) at τ = 1 does not lift it (its gradient there is of reverse's order or smaller);
the loss temperature does (reverse at τ = 2: ~0.3), and it leaves the minimiser unchanged
(softmax(z/τ) = softmax(z'/τ) iff softmax(z) = softmax(z')). Use it with ``top_k`` = the
vocabulary (see :mod:`.distill_losses` on the ``rest`` atom).

The manifest records every setting (``loss``, ``beta``, ``temperature``,
``student_sample_fraction`` included) and ``parameterisation``; a head recorded without it was
trained with the first parameterisation (:func:`.distill_losses.topk_kl_v1`), which no training
path uses any more.

Departures from TRL's ``GKDTrainer``: the divergence is taken on the shared top-k atoms above,
not a sum over the full vocabulary (the same when k covers it); the teacher and student read
*different* prompts (context distillation; GKD feeds both the same input); temperature scales
the loss's distributions, while sequences are sampled at ``teacher_temperature``.
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

from .distill_losses import LOSSES, PARAMETERISATION, check_loss, distill_loss

PATH_FIELDS = ("model", "out")  # written repo-relative into the manifest
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class DistillConfig:
    model: str
    out: str
    loss: str = "forward"  # forward | reverse | jsd (see distill_losses)
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
    beta: float | None = None  # jsd's β (GKD): 0 forward KL, 1 reverse KL; None for forward/reverse
    temperature: float = 1.0  # τ of the loss's distributions (softmax(z / τ), teacher and student)
    student_sample_fraction: float = 0.0  # GKD's λ: the chance a step trains on the student's own samples


def check_config(cfg: DistillConfig) -> None:
    """Refuse a config whose loss settings do not fit (before anything is written)."""
    check_loss(cfg.loss, cfg.beta, cfg.temperature)
    lam = cfg.student_sample_fraction
    if not (isinstance(lam, (int, float)) and 0.0 <= lam <= 1.0):
        raise ValueError(f"student_sample_fraction must be in [0, 1]; got {lam!r}")


def topk_kl(student_logits, teacher_logits, k: int, loss: str):
    """Per-position forward or reverse KL on the shared atoms (:func:`.distill_losses.distill_loss`),
    and the mass inside K of the divergence's first distribution (teacher for forward, student for
    reverse). The generalized JSD is :func:`.distill_losses.distill_loss`."""
    if loss not in ("forward", "reverse"):
        raise ValueError(f"unknown loss {loss!r} for a KL; losses: forward, reverse (jsd: distill_losses.distill_loss)")
    per, s_mass, t_mass = distill_loss(student_logits, teacher_logits, k, loss)
    return per, (t_mass if loss == "forward" else s_mass)


def _sample(model, tok, prompts: list[str], cfg: DistillConfig, seed: int) -> list[list[int]]:
    """One sampled continuation per prompt (token ids, ending with eos when it stopped)."""
    import torch

    eos = tok.eos_token_id
    out: list[list[int]] = [None] * len(prompts)  # type: ignore[list-item]
    side = tok.padding_side
    tok.padding_side = "left"
    try:
        for b in range(0, len(prompts), 64):
            chunk = prompts[b:b + 64]
            enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(cfg.device)
            torch.manual_seed(seed + b)
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=cfg.max_new_tokens, do_sample=cfg.teacher_temperature > 0,
                                     temperature=cfg.teacher_temperature if cfg.teacher_temperature > 0 else None,
                                     top_p=None, top_k=None, pad_token_id=tok.pad_token_id, eos_token_id=eos)
            for i, row in enumerate(gen[:, enc["input_ids"].shape[1]:].tolist()):
                out[b + i] = row[: row.index(eos) + 1] if eos in row else row
    finally:
        tok.padding_side = side
    return out


def sample_continuations(model, tok, prompts: list[str], max_new_tokens: int, temperature: float, seed: int,
                         device: str = "cpu") -> list[list[int]]:
    """One continuation per prompt (token ids, ending with eos when it stopped within ``max_new_tokens``),
    sampled as the teacher's sequences are (batches of 64, seeded per batch)."""
    cfg = DistillConfig(model="", out="", max_new_tokens=max_new_tokens, teacher_temperature=temperature,
                        device=device)
    return _sample(model, tok, prompts, cfg, seed)


def _teacher_sequences(model, tok, teacher_prompts: list[str], cfg: DistillConfig) -> list[list[int]]:
    """One sampled continuation per teacher prompt, seeded by the head's seed."""
    return _sample(model, tok, teacher_prompts, cfg, cfg.seed * 100003)


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
    settings["parameterisation"] = PARAMETERISATION  # a head recorded without it: distill_losses.topk_kl_v1
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
    check_config(cfg)
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
    coin = torch.Generator().manual_seed(cfg.seed * 7919 + 1)  # GKD's λ: which steps train on student samples
    lora = [p for p in model.parameters() if p.requires_grad]
    scores: dict[int, float] = {}
    step_times = []
    bar = tqdm(range(1, cfg.steps + 1), desc=f"distill {cfg.loss}", disable=not progress)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = cfg.learning_rate * min(1.0, step / warm)
        t_step = time.perf_counter()
        idx = torch.randint(0, len(seqs), (cfg.batch,), generator=gen).tolist()
        on_policy = cfg.student_sample_fraction > 0 and \
            torch.rand((), generator=coin).item() < cfg.student_sample_fraction
        if on_policy:
            model.eval()
            sq = _sample(model, tok, [student_prompts[i] for i in idx], cfg, cfg.seed * 100003 + 7 * step + 1)
            sq = [s if s else [tok.eos_token_id] for s in sq]
        else:
            sq = [seqs[i] for i in idx]
        row = _step(model, tok, cfg, [student_prompts[i] for i in idx], [teacher_prompts[i] for i in idx], sq, lora)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_times.append(time.perf_counter() - t_step)
        row = {"step": step, **row, "on_policy": bool(on_policy), "seconds": round(step_times[-1], 4)}
        bar.set_postfix(loss=f"{row['loss']:.4f}")
        if step % cfg.save_every == 0 or step == cfg.steps:
            model.eval()
            save_adapter(model, out / f"step-{step}")
            if select_fn is not None:
                with torch.no_grad():
                    got = select_fn(model, step)
                extra = dict(got) if isinstance(got, dict) else {"score": got}
                scores[step] = float(extra.pop("score"))
                row["validation"] = scores[step]
                row.update({f"validation_{k}": float(v) for k, v in extra.items()})
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


def _step(model, tok, cfg: DistillConfig, s_prompts, t_prompts, sq, lora) -> dict:
    """Forward and backward of one batch (gradients left on the LoRA parameters, clipped at 1.0);
    the step log's loss, masses and gradient norms."""
    import torch

    s_ids, s_att, s_pos, mask = _batch(tok, s_prompts, sq, cfg.device)
    t_ids, t_att, t_pos, _ = _batch(tok, t_prompts, sq, cfg.device)
    model.train()
    with torch.no_grad(), model.disable_adapter():
        t_logits = _gather(model(input_ids=t_ids, attention_mask=t_att).logits, t_pos)
    s_logits = _gather(model(input_ids=s_ids, attention_mask=s_att).logits, s_pos)
    s_logits.retain_grad()
    per_tok, s_mass, t_mass = distill_loss(s_logits, t_logits, cfg.top_k, cfg.loss, cfg.beta, cfg.temperature)
    n = mask.sum()
    loss = (per_tok * mask).sum() / n
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(lora, 1.0)  # the total norm before clipping
    # d loss / d z[i, 0] = (1 / n) d per_tok[i, 0] / d z[i, 0]: the first token's own gradient norm
    first = (s_logits.grad[:, 0, :].norm(dim=-1) * n).mean()
    max_p = torch.softmax(s_logits.detach()[:, 0, :].float(), -1).max(-1).values.mean()

    def avg(x):
        return round(((x * mask).sum() / n).item(), 6)

    return {"loss": round(loss.item(), 6), "topk_mass": avg(t_mass), "student_mass": avg(s_mass),
            "grad_norm": round(float(grad_norm), 6), "first_token_grad_norm": round(first.item(), 8),
            "first_token_max_p": round(max_p.item(), 6)}

