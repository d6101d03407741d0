"""The base of every config section: unknown keys are errors (a typo fails at load, naming the field
and the keys there are) and a loaded config cannot change (the plan and the workers see the config
that was checked)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
