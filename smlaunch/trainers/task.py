"""What a step minimises and what validation measures: the one seam between the loop and a model.

The loop (`trainers.loop`) owns everything around a step: DDP and its drain steps, autocast,
gradient accumulation, checkpoints, exactly-once accounting, the report. A task owns three things
only, as torchtitan's `loss_fn` or Composer's `ComposerModel.loss`/`eval_forward` draw the line
(../shared/notes/style.md section 11):

* `inputs(batch)`: what the model's side sees of a batch: its fields on the rank's device, without
  the reader's bookkeeping (ids, positions, hosts, chain times);
* `loss(model, inputs)`: `(scalar tensor, {name: float})`;
* `measure(model, inputs)`: for one validation batch, `{metric: float}` (means over its rows) and
  the `(preds, target)` its whole-set metrics are updated with (`trainers.metrics`), or None;
* `metrics()`: the whole-set metrics, fresh (torchmetrics `Metric`s by name).

`Classification` is the built-in task (cross-entropy on `image` and `label`; the loss, and accuracy
and top-5 as whole-set metrics); `UserTask` calls the user's `task.loss`, `task.evaluate`,
`task.metrics` and `task.predict` in the same places, so a user's task gets every guarantee the
built-in one has by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

from smlaunch.config.columns import BOOKKEEPING_COLUMNS

METRIC_SLOTS = 8
"""Numbers a loss may return beside the loss, averaged over ranks each step (`control.StepNumbers`)."""


def make_task(spec):
    """The run's task: the user's (`task.loss`) or the built-in classification."""
    if spec.task_loss:
        return UserTask(
            spec.task_loss,
            spec.task_evaluate,
            spec.normalize if spec.normalize_in_chain else None,
            spec.task_metrics,
            spec.task_predict,
        )
    return Classification(spec.normalize, spec.num_classes)


class Classification:
    """Cross-entropy of the model's logits for `image` against `label`; in validation the loss, and
    accuracy (top-5 too past 5 classes) over the whole set."""

    builtin = True

    def __init__(self, normalize: dict, num_classes: int | None = None):
        self.normalize, self.num_classes = normalize, num_classes
        self.metric_names: tuple[str, ...] = ()

    def inputs(self, batch: dict, device) -> dict:
        from smlaunch.trainers.evaluate import normalise

        return {"image": normalise(batch["image"], device, self.normalize), "label": batch["label"].to(device)}

    def loss(self, model, inputs: dict):
        import torch.nn.functional as F

        return F.cross_entropy(model(inputs["image"]).float(), inputs["label"]), {}

    def measure(self, model, inputs: dict):
        import torch.nn.functional as F

        logits = model(inputs["image"]).float()
        labels = inputs["label"]
        return {"loss": F.cross_entropy(logits, labels).double()}, (logits, labels)

    def metrics(self) -> dict:
        from smlaunch.trainers.metrics import classification_metrics

        return classification_metrics(self.num_classes)


@dataclass
class UserTask:
    """The user's `task.loss` and `task.evaluate`, imported by name on each rank (`user_code`)."""

    loss_path: str
    evaluate_path: str | None = None
    normalize: dict | None = None
    """The chain's trailing `normalize`, applied to `image` on the device; None: images stay uint8."""
    metrics_path: str | None = None
    predict_path: str | None = None
    builtin = False

    def __post_init__(self):
        from smlaunch.user_code import resolve

        self._loss = resolve(self.loss_path, "task.loss")
        self._evaluate = resolve(self.evaluate_path, "task.evaluate") if self.evaluate_path else None
        self._predict = resolve(self.predict_path, "task.predict") if self.predict_path else None
        self.metric_names: tuple[str, ...] = ()

    def inputs(self, batch: dict, device) -> dict:
        from smlaunch.trainers.evaluate import normalise

        out = {
            name: value.to(device, non_blocking=True) if hasattr(value, "to") else value
            for name, value in batch.items()
            if name not in BOOKKEEPING_COLUMNS  # the loop's, not the model's or the user's functions'
        }
        if self.normalize is not None and "image" in out:
            out["image"] = normalise(out["image"], device, self.normalize)
        return out

    def loss(self, model, inputs: dict):
        from smlaunch.errors import UserError

        out = self._loss(model, inputs)
        value, metrics = out if isinstance(out, tuple) else (out, {})
        if not hasattr(value, "backward") or getattr(value, "ndim", 1) != 0:
            raise UserError(
                f"task.loss {self.loss_path} returned {type(value).__name__}"
                f"{'' if not hasattr(value, 'shape') else f' of shape {tuple(value.shape)}'}; return a "
                "scalar tensor, or (tensor, {name: float})"
            )
        if not isinstance(metrics, dict):
            raise UserError(
                f"task.loss {self.loss_path}: the second value must be a dict of numbers, not {type(metrics).__name__}"
            )
        if metrics and not self.metric_names:
            self.metric_names = tuple(sorted(metrics))[:METRIC_SLOTS]
        return value, metrics

    def measure(self, model, inputs: dict):
        from smlaunch.errors import UserError

        pair = None
        if self._predict is not None:
            pair = self._predict(model, inputs)
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise UserError(
                    f"task.predict {self.predict_path} returned {type(pair).__name__}; return (preds, target)"
                )
        if self._evaluate is None:
            return {"loss": self.loss(model, inputs)[0].double()}, pair
        out = self._evaluate(model, inputs)
        if not isinstance(out, dict) or not out:
            raise UserError(
                f"task.evaluate {self.evaluate_path} returned {type(out).__name__}; return "
                "{metric: float} for the batch"
            )
        return out, pair

    def metrics(self) -> dict:
        from smlaunch.trainers.metrics import user_metrics

        return user_metrics(self.metrics_path) if self.metrics_path else {}


def metric_values(metrics: dict, names: tuple[str, ...]) -> list[float]:
    """A loss's numbers in `names`' slots (missing ones 0), `METRIC_SLOTS` long."""
    values = [float(metrics.get(name, 0.0)) for name in names]
    return values + [0.0] * (METRIC_SLOTS - len(values))
