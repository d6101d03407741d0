"""The base of every config section: unknown keys are errors (a typo fails at load, naming the field
and the keys there are) and a loaded config cannot change (the plan and the workers see the config
that was checked). Numbers are numbers: `inf` and `nan` are refused (`learning_rate: .inf` would
train nothing), and so is `true`/`false` where a number goes (pydantic's lax mode reads `steps: true`
as 1)."""

from __future__ import annotations

import types
import typing
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
                if isinstance(value, bool) and field is not None:
                    kinds = _kinds(field.annotation)
                    if kinds & {int, float} and bool not in kinds:
                        raise ValueError(f"{name}: {NOT_A_NUMBER}{str(value).lower()}")
        return data


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
