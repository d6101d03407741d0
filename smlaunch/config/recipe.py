"""The recipe around the user's model, as config: optimizer and schedule factories, EMA, keeping
the best validation's weights and stopping early (`docs/recipe.md`). Rules that need the config
alone are checked here, at load, so `plan` refuses them in one line naming the key."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from smlaunch.config.base import StrictModel
from smlaunch.config.op_specs import FunctionPath


class FactoryConfig(StrictModel):
    """Your function, `package.module:function`, and its keyword arguments."""

    factory: FunctionPath
    """Imported from the folder sm-launch runs in (or an installed package), never evaluated; checked at
    `plan` (it imports, its arguments bind)."""
    params: dict = {}
    """Keyword arguments of `factory`."""


class EmaConfig(StrictModel):
    """An exponential moving average of the weights, updated after every optimizer step that stepped."""

    decay: float = Field(default=0.999, gt=0, lt=1)
    """The average keeps `decay` of itself per step: 0.999 averages about the last 1000 steps."""


class KeepBestConfig(StrictModel):
    """`model.pt` holds the weights of the best validation, not the last step's."""

    metric: str = Field(min_length=1)
    """A name on the validation line (`loss`, `accuracy`, or your metric's)."""
    mode: Literal["min", "max"] = "min"
    """Whether lower (`min`) or higher (`max`) is better."""


class EarlyStopConfig(StrictModel):
    """Stop after `patience` validations without improvement: the job saves and exits 0."""

    metric: str = Field(min_length=1)
    """A name on the validation line."""
    mode: Literal["min", "max"] = "min"
    patience: int = Field(default=3, ge=1)
    """Validations in a row without improvement before the run stops."""
    min_delta: float = Field(default=0.0, ge=0)
    """An improvement must beat the best by more than this to count."""


RECIPE_TRAINER_KEYS = ("clip_grad_norm", "precision", "compile", "ema", "keep_best", "early_stop", "callbacks")
"""`trainer` keys of the built-in loop's recipe: refused with `trainer.loop` (your loop owns them)."""


def recipe_problem(cfg) -> str | None:
    """One line on a recipe key the config cannot honour, or None: recipe keys beside your own loop,
    keep_best or early_stop without a validation channel. (fp16 on train instances without GPUs
    needs the plan's train group: `launcher.job.preflight`.)"""
    t = cfg.trainer
    if t.loop is not None:
        # By value, not by whether the key was written: a resolved config (the one a SageMaker job ships)
        # writes every default out.
        fields = type(t).model_fields
        named = [f"trainer.{key}" for key in RECIPE_TRAINER_KEYS if getattr(t, key) != fields[key].default]
        named += [key for key in ("optimizer", "schedule") if getattr(cfg, key) is not None]
        if named:
            return (
                f"{named[0]}: the built-in loop's recipe; your loop (trainer.loop) builds its own optimizer, "
                "schedule, precision and callbacks: remove it, or pass it in trainer.loop_config"
            )
        return None
    for key in ("keep_best", "early_stop"):
        if getattr(t, key) is not None and not cfg.validates:
            return (
                f"trainer.{key}: needs validation, and the job has no channel named 'validation'; add one "
                f"or remove trainer.{key}"
            )
    return None
