"""A user's regression project, written as its authors would: a map op, a model factory, a loss
and an evaluate function, in their own module beside their config (sm-launch imports it by name
from the folder it runs in). tests/launcher/test_byo_jobs.py copies this folder and trains it."""

import numpy as np
import torch
import torch.nn.functional as F

FEATURES = ("x1", "x2", "x3", "x4")
WEIGHTS = np.array([1.5, -2.0, 0.5, 1.0], np.float32)
BIAS = 0.5


def make_frame(rows: int, seed: int):
    """The data as a pandas DataFrame: four float features and a target y = x . w + b + noise."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, len(FEATURES))).astype(np.float32)
    y = x @ WEIGHTS + BIAS + rng.normal(scale=0.05, size=rows).astype(np.float32)
    return pd.DataFrame({**{name: x[:, i] for i, name in enumerate(FEATURES)}, "y": y})


def stack_features(batch, rng, train, noise=0.0):
    """The float columns stacked into one float32 matrix (Ray Data's map_batches convention)."""
    x = np.stack([np.asarray(batch[name], np.float32) for name in FEATURES], axis=1)
    if train and noise:
        x = x + rng.normal(scale=noise, size=x.shape).astype(np.float32)
    return {"x": x, "y": np.asarray(batch["y"], np.float32)}


def mlp(inputs, hidden=32):
    return torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))


def mse(model, batch):
    pred = model(batch["x"]).squeeze(1)
    return F.mse_loss(pred, batch["y"]), {"mae": (pred - batch["y"]).abs().mean().detach()}


def metrics(model, batch):
    pred = model(batch["x"]).squeeze(1)
    return {"mse": F.mse_loss(pred, batch["y"]).item(), "mae": (pred - batch["y"]).abs().mean().item()}


def column_mse(model, batch):
    """The loss of a job with no ops at all: the columns arrive one by one, stacked here."""
    x = torch.stack([batch[name].float() for name in FEATURES], dim=1)
    return F.mse_loss(model(x).squeeze(1), batch["y"].float())


_CALLS = [0]


def mse_with_a_bug_at_step_5(model, batch):
    """`column_mse`, until the fifth call on this rank (its fifth step): a bug that happens every time."""
    _CALLS[0] += 1
    if _CALLS[0] == 5:
        raise ValueError(f"batch of {len(batch['y'])} rows has no column 'x5'")
    return column_mse(model, batch)


# --- the recipe (docs/recipe.md), as its users write it ------------------------------------------


def grouped_adamw(model, lr, head_lr):
    """Two parameter groups, as timm's or nanoGPT's factories make them: the output layer at its own
    rate, named so the step lines can say which is which."""
    head = list(model[-1].parameters())
    body = [p for p in model.parameters() if all(p is not h for h in head)]
    return torch.optim.AdamW(
        [{"params": body, "lr": lr, "name": "body"}, {"params": head, "lr": head_lr, "name": "head"}], weight_decay=0.0
    )


def cliff(optimizer, total_steps, drop_at, factor):
    """A schedule that ruins a good run: the rate times `factor` from step `drop_at` on."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 if step < drop_at else factor)


def auroc_metrics():
    """Whole-set metrics, as torchmetrics writes them: AUROC of the prediction for "y is above 0.5"."""
    from torchmetrics.classification import BinaryAUROC

    return {"auroc": BinaryAUROC()}


def predict_above(model, batch):
    return model(batch["x"]).squeeze(1), (batch["y"] > 0.5).long()


class EventLog:
    """A user's callback: logs every event (rank 0) to events.jsonl beside this module, and once, at
    step `KILL_AT`, kills rank 1's process: the job must resume from its last checkpoint with the
    recipe's state (schedule, EMA, best weights, patience left) as it was."""

    KILL_AT = 62

    def __init__(self):
        import pathlib

        self.folder = pathlib.Path(__file__).resolve().parent

    def _log(self, run, event, **fields):
        import json

        if run.rank == 0:
            with open(self.folder / "events.jsonl", "a") as f:
                f.write(json.dumps({"event": event, "step": run.step, **fields}) + "\n")

    def on_train_start(self, run):
        self._log(run, "train_start", world=run.world_size)

    def on_step_end(self, run, outcome):
        self._log(run, "step_end", lr=outcome.lr, stepped=outcome.stepped)
        marker = self.folder / "killed-once"
        if run.step == self.KILL_AT and run.rank == 1 and not marker.exists():
            import os

            marker.write_text("rank 1 killed itself at step 62\n")
            os._exit(1)

    def on_validation_end(self, run, metrics):
        self._log(run, "validation_end", metrics=metrics)

    def on_train_end(self, run):
        self._log(run, "train_end")
