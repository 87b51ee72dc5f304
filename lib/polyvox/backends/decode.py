"""Batched sampling at the memory bandwidth's pace: polyvox's own decode loop over a transformers model.

A decode step of a small model at a large batch is bound by the bytes it reads: the weights
once and every row's KV cache. transformers' ``generate`` with its static cache reads more:
its SDPA path repeats the grouped-query KV for every query head (a copy per layer and step)
and attends over the whole padded cache. This loop uses only standard parts:

- **the model's own forward**, through transformers' ``AttentionInterface`` (an attention
  function registered as ``polyvox_decode``, switched on only inside :func:`decode_rows`) and a
  KV cache of our own passed as ``past_key_values`` (transformers calls its ``update``);
- **a KV cache packed per row**, ``(rows, capacity, kv_heads, head_dim)`` per layer, left-aligned:
  row ``b``'s token at position ``t`` sits in slot ``t``, so no row carries padding;
- **attention without KV copies**, by PyTorch's own FlashAttention-2 kernel in its variable-length
  form (``torch.ops.aten._flash_attention_forward`` with ``seqused_k``): each row reads only its
  own tokens, and at decode the query heads of one KV head are folded onto that head as
  ``groups`` query rows, so each KV head is read once per step. Where that kernel cannot run
  (CPU, fp32, or a failed self-check at start) the same op computes SDPA densely under a
  length mask — the same function, tested against ``generate`` in fp32 on CPU;
- **packed prefill**: the prompts of a batch are concatenated (no padding) and run through the
  model in chunks of at most ``PREFILL_TOKENS`` tokens, causal within each prompt;
- **one CUDA graph per batch size**: the decode step — forward, the seeded sampler, EOS
  bookkeeping and the step counters — is compiled with ``torch.compile`` (dynamic in rows and
  capacity, so one compilation serves every shape) and captured once; each step is one replay
  and the host checks for the end of the batch every ``CHECK_EVERY`` steps.

The attention kernels are in :mod:`polyvox.backends.attention`, the host's stop-string cut in
:mod:`polyvox.backends.stops`.

Sampling is :func:`polyvox.backends.hf.seeded_choice`, the function behind ``SeededSampler``:
counter-based Gumbel noise per (request seed, step, token id), so a request's text does not
depend on its batch. ``test_decode.py`` checks that this loop gives the eager path's texts in
fp32 on CPU; the sampling bench compares the two in bf16 on the GPU.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from .stops import _check_stops, _first_stop  # noqa: F401
from .attention import (ATTN, DENSE_PREFILL_TOKENS, _AttentionSwitch, _register, decode_attention,  # noqa: F401
                        flash_self_check, prefill_attention)

PREFILL_TOKENS = 1 << 16  # tokens per packed prefill chunk (dense fallback: DENSE_PREFILL_TOKENS)
CAP_BUCKET = 256  # KV capacity is rounded up to this: few reallocations, few graph captures
CHECK_EVERY = 16  # decode steps between the host's checks for the end of a batch (one sync each)

# generation-config options that ``generate(do_sample=False)`` would apply as logits processors;
# a model that sets any of them goes through ``generate`` instead of this loop
_PROCESSOR_OPTIONS = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "bad_words_ids": None,
                      "min_length": 0, "min_new_tokens": None, "suppress_tokens": None,
                      "begin_suppress_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
                      "sequence_bias": None, "encoder_repetition_penalty": 1.0, "renormalize_logits": False,
                      "exponential_decay_length_penalty": None, "encoder_no_repeat_ngram_size": 0}


# ----------------------------------------------------------------------------- cache and state

class PackedCache:
    """Per layer K and V of shape (rows, capacity, kv_heads, head_dim); row b's position t in slot t.

    transformers calls :meth:`update` from every attention layer. At prefill the new keys are the
    packed prompts (scattered to (``rows``, ``slots``)) and attention runs on them directly; at
    decode one key per row is written at slot ``pos[b]`` and attention reads the whole store.
    """

    is_compileable = True

    def __init__(self, n_layers, rows, cap, kv_heads, head_dim, dtype, device):
        shape = (rows, cap, kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.prefill = False
        self.rows_idx = self.slots = None  # prefill scatter index
        self.batch_idx = torch.arange(rows, device=device)
        self.pos = None  # decode: the state's position tensor

    def update(self, key, value, layer_idx, *args, **kwargs):
        if self.prefill:
            self.k[layer_idx].index_put_((self.rows_idx, self.slots), key[0].transpose(0, 1))
            self.v[layer_idx].index_put_((self.rows_idx, self.slots), value[0].transpose(0, 1))
            return key, value
        self.k[layer_idx].index_put_((self.batch_idx, self.pos), key[:, :, 0])
        self.v[layer_idx].index_put_((self.batch_idx, self.pos), value[:, :, 0])
        return self.k[layer_idx], self.v[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0


class _State:
    """The decode loop's device buffers (fixed addresses: a captured graph reads and writes them)."""

    def __init__(self, rows, max_new, n_eos, device):
        self.tok = torch.zeros(rows, dtype=torch.int64, device=device)  # the token fed next
        self.pos = torch.zeros(rows, dtype=torch.int64, device=device)  # its position (= its cache slot)
        self.step = torch.zeros((), dtype=torch.int64, device=device)  # index of the token sampled next
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)
        self.out = torch.zeros(rows, max_new, dtype=torch.int64, device=device)
        self.seeds = torch.zeros(rows, dtype=torch.int64, device=device)
        self.eos = torch.zeros(n_eos, dtype=torch.int64, device=device)


