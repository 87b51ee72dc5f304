"""One-line errors: :class:`ConfigError`, and pydantic's errors as ``FILE: key.path: expected …, got …``."""
from __future__ import annotations

import re
from typing import Any, get_args

from pydantic import BaseModel, ValidationError


class ConfigError(ValueError):
    """A configuration file (or value) that cannot be used; the message is one line naming the file."""


_PHRASES = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "string_type": "text", "bool_type": "true or false", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "date_type": "a date (YYYY-MM-DD)",
    "date_parsing": "a date (YYYY-MM-DD)", "date_from_datetime_parsing": "a date (YYYY-MM-DD)",
    "date_from_datetime_inexact": "a date (YYYY-MM-DD)", "none_required": "nothing (null)",
}


def _phrase(err: dict) -> str:
    t, ctx = err["type"], err.get("ctx") or {}
    if t in _PHRASES:
        return _PHRASES[t]
    if t == "greater_than_equal":
        return f"a value ≥ {ctx['ge']}"
    if t == "greater_than":
        return f"a value > {ctx['gt']}"
    if t == "less_than_equal":
        return f"a value ≤ {ctx['le']}"
    if t == "less_than":
        return f"a value < {ctx['lt']}"
    if t == "literal_error":
        return f"one of {ctx['expected']}"
    if t in ("too_short", "string_too_short"):
        n = ctx.get("min_length", 1)
        return "non-empty text" if t == "string_too_short" else f"at least {n} item{'s' * (n != 1)}"
    if t in ("too_long", "string_too_long"):
        n = ctx.get("max_length")
        return f"at most {n} item{'s' * (n != 1)}" if t == "too_long" else f"at most {n} characters"
    return err["msg"][0].lower() + err["msg"][1:]


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _loc(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models_in(a)]


def _walk(model: type[BaseModel] | None, loc) -> tuple[Any, type[BaseModel] | None]:
    """(the FieldInfo at loc if loc ends on a field, the model holding what is at loc)."""
    info, cls = None, model
    for i, part in enumerate(loc):
        if cls is not None and isinstance(part, str) and part in cls.model_fields:
            info = cls.model_fields[part]
            inner = _models_in(info.annotation)
            cls = inner[0] if len(inner) == 1 else None
            if i < len(loc) - 1:
                info = None
        else:  # a list index or a mapping's own key: the items' model, if any
            info = None
    return info, cls


def describe(exc: ValidationError, source: str, model: type[BaseModel] | None = None, prefix: str = "") -> str:
    """pydantic's errors as one line: ``SOURCE: key.path: expected …, got …`` (and how many more)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    head = f"{source}: {prefix + ': ' if prefix else ''}"
    used = 1
    if first["type"] in ("missing", "extra_forbidden"):
        parent = tuple(first["loc"][:-1])
        group = [e for e in errors if e["type"] in ("missing", "extra_forbidden") and tuple(e["loc"][:-1]) == parent]
        used = len(group)
        unknown = [str(e["loc"][-1]) for e in group if e["type"] == "extra_forbidden"]
        missing = [str(e["loc"][-1]) for e in group if e["type"] == "missing"]
        parts = []
        if unknown:
            parts.append(f"unknown key{'s' * (len(unknown) > 1)} {', '.join(unknown)}")
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        _, cls = _walk(model, parent)
        known = f" (keys: {', '.join(cls.model_fields)})" if cls is not None else ""
        line = head + (f"{_loc(parent)}: " if parent else "") + "; ".join(parts) + known
    else:
        info, _ = _walk(model, first["loc"])
        where = _loc(first["loc"])
        where = f"{where}: " if where else ""
        if first["type"] in ("value_error", "assertion_error"):
            msg = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
            got = first["input"]
            said = "got" in msg or repr(got) in msg or isinstance(got, dict)
            line = head + where + msg + ("" if said else f", got {_show(got)}")
        else:
            what = info.description if info is not None and info.description else _phrase(first)
            line = head + f"{where}expected {what}, got {_show(first['input'])}"
            got = first["input"]
            if first["type"] in ("float_type", "int_type") and isinstance(got, str) and _is_number(got):
                sci = re.fullmatch(r"([-+]?\d+)[eE]([-+]?\d+)", got.strip())
                line += (f" (YAML reads {got} as text: write {sci[1]}.0e{sci[2]})" if sci
                         else " (text, not a number: write it without quotes)")
    rest = len(errors) - used
    return line + (f" (and {rest} more problem{'s' * (rest > 1)})" if rest > 0 else "")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def validate(model: type[BaseModel], data: Any, source: str, prefix: str = "") -> BaseModel:
    """``model`` from ``data``, or a ConfigError whose message is :func:`describe`'s one line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, str(source), model, prefix)) from None


def _in_order(raw: Any, clean: Any) -> Any:
    """``clean`` (a model dump) with its keys in ``raw``'s order, so a dict keeps the file's shape."""
    if isinstance(raw, dict) and isinstance(clean, dict):
        return {k: _in_order(raw[k], clean[k]) for k in raw if k in clean} | \
            {k: v for k, v in clean.items() if k not in raw}
    if isinstance(raw, list) and isinstance(clean, list) and len(raw) == len(clean):
        return [_in_order(r, c) for r, c in zip(raw, clean)]
    return clean


def as_dict(model: BaseModel, raw: Any) -> dict:
    """The validated values as a plain dict of the file's shape (keys not given stay absent)."""
    return _in_order(raw, model.model_dump(mode="python", exclude_unset=True))
