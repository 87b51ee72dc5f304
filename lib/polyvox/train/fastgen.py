"""GRPO generation on the fast path: a colocated inference copy of the policy, refreshed each step.

TRL's ``GRPOTrainer`` generates with the training model through ``generate`` with
``disable_compile=True``, so even ``cache_implementation="static"`` runs uncompiled. As
TRL's own vLLM "colocate" mode does with a vLLM engine, polyvox keeps a second,
plain (non-PEFT) copy of the model in the generation dtype and, whenever the training
step has changed, writes into it the policy's merged weights — ``W + scale·B·A`` for
every LoRA module, from PEFT's own ``get_delta_weight`` — then generates on it with
:func:`polyvox.backends.hf.generate_rows` — on CUDA polyvox's decode loop
(:mod:`polyvox.backends.decode`: packed prefill, FlashAttention over each row's own tokens,
the decode step compiled once and replayed as a CUDA graph), per-row seeds. The copy's
weights are updated in place, so the captured graph is reused across steps; it is captured
again only when a batch needs a larger KV capacity (rounded up to 256 tokens), and the
compilation is dynamic in rows and capacity, so new prompt widths cost no recompilation.

First-shape costs in training: on CUDA the trainer turns PyTorch's cuDNN attention backend
off for the process (``torch.backends.cuda.enable_cudnn_sdp(False)``). cuDNN builds a plan
for every new sequence shape, 1–3 s each in the recorded runs, and GRPO batches have a new
padded width almost every step; the flash and memory-efficient kernels need no plans.

The copy is refreshed whenever the policy may have changed: at a new global step, and at the
first generation of every ``train()`` call (a second ``train()`` restarts ``global_step``).
Trainers of one process share the copy of the same model path (one at a time is kept): a
later stage's trainer finds the decode loop's compiled step and captured graphs ready.

Departure from the policy: the copy runs in bf16 on GPU while the policy trains in fp32
under bf16 autocast, so sampling probabilities differ from the policy's by rounding, as
with vLLM generation; the loss uses the policy's own log-probabilities
(``num_iterations = 1``). :func:`refresh` is tested to give the policy's logits exactly
in fp32.

Data-parallel (:mod:`polyvox.train.parallel`): each process keeps its own copy on its own device,
refreshed from the policy unwrapped from DDP (``accelerator.unwrap_model``; every rank holds the
same weights after a step), and generates its own slice of the step's batch. A row is seeded by
its position in the *global* batch (rank × rows per rank + its index), so the rows of a step get
the seeds a one-process run gives the same rows.
"""
from __future__ import annotations

import hashlib


def refresh(policy, copy) -> int:
    """Write base + merged LoRA deltas of ``policy`` (a PEFT model) into ``copy``; returns modules written."""
    import torch
    from peft.tuners.lora import LoraLayer

    params = dict(copy.named_parameters())
    written = 0
    with torch.no_grad():
        for name, module in policy.named_modules():
            if not isinstance(module, LoraLayer):
                continue
            key = name.removeprefix("base_model.model.") + ".weight"
            weight = module.get_base_layer().weight
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    weight = weight + module.get_delta_weight(adapter)
            params[key].copy_(weight.to(params[key].dtype))
            written += 1
    return written


_SHARED: dict = {}  # (model path, device, dtype) -> the inference copy; one entry at a time


def shared_copy(path: str, device, dtype):
    """The process's inference copy of ``path`` (loaded on first use; another path replaces it)."""
    from transformers import AutoModelForCausalLM

    key = (str(path), str(device), str(dtype))
    if key not in _SHARED:
        _SHARED.clear()
        _SHARED[key] = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    return _SHARED[key]


def step_seed(seed: int, step: int, index: int) -> int:
    h = hashlib.sha256(f"grpo|{seed}|{step}|{index}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def fast_trainer_class():
    """A GRPOTrainer whose generation goes through the refreshed inference copy (built lazily: TRL is heavy)."""
    import torch
    from trl import GRPOTrainer

    from ..backends.base import SamplingParams
    from ..backends.hf import check_positions, generate_rows

    class FastGRPOTrainer(GRPOTrainer):
        polyvox_model_path: str = ""
        polyvox_seed: int = 0
        polyvox_timing: dict

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.accelerator.device.type == "cuda":
                torch.backends.cuda.enable_cudnn_sdp(False)  # no per-shape plan building (module docstring)
            self._pv_round = 0

        def train(self, *args, **kwargs):
            self._pv_round += 1  # global_step restarts: the copy must be refreshed again
            return super().train(*args, **kwargs)

        def _tokenize_prompts(self, prompts):
            # plain-text prompts (a GRPO batch repeats each one num_generations times): TRL's own call,
            # made once per distinct prompt; the same ids, an eighth of the host time at group 8
            if prompts and all(isinstance(p, str) for p in prompts):
                distinct = list(dict.fromkeys(prompts))
                ids = dict(zip(distinct, self.processing_class(text=distinct)["input_ids"]))
                return [list(ids[p]) for p in prompts], None, {}
            return super()._tokenize_prompts(prompts)

        def _polyvox_copy(self):
            if getattr(self, "_pv_copy", None) is None:
                device = self.accelerator.device
                dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
                self._pv_copy = shared_copy(self.polyvox_model_path, device, dtype)
                self.polyvox_timing = {"refresh_s": 0.0, "generate_s": 0.0, "tokens": 0, "calls": 0}
                self.polyvox_decode_stats = {}
            return self._pv_copy

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):
            import time

            copy = self._polyvox_copy()
            t0 = time.perf_counter()
            # the copy may be shared with another trainer: it records whose weights it holds
            version = (id(self), self._pv_round, self.state.global_step)
            if getattr(copy, "_polyvox_version", None) != version:
                refresh(self.accelerator.unwrap_model(self.model), copy)
                copy._polyvox_version = version
            t1 = time.perf_counter()
            params = SamplingParams(self.max_completion_length, self.temperature, self.top_p or 1.0)
            # seeded by the row's place in the global batch: this rank's slice starts at rank × rows
            first = self.accelerator.process_index * len(prompt_ids)
            seeds = [step_seed(self.polyvox_seed, self.state.global_step, first + i) for i in range(len(prompt_ids))]
            eos = self.eos_token_ids
            check_positions(copy, prompt_ids, params.max_tokens)  # a refusal, not text past the trained positions
            rows = generate_rows(copy, [list(p) for p in prompt_ids], seeds, params, self._tokenizer.pad_token_id,
                                 eos, str(self.accelerator.device), static=self.accelerator.device.type == "cuda",
                                 batch_size=len(prompt_ids), stats=self.polyvox_decode_stats)
            eos_set = set(eos if isinstance(eos, (list, tuple)) else [eos])
            completions = []
            for row in rows:
                cut = next((k + 1 for k, t in enumerate(row) if t in eos_set), len(row))
                completions.append(row[:cut])
            t2 = time.perf_counter()
            self.polyvox_timing["refresh_s"] += t1 - t0
            self.polyvox_timing["generate_s"] += t2 - t1
            self.polyvox_timing["tokens"] += sum(len(c) for c in completions)
            self.polyvox_timing["calls"] += 1
            return completions, None

    return FastGRPOTrainer
