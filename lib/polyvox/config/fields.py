"""Value types the models share: strict models, numbers with ranges, addresses, variable names."""
from __future__ import annotations

import re
import urllib.parse
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import _show


def _url_ok(text: str) -> str | None:
    """None when ``text`` is an http(s) address with a host; else what is wrong."""
    if not isinstance(text, str) or not text or any(c.isspace() for c in text):
        return "an http(s) address without spaces"
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        return f"an http(s) address ({exc})"
    if parts.scheme not in ("http", "https"):
        return "an http(s) address (http:// or https://)"
    if not parts.hostname:
        return "an http(s) address with a host"
    return None


def _check_url(text: str) -> str:
    problem = _url_ok(text)
    if problem:
        raise ValueError(f"expected {problem}, got {_show(text)}")
    return text


_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s\"'<>]*")


def url_credentials(text: str) -> str | None:
    """None when no URL in ``text`` carries credentials; else where they are (user info, or the name of a
    credential-named query parameter such as ``api_key``). The value itself is never named."""
    import urllib.parse

    from ..secrets import _SECRET_NAME, _SECRET_URL_USERINFO

    if not isinstance(text, str) or "://" not in text:
        return None
    if _SECRET_URL_USERINFO.search(text):
        return "credentials in a URL (user:password@)"
    for m in _URL_IN_TEXT.finditer(text):
        try:
            parts = urllib.parse.urlsplit(m.group(0))
        except ValueError:
            continue
        if "@" in parts.netloc:
            return "credentials in a URL (user:password@)"
        for name, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) + \
                urllib.parse.parse_qsl(parts.fragment, keep_blank_values=True):
            if _SECRET_NAME.match(name) or name.lower() in ("key", "token", "sig", "signature"):
                return f"a credential in a URL (its {name!r} query parameter)"
    return None


def _check_url_no_credentials(text: str) -> str:
    """An http(s) address (:func:`_check_url`) that carries no credentials (they would be copied into records)."""
    _check_url(text)
    where = url_credentials(text)
    if where:  # not echoed: the line must not repeat the secret
        raise ValueError(f"{where}: put credentials in the environment: api_key_env names the variable "
                         "(the address is not repeated here: got one with credentials)")
    return text


_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env(text: str) -> str:
    if not _ENV.fullmatch(text):  # not echoed: a key pasted here instead of its variable's name stays out of logs
        raise ValueError("expected the name of an environment variable (letters, digits, _), "
                         "got something else (not repeated here: it may be the key itself)")
    return text


def _unique(values: list) -> list:
    dup = sorted({str(v) for v in values if values.count(v) > 1})
    if dup:
        raise ValueError(f"expected distinct values, got {', '.join(dup)} more than once")
    return values


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Int = Annotated[int, Field(description="an integer")]
Pos = Annotated[int, Field(ge=1, description="an integer ≥ 1")]
Seed = Annotated[int, Field(ge=0, description="an integer ≥ 0")]
Group = Annotated[int, Field(ge=2, description="an integer ≥ 2 (a group needs two samples to compare)")]
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False, description="a number > 0")]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False, description="a number ≥ 0")]
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False, description="a number in (0, 1]")]
Prob = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False, description="a number in [0, 1]")]
Text = Annotated[str, Field(min_length=1, description="non-empty text")]
Url = Annotated[str, Field(description="an http(s) address")]
Dtype = Annotated[Literal["float32", "bfloat16", "float16"], Field(description="float32, bfloat16 or float16")]
Seeds = Annotated[list[Seed], Field(min_length=1, description="a non-empty list of integers ≥ 0")]
