"""The optimizer and learning-rate schedule, each built by a factory: the user's (the top-level
`optimizer` and `schedule`, `docs/recipe.md`) or ours, called the same way. Ours: AdamW or SGD
over all parameters, and linear warmup then cosine decay to zero over the run's optimizer steps.

What a user's factory returns is checked on the ranks before the first step, in one line naming the
key: an optimizer that leaves a trainable parameter out (it would never train) or holds one twice
(it would step twice), a schedule that is not a scheduler of that optimizer."""

from __future__ import annotations

import math

from smlaunch.errors import UserError


def adamw(model, lr: float, weight_decay: float):
    import torch

    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)


def sgd(model, lr: float, weight_decay: float, momentum: float):
    import torch

    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)


def warmup_cosine_schedule(optimizer, total_steps: int | None, warmup_steps: int | None = None):
    """The built-in schedule as a factory: `LambdaLR` over `warmup_cosine`."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, warmup_steps))


def build_optimizer(model, spec):
    """The run's optimizer over `model` (the bare module, before DDP wraps it)."""
    from smlaunch.user_code import resolve

    t = spec.trainer
    if spec.optimizer is None:
        if t.optimizer == "sgd":
            return sgd(model, spec.learning_rate, t.weight_decay, t.momentum)
        return adamw(model, spec.learning_rate, t.weight_decay)
    factory = resolve(spec.optimizer.factory, "optimizer.factory")
    optimizer = factory(model, **spec.optimizer.params)
    check_optimizer(optimizer, model, spec.optimizer.factory)
    return optimizer


def build_schedule(optimizer, spec):
    """The run's schedule, stepped once per optimizer step that stepped (`trainers.recipe`)."""
    from smlaunch.user_code import resolve

    if spec.schedule is None:
        return warmup_cosine_schedule(optimizer, spec.total_steps, spec.trainer.warmup_steps)
    factory = resolve(spec.schedule.factory, "schedule.factory")
    schedule = factory(optimizer, spec.total_steps, **spec.schedule.params)
    if not all(callable(getattr(schedule, name, None)) for name in ("step", "state_dict", "load_state_dict")):
        raise UserError(
            f"schedule.factory {spec.schedule.factory} returned {type(schedule).__name__}; return a "
            "torch.optim.lr_scheduler.LRScheduler (step, state_dict, load_state_dict) of the optimizer it was given"
        )
    if getattr(schedule, "optimizer", optimizer) is not optimizer:
        raise UserError(
            f"schedule.factory {spec.schedule.factory}: the scheduler drives another optimizer than the one "
            "it was given; build it on the `optimizer` argument"
        )
    return schedule


def check_optimizer(optimizer, model, factory: str) -> None:
    """Every trainable parameter of `model` in exactly one of the optimizer's groups, and nothing else."""
    import torch

    if not isinstance(optimizer, torch.optim.Optimizer):
        raise UserError(
            f"optimizer.factory {factory} returned {type(optimizer).__name__}; return a torch.optim.Optimizer"
        )
    names = {id(p): name for name, p in model.named_parameters()}
    seen: dict[int, int] = {}
    for i, group in enumerate(optimizer.param_groups):
        for p in group["params"]:
            if id(p) in seen:
                raise UserError(
                    f"optimizer.factory {factory}: parameter {names.get(id(p), '?')} is in groups {seen[id(p)]} "
                    f"and {i}; put each parameter in exactly one group"
                )
            if id(p) not in names:
                raise UserError(
                    f"optimizer.factory {factory}: group {i} holds a tensor that is not a parameter of the model "
                    "(build the optimizer from the `model` argument)"
                )
            seen[id(p)] = i
    left_out = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in seen]
    if left_out:
        more = f" and {len(left_out) - 3} more" if len(left_out) > 3 else ""
        raise UserError(
            f"optimizer.factory {factory}: trainable parameter{'s' if len(left_out) > 1 else ''} "
            f"{', '.join(left_out[:3])}{more} in no group (never trained); add them to a group, or set "
            "requires_grad=False"
        )


def warmup_length(total: int | None, warmup: int | None = None) -> int:
    """Steps of linear warmup: `warmup` (at least 1), else a tenth of the run, at most 100 (100 where
    the run's length is unknown). One rule for the schedule and for the line `plan` prints of it."""
    if warmup is None:
        warmup = min(100, (total or 1000) // 10)
    return max(1, warmup)


def warmup_cosine(total: int | None, warmup: int | None = None):
    """LR factor per step: linear warmup (`warmup_length`), then cosine to zero over `total`
    (constant after warmup if the length is unknown: `plan` says so, and why)."""
    warmup = warmup_length(total, warmup)

    def factor(s: int) -> float:
        ramp = min(1.0, (s + 1) / warmup)
        return ramp if not total else ramp * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))

    return factor  # a function: LambdaLR's state_dict keeps the step count, not the function
