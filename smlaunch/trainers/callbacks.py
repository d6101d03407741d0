"""What happens around the built-in loop's steps, as callbacks on named events, the way Lightning's
`Callback` hooks or Composer's `Event`s work (`../shared/notes/recipe.md` section 7): keeping the
best validation's weights, stopping early, and the user's own (`trainer.callbacks`).

The loop's own parts are callbacks too, listed first: checkpoints by step count or timer
(`run_callbacks.StepCheckpoints`), the phase marks, validation passes (`validation.EpochValidation`),
the console's step lines (`run_callbacks.ConsoleLog`); then keep-best and early stop; then the
user's, in the order `trainer.callbacks` lists them. Events, each called on every rank unless said:

* `on_train_start(run)`: the model is built (and resumed), before the first step;
* `on_step_end(run, outcome)`: after each optimizer step (`outcome`: `trainers.recipe.StepOutcome`:
  `lr`, `grad_norm` as a tensor, `stepped`);
* `on_log(run, record)`: rank 0 only, a step's record over all ranks (`step`, `loss`, `lr`,
  `grad_norm`, `images_per_s`, ...), one step after it was taken (what the step lines print);
* `on_epoch_end(run)`: after each complete pass over the train channel;
* `on_validation_end(run, metrics)`: after each validation pass, `metrics` the same dict on every
  rank (`step`, `epoch`, `rows` and each metric's value);
* `on_train_end(run)`: after the last step (its first callback runs the final validation), before
  the final checkpoint and the model are saved.

`run` is a `RunView`: the step, epoch, rank, world size, the bare model, the optimizer, and
`request_stop(line)`. A callback with state has `state_dict()` / `load_state_dict(state)`, saved in
every checkpoint under its class name, so a resumed run goes on with the same best value, the same
patience left. Decisions made from `metrics` are the same on every rank: every rank sees rank 0's
numbers.
"""

from __future__ import annotations

import math
from typing import Any


class Callback:
    """The base of every callback: each event does nothing unless overridden."""

    def on_train_start(self, run: RunView) -> None: ...

    def on_step_end(self, run: RunView, outcome: Any) -> None: ...

    def on_log(self, run: RunView, record: dict) -> None: ...

    def on_epoch_end(self, run: RunView) -> None: ...

    def on_validation_end(self, run: RunView, metrics: dict) -> None: ...

    def on_train_end(self, run: RunView) -> None: ...


class RunView:
    """What a callback sees of the run: read-only numbers, and one way to act (`request_stop`)."""

    def __init__(self, run):
        self._run = run

    @property
    def step(self) -> int:
        """Optimizer steps taken."""
        return self._run.step

    @property
    def epoch(self) -> int:
        """The 1-based epoch the current step belongs to."""
        return self._run.epochs_done + 1

    @property
    def rank(self) -> int:
        return self._run.rank

    @property
    def world_size(self) -> int:
        return self._run.world

    @property
    def model(self):
        """The bare module (not DDP's wrapper), or the EMA's average when `trainer.ema` is on."""
        return self._run.recipe.validated

    @property
    def optimizer(self):
        return self._run.recipe.optimizer

    def request_stop(self, line: str) -> None:
        """End the run: it finishes (final validation, checkpoint, model) and exits 0, printing `line`.
        Asked on any rank in `on_step_end`, every rank ends before the next step (the step's exchange
        carries it); in `on_validation_end`, rank 0's ask decides for all."""
        self._run.stop_request = self._run.stop_request or line


def better(value: float, best: float | None, mode: str, min_delta: float = 0.0) -> bool:
    """Whether `value` improves on `best` by more than `min_delta` (a nan never does)."""
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value < best - min_delta if mode == "min" else value > best + min_delta


def metric_of(metrics: dict, name: str, key: str) -> float:
    """`metrics[name]`; a one-line UserError naming `key` and the metrics there are when it is missing."""
    from smlaunch.errors import UserError

    if name not in metrics:
        there = sorted(k for k in metrics if k not in ("step", "epoch", "rows"))
        raise UserError(f"{key}.metric: validation gave no {name!r}; it gave {', '.join(there) or 'no metric'}")
    return float(metrics[name])


