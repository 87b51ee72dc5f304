"""The sampling layer's contract: requests in, completions with token usage out.

    backend = make_backend("transformers", model, adapter)     # by name, from the registry
    prompt = backend.prompt("think", problem_text)             # the one place prompts are built
    backend.generate([Request.of(prompt, seed)], params) -> [Completion]

One completion per request; n samples of a prompt are n requests, each with its
own seed, so a resumed run asks for exactly the samples it is missing. Backends
register themselves by name with :func:`register_backend` (a plain dict, as
lm-evaluation-harness registers its models); ``make_backend`` looks the name up,
so adding a backend never touches the callers.

``identity()`` names what produced a completion — backend, model (its folder's name
and hashes of every file that changes its outputs: weights and config, generation
config, tokenizer, chat template; or a hub id / served name) and adapter hash — and is
the model part of the request cache's key (:mod:`polyvox.cache`) and of a run's
settings, so a resume after any of those files changed is refused.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from ..formats import Prompt, build_prompt


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    prompt: str  # templated text (completions) or the user message (chat endpoints)
    seed: int = 0
    chat: bool = False
    template_kwargs: dict = field(default_factory=dict)  # chat endpoints: e.g. {"enable_thinking": False}
    # this request's own LoRA adapter folder (None: the backend's own adapter, if any). Read by the vllm
    # backend (one LoRARequest per folder, many adapters in one engine); the transformers and openai
    # backends refuse a request whose adapter is not their own (refuse_request_adapters)
    adapter: str | None = None

    @classmethod
    def of(cls, prompt: Prompt, seed: int, adapter: str | None = None) -> "Request":
        return cls(prompt.text, seed, prompt.chat, dict(prompt.template_kwargs), adapter)

    def hash(self) -> str:
        """Short hash of what the backend receives (text, template options, own adapter), stored with each sample."""
        blob = self.prompt if not self.template_kwargs else self.prompt + json.dumps(self.template_kwargs, sort_keys=True)
        if self.adapter is not None:  # requests without one hash as before
            blob += "\0adapter=" + self.adapter
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def local_prompt(tokenizer, r: Request) -> str:
    """The text a local model reads for ``r``: a completion request as it is; a chat request (the user
    message, as a chat endpoint takes it) through the tokenizer's chat template with the generation
    prompt and the request's template options, as an OpenAI-compatible server renders it — so a judge
    or any caller that sends chat requests gets the same reply from a local backend as from a server."""
    if not r.chat:
        return r.prompt
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("a chat request needs a model whose tokenizer has a chat template")
    return tokenizer.apply_chat_template([{"role": "user", "content": r.prompt}], tokenize=False,
                                         add_generation_prompt=True, **r.template_kwargs)


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" | "length"
    latency_s: float

    @property
    def usage(self) -> dict:
        """Token usage in the OpenAI shape (Part III's cost accounting sums these)."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


class Backend(Protocol):
    name: str

    def prompt(self, fmt: str, text: str) -> Prompt: ...

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]: ...

    def identity(self) -> dict: ...


class LocalBackend:
    """Shared by backends that hold the model's tokenizer: prompts use its chat template."""

    name = "local"
    tokenizer = None
    model_name = ""
    adapter: str | None = None
    options: dict = {}

    def prompt(self, fmt: str, text: str) -> Prompt:
        return build_prompt(fmt, text, self.tokenizer)

    @classmethod
    def describe(cls, model: str, adapter: str | None = None, **options) -> dict:
        """The identity of this backend on model + adapter, checked and hashed without loading anything."""
        check_model_path(model)
        check_adapter_path(adapter)
        return {"backend": cls.name, **model_identity(model), "adapter_sha256": adapter_identity(adapter),
                **cls.identity_options(options)}

    @classmethod
    def identity_options(cls, options: dict) -> dict:
        return {}

    def identity(self) -> dict:
        return self.describe(self.model_name, self.adapter, **self.options)


@dataclass(frozen=True)
class BackendSpec:
    """A backend not loaded yet: its identity is known (and checked) before any weights load."""

    kind: str
    model: str
    adapter: str | None = None
    options: dict = field(default_factory=dict)

    def identity(self) -> dict:
        return backend_class(self.kind).describe(self.model, self.adapter, **self.options)

    def load(self) -> Backend:
        return make_backend(self.kind, self.model, self.adapter, **self.options)


