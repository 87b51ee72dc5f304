"""A request-keyed completion cache: one JSONL file, shared by sampling and judging.

Key = sha256 over the canonical JSON of
  (backend identity — backend, model and a hash of its weights' index, adapter sha256 —,
   the request — prompt text, chat flag, template options, seed —, the sampling parameters).
A hit returns the stored completion without calling the backend. Entries are appended
(one line each, flushed and fsynced) after each backend call, so a crash loses at most
the call in flight; a torn last line is cut off on open, as :func:`polyvox.records.iter_jsonl`
tolerates one; every other line is checked (a string key; a completion of exactly its five
fields, each of its type: text and finish reason strings, token counts non-negative integers,
latency a non-negative number) and one that is not is refused with file and line.
:class:`CachingBackend` wraps any backend in the cache, as
lm-evaluation-harness's ``CachingLM`` wraps a model.

Secrets: a backend that holds credentials names them (``secrets()``: the openai backend's key
and URL credentials); completions are scrubbed of them (:func:`polyvox.records.scrub_text`)
before they are stored and again when they are read back, so neither the file nor a hit —
even one stored by an older polyvox — carries a key. A backend without secrets (a local model)
is cached as it answered: a cached run gives the texts an uncached one would.

Departure from ``CachingLM`` (SQLite, keyed by the model's arguments): the key holds
the weights' hash, so a retrained checkpoint saved in the same folder misses; and the
file is append-only JSONL that a reader can open, like every other polyvox record.
Seeds: a request carries its own seed, and the transformers backend samples each request
with it whatever batch it lands in (``hf.SeededSampler``), so a key's completion does not
depend on its batch-mates; the cache returns the one it stored (on the GPU a bf16 rerun can
differ from it at near ties, see ``bench/results/README.md``).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from .backends.base import Backend, Completion, Request, SamplingParams
from .records import RecordError, append_jsonl, iter_jsonl, repair_truncated_tail, scrub_text


def request_key(identity: dict, request: Request, params: SamplingParams) -> str:
    req = asdict(request)
    if req.get("adapter") is None:  # requests without their own adapter keep the keys of earlier caches
        req.pop("adapter", None)
    blob = json.dumps({"identity": identity, "request": req, "params": asdict(params)},
                      sort_keys=True, ensure_ascii=False, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()


_COUNTS = ("prompt_tokens", "completion_tokens")
_FIELDS = ("text", *_COUNTS, "finish_reason", "latency_s")


def _entry(obj) -> tuple[str, Completion | str]:
    """(key, completion) of one cache line, or (``""``, what is wrong with it); never quotes a value."""
    if not isinstance(obj, dict) or set(obj) != {"key", "completion"}:
        return "", 'an object with exactly the fields "key" and "completion" is expected'
    key, c = obj["key"], obj["completion"]
    if not isinstance(key, str) or not key:
        return "", '"key" is not a non-empty string'
    if not isinstance(c, dict) or set(c) != set(_FIELDS):
        return "", f'"completion" must be an object with exactly the fields {", ".join(_FIELDS)}'
    if not isinstance(c["text"], str):
        return "", '"completion.text" is not a string'
    for name in _COUNTS:
        if isinstance(c[name], bool) or not isinstance(c[name], int) or c[name] < 0:
            return "", f'"completion.{name}" is not a non-negative integer'
    if not isinstance(c["finish_reason"], str) or not c["finish_reason"]:
        return "", '"completion.finish_reason" is not a non-empty string'
    lat = c["latency_s"]
    if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not lat >= 0 or lat == float("inf"):
        return "", '"completion.latency_s" is not a non-negative number'
    return key, Completion(c["text"], c["prompt_tokens"], c["completion_tokens"], c["finish_reason"], float(lat))


class CompletionCache:
    """The completions of one JSONL file, by request key."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.entries: dict[str, Completion] = {}
        self.hits = self.misses = 0
        if self.path.exists():
            repair_truncated_tail(self.path)  # an append after a torn line would glue onto it
            for line, obj in iter_jsonl(self.path):
                key, completion = _entry(obj)
                if isinstance(completion, str):
                    raise RecordError(self.path, line, f"not a cache entry: {completion}; the cache only "
                                      "spares requests: delete the file (or this line) and run again")
                self.entries[key] = completion

    def get(self, key: str) -> Completion | None:
        hit = self.entries.get(key)
        if hit is None:
            self.misses += 1
        else:
            self.hits += 1
        return hit

    def put(self, items: list[tuple[str, Completion]]) -> None:
        new = [(k, c) for k, c in items if k not in self.entries]
        append_jsonl(self.path, [{"key": k, "completion": asdict(c)} for k, c in new])
        self.entries.update(new)


class CachingBackend:
    """A backend whose ``generate`` answers from the cache and asks the backend only for misses."""

    def __init__(self, backend: Backend, cache: CompletionCache | str | os.PathLike):
        self.backend = backend
        self.cache = cache if isinstance(cache, CompletionCache) else CompletionCache(cache)
        self.name = backend.name
        self._identity = backend.identity()
        self._secrets = getattr(backend, "secrets", None)

    def _clean(self, c: Completion) -> Completion:
        if self._secrets is None:
            return c
        text = scrub_text(c.text, *self._secrets())
        return c if text == c.text else Completion(text, c.prompt_tokens, c.completion_tokens, c.finish_reason,
                                                   c.latency_s)

    def prompt(self, fmt: str, text: str):
        return self.backend.prompt(fmt, text)

    def identity(self) -> dict:
        return self._identity

    def generate(self, requests: list[Request], params: SamplingParams) -> list[Completion]:
        keys = [request_key(self._identity, r, params) for r in requests]
        found = [self.cache.get(k) for k in keys]
        found = [None if c is None else self._clean(c) for c in found]
        missing = [i for i, c in enumerate(found) if c is None]
        if missing:
            fresh = [self._clean(c) for c in self.backend.generate([requests[i] for i in missing], params)]
            self.cache.put([(keys[i], c) for i, c in zip(missing, fresh)])
            for i, c in zip(missing, fresh):
                found[i] = c
        return found  # type: ignore[return-value]
