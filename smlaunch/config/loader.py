"""YAML + `--set` overrides -> a validated `LaunchConfig`, with one-line errors.

YAML is read by a safe loader only: a config is data and can never run code. It is bounded too: a
file over `MAX_CONFIG_BYTES`, or one whose aliases would expand past `MAX_ALIASES` nodes (an alias
bomb: 9 levels of 9 aliases is 387 million nodes from a 1 KiB file), is refused in one line before
anything is built, and a key written twice in one mapping is an error naming both lines (YAML's own
loaders keep the last one silently). Nesting deeper than `MAX_DEPTH` (PyYAML's composer recurses, so
10,000 `[` would raise RecursionError) and an alias inside its own anchor (a cyclic tree, which no
config needs and pydantic or a later `json.dumps` would trip on) are refused too, and a scalar its
tag cannot read (`2001-13-45`, `!!int 0b`, 5,000 digits) is a YAML error, not PyYAML's ValueError.
Pydantic's errors are rewritten to name the dotted field and, for an unknown key, the keys that are
valid there; every message is one line, whatever line breaks the keys and values hold.
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
from smlaunch.redaction import looks_secret

MAX_CONFIG_BYTES = 1 << 20
"""A config is a few KiB; 1 MiB is a generous bound."""
MAX_ALIASES = 10_000
"""Nodes a document's aliases may expand to (a config uses a handful of aliases, if any)."""
MAX_DEPTH = 100
"""Nesting of a document's collections (a config nests about 6 deep; Python's stack takes ~400)."""
MAX_PROBLEMS = 10
"""Problems one error names (100,000 unknown keys are not a 16 MB line); the rest are counted."""
MAX_SHOWN = 80
"""Characters of a bad value a message repeats."""
_MERGE = "tag:yaml.org,2002:merge"
_UNREADABLE = (ValueError, TypeError, LookupError, AttributeError, ArithmeticError)
"""What PyYAML's constructors raise, besides its own errors, on a node its tag cannot read."""
_LINE_BREAKS = re.compile("[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")


class _BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that counts the nodes its aliases expand to, bounds nesting, refuses cyclic
    aliases and duplicate keys, and turns a scalar its constructor cannot read into a YAML error."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.expanded = 0
        self.open: list[str | None] = []  # the anchors of the collections being composed, outermost first

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            if event.anchor in self.open:
                raise yaml.constructor.ConstructorError(
                    None, None, f"alias *{event.anchor} is inside its own anchor (a cycle)", event.start_mark
                )
            anchor = self.anchors.get(event.anchor)
            self.expanded += _size(anchor) if anchor is not None else 1
            if self.expanded > MAX_ALIASES:
                raise yaml.constructor.ConstructorError(
                    None, None, f"its aliases expand past {MAX_ALIASES} nodes (an alias bomb?)", event.start_mark
                )
            return super().compose_node(parent, index)
        event = self.peek_event()
        if isinstance(event, yaml.ScalarEvent):
            return super().compose_node(parent, index)
        if len(self.open) >= MAX_DEPTH:
            raise yaml.constructor.ConstructorError(None, None, f"nested more than {MAX_DEPTH} deep", event.start_mark)
        self.open.append(event.anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self.open.pop()

    def fetch_flow_collection_start(self, TokenClass):
        # The composer's bound comes too late for `[[[[...`: the scanner reads ahead while a `[` may
        # still start a key, checking every pending one per token (~0.3 s for a run of 1,000).
        if self.flow_level >= MAX_DEPTH:
            raise yaml.scanner.ScannerError(None, None, f"nested more than {MAX_DEPTH} deep", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except _UNREADABLE as exc:
            shown = repr(node.value)[:40] if isinstance(node.value, str) else "this node"
            tag = node.tag.rpartition(":")[2]
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {shown} as {tag} ({_one_line(str(exc))})", node.start_mark
            ) from None

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):  # `!!set x`: PyYAML's own error says so
            return super().construct_mapping(node, deep=deep)
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:  # `<<: *base`: its keys are meant to be overridden
                continue
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
    except _UNREADABLE as exc:  # raised where `construct_object` cannot catch it (a collection's body)
        raise yaml.constructor.ConstructorError(None, None, f"cannot read it ({_one_line(str(exc))})") from None
    finally:
        loader.dispose()


def load_config(
    path: str | Path, overrides: list[str] | tuple[str, ...] = (), hyperparameters: Mapping[str, Any] | None = None
) -> LaunchConfig:
    """Read `path`, apply a SageMaker job's `hyperparameters` (dotted key -> decoded value:
    `config.hyperparameters.config_overrides`), then the `KEY=VALUE` overrides (dotted keys, list
    indices allowed), and validate."""
    try:
        return _load(Path(path), overrides, hyperparameters or {})
    except ConfigError as exc:
        message = _one_line(str(exc))  # a key, value or path may hold a line break
        if message == str(exc):
            raise
        raise ConfigError(message) from None


