"""The built-in loop's own callbacks (`trainers.callbacks`): what happens around its steps that is not
the step itself. Each holds the loop's run (`trainers.loop._Run`), as the loop's own parts do; a
user's callback sees a `RunView` instead. Validation passes are `trainers.validation.EpochValidation`."""

from __future__ import annotations

import time

from smlaunch.trainers.callbacks import Callback


class StepCheckpoints(Callback):
    """A checkpoint after every `trainer.checkpoint_interval`-th step, or after a step that rank 0's
    clock found a timed one due before (`trainer.checkpoint_every_s`, decided in the step's exchange)."""

    def __init__(self, run):
        self.run = run

    def on_step_end(self, view, outcome) -> None:
        run = self.run
        interval = run.trainer.checkpoint_interval
        if interval and run.step % interval == 0:
            run.save("interval")
        elif run.checkpoint_due:
            run.save("timer")


class PhaseMarks(Callback):
    """When the first and the last step ended: the run's phases in the report (`launcher.report.phases`)."""

    def __init__(self, phase_marks: dict):
        self.phase_marks = phase_marks

    def on_step_end(self, view, outcome) -> None:
        self.phase_marks["last_step"] = now = time.time()
        self.phase_marks.setdefault("first_step", now)


class ConsoleLog(Callback):
    """Each step's record (over all ranks, rank 0) to the launcher's console: the progress bar, the
    metric lines, TensorBoard (`launcher.job.train_progress`)."""

    def __init__(self, console):
        self.console = console

    def on_log(self, view, record: dict) -> None:
        self.console.put("step", **record)
