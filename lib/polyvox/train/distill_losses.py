"""The divergences of :mod:`polyvox.train.distill`, on one parameterisation for every direction.

Parameterisation (``PARAMETERISATION``, recorded in every head's manifest): at each response
position both models' next-token distributions are taken over the **full vocabulary** (after the
shared temperature τ: ``log_softmax(z / τ)``) and coarsened on the **same partition** of the
vocabulary: the atoms are the ids of K = (teacher's top-k) ∪ (student's top-k) — chosen without
gradient — plus one atom ``rest`` holding every other id's mass (``log Σ_{i∉K} p_i``, computed by a
log-sum-exp over the ids outside K, not by subtraction). Teacher ``p`` and student ``q`` are then
two proper distributions on the same k…2k + 1 atoms, and

- ``forward``: KL(p ‖ q) = Σ p (log p − log q);
- ``reverse``: KL(q ‖ p) = Σ q (log q − log p);
- ``jsd`` (β): GKD's generalized Jensen–Shannon divergence (Agarwal et al., 2024, "On-Policy
  Distillation of Language Models: Learning from Self-Generated Mistakes", arXiv:2306.13649,
  Eq. 1), with P the teacher and Q the student: β KL(P ‖ M) + (1 − β) KL(Q ‖ M), M = βP + (1 − β)Q.
  The endpoints follow GKD's convention as implemented in TRL's ``GKDTrainer.generalized_jsd_loss``
  (which cites that equation; TRL's ``GKDConfig``: "When beta is 0.0, the loss is the KL
  divergence. When beta is 1.0, the loss is the Inverse KL Divergence"): β = 0 is the forward KL
  and β = 1 the reverse KL above (the raw formula is 0 at both ends, so they are the KLs by
  definition, as in TRL).

Why this one: the three losses then differ *only* in the direction (or β) of the divergence
between the same two distributions — no renormalisation that one direction applies and the other
does not, and no support chosen by one side alone (the union is symmetric in teacher and
student). Keeping the ``rest`` atom keeps both distributions normalised over the whole
vocabulary, so student mass outside K is still penalised (in either direction), the divergence is
finite, and it is the exact full-vocabulary divergence when K covers the vocabulary (by the
data-processing inequality a lower bound otherwise). ``teacher mass`` / ``student mass`` are the
shares of p and q inside K, logged per step.

The recorded heads (manifests without ``parameterisation``, data/runs/personas-*) were trained
with the first parameterisation, :func:`topk_kl_v1` (forward: teacher renormalised over its
top-k against the student's full-vocabulary log-probabilities; reverse: student renormalised
over its own top-k against the teacher's full-vocabulary log-probabilities). It is kept only so
the recorded runs' gradients can be recomputed and compared (:func:`first_token_report`); no
training path uses it.

Near one-hot (issue 22): the gradient of each loss w.r.t. the student's logits at one position
is, with J = diag(q) − q qᵀ the softmax Jacobian, Jᵀ ∂D/∂q. Forward: ∂D/∂q = −p/q, so the
gradient is q − p, whose norm stays ≈ √2 when q and p put their mass on different ids however
saturated q is. Reverse: ∂D/∂q = log(q/p) + 1 is only logarithmically large, and Jᵀ scales it by
q_j(1 − …): the norm is O(ε log 1/ε) for a student with max probability 1 − ε. JSD(β) for β > 0
has ∂D/∂q = (1 − β) log(q/M), again logarithmic, so it shares reverse's scale unless β is
tiny; a temperature τ > 1 de-saturates q itself. :func:`near_one_hot_grad_norms` computes these
on a synthetic case, :func:`first_token_report` on a real model's first response token.

The ``rest`` atom and a temperature: the coarsened divergence is blind to how mass is spread inside
``rest``. A temperature fattens the teacher's tail (on tiny-chat's 699 ids at τ = 2 much of its mass
leaves the top-16), and the student can then match ``rest`` by spreading its own mass anywhere
outside K. Measured on CPU (tiny-chat, impersonal head, seed 0, the recorded recipe): reverse at
τ = 2 with k = 16 flattened the student's first token (max p 0.003) and the head showed its style
on 0–4 % of validation prompts, while with k = 699 (the whole vocabulary: the exact divergence) it
showed it on 100 %. Take k = the vocabulary wherever the logits fit (tiny-chat: always), and
never pair a small k with τ > 1.
"""
from __future__ import annotations

import math

LOSSES = ("forward", "reverse", "jsd")
PARAMETERISATION = "full-vocabulary, union of top-k plus rest"
_OUTSIDE = -1.0e4  # fills the ids of K when summing the rest: exp underflows to 0, gradients stay finite