def check_model_path(model: str) -> None:
    """A local model path must be a folder with config.json; a hub id (org/name) is left to from_pretrained."""
    p = Path(model).expanduser()
    if p.is_file():
        raise ValueError(f"{model}: a file, not a model folder")
    if p.is_dir():
        if not (p / "config.json").exists():
            raise ValueError(f"{model}: no config.json: not a model folder")
    elif model.startswith(("/", ".", "~")) or model.count("/") > 1:
        raise ValueError(f"{model}: no such model folder")


def check_adapter_path(adapter: str | None) -> None:
    if adapter is None:
        return
    p = Path(adapter)
    if not p.is_dir():
        raise ValueError(f"{adapter}: no such adapter folder")
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if not (p / name).exists():
            raise ValueError(f"{adapter}: no {name} (polyvox loads PEFT adapters saved as safetensors)")


BACKENDS: dict[str, Callable[..., Backend]] = {}


def register_backend(name: str):
    def deco(factory):
        if name in BACKENDS:
            raise ValueError(f"backend {name!r} is registered twice")
        BACKENDS[name] = factory
        return factory
    return deco


# where each backend registers itself, imported by name on first use: this module never imports
# the backends statically (they import it), so the registry has no import cycle
BACKEND_MODULES = {"transformers": "polyvox.backends.hf", "vllm": "polyvox.backends.vllm",
                   "openai": "polyvox.backends.openai"}


def backend_class(kind: str):
    import importlib

    if kind not in BACKENDS and kind in BACKEND_MODULES:
        importlib.import_module(BACKEND_MODULES[kind])  # registers it
    if kind not in BACKENDS:
        raise ValueError(f"unknown backend {kind!r}; backends: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[kind]


def make_backend(kind: str, model: str, adapter: str | None = None, **kwargs) -> Backend:
    return backend_class(kind)(model, adapter, **kwargs)


def accepted_options(kind: str, **options) -> dict:
    """The options (not None) that backend ``kind`` accepts: a command line offers all, each backend takes its own."""
    import inspect

    params = inspect.signature(backend_class(kind)).parameters
    return {k: v for k, v in options.items() if k in params and v is not None}


# ---------------------------------------------------------------- identities

_WEIGHTS_FULL_HASH_BYTES = 512 << 20  # hash every byte of weights up to this size; above it, the index

# Everything in a model folder that changes what the model writes, besides its weights: the
# architecture, the generation defaults ``generate`` falls back on (top_k, repetition_penalty,
# eos ids), the tokenizer in each format transformers and vLLM read, and the chat template
# wherever it is kept (its own file, chat_template.json, or a key of tokenizer_config.json).
_CONFIG_FILES = ("config.json",)
_GENERATION_FILES = ("generation_config.json",)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                    "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model",
                    "sentencepiece.bpe.model", "preprocessor_config.json", "processor_config.json")
_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
_TEMPLATE_FOLDER = "additional_chat_templates"


