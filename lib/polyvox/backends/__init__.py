"""Sampling backends behind one protocol (:mod:`.base`): ``hf`` (transformers), ``vllm``, ``openai``."""
from .base import (BACKENDS, accepted_options, Backend, Completion, Request, SamplingParams, adapter_identity, make_backend,
                   model_identity, register_backend)

__all__ = ["BACKENDS", "accepted_options", "Backend", "Completion", "Request", "SamplingParams", "adapter_identity", "make_backend",
           "model_identity", "register_backend"]

from . import hf, openai, vllm  # noqa: E402,F401 - importing registers them (none imports torch or vllm at import)
