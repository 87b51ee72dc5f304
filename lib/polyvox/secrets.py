"""Credentials kept out of what polyvox writes: manifests, caches, error messages.

:func:`scrub` copies a parameter tree with every value under a credential-like key name
redacted and every string passed through :func:`scrub_text`, which removes key-shaped
substrings, credentials in URLs (userinfo, and credential-named query parameters such as
``?api_key=``, ``&token=``, ``sig=``) and each known secret value (whole, escaped, percent-encoded,
inside base64 at any alignment and base64 of base64, or any piece of six characters or more). :func:`polyvox.records.write_manifest` scrubs every manifest;
``polyvox.records`` re-exports both functions.
"""
from __future__ import annotations

import functools
import json
import re

# Key names that hold credentials: api_key, hf_token, access_token, client_secret, password,
# authorization ... but not max_tokens, eos_token, pad_token, cache_key or api_key_env (which
# names a variable, not a value).
_SECRET_NAME = re.compile(
    r"(?i)^(.*_)?(api_?key|secret(_key)?|password|passwd|authorization|credentials?|private_key|access_key)$"
    r"|^((hf|access|auth|bearer|refresh|session|id|github|gh|openai|api)_)?token$")
# Values that look like keys wherever they appear: OpenAI/Anthropic-style sk-…, Hugging Face
# hf_…, AWS access key ids, GitHub tokens, Slack tokens, and bearer credentials (a Basic credential is
# ordinary base64 after an ordinary word: it is removed as a known secret, see scrub_text).
_SECRET_VALUE = re.compile(
    r"sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|(?i:bearer)\s+[A-Za-z0-9._\-~+/]{8,}=*")
# Credentials inside a URL: scheme://user:password@host (or scheme://token@host), everything up to
# the last '@' before the host's path (a password may hold '@' or a space: neither is left showing),
# and the single-slash form ``https:/user:pass@host`` that pathlib makes of a URL. Bounded (512 characters), so a
# long line without an '@' costs little to scan.
_SECRET_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*:/{1,2})[^/?#\"'<>\r\n]{0,512}@")
# Credentials in a URL's query string (or fragment): the value of every parameter whose name says
# it holds one (api_key, key, token, access_token, password, secret, sig, signature, auth ...).
_SECRET_QUERY = re.compile(
    r"(?i)([?&;#](?:[a-z0-9_.\-]*[_.\-])?(?:api[_\-]?key|key|apikey|token|access[_\-]?token|id[_\-]?token"
    r"|refresh[_\-]?token|auth|authorization|password|passwd|pwd|pass|secret|client[_\-]?secret|sig|signature"
    r"|credentials?|session|sessionid|code)(?:[_.\-][a-z0-9_.\-]*)?=)[^&#\s\"'<>]+")
# A known secret is removed whole, and so is every run of text made of its pieces of this many
# characters or more: an error body cut in the middle of a key still shows none of it.
_SECRET_FRAGMENT = 6
_REDACTED = "<redacted>"


def _secret_forms(secret: str) -> set[str]:
    """The forms a secret takes in text: as is, JSON-escaped, percent-encoded, and inside a Basic credential."""
    import base64
    import urllib.parse

    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
             urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    try:
        raw = secret.encode()
    except UnicodeEncodeError:
        raw = b""
    if raw:
        forms.add(base64.b64encode(raw).decode().rstrip("="))
        # Inside any base64 text ("Bearer <key>", "user:<key>", "Basic <base64(user:key)>" encoded
        # again) the key starts at one of three offsets within a 3-byte group; for each, the base64
        # of its aligned core (leading bytes up to the group boundary and a trailing partial group
        # dropped) stands in the encoding whatever surrounds it. The cores of those cores cover a
        # second encoding.
        cores = _b64_cores(raw)
        for core in list(cores):
            cores |= _b64_cores(core.encode())
        forms |= cores
    return {f for f in forms if f}


def _b64_cores(raw: bytes) -> set[str]:
    """The base64 of ``raw``'s core at each of the three alignments (four characters or more)."""
    import base64

    out = set()
    for drop in range(3):
        core = raw[drop:]
        core = core[: len(core) - len(core) % 3]
        if len(core) >= 3:
            out.add(base64.b64encode(core).decode())
    return out


@functools.lru_cache(maxsize=64)
def _fragment_pattern(secret: str) -> tuple[tuple[str, ...], re.Pattern]:
    n = _SECRET_FRAGMENT
    grams = tuple(sorted({secret[i:i + n] for i in range(len(secret) - n + 1)}))
    return grams, re.compile("(?=(?:" + "|".join(map(re.escape, grams)) + "))")


def _secret_spans(text: str, secret: str) -> list[tuple[int, int]]:
    """Where the secret, or any piece of ``_SECRET_FRAGMENT`` characters of it, stands in text."""
    n = _SECRET_FRAGMENT
    if len(secret) < n:
        spans, at = [], text.find(secret)
        while at >= 0:
            spans.append((at, at + len(secret)))
            at = text.find(secret, at + 1)
        return spans
    grams, pattern = _fragment_pattern(secret)
    if not any(g in text for g in grams):
        return []
    return [(m.start(), m.start() + n) for m in pattern.finditer(text)]  # overlapping starts included


def _redact_spans(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for start, end in sorted(spans):
        if start > pos or not out:
            out += [text[pos:start], _REDACTED]
        pos = max(pos, end)
    out.append(text[pos:])
    return "".join(out)


def scrub_text(text: str, *known: str | None) -> str:
    """text with credentials replaced by ``<redacted>``: key-shaped substrings (sk-…, hf_…, Bearer …),
    credentials in URLs (``scheme://user:pass@``, ``?api_key=…``), and each known secret value — whole, in its
    escaped and encoded forms, and any piece of six or more of its characters.

    A known value shorter than four characters is not searched for (it would cut ordinary words out
    of the text): callers refuse such secrets instead (the openai backend asks for six or more)."""
    spans = [s for k in known if k and len(k) >= 4 for form in _secret_forms(k) if len(form) >= 4
             for s in _secret_spans(text, form)]
    if spans:
        text = _redact_spans(text, spans)
    text = _SECRET_URL_USERINFO.sub(lambda m: m.group(1) + _REDACTED + "@", text)
    text = _SECRET_QUERY.sub(lambda m: m.group(1) + _REDACTED, text)
    return _SECRET_VALUE.sub(_REDACTED, text)


def scrub(params, *known: str | None):
    """Copy of params with credentials redacted: by key name, and by value (:func:`scrub_text`) at any depth."""
    if isinstance(params, dict):
        return {k: _REDACTED if isinstance(k, str) and _SECRET_NAME.match(k) and v not in (None, "")
                else scrub(v, *known) for k, v in params.items()}
    if isinstance(params, (list, tuple)):
        return [scrub(v, *known) for v in params]
    if isinstance(params, str):
        return scrub_text(params, *known)
    return params