def _safetensors_header(path: Path) -> bytes:
    with path.open("rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        return fh.read(min(n, 64 << 20))


def _identity_files(p: Path) -> list[Path]:
    """The files of a model folder that its identity covers (weights, configs, tokenizer, templates)."""
    named = set(_CONFIG_FILES + _GENERATION_FILES + _TOKENIZER_FILES + _TEMPLATE_FILES)
    files = [x for x in p.iterdir() if x.is_file() and (
        x.suffix == ".safetensors" or x.name in named or x.name.endswith(".safetensors.index.json")
        or x.suffix == ".tiktoken")]
    extra = p / _TEMPLATE_FOLDER
    if extra.is_dir():
        files += [x for x in extra.rglob("*") if x.is_file()]
    return sorted(files)


def _chat_templates(p: Path) -> tuple[bytes, bytes | None]:
    """(tokenizer_config.json without its chat template, canonical bytes of every chat template or None)."""
    templates: dict[str, object] = {}
    tok_cfg = p / "tokenizer_config.json"
    stripped = b""
    if tok_cfg.is_file():
        raw = tok_cfg.read_bytes()
        try:
            cfg = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            cfg = None
        if isinstance(cfg, dict):
            if cfg.get("chat_template") is not None:
                templates["tokenizer_config.json"] = cfg.pop("chat_template")
            stripped = json.dumps(cfg, sort_keys=True).encode()
        else:
            stripped = raw
    for name in _TEMPLATE_FILES:
        if (p / name).is_file():
            templates[name] = hashlib.sha256((p / name).read_bytes()).hexdigest()
    extra = p / _TEMPLATE_FOLDER
    if extra.is_dir():
        for f in sorted(x for x in extra.rglob("*") if x.is_file()):
            templates[f"{_TEMPLATE_FOLDER}/{f.relative_to(extra).as_posix()}"] = \
                hashlib.sha256(f.read_bytes()).hexdigest()
    return stripped, (json.dumps(templates, sort_keys=True).encode() if templates else None)


_identity_memo: dict[tuple, dict] = {}


def model_identity(model: str) -> dict:
    """The identity of a local model folder — every file that changes its outputs — or a hub id / served name as given.

    - ``weights_sha256``: the weights and ``config.json``. Weights up to 512 MB are hashed byte
      for byte. Larger checkpoints are identified by their weights' index — every safetensors
      header (tensor names, shapes, dtypes, offsets) and file sizes — which is cheap for a 60 GB
      model but does not see a change of values that keeps every shape: give such a model a new folder.
    - ``generation_config_sha256``: ``generation_config.json`` (the defaults ``generate`` samples with).
    - ``tokenizer_sha256``: the tokenizer's files (``tokenizer.json``, ``tokenizer_config.json`` without
      its chat template, vocabularies, special tokens).
    - ``chat_template_sha256``: every chat template, wherever it is kept (``chat_template.jinja``,
      ``chat_template.json``, ``additional_chat_templates/``, the ``chat_template`` key of
      ``tokenizer_config.json``).

    A file that is absent hashes as absent (None for a folder without a generation config or chat
    template), so adding one changes the identity too. A run's settings hold this identity: a
    resumed run whose model folder changed in any of these files is refused, naming the field.
    """
    p = Path(model)
    if not p.is_dir():
        return {"model": model}
    p = p.resolve()
    files = _identity_files(p)
    stats = [(f, f.stat()) for f in files]
    stamp = tuple((str(f.relative_to(p)), s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino) for f, s in stats)
    key = (str(p), stamp)
    if key not in _identity_memo:
        weights = [(f, s) for f, s in stats if f.suffix == ".safetensors" or f.name in _CONFIG_FILES]
        full = sum(s.st_size for f, s in weights if f.suffix == ".safetensors") <= _WEIGHTS_FULL_HASH_BYTES
        h = hashlib.sha256()
        for f, s in weights:
            h.update(f.name.encode() + b"\0" + str(s.st_size).encode() + b"\0")
            if full or f.suffix != ".safetensors":
                h.update(f.read_bytes())
            else:
                h.update(_safetensors_header(f))
        for f in files:
            if f.name.endswith(".safetensors.index.json"):
                h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())

        def digest(names) -> str | None:
            present = [p / n for n in names if (p / n).is_file()]
            if not present:
                return None
            g = hashlib.sha256()
            for f in present:
                g.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
            return g.hexdigest()

        tok_cfg, templates = _chat_templates(p)
        t, n_tok = hashlib.sha256(), 0
        for f in [p / n for n in _TOKENIZER_FILES] + [f for f in files if f.suffix == ".tiktoken"]:
            if f.is_file():
                body = tok_cfg if f.name == "tokenizer_config.json" else f.read_bytes()
                t.update(f.name.encode() + b"\0" + hashlib.sha256(body).digest())
                n_tok += 1
        _identity_memo[key] = {"model": p.name, "weights_sha256": h.hexdigest(),
                               "weights_hash": "content" if full else "index",
                               "generation_config_sha256": digest(_GENERATION_FILES),
                               "tokenizer_sha256": t.hexdigest() if n_tok else None,
                               "chat_template_sha256": hashlib.sha256(templates).hexdigest() if templates else None}
    return dict(_identity_memo[key])


def adapter_identity(adapter: str | os.PathLike | None) -> str | None:
    """sha256 over an adapter folder's files (None without an adapter)."""
    if not adapter:
        return None
    from ..records import sha256_tree

    return sha256_tree(adapter)


def refuse_request_adapters(backend: str, requests, own: str | None) -> None:
    """One line, before anything is sampled, when a request names an adapter this backend would not apply
    (only the vllm backend serves adapters per request; the others apply the one they loaded)."""
    from pathlib import Path

    for r in requests:
        if r.adapter is not None and (own is None or Path(r.adapter).resolve() != Path(own).resolve()):
            raise ValueError(f"the {backend} backend samples every request with its own adapter ({own or 'none'}); "
                             f"a request names {r.adapter}: use the vllm backend for adapters per request")

