"""The base of every config section: unknown keys are errors (a typo fails at load, naming the field
and the keys there are) and a loaded config cannot change (the plan and the workers see the config
that was checked). Numbers are numbers: `inf` and `nan` are refused (`learning_rate: .inf` would
train nothing), and so is `true`/`false` where a number goes (pydantic's lax mode reads `steps: true`
as 1), inside lists, tuples and mappings too (`scale: [true, 1.0]` would be `(1.0, 1.0)`)."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

NOT_A_NUMBER = "a number, not "


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                found = _bool_for_a_number(value, field.annotation) if field is not None else None
                if found is not None:
                    where, flag = found
                    raise ValueError(f"{name}{where}: {NOT_A_NUMBER}{str(flag).lower()}")
        return data


def _bool_for_a_number(value: Any, annotation: Any) -> tuple[str, bool] | None:
    """Where in `value` a bool stands that `annotation` would read as a number (`""` for `value`
    itself, `.1` for a list's second item, `.key` for a mapping's value), and the bool; None if
    nowhere. Nested models are left to their own validator."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _bool_for_a_number(value, args[0])
    if isinstance(value, bool):
        kinds = _kinds(annotation)
        return ("", value) if kinds & {int, float} and bool not in kinds else None
    if origin in (typing.Union, types.UnionType):
        for member in args:
            found = _bool_for_a_number(value, member)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple) and origin in (list, tuple, set, frozenset, Sequence):
        for i, item in enumerate(value):
            fixed = origin is tuple and args and args[-1] is not Ellipsis
            kind = (args[i] if i < len(args) else None) if fixed else (args[0] if args else None)
            found = _bool_for_a_number(item, kind) if kind is not None else None
            if found is not None:
                return f".{i}{found[0]}", found[1]
    if isinstance(value, dict) and origin in (dict, Mapping) and len(args) == 2:
        for key, item in value.items():
            found = _bool_for_a_number(item, args[1])
            if found is not None:
                return f".{key}{found[0]}", found[1]
    return None


def _kinds(annotation: Any) -> set:
    """The plain types an annotation admits (`int | None` -> {int, NoneType}); Literal values' types too."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_kinds(a) for a in typing.get_args(annotation)))
    if origin is typing.Literal:
        return {type(v) for v in typing.get_args(annotation)}
    if origin is typing.Annotated:
        return _kinds(typing.get_args(annotation)[0])
    return {annotation} if isinstance(annotation, type) else set()
