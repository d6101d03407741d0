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