class KeepBest(Callback):
    """`trainer.keep_best`: the weights of the best validation, kept on rank 0 (on the CPU), are what
    `model.pt` holds. The last step's weights stay in the checkpoints, for resume."""

    def __init__(self, metric: str, mode: str):
        self.metric, self.mode = metric, mode
        self.value: float | None = None
        self.step: int | None = None
        self.weights: dict | None = None

    def on_validation_end(self, run: RunView, metrics: dict) -> None:
        value = metric_of(metrics, self.metric, "trainer.keep_best")
        if better(value, self.value, self.mode):
            self.value, self.step = value, int(metrics["step"])
            if run.rank == 0:  # a copy: on the CPU, `state_dict()`'s tensors are the live parameters
                self.weights = {k: v.detach().to("cpu", copy=True) for k, v in run.model.state_dict().items()}

    def best(self) -> dict | None:
        """report.json's `summary.best`."""
        return None if self.step is None else {"step": self.step, "metric": self.metric, "value": self.value}

    def state_dict(self) -> dict:
        return {"value": self.value, "step": self.step, "weights": self.weights}

    def load_state_dict(self, state: dict) -> None:
        self.value, self.step, self.weights = state["value"], state["step"], state.get("weights")


class EarlyStop(Callback):
    """`trainer.early_stop`: after `patience` validations in a row that do not beat the best by more
    than `min_delta`, the run stops (saves, exits 0)."""

    def __init__(self, metric: str, mode: str, patience: int, min_delta: float):
        self.metric, self.mode, self.patience, self.min_delta = metric, mode, patience, min_delta
        self.best: float | None = None
        self.best_step: int | None = None
        self.wait = 0
        self.stopped = False

    def on_validation_end(self, run: RunView, metrics: dict) -> None:
        value = metric_of(metrics, self.metric, "trainer.early_stop")
        if better(value, self.best, self.mode, self.min_delta):
            self.best, self.best_step, self.wait = value, int(metrics["step"]), 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped = True
            run.request_stop(
                f"early stop at step {metrics['step']}: {self.metric} has not improved by more than "
                f"{self.min_delta:g} in {self.patience} validation{'s' if self.patience > 1 else ''}; best "
                f"{self.metric}={self.best:.6g} at step {self.best_step}"
            )

    def state_dict(self) -> dict:
        return {"best": self.best, "best_step": self.best_step, "wait": self.wait, "stopped": self.stopped}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.best_step, self.wait = state["best"], state["best_step"], state["wait"]
        self.stopped = bool(state.get("stopped"))


class Callbacks:
    """The run's callbacks, called in order on each event; their states, keyed by class name."""

    def __init__(self, trainer, user_paths: list[str] | tuple[str, ...] = (), builtin: tuple = ()):
        from smlaunch.user_code import resolve

        self.keep_best = KeepBest(trainer.keep_best.metric, trainer.keep_best.mode) if trainer.keep_best else None
        self.early_stop = (
            EarlyStop(e.metric, e.mode, e.patience, e.min_delta) if (e := trainer.early_stop) is not None else None
        )
        self.items: list[Any] = [*builtin, *(c for c in (self.keep_best, self.early_stop) if c is not None)]
        self.items += [resolve(path, f"trainer.callbacks.{i}")() for i, path in enumerate(user_paths)]

    def stopped_early_line(self, step: int) -> str | None:
        """For a run resumed from a checkpoint of one that had stopped early (a rerun of the same
        config): the line it ends on at once, as a finished run's rerun trains no further."""
        e = self.early_stop
        if e is None or not e.stopped:
            return None
        return (
            f"early stop: this run had stopped early at step {step} (best {e.metric}={e.best:.6g} at step "
            f"{e.best_step}); nothing left to train"
        )

    def fire(self, event: str, run: RunView, *args) -> None:
        for callback in self.items:
            hook = getattr(callback, event, None)
            if hook is not None:
                hook(run, *args)

    def state_dict(self) -> dict:
        return {type(c).__name__: c.state_dict() for c in self.items if hasattr(c, "state_dict")}

    def load_state_dict(self, states: dict | None) -> None:
        for callback in self.items:
            state = (states or {}).get(type(callback).__name__)
            if state is not None and hasattr(callback, "load_state_dict"):
                callback.load_state_dict(state)
