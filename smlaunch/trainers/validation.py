"""When the built-in loop validates: decided once per run, from whether the job has a validation
channel (`LaunchConfig.validates`), as one of two schedules the loop asks at each epoch's end and
at the run's end.

Without a validation channel Ray Train has no `validation` shard to give (`get_dataset_shard`
raises `KeyError`), so a pass must never start: most users' first job has only a `train` channel
(issue 76). With one, the pass runs after every `validation_every_epochs`-th epoch (every epoch
for a run of `epochs`) and once more at the end, unless the last pass was at the last step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from smlaunch.trainers.spec import TrainSpec


class ChannelValidation:
    """Passes over the `validation` channel."""

    def __init__(self, every_epochs: int, by_epochs: bool):
        self.every_epochs, self.by_epochs = every_epochs, by_epochs

    def after_epoch(self, epochs_done: int) -> bool:
        return self.by_epochs or bool(self.every_epochs) and epochs_done % self.every_epochs == 0

    def at_end(self, done: list[dict[str, Any]], step: int) -> bool:
        return not done or done[-1]["step"] != step


class NoValidation:
    """No validation channel: no pass, ever."""

    def after_epoch(self, epochs_done: int) -> bool:
        return False

    def at_end(self, done: list[dict[str, Any]], step: int) -> bool:
        return False


def schedule(spec: TrainSpec) -> ChannelValidation | NoValidation:
    """The run's validation schedule (`spec`: the workers' `TrainSpec`)."""
    if not spec.validation:
        return NoValidation()
    return ChannelValidation(spec.trainer.validation_every_epochs, by_epochs=bool(spec.trainer.epochs))
