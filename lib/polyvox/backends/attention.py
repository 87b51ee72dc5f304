"""The attention of polyvox's decode loop (:mod:`polyvox.backends.decode`): kernels and their switch.

Decode: each row reads only its own tokens of a KV cache packed per row, with the query heads
of one KV head folded onto it (no KV copy), by PyTorch's FlashAttention-2 kernel in its
variable-length form; where that kernel cannot run (CPU, fp32, a failed self-check) the same op
computes SDPA densely under a length mask. Prefill: prompts packed without padding, causal within
each. The function is registered with transformers' ``AttentionInterface`` as ``polyvox_decode``
and switched on only inside a decode (:class:`_AttentionSwitch`).
"""
from __future__ import annotations

import torch

ATTN = "polyvox_decode"
DENSE_PREFILL_TOKENS = 1 << 12


# ----------------------------------------------------------------------------- attention kernels

def _dense_decode(q, k, v, lens, scale):
    """q (B, Hq, D); k, v (B, cap, Hkv, D); lens (B,): SDPA over each row's first lens[b] slots."""
    B, Hq, D = q.shape
    cap, Hkv = k.shape[1], k.shape[2]
    mask = (torch.arange(cap, device=q.device)[None, :] < lens[:, None].to(torch.int64))[:, None, None, :]
    out = torch.nn.functional.scaled_dot_product_attention(
        q.reshape(B, Hkv, Hq // Hkv, D), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale)
    return out.reshape(B, Hq, D)


def _flash_decode(q, k, v, lens, scale):
    B, Hq, D = q.shape
    cap, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    # fold: the G query heads of KV head j become G query rows of a sequence with one head j
    qf = q.reshape(B, Hkv, G, D).transpose(1, 2).reshape(B * G, Hkv, D)
    cu_q = torch.arange(0, (B + 1) * G, G, dtype=torch.int32, device=q.device)
    cu_k = torch.arange(0, (B + 1) * cap, cap, dtype=torch.int32, device=q.device)
    out = torch.ops.aten._flash_attention_forward(
        qf, k.view(B * cap, Hkv, D), v.view(B * cap, Hkv, D), cu_q, cu_k, G, cap, 0.0, False, False,
        scale=scale, seqused_k=lens)[0]
    return out.view(B, G, Hkv, D).transpose(1, 2).reshape(B, Hq, D)


_FLASH = {}  # (device index, dtype) -> whether the flash kernels passed their self-check


def _use_flash(t) -> bool:
    return t.is_cuda and t.dtype in (torch.float16, torch.bfloat16) and _FLASH.get((t.device.index, t.dtype), False)


@torch.library.custom_op("polyvox::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """One query per row against that row's first ``lens[b]`` cached tokens (an opaque op for the compiler)."""
    if _use_flash(q) and q.shape[-1] <= 256:
        return _flash_decode(q.contiguous(), k, v, lens, scale)
    return _dense_decode(q, k, v, lens, scale)


@decode_attention.register_fake
def _(q, k, v, lens, scale):
    return torch.empty_like(q)


def prefill_attention(q, k, v, cu, max_len: int, scale: float, cu_host=None):
    """Causal attention within each packed prompt. q (T, Hq, D), k, v (T, Hkv, D), cu (B+1,) int32."""
    if _use_flash(q) and q.shape[-1] <= 256:
        return torch.ops.aten._flash_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), cu, cu,
                                                       max_len, max_len, 0.0, True, False, scale=scale)[0]
    bounds = cu_host if cu_host is not None else cu.tolist()
    G = q.shape[1] // k.shape[1]
    out = torch.empty_like(q)
    for a, b in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (x[a:b].transpose(0, 1)[None] for x in (q, k, v))
        out[a:b] = torch.nn.functional.scaled_dot_product_attention(
            qs, ks.repeat_interleave(G, dim=1), vs.repeat_interleave(G, dim=1), is_causal=True,
            scale=scale)[0].transpose(0, 1)
    return out


def flash_self_check(device, dtype) -> bool:
    """Run the flash kernels once on random data against the dense path; remember the verdict."""
    key = (torch.device(device).index or 0, dtype)
    if key in _FLASH:
        return _FLASH[key]
    _FLASH[key] = False
    if not (torch.device(device).type == "cuda" and dtype in (torch.float16, torch.bfloat16)):
        return False
    try:
        g = torch.Generator(device=device).manual_seed(0)
        B, cap, Hkv, G, D = 5, 96, 2, 3, 64
        q = torch.randn(B, Hkv * G, D, device=device, dtype=dtype, generator=g)
        k = torch.randn(B, cap, Hkv, D, device=device, dtype=dtype, generator=g)
        v = torch.randn(B, cap, Hkv, D, device=device, dtype=dtype, generator=g)
        lens = torch.tensor([1, 96, 17, 64, 40], dtype=torch.int32, device=device)
        ref = _dense_decode(q.float(), k.float(), v.float(), lens, 0.125)
        got = _flash_decode(q, k, v, lens, 0.125).float()
        ok = bool(((got - ref).norm() / ref.norm()) < 2e-2)
        cu_host = [0, 5, 12, 30, 31]
        T = cu_host[-1]
        qp = torch.randn(T, Hkv * G, D, device=device, dtype=dtype, generator=g)
        kp = torch.randn(T, Hkv, D, device=device, dtype=dtype, generator=g)
        vp = torch.randn(T, Hkv, D, device=device, dtype=dtype, generator=g)
        cu = torch.tensor(cu_host, dtype=torch.int32, device=device)
        ref = prefill_attention(qp.float(), kp.float(), vp.float(), cu, 18, 0.125, cu_host)
        got = torch.ops.aten._flash_attention_forward(qp, kp, vp, cu, cu, 18, 18, 0.0, True, False,
                                                      scale=0.125)[0].float()
        ok = ok and bool(((got - ref).norm() / ref.norm()) < 2e-2)
    except Exception as exc:  # an older or newer kernel signature: the dense path still works
        import warnings

        warnings.warn(f"polyvox.decode: flash attention unavailable ({type(exc).__name__}: {exc}); "
                      "using dense SDPA", stacklevel=2)
        ok = False
    _FLASH[key] = ok
    return ok


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
               pv_lens=None, pv_cu=None, pv_max=None, pv_cu_host=None, **kwargs):
    """The ``polyvox_decode`` attention function (transformers calls it with the cache's update output)."""
    if sliding_window is not None:
        raise NotImplementedError("polyvox.decode: sliding-window attention is not supported")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if pv_lens is not None:  # decode: query (B, Hq, 1, D); key/value the packed cache (B, cap, Hkv, D)
        out = torch.ops.polyvox.decode_attention(query[:, :, 0], key, value, pv_lens, float(scale))
        return out[:, None], None
    # prefill: query (1, Hq, T, D) and key/value (1, Hkv, T, D), packed prompts with boundaries pv_cu
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))
    return prefill_attention(q, k, v, pv_cu, pv_max, float(scale), pv_cu_host)[None], None


_REGISTERED = False


def _register():
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface

        AttentionInterface.register(ATTN, _attention)
        _REGISTERED = True


class _AttentionSwitch:
    """Within the block, the model's attention layers call ``polyvox_decode`` (restored after)."""

    def __init__(self, model):
        self.configs = {id(m.config): m.config for m in model.modules()
                        if hasattr(getattr(m, "config", None), "_attn_implementation_internal")}
        self.configs = list(self.configs.values())

    def __enter__(self):
        self.saved = [c._attn_implementation_internal for c in self.configs]
        for c in self.configs:
            c._attn_implementation_internal = ATTN

    def __exit__(self, *exc):
        for c, s in zip(self.configs, self.saved):
            c._attn_implementation_internal = s
