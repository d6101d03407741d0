"""YAML + `--set` overrides -> a validated `LaunchConfig`, with one-line errors.

YAML is read by a safe loader only: a config is data and can never run code. It is bounded too: a
file over `MAX_CONFIG_BYTES`, or one whose aliases would expand past `MAX_ALIASES` nodes (an alias
bomb: 9 levels of 9 aliases is 387 million nodes from a 1 KiB file), is refused in one line before
anything is built, and a key written twice in one mapping is an error naming both lines (YAML's own
loaders keep the last one silently). Pydantic's errors are rewritten to name the dotted field and,
for an unknown key, the keys that are valid there.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from smlaunch.config.base import NOT_A_NUMBER
from smlaunch.config.op_specs import OP_NAMES
from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20
"""A config is a few KiB; 1 MiB is a generous bound."""
MAX_ALIASES = 10_000
"""Nodes a document's aliases may expand to (a config uses a handful of aliases, if any)."""


class _BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that counts the nodes its aliases expand to and refuses duplicate keys."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.expanded = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            anchor = self.anchors.get(event.anchor)
            self.expanded += _size(anchor) if anchor is not None else 1
            if self.expanded > MAX_ALIASES:
                raise yaml.constructor.ConstructorError(
                    None, None, f"its aliases expand past {MAX_ALIASES} nodes (an alias bomb?)", event.start_mark
                )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool):
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} appears twice in one mapping (lines {seen[key] + 1} and "
                        f"{key_node.start_mark.line + 1}); keep one",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _size(node: Any, budget: int = MAX_ALIASES + 1) -> int:
    """Nodes under `node`, itself included, counted up to `budget`: what an alias to it expands to."""
    count, stack = 0, [node]
    while stack and count <= budget:
        current = stack.pop()
        count += 1
        if isinstance(current.value, list):
            for item in current.value:
                stack.extend(item if isinstance(item, tuple) else (item,))
    return count


def safe_load_bounded(text: str) -> Any:
    """`yaml.safe_load`, bounded (the module's docstring says how)."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LaunchConfig:
    """Read `path`, apply `KEY=VALUE` overrides (dotted keys, list indices allowed), validate."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {path}: {size} bytes, more than a config's {MAX_CONFIG_BYTES}")
        raw = safe_load_bounded(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: not UTF-8 at byte {exc.start}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file {path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: expected a mapping at the top level")
    for item in overrides:
        apply_override(raw, item)
    return validate_config(raw, source=str(path))


def validate_config(raw: dict[str, Any], source: str = "config") -> LaunchConfig:
    try:
        return LaunchConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: " + "; ".join(_describe(e) for e in exc.errors())) from None


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Apply one `a.b.c=value` to the raw tree; the value is parsed as a YAML scalar or list."""
    key, sep, value = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted KEY, e.g. trainer.steps=100")
    try:
        parsed = safe_load_bounded(value) if value.strip() else ""
    except yaml.YAMLError:
        raise ConfigError(f"--set {item!r}: value is not valid YAML") from None
    node: Any = raw
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(
                    f"--set {item!r}: {'.'.join(parts[:i]) or 'root'} is a list of "
                    f"{len(node)}; use an index 0..{len(node) - 1}"
                )
            index: Any = int(part)
        elif isinstance(node, dict):
            index = part
            if not last and index not in node:
                node[index] = {}
        else:
            raise ConfigError(f"--set {item!r}: {'.'.join(parts[:i])} is a value, not a section")
        if last:
            node[index] = parsed
        else:
            node = node[index]


def _describe(error: Mapping[str, Any]) -> str:
    loc = ".".join(str(p) for p in error["loc"] if not _is_union_tag(p))
    if error["type"] == "extra_forbidden":
        parent = _model_at(error["loc"][:-1])
        valid = f"; valid keys: {', '.join(parent.model_fields)}" if parent else ""
        return f"{loc}: unknown key{valid}"
    message = error["msg"].removeprefix("Value error, ")
    head, sep, rest = message.partition(": ")
    parent = _model_at(error["loc"])
    if loc and sep and rest.startswith(NOT_A_NUMBER) and parent is not None and head in parent.model_fields:
        return f"{loc}.{head}: {rest}"  # `StrictModel`'s rule on one of a section's keys, named as a field
    if error["type"] == "missing":
        return f"{loc}: required field is missing"
    if error["type"] == "union_tag_invalid":  # an op name not in the registry
        tag = error["ctx"]["tag"]
        hint = _did_you_mean(tag, OP_NAMES)
        return f"{loc}.op: unknown op {tag!r}{f' ({hint})' if hint else ''}; ops: {', '.join(OP_NAMES)}"
    shown = error.get("input")
    got = f" (got {shown!r})" if isinstance(shown, (str, int, float, bool)) and repr(shown) not in message else ""
    if error["type"] == "literal_error" and isinstance(shown, str):
        hint = _did_you_mean(shown, re.findall(r"'([^']*)'", error["ctx"]["expected"]))
        got += f"; {hint}" if hint else ""
    return f"{loc}: {message}{got}" if loc else f"{message}{got}"


def _did_you_mean(value: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6) or [
        c for c in choices if c.lower() == value.lower()
    ]
    return f"did you mean {close[0]!r}?" if close else ""


_OP_TAGS = frozenset(OP_NAMES)


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and part in _OP_TAGS


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that owns the mapping at `loc`, for listing its valid keys."""
    current: Any = LaunchConfig
    for part in loc:
        current = _unwrap(current, part)
        if current is None:
            return None
    current = _unwrap(current, None)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any, part: Any) -> Any:
    """Step from `annotation` into `part` (a field name, list index, dict key or union tag)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if part is None:
            return annotation
        field = annotation.model_fields.get(part)
        return field.annotation if field else None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _unwrap(args[0], part)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                tag = arg.model_fields.get("op")
                if tag is not None and typing.get_args(tag.annotation) == (part,):
                    return arg
        members = [a for a in args if a is not type(None)]
        return _unwrap(members[0], part) if len(members) == 1 else None
    if origin is list and isinstance(part, int):
        return args[0]
    if origin is dict and part is not None:
        return args[1]
    return annotation if part is None else None
