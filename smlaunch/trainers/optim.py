"""Optimizer and learning-rate schedule from the trainer config: AdamW or SGD, linear warmup then
cosine decay to zero over the run's optimizer steps."""

from __future__ import annotations

import math


def build_optimizer(model, t, learning_rate: float):
    """`t` is the trainer config; `learning_rate` the peak rate (scaled with the workers or not)."""
    import torch

    if t.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=t.momentum, weight_decay=t.weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=t.weight_decay)


def build_schedule(optimizer, t, total_steps: int | None):
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, t.warmup_steps))


def warmup_cosine(total: int | None, warmup: int | None = None):
    """LR factor per step: linear warmup (default a tenth of the run, at most 100 steps), then cosine
    to zero over `total` (constant after warmup if the length is unknown)."""
    if warmup is None:
        warmup = max(1, min(100, (total or 1000) // 10))
    warmup = max(1, warmup)

    def factor(s: int) -> float:
        ramp = min(1.0, (s + 1) / warmup)
        return ramp if not total else ramp * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))

    return factor  # a function: LambdaLR's state_dict keeps the step count, not the function
