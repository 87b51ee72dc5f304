"""What the book reads: an entry of ``data/corrections.yml`` and a ``--params`` value."""
from __future__ import annotations

import math
from datetime import date  # noqa: F401 - Correction.date: pydantic resolves the annotation here
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from .errors import _show
from .fields import Strict, Text, Url, _check_url


class Correction(Strict):
    """One entry of data/corrections.yml (the book's banners and its Corrections page)."""

    date: Annotated[date, Field(strict=False, description="a date (YYYY-MM-DD)")]
    chapters: list[Text]
    claimed: Text
    stands: Text
    source: Text
    study: str = None  # type: ignore[assignment]
    what: str = None  # type: ignore[assignment]
    url: Url = None  # type: ignore[assignment]
    status: Literal["withdrawn", "revised"] = None  # type: ignore[assignment]

    checked_url = field_validator("url")(classmethod(lambda cls, v: _check_url(v)))


# ---------------------------------------------------------------- --params values

def check_param_value(name: str, value: Any, default_source: str) -> str | None:
    """None when ``value`` may replace a parameter whose default is written ``default_source``
    (papermill's inspection), else what it must be: an int default takes integers, a float
    default numbers, a bool default true/false, a text default text, a list default a list;
    a ``None`` default (or one that is not a literal) takes anything, and any parameter takes ``None``
    (the chapters read it as "absent": ``adapter=null`` samples the bare base)."""
    import ast

    problem = _unsafe_value(value)
    if problem:
        return problem
    try:
        default = ast.literal_eval(default_source)
    except (ValueError, SyntaxError, TypeError):
        return None
    if default is None or value is None:  # null means "absent" for any parameter (adapter=null: no adapter)
        return None
    if isinstance(default, bool):
        ok, what = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        what = "a finite number"
    elif isinstance(default, str):
        ok, what = isinstance(value, str), "text"
    elif isinstance(default, (list, tuple)):
        ok, what = isinstance(value, list), "a list"
    elif isinstance(default, dict):
        ok, what = isinstance(value, dict), "a mapping"
    else:
        return None
    return None if ok else f"expected {what} (its default is {default_source}), got {_show(value)}"


def _unsafe_value(value: Any, depth: int = 0) -> str | None:
    """What no parameter may take, whatever its default, anywhere inside the value: a number that is not
    finite (NaN, ±inf: no JSON record can hold it), and a URL carrying credentials (user:password@ or a
    credential-named query parameter: the executed notebook and its manifest would keep it)."""
    from .fields import url_credentials

    if depth > 100:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected finite numbers, got {value!r}" + (" inside the value" if depth else "")
    if isinstance(value, str):
        where = url_credentials(value)
        if where:  # the value is not echoed: it holds the secret
            return (f"{where} (not repeated here); pass secrets through environment variables, "
                    "never as a parameter")
        return None
    if isinstance(value, dict):
        items = list(value.keys()) + list(value.values())
    elif isinstance(value, (list, tuple, set)):
        items = list(value)
    else:
        return None
    for item in items:
        problem = _unsafe_value(item, depth + 1)
        if problem:
            return problem
    return None