def check_loss(loss: str, beta: float | None, temperature: float = 1.0) -> None:
    """Refuse a loss that is not one of LOSSES, a β outside [0, 1] or without jsd, a temperature ≤ 0."""
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; losses: {', '.join(LOSSES)}")
    if loss == "jsd":
        if beta is None or not 0.0 <= float(beta) <= 1.0:
            raise ValueError(f"loss jsd needs beta in [0, 1] (0: forward KL, 1: reverse KL); got {beta!r}")
    elif beta is not None:
        raise ValueError(f"beta is the jsd loss's coefficient; loss {loss!r} takes none (got {beta!r})")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0; got {temperature!r}")


def atoms(student_logits, teacher_logits, k: int, temperature: float = 1.0):
    """Student and teacher log-probabilities on the shared atoms (K's ids, then ``rest``), the atoms'
    weights (0 for an id listed twice) and the student's and teacher's mass inside K.

    Shapes: logits (..., V) → log-probs and weights (..., 2k + 1), masses (...)."""
    import torch
    import torch.nn.functional as F

    ls = F.log_softmax(student_logits.float() / temperature, -1)
    with torch.no_grad():
        lt = F.log_softmax(teacher_logits.float() / temperature, -1)
        k = min(int(k), ls.shape[-1])
        ti = lt.topk(k, dim=-1).indices
        si = ls.detach().topk(k, dim=-1).indices
        dup = (si.unsqueeze(-1) == ti.unsqueeze(-2)).any(-1)
        idx = torch.cat([ti, si], -1)
        w_k = torch.cat([torch.ones_like(ti, dtype=ls.dtype), (~dup).to(ls.dtype)], -1)
        lt_rest = lt.scatter(-1, idx, _OUTSIDE).logsumexp(-1, keepdim=True)
        t_mass = (lt.gather(-1, idx).exp() * w_k).sum(-1)
    lq = torch.cat([ls.gather(-1, idx), ls.scatter(-1, idx, _OUTSIDE).logsumexp(-1, keepdim=True)], -1)
    lp = torch.cat([lt.gather(-1, idx), lt_rest], -1)
    w = torch.cat([w_k, torch.ones_like(w_k[..., :1])], -1)
    s_mass = (lq[..., :-1].detach().exp() * w_k).sum(-1)
    return lq, lp, w, s_mass, t_mass


def _kl(la, lb, w):
    """Σ w · a (log a − log b) over the last axis, a = exp(la)."""
    return (w * la.exp() * (la - lb)).sum(-1)


def divergence(lq, lp, w, loss: str, beta: float | None = None):
    """Per-position divergence between student ``lq`` and teacher ``lp`` (log-probabilities on the same atoms)."""
    import torch

    check_loss(loss, beta)
    if loss == "forward" or (loss == "jsd" and float(beta) == 0.0):
        return _kl(lp, lq, w)
    if loss == "reverse" or (loss == "jsd" and float(beta) == 1.0):
        return _kl(lq, lp, w)
    b = float(beta)
    lm = torch.logaddexp(lp + math.log(b), lq + math.log1p(-b))
    return b * _kl(lp, lm, w) + (1.0 - b) * _kl(lq, lm, w)


def distill_loss(student_logits, teacher_logits, k: int, loss: str, beta: float | None = None,
                 temperature: float = 1.0):
    """Per-position loss (see the module docstring), the student's and the teacher's mass inside K."""
    check_loss(loss, beta, temperature)
    lq, lp, w, s_mass, t_mass = atoms(student_logits, teacher_logits, k, temperature)
    return divergence(lq, lp, w, loss, beta), s_mass, t_mass


def topk_kl_v1(student_logits, teacher_logits, k: int, loss: str):
    """The recorded heads' losses (before ``PARAMETERISATION``): forward renormalises the teacher over
    its top-k against the student's full-vocabulary log-probabilities, reverse renormalises the
    student over its own top-k against the teacher's. Per-position loss and the first distribution's
    mass in K. For recomputing the recorded runs only."""
    import torch
    import torch.nn.functional as F

    if loss == "forward":
        with torch.no_grad():
            top_v, top_i = F.log_softmax(teacher_logits.float(), -1).topk(k, dim=-1)
            p_logp = F.log_softmax(top_v, -1)
        s_logp = F.log_softmax(student_logits.float(), -1).gather(-1, top_i)
        return (p_logp.exp() * (p_logp - s_logp)).sum(-1), top_v.exp().sum(-1)
    if loss == "reverse":
        s_full = F.log_softmax(student_logits.float(), -1)
        top_i = s_full.detach().topk(k, dim=-1).indices
        top_v = s_full.gather(-1, top_i)
        q_logp = F.log_softmax(top_v, -1)
        with torch.no_grad():
            t_logp = F.log_softmax(teacher_logits.float(), -1).gather(-1, top_i)
        return (q_logp.exp() * (q_logp - t_logp)).sum(-1), top_v.detach().exp().sum(-1)
    raise ValueError(f"unknown loss {loss!r}; the recorded runs' losses: forward, reverse")


# ---------------------------------------------------------------- gradient norms