_NO_MASK = {"full_attention": None, "sliding_attention": None}


def _decode_step(model, cache, st, temperature: float, top_p: float, pad_id: int):
    """One step: feed ``st.tok`` at ``st.pos``, sample ``st.out[:, st.step]``, advance (all in place)."""
    from .hf import seeded_choice

    lens = (st.pos + 1).to(torch.int32)
    logits = model(input_ids=st.tok[:, None], position_ids=st.pos[:, None], past_key_values=cache,
                   attention_mask=_NO_MASK, use_cache=True, pv_lens=lens, logits_to_keep=1).logits[:, -1, :]
    if temperature > 0:
        choice = seeded_choice(logits, st.seeds, st.step, temperature, top_p)
    else:
        choice = torch.argmax(logits.float(), dim=-1)
    choice = torch.where(st.finished, pad_id, choice)
    st.finished.logical_or_(torch.isin(choice, st.eos))
    st.out.index_copy_(1, st.step.view(1), choice[:, None])
    st.tok.copy_(choice)
    st.pos.add_(1)
    st.step.add_(1)


_COMPILED = None


def _compiled_step():
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = torch.compile(_decode_step, fullgraph=True, dynamic=None)
    return _COMPILED


# ----------------------------------------------------------------------------- the engine

class Engine:
    """Decode state for one model and one batch size: cache, buffers, compiled step, CUDA graph."""

    def __init__(self, model, rows: int, device, compile: bool | None = None, graphs: bool | None = None):
        cfg = _text_config(model)
        self.model, self.rows, self.device = model, rows, torch.device(device)
        self.dtype = next(model.parameters()).dtype
        self.n_layers = cfg.num_hidden_layers
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        cuda = self.device.type == "cuda"
        self.compile = cuda if compile is None else compile
        self.graphs = cuda if graphs is None else graphs
        self.cache = self.state = self.graph = None
        self.cap = self.max_new = 0
        self.key = None  # (temperature, top_p, pad_id, eos) the graph was captured for
        self.pool = torch.cuda.graph_pool_handle() if cuda and self.graphs else None
        self.flash = flash_self_check(self.device, self.dtype) if cuda else False
        self.info = {"flash": self.flash, "compiled": False, "graph": False, "captures": 0, "errors": []}

    def ensure(self, cap: int, max_new: int, n_eos: int):
        cap = -(-cap // CAP_BUCKET) * CAP_BUCKET
        max_new = -(-max_new // 128) * 128
        if self.cache is not None and cap <= self.cap and max_new <= self.max_new and n_eos == self.state.eos.numel():
            return
        self.cap, self.max_new = max(cap, self.cap), max(max_new, self.max_new)
        self.graph = self.cache = self.state = None
        self.cache = PackedCache(self.n_layers, self.rows, self.cap, self.kv_heads, self.head_dim, self.dtype,
                                 self.device)
        self.state = _State(self.rows, self.max_new, n_eos, self.device)
        self.cache.pos = self.state.pos
        if self.compile:  # one compilation for every batch size and capacity
            for t in (self.state.tok, self.state.pos, self.state.finished, self.state.out, self.state.seeds,
                      self.cache.batch_idx):
                torch._dynamo.maybe_mark_dynamic(t, 0)
            torch._dynamo.maybe_mark_dynamic(self.state.out, 1)
            for t in self.cache.k + self.cache.v:
                torch._dynamo.maybe_mark_dynamic(t, 0)
                torch._dynamo.maybe_mark_dynamic(t, 1)

    def _reset_state(self):
        st = self.state
        st.tok.zero_(), st.pos.zero_(), st.step.zero_(), st.finished.zero_()

    def _step_fn(self):
        return _compiled_step() if self.compile else _decode_step

    def step(self, temperature, top_p, pad_id):
        """One decode step (a graph replay once captured)."""
        key = (temperature, top_p, pad_id)
        if self.graph is not None and self.key == key:
            self.graph.replay()
            return
        self._run(key)

    def _run(self, key):
        fn = self._step_fn()
        try:
            fn(self.model, self.cache, self.state, *key)
            self.info["compiled"] = self.compile
        except Exception as exc:
            if not self.compile:
                raise
            self.info["errors"].append(f"compile: {type(exc).__name__}: {str(exc)[:300]}")
            self.compile = False
            _decode_step(self.model, self.cache, self.state, *key)

    def capture(self, key):
        """Warm up (compiles on first use) and capture the step as a CUDA graph. Run before prefill:
        the warm-up steps write cache slot 0 of every row, which prefill then overwrites."""
        if not self.graphs or (self.graph is not None and self.key == key):
            return
        self.graph = None
        self._reset_state()
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    self._run(key)
                    self._reset_state()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool):
                self._step_fn()(self.model, self.cache, self.state, *key)
            self.graph, self.key = g, key
            self.info["graph"] = True
            self.info["captures"] += 1
        except Exception as exc:
            self.graph, self.graphs = None, False
            self.info["errors"].append(f"graph: {type(exc).__name__}: {str(exc)[:300]}")
            torch.cuda.synchronize()
        self._reset_state()


def _text_config(model):
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def unsupported(model) -> str | None:
    """Why this loop cannot reproduce ``generate`` for this model (None: it can)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = _text_config(base)
    if not getattr(base, "_can_set_attn_implementation", lambda: False)():
        return "the model does not dispatch attention through AttentionInterface"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return "sliding-window or other non-full attention layers"
    if getattr(cfg, "attn_logit_softcapping", None) or getattr(cfg, "sliding_window", None) and \
            getattr(cfg, "use_sliding_window", False):
        return "attention softcapping or sliding windows"
    if getattr(cfg, "is_encoder_decoder", False):
        return "an encoder-decoder model"
    gc = getattr(base, "generation_config", None)
    for name, default in _PROCESSOR_OPTIONS.items():
        value = getattr(gc, name, default) if gc is not None else default
        if value not in (default, None) and not (name == "min_length" and value == 0):
            return f"generation_config.{name}={value!r} (a logits processor this loop does not apply)"
    return None


def engine_for(model, rows: int, device) -> Engine:
    """The model's engine for batches of ``rows`` (kept on the model: it lives as long as the model)."""
    per_model = model.__dict__.setdefault("_polyvox_engines", {})
    if rows not in per_model:
        per_model[rows] = Engine(model, rows, device)
    return per_model[rows]


# ----------------------------------------------------------------------------- the loop

def decode_rows(model, rows: list[list[int]], seeds: list[int], max_new: int, temperature: float, top_p: float,
                pad_id: int, eos_ids, device, batch_rows: int | None = None, stops=(), tokenizer=None,
                cap_hint: int = 0, stats: dict | None = None) -> list[list[int]]:
    """Sample up to ``max_new`` tokens after each prompt (token ids); returns each row's new tokens.

    A row ends after its first end-of-sequence token (kept) or, with ``stops``, at the first token
    whose decoded text contains a stop string (kept; the caller cuts the text). ``batch_rows``:
    the batch is filled up to this many rows with copies of its last row (one captured graph
    serves every batch of that size; each row samples with its own seed, so the filler changes
    nothing). ``stats`` (a dict) receives timings and the work done, for benches.
    """
    _register()
    t_start = time.perf_counter()
    n = len(rows)
    if max_new < 1 or n == 0:
        return [[] for _ in range(n)]
    B = max(batch_rows or n, n)
    if n < B:
        rows, seeds = rows + [rows[-1]] * (B - n), list(seeds) + [seeds[-1]] * (B - n)
    eos = sorted({int(e) for e in (eos_ids if isinstance(eos_ids, (list, tuple, set)) else [eos_ids])
                  if e is not None})
    eng = engine_for(model, B, device)
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=B)
    if lens.min() < 1:
        raise ValueError("polyvox.decode: an empty prompt")
    eng.ensure(max(int(lens.max()), cap_hint) + max_new, max_new, max(len(eos), 1))
    st, cache, dev = eng.state, eng.cache, eng.device
    cuda = dev.type == "cuda"
    key = (float(temperature), float(top_p), int(pad_id))
    # in the weights' dtype (the cache's), whatever autocast the caller is in (e.g. a trainer's bf16)
    with torch.no_grad(), torch.autocast(dev.type, enabled=False), _AttentionSwitch(model):
        if cuda:
            eng.capture(key)  # first: its warm-up writes cache slots that prefill then fills
        eng._reset_state()
        st.seeds.copy_(torch.as_tensor(np.asarray(seeds, dtype=np.int64)), non_blocking=True)
        st.eos.copy_(torch.as_tensor(eos or [-1], dtype=torch.int64), non_blocking=True)
        # ---- packed prefill, in chunks of rows
        budget = PREFILL_TOKENS if eng.flash else DENSE_PREFILL_TOKENS
        flat = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])
        offsets = np.concatenate([[0], np.cumsum(lens)])
        positions = np.arange(len(flat), dtype=np.int64) - np.repeat(offsets[:-1], lens)
        first = torch.empty(B, dtype=torch.int64, device=dev)
        w_pre = time.perf_counter()
        if cuda:
            t_pre = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t_pre[0].record()
        a = 0
        while a < B:
            b, tok = a, 0
            while b < B and (b == a or tok + lens[b] <= budget):
                tok += lens[b]
                b += 1
            lo, hi = offsets[a], offsets[b]
            ids = torch.as_tensor(flat[lo:hi]).to(dev, non_blocking=True)[None]
            pos = torch.as_tensor(positions[lo:hi]).to(dev, non_blocking=True)
            cu_host = (offsets[a:b + 1] - lo).astype(np.int32)
            cu = torch.as_tensor(cu_host).to(dev, non_blocking=True)
            cache.prefill = True
            cache.rows_idx = torch.as_tensor(np.repeat(np.arange(a, b), lens[a:b])).to(dev, non_blocking=True)
            cache.slots = pos
            last = torch.as_tensor(cu_host[1:].astype(np.int64) - 1).to(dev, non_blocking=True)
            logits = model(input_ids=ids, position_ids=pos[None], past_key_values=cache, attention_mask=_NO_MASK,
                           use_cache=True, pv_cu=cu, pv_max=int(lens[a:b].max()), pv_cu_host=cu_host.tolist(),
                           logits_to_keep=last).logits[0]
            cache.prefill = False
            if temperature > 0:
                from .hf import seeded_choice

                first[a:b] = seeded_choice(logits, st.seeds[a:b], 0, temperature, top_p)
            else:
                first[a:b] = torch.argmax(logits.float(), dim=-1)
            a = b
        cache.rows_idx = cache.slots = None
        st.out[:, 0] = first
        st.tok.copy_(first)
        st.pos.copy_(torch.as_tensor(lens).to(dev, non_blocking=True))
        st.finished.copy_(torch.isin(first, st.eos))
        st.step.fill_(1)
        if cuda:
            t_pre[1].record()
        # ---- decode: one replay per step; the host looks every CHECK_EVERY steps
        w_dec = time.perf_counter()
        if cuda:
            t_dec = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t_dec[0].record()
        cut = [None] * B  # per row: tokens kept, once known (eos or stop string)
        checked = 1
        steps = 1
        all_done = bool(st.finished.all()) if max_new > 1 else True
        while steps < max_new and not all_done:
            eng.step(*key)
            steps += 1
            if steps % CHECK_EVERY == 0 or steps == max_new:
                if stops and tokenizer is not None:  # rows still running whose text reached a stop string
                    _check_stops(st, cut, checked, steps, stops, tokenizer, n, eos)
                    checked = steps
                all_done = bool(st.finished.all())
        if cuda:
            t_dec[1].record()
        out = st.out[:n, :steps].cpu().numpy()
        w_end = time.perf_counter()
    ends = np.full(n, steps, dtype=np.int64)
    if eos:
        is_eos = np.isin(out, eos)
        has = is_eos.any(axis=1)
        ends[has] = is_eos[has].argmax(axis=1) + 1
    if stops and tokenizer is not None:  # every row, up to its end: also a stop string before an eos
        todo = [i for i in range(n) if cut[i] is None]
        texts = tokenizer.batch_decode([out[i, :ends[i]].tolist() for i in todo], skip_special_tokens=True)
        for i, text in zip(todo, texts):
            if any(s in text for s in stops):
                cut[i] = _first_stop(out[i, :ends[i]].tolist(), 0, stops, tokenizer)
    result = [out[i, :min(ends[i], cut[i] or ends[i])].tolist() for i in range(n)]
    if stats is not None:
        if cuda:  # device time between events (host gaps included: the device waited for them)
            torch.cuda.synchronize()
            pre_s, dec_s = t_pre[0].elapsed_time(t_pre[1]) / 1e3, t_dec[0].elapsed_time(t_dec[1]) / 1e3
        else:
            pre_s, dec_s = w_dec - w_pre, w_end - w_dec
        stats["prefill_s"] = stats.get("prefill_s", 0.0) + pre_s
        stats["decode_s"] = stats.get("decode_s", 0.0) + dec_s
        stats["decode_steps"] = stats.get("decode_steps", 0) + steps - 1
        stats["row_steps"] = stats.get("row_steps", 0) + B * (steps - 1)  # rows x decode steps
        stats["row_positions"] = stats.get("row_positions", 0) + B * steps  # rows x sampled positions
        # KV slots read over the decode steps: row b at step s reads lens[b] + s slots
        stats["kv_slot_reads"] = stats.get("kv_slot_reads", 0) + int(
            lens.sum() * (steps - 1) + B * (steps - 1) * steps // 2)
        stats["batches"] = stats.get("batches", 0) + 1
        stats["wall_s"] = stats.get("wall_s", 0.0) + time.perf_counter() - t_start
        stats["engine"] = dict(eng.info)
    return result
