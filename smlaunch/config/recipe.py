"""The recipe around the user's model, as config: optimizer and schedule factories, EMA, keeping
the best validation's weights and stopping early (`docs/recipe.md`). Rules that need the config
alone are checked here, at load, so `plan` refuses them in one line naming the key."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

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


LOWER_IS_BETTER = frozenset(
    {"loss", "error", "err", "mse", "mae", "rmse", "mape", "nll", "perplexity", "ppl", "wer", "cer", "distance"}
)
HIGHER_IS_BETTER = frozenset(
    {
        "accuracy",
        "acc",
        "top1",
        "top5",
        "iou",
        "miou",
        "dice",
        "f1",
        "auroc",
        "auc",
        "ap",
        "map",
        "precision",
        "recall",
        "r2",
        "bleu",
        "rouge",
        "score",
    }
)
"""The words of a metric's name (split at `_`, `-`, `.`, `/`) that say which way is better."""


def better_direction(metric: str) -> str | None:
    """`min` or `max` when the metric's name says which is better (`val_loss`: min, `pixel_accuracy`:
    max), else None."""
    words = set(re.split(r"[_\-./\s]+", metric.lower()))
    lower, higher = bool(words & LOWER_IS_BETTER), bool(words & HIGHER_IS_BETTER)
    return "min" if lower and not higher else "max" if higher and not lower else None


class _Watched(StrictModel):
    """A validation metric watched for its best value: `mode` follows from the name where it can."""

    metric: str = Field(min_length=1)
    """A name on the validation line (`loss`, `accuracy`, `top5`, or your metric's)."""
    mode: Literal["min", "max"]
    """Whether lower (`min`) or higher (`max`) is better. Default: what the name says (`loss`, `mse`,
    `error`: min; `accuracy`, `iou`, `f1`, `auroc`: max); required for a name that says neither. A mode
    against the name (`accuracy` with `min`, which would keep the worst weights) is refused."""

    @model_validator(mode="before")
    @classmethod
    def _mode_from_name(cls, data):
        if not isinstance(data, dict) or not isinstance(data.get("metric"), str):
            return data
        said = better_direction(data["metric"])
        if data.get("mode") is None:
            if said is None:
                raise ValueError(
                    f"mode: the name {data['metric']!r} does not say whether lower or higher is better; "
                    "set mode: min or mode: max"
                )
            return {**data, "mode": said}
        if said is not None and data["mode"] != said:
            raise ValueError(
                f"mode: {data['mode']} would keep the {'lowest' if data['mode'] == 'min' else 'highest'} "
                f"{data['metric']}, and a {'lower' if said == 'min' else 'higher'} one is better: set mode: "
                f"{said} (or leave mode out)"
            )
        return data


class KeepBestConfig(_Watched):
    """`model.pt` holds the weights of the best validation, not the last step's."""


class EarlyStopConfig(_Watched):
    """Stop after `patience` validations without improvement: the job saves and exits 0."""

    patience: int = Field(default=3, ge=1)
    """Validations in a row without improvement before the run stops."""
    min_delta: float = Field(default=0.0, ge=0)
    """An improvement must beat the best by more than this to count."""


BUILTIN_METRICS = ("loss", "accuracy", "top5")
"""What the built-in classification's validation line gives (`trainers.task.Classification`)."""
RECIPE_TRAINER_KEYS = ("clip_grad_norm", "precision", "compile", "ema", "keep_best", "early_stop", "callbacks")
"""`trainer` keys of the built-in loop's recipe: refused with `trainer.loop` (your loop owns them)."""
BUILTIN_LOOP_KEYS = (
    "batch_size",
    "optimizer",
    "learning_rate",
    "weight_decay",
    "momentum",
    "warmup_steps",
    "grad_accum_steps",
    "lr_scaling",
    "checkpoint_interval",
    "validation_every_epochs",
    "prefetch_batches",
)
"""The other `trainer` keys only the built-in loop reads: beside `trainer.loop` they would be silently
ignored (your loop gets `trainer.loop_config`), so they are refused as the recipe's are."""


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
        unread = [key for key in BUILTIN_LOOP_KEYS if getattr(t, key) != fields[key].default]
        if unread:
            return (
                f"trainer.{unread[0]}: only the built-in loop reads it; your loop (trainer.loop) is given "
                "trainer.loop_config alone: remove it, or pass it in trainer.loop_config"
            )
        return None
    for key in ("keep_best", "early_stop"):
        watched = getattr(t, key)
        if watched is not None and not cfg.validates:
            return (
                f"trainer.{key}: needs validation, and the job has no channel named 'validation'; add one "
                f"or remove trainer.{key}"
            )
        if watched is not None and cfg.task is None and watched.metric not in BUILTIN_METRICS:
            return (
                f"trainer.{key}.metric: the built-in classification's validation gives "
                f"{', '.join(BUILTIN_METRICS)} (top5 with more than 5 classes), not {watched.metric!r}"
            )
    return None