def logit_grad_norms(student_logits, teacher_logits, k: int, loss: str, beta: float | None = None,
                     temperature: float = 1.0, v1: bool = False):
    """Per position, the norm of the gradient of that position's loss w.r.t. the student's logits
    (``v1``: the recorded runs' :func:`topk_kl_v1`). Shape of the logits without the last axis."""
    import torch

    z = student_logits.detach().float().clone().requires_grad_(True)
    with torch.enable_grad():
        per = topk_kl_v1(z, teacher_logits, k, loss)[0] if v1 else \
            distill_loss(z, teacher_logits, k, loss, beta, temperature)[0]
        (g,) = torch.autograd.grad(per.sum(), z)
    return g.norm(dim=-1)


def _labels(betas, temperatures) -> list[tuple[str, str, float | None, float]]:
    out = [("forward", "forward", None, 1.0), ("reverse", "reverse", None, 1.0)]
    out += [(f"jsd(β={b:g})", "jsd", float(b), 1.0) for b in betas]
    out += [(f"{loss} (τ={t:g})", loss, None, float(t)) for t in temperatures for loss in ("forward", "reverse")]
    return out


def near_one_hot_grad_norms(max_p: float = 0.9999, teacher_p: float = 0.99, vocab: int = 700, k: int = 16,
                            betas=(0.1, 0.5, 0.9), temperatures=(2.0,)) -> dict:
    """The logit-gradient norm of each loss at one position where the student puts ``max_p`` on id 0
    and the teacher puts ``teacher_p`` on id 1 (the rest of each spread evenly): the near-one-hot
    first response token of issue 22. Keys: forward, reverse, jsd(β=…), forward/reverse (τ=…),
    and ``v1 forward`` / ``v1 reverse`` (the recorded runs' losses); plus the two distributions' max."""
    import torch

    def logits(top: int, p: float):
        probs = torch.full((vocab,), (1.0 - p) / (vocab - 1), dtype=torch.float64)
        probs[top] = p
        return probs.log().float().unsqueeze(0)

    s, t = logits(0, max_p), logits(1, teacher_p)
    out = {"student_max_p": max_p, "teacher_max_p": teacher_p, "vocab": vocab, "k": k}
    for label, loss, beta, tau in _labels(betas, temperatures):
        out[label] = float(logit_grad_norms(s, t, k, loss, beta, tau)[0])
    for loss in ("forward", "reverse"):
        out[f"v1 {loss}"] = float(logit_grad_norms(s, t, k, loss, v1=True)[0])
    return out


def first_token_report(model_path: str, student_prompts: list[str], teacher_prompts: list[str], k: int,
                       betas=(0.1, 0.5, 0.9), temperatures=(2.0,), adapter: str | None = None,
                       device: str = "cpu", batch: int = 16) -> dict:
    """The first response token on a real model: the student (``model_path``, plus ``adapter`` if
    given) reads ``student_prompts``, the teacher (the base) ``teacher_prompts`` (already templated,
    ending where the answer starts). Returns the student's and teacher's mean max probability and,
    per loss, the mean and median over prompts of the logit-gradient norm at that token
    (``v1 forward`` / ``v1 reverse``: the recorded runs' losses)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if len(student_prompts) != len(teacher_prompts) or not student_prompts:
        raise ValueError("first_token_report: as many student prompts as teacher prompts (at least one)")
    tok = AutoTokenizer.from_pretrained(model_path)
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, use_safetensors=True).to(device)
    student = base
    if adapter:
        from peft import PeftModel

        student = PeftModel.from_pretrained(base, adapter).to(device)
    student.eval()

    def last_logits(model, prompts):
        side, tok.padding_side = tok.padding_side, "left"
        try:
            rows = []
            for b in range(0, len(prompts), batch):
                enc = tok(prompts[b:b + batch], return_tensors="pt", padding=True, add_special_tokens=False).to(device)
                with torch.no_grad():
                    rows.append(model(**enc).logits[:, -1, :].float().cpu())
            return torch.cat(rows)
        finally:
            tok.padding_side = side

    s = last_logits(student, student_prompts)
    if adapter:
        with student.disable_adapter():
            t = last_logits(student, teacher_prompts)
    else:
        t = last_logits(base, teacher_prompts)
    out = {"n": len(student_prompts), "k": k, "student_max_p": float(s.softmax(-1).max(-1).values.mean()),
           "teacher_max_p": float(t.softmax(-1).max(-1).values.mean()),
           "same_argmax": float((s.argmax(-1) == t.argmax(-1)).float().mean())}
    norms = {label: logit_grad_norms(s, t, k, loss, beta, tau)
             for label, loss, beta, tau in _labels(betas, temperatures)}
    for loss in ("forward", "reverse"):
        norms[f"v1 {loss}"] = logit_grad_norms(s, t, k, loss, v1=True)
    out["grad_norm_mean"] = {n: float(v.mean()) for n, v in norms.items()}
    out["grad_norm_median"] = {n: float(v.median()) for n, v in norms.items()}
    return out
