"""Sampling backends behind one protocol (:mod:`.base`): ``hf`` (transformers), ``vllm``, ``openai``."""
from .base import (BACKENDS, Backend, BackendSpec, Completion, Request, SamplingParams, accepted_options,
                   adapter_identity, make_backend, model_identity, register_backend)

__all__ = ["BACKENDS", "Backend", "BackendSpec", "Completion", "Request", "SamplingParams", "accepted_options",
           "adapter_identity", "make_backend", "model_identity", "register_backend"]

from . import hf, openai, vllm  # noqa: E402,F401 - importing registers them (none imports torch or vllm at import)
