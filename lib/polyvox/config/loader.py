"""The safe YAML loader: limits on size, values after aliases, depth; no duplicate keys."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

MAX_BYTES = 1 << 20  # a configuration is a few kilobytes; the shipped ones are under 4 KB
MAX_NODES = 100_000  # values after alias expansion (the shipped files hold a few hundred)
MAX_DEPTH = 64  # levels of nesting

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key, mark):
        self.key, self.mark = key, mark
        super().__init__(f"duplicate key {key!r}")


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """The safe loader, refusing a mapping that names one key twice."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise _DuplicateKey(key, key_node.start_mark)
                seen.add(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a scalar",
                                                        key_node.start_mark) from None
        return super().construct_mapping(node, deep)


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)


def _where(source: str, mark) -> str:
    return f"{source}:{mark.line + 1}" if mark is not None else source


def _check_shape(text: str, source: str, max_nodes: int, max_depth: int) -> None:
    """Walk the YAML events once (no objects built): refuse deep nesting, recursive aliases and
    documents whose aliases expand to more than ``max_nodes`` values."""
    sizes: dict[str, int] = {}  # anchor -> expanded size of its node
    stack: list[list] = []  # open collections: [size, anchor]
    total = 0

    def add(n: int, mark) -> None:
        nonlocal total
        if stack:
            stack[-1][0] += n
        else:
            total += n
        if total + sum(s[0] for s in stack) > max_nodes:
            raise ConfigError(f"{_where(source, mark)}: more than {max_nodes} values once YAML aliases are "
                              "expanded (an alias bomb?); a configuration is a few hundred")

    for ev in yaml.parse(text, Loader=_Base):
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([1, ev.anchor])
            if len(stack) > max_depth:
                raise ConfigError(f"{_where(source, ev.start_mark)}: nested more than {max_depth} levels deep")
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            size, anchor = stack.pop()
            if anchor is not None:
                sizes[anchor] = size
            add(size, ev.start_mark)
        elif isinstance(ev, yaml.ScalarEvent):
            if ev.anchor is not None:
                sizes[ev.anchor] = 1
            add(1, ev.start_mark)
        elif isinstance(ev, yaml.AliasEvent):
            if ev.anchor not in sizes:
                what = "refers to itself" if any(s[1] == ev.anchor for s in stack) else "is not defined"
                raise ConfigError(f"{_where(source, ev.start_mark)}: YAML alias *{ev.anchor} {what}")
            add(sizes[ev.anchor], ev.start_mark)


def parse_yaml(text: str, source: str = "<text>", max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """YAML text → Python values, within the limits; errors are ConfigError naming ``source``."""
    try:
        _check_shape(text, source, max_nodes, max_depth)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is the safe loader
    except _DuplicateKey as exc:
        raise ConfigError(f"{_where(source, exc.mark)}: duplicate key {exc.key!r} (YAML would keep only the last)") \
            from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({' '.join(str(exc).split())})") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a date 2026-13-01
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{source}: not valid YAML ({' '.join(str(exc).split())})") from None


def load_yaml(path: os.PathLike | str, max_bytes: int = MAX_BYTES) -> Any:
    """A YAML file, read within the limits (size, values after aliases, depth, duplicate keys).

    A missing file raises the usual ``FileNotFoundError``; everything else wrong is a
    :class:`ConfigError` naming the file.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: a folder, not a YAML file")
    with open(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{path}: larger than {max_bytes} bytes; a configuration is a few kilobytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_yaml(text, str(path))