def _one_line(text: str) -> str:
    """`text` with each line break (all that `str.splitlines` splits at) escaped as `repr` does."""
    return _LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], text)


def _load(path: Path, overrides: list[str] | tuple[str, ...], hyperparameters: Mapping[str, Any]) -> LaunchConfig:
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
        raise ConfigError(f"config file {path}{where}: not valid YAML ({_yaml_problem(exc)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: expected a mapping at the top level")
    for key, value in hyperparameters.items():
        _assign(raw, key, value, f"hyperparameters.json {key!r}")
    for item in overrides:
        apply_override(raw, item)
    source = str(path) + (f" with hyperparameters.json's {', '.join(hyperparameters)}" if hyperparameters else "")
    return validate_config(raw, source=source)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong, without PyYAML's multi-line excerpt of the text."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        character = chr(exc.character) if isinstance(exc.character, int) else exc.character
        return f"character {character!r} at position {exc.position} is not allowed"
    return getattr(exc, "problem", None) or str(exc).splitlines()[0]


def validate_config(raw: dict[str, Any], source: str = "config") -> LaunchConfig:
    try:
        return LaunchConfig.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        shown = [_describe(e) for e in errors[:MAX_PROBLEMS]]
        more = f"; and {len(errors) - MAX_PROBLEMS} more problems" if len(errors) > MAX_PROBLEMS else ""
        raise ConfigError(_one_line(f"{source}: " + "; ".join(shown) + more)) from None


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
    _assign(raw, key.strip(), parsed, f"--set {item!r}")


def _assign(raw: dict[str, Any], key: str, parsed: Any, label: str) -> None:
    """Set the dotted `key` of the raw tree to `parsed`; `label` names the override in an error."""
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"{label}: expected a dotted KEY, e.g. trainer.steps")
    node: Any = raw
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not (part.isascii() and part.isdigit()) or int(part) >= len(node):  # not `²`, which int() refuses
                indices = f"use an index 0..{len(node) - 1}" if node else "an index cannot add an item"
                raise ConfigError(f"{label}: {'.'.join(parts[:i]) or 'root'} is a list of {len(node)}; {indices}")
            index: Any = int(part)
        elif isinstance(node, dict):
            index = part
            if not last and index not in node:
                node[index] = {}
        else:
            raise ConfigError(f"{label}: {'.'.join(parts[:i])} is a value, not a section")
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
    field = head.partition(".")[0]  # `scale.0`: an item of the field
    if loc and sep and rest.startswith(NOT_A_NUMBER) and parent is not None and field in parent.model_fields:
        return f"{loc}.{head}: {rest}"  # `StrictModel`'s rule on one of a section's keys, named as a field
    if error["type"] == "missing":
        return f"{loc}: required field is missing"
    if error["type"] == "union_tag_invalid":  # an op name not in the registry
        tag = error["ctx"]["tag"]
        hint = _did_you_mean(tag, OP_NAMES)
        return f"{loc}.op: unknown op {tag!r}{f' ({hint})' if hint else ''}; ops: {', '.join(OP_NAMES)}"
    shown = error.get("input")
    secret = any(looks_secret(str(part)) for part in error["loc"][-1:])  # `HF_TOKEN: 1234`: the name, not the value
    got = (
        f" (got {_clip(shown)})"
        if isinstance(shown, (str, int, float, bool)) and _clip(shown) not in message and not secret
        else ""
    )
    if error["type"] == "literal_error" and isinstance(shown, str):
        hint = _did_you_mean(shown, re.findall(r"'([^']*)'", error["ctx"]["expected"]))
        got += f"; {hint}" if hint else ""
    if loc and sep and (head == loc or head.startswith(loc + ".")):
        return f"{message}{got}"  # a section's rule that names its own key in full (`cluster.object_store_mb: ...`)
    if loc and sep and loc.endswith("." + head):
        return f"{loc}: {rest}{got}"  # a field's rule that names the field (`pretrained: ...`): named once
    return f"{loc}: {message}{got}" if loc else f"{message}{got}"


def _clip(value: Any) -> str:
    """`repr(value)`, cut to `MAX_SHOWN` characters: a message names a 1 MiB value, it does not hold it."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digits limit for str()
        return f"an int of {value.bit_length()} bits"
    return text if len(text) <= MAX_SHOWN else f"{text[: MAX_SHOWN - 5]}...{text[-2:]}"


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
