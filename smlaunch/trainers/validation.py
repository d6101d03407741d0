"""When the built-in loop validates: decided once per run, from whether the job has a validation
channel (`LaunchConfig.validates`), as one of two schedules the loop asks at each epoch's end and
at the run's end.

Without a validation channel Ray Train has no `validation` shard to give (`get_dataset_shard`
raises `KeyError`), so a pass must never start: most users' first job has only a `train` channel
(issue 76). With one, the pass runs after every `validation_every_epochs`-th epoch (every epoch
for a run of `epochs`) and once more at the end, unless the last pass was at the last step.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from smlaunch.trainers.callbacks import Callback

if TYPE_CHECKING:
    from smlaunch.trainers.spec import TrainSpec

NOTICE_WAIT_S = 3.0
"""How long a validation pass that failed waits for a preemption notice that explains it (a drain
Ray Train's watcher had not seen yet) before the failure counts as the run's."""


class ChannelValidation:
    """Passes over the `validation` channel."""

    def __init__(self, every_epochs: int):
        self.every_epochs = every_epochs

    def after_epoch(self, epochs_done: int) -> bool:
        return bool(self.every_epochs) and epochs_done % self.every_epochs == 0

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
    return ChannelValidation(spec.trainer.validation_every_epochs)


class EpochValidation(Callback):
    """The passes as a callback of the loop (`trainers.callbacks`): after the epochs the schedule names
    (`on_epoch_end`) and at the run's end (`on_train_end`, first of that event's callbacks). Each pass
    fires `on_validation_end` with its result, the same on every rank; a stop a callback asks for then
    (early stop) is rank 0's, broadcast, so every rank ends at the same step."""

    def __init__(self, run: Any, passes: ChannelValidation | NoValidation):
        self.run, self.passes = run, passes

    def on_epoch_end(self, view: Any) -> None:
        if self.passes.after_epoch(self.run.epochs_done):
            self.validate_unless_preempted(self.run.epochs_done)

    def on_train_end(self, view: Any) -> None:
        run = self.run
        if not run.stopped and self.passes.at_end(run.validation, run.step):
            if self.validate_unless_preempted(run.epochs_done + run.cut_short):
                run.phase_marks["final_validation"] = time.time()

    def validate_unless_preempted(self, epoch: int) -> bool:
        """Validate, unless a train node is being drained (then stop: False). A validation pass on a
        draining node cannot start: Ray Train starts the validation dataset's coordinator actor on
        first use, pinned to a train node (`NodeAffinitySchedulingStrategy`, soft=False), and a draining
        node takes no new actor, so the pass fails with `ActorUnschedulableError`; a restart cannot be
        placed there either, and the job would end in 3 x 60 s with exit 1 instead of a checkpoint.
        The step loop asks for the notice at most once a second, so a drain just before an epoch's end
        (or the run's) is asked for here again, on every rank (a barrier); a pass that fails because
        the notice came a moment after this ask stops the run too."""
        run = self.run
        if run.control.notice() is None:
            try:
                self._validate(epoch)
                return True
            except Exception:
                if run.control.notice(wait_s=NOTICE_WAIT_S) is None:
                    raise
        run.stop()
        return False

    def _validate(self, epoch: int) -> None:
        import ray.train

        from smlaunch.trainers.evaluate import validate

        run = self.run
        run.doing = f"in the validation at step {run.step}"
        batches = ray.train.get_dataset_shard("validation").iter_torch_batches(
            batch_size=256, device=run.device, pin_memory=run.device.type == "cuda"
        )
        result = validate(
            run.recipe.validated,
            batches,
            run.task,
            run.device,
            run.host_rows,
            run.step,
            epoch,
            run.control,
            run.recipe.autocast,
        )
        run.validation.append(result)
        run.console.put("validation", **result)
        run.callbacks.fire("on_validation_end", run.view, dict(result))
        run.stop_request = run.control.broadcast(run.stop_request)  # rank 0's decision is every rank's
        if run.stop_request and run.rank == 0:
            run.console.put("note", text=run.stop_request)
