"""Everything around a step's backward and its optimizer step, in one fixed order
(`../shared/notes/recipe.md` section 1):

    scale the loss (fp16) -> backward per micro-batch -> unscale -> gradient norm (clip)
    -> optimizer step (skipped by the GradScaler on overflow) -> scaler update
    -> schedule and EMA, only if the optimizer stepped -> zero the gradients

`Recipe` owns the optimizer, the schedule, the GradScaler, the EMA and the precision: the loop
calls `backward` and `step` and never asks which of them are on. Whether the optimizer stepped is
what its step post-hook saw (`Optimizer.register_step_post_hook` runs only after a real step), not
a comparison of scales, so a skipped fp16 step leaves the schedule where it was.

The gradient norm is the local one: DDP has already averaged the gradients, so it is the global
norm on every rank, with no all-reduce of its own.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any


@dataclass
class StepOutcome:
    """What one optimizer step did."""

    lr: float
    """The first group's rate the step used (read before the schedule moved it)."""
    grad_norm: Any
    """The global L2 norm of the gradients before clipping: a 0-d tensor, read a step later (no sync
    now); inf or nan on an fp16 overflow."""
    stepped: bool
    """False: the GradScaler skipped the step (overflow): no schedule or EMA update."""
    group_lrs: dict[str, float] | None = None
    """Each named parameter group's rate (a group's `name` key), where the optimizer names two or more."""


class Recipe:
    """The run's optimizer, schedule, precision, clipping and EMA, over the bare `model` (before
    compile and DDP wrap it: the EMA is a copy of the plain module, with plain keys)."""

    def __init__(self, model, spec, device, precision: str):
        import torch

        from smlaunch.trainers.optim import build_optimizer, build_schedule

        t = spec.trainer
        self.model, self.device, self.precision = model, device, precision
        self.optimizer = build_optimizer(model, spec)
        self.schedule = build_schedule(self.optimizer, spec)
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        self.clip = t.clip_grad_norm
        self.ema = None
        if t.ema is not None:
            from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

            # Parameters averaged; buffers (BatchNorm statistics) copied from the live model at each
            # update (`use_buffers=False`): the statistics of the weights being trained.
            self.ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(t.ema.decay), use_buffers=False)
        self.skipped = 0
        """fp16 steps the GradScaler skipped (an overflow), over the whole run."""
        self._stepped = False
        self.optimizer.register_step_post_hook(self._mark_stepped)
        self.params = [p for p in model.parameters() if p.requires_grad]

    def _mark_stepped(self, *_args) -> None:
        self._stepped = True

    def autocast(self):
        """The forward's autocast context (a new one per use)."""
        import torch

        if self.device.type == "cuda" and self.precision in ("bf16", "fp16"):
            return torch.autocast("cuda", dtype=torch.bfloat16 if self.precision == "bf16" else torch.float16)
        return contextlib.nullcontext()

    def backward(self, loss) -> None:
        self.scaler.scale(loss).backward()

    def step(self) -> StepOutcome:
        """After the step's last backward (and a drain step's explicit gradient sum)."""
        import torch

        groups = self.optimizer.param_groups
        lr = float(groups[0]["lr"])
        named = {str(g["name"]): float(g["lr"]) for g in groups if "name" in g}
        self.scaler.unscale_(self.optimizer)
        if self.clip:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip, foreach=None)
        else:
            norm = total_norm([p.grad for p in self.params if p.grad is not None], self.device)
        self._stepped = False
        self.scaler.step(self.optimizer)
        self.scaler.update()
        stepped = self._stepped
        if stepped:
            self.schedule.step()
            if self.ema is not None:
                self.ema.update_parameters(self.model)
        else:
            self.skipped += 1
        self.optimizer.zero_grad(set_to_none=True)
        return StepOutcome(lr, norm.detach(), stepped, named if len(named) > 1 else None)

    @property
    def validated(self):
        """The module validation measures and `model.pt` holds: the EMA's when on."""
        return self.ema.module if self.ema is not None else self.model

    def state_dict(self) -> dict:
        """What a checkpoint holds beside the model, optimizer and schedule (`TrainState.recipe`)."""
        return {
            "precision": self.precision,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "skipped": self.skipped,
            "ema": self.ema.state_dict() if self.ema is not None else None,
        }

    def load_state_dict(self, state: dict | None) -> None:
        """A checkpoint's recipe state; one without EMA (EMA switched on at resume) starts the average
        from the resumed weights, at the first step."""
        if not state:
            return
        self.skipped = int(state.get("skipped", 0))
        if state.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler"])
        if state.get("ema") is not None and self.ema is not None:
            self.ema.load_state_dict(state["ema"])


def checkpoint_fields(recipe: Recipe, callbacks) -> dict:
    """The `TrainState` fields of the recipe and the callbacks: what resumes them exactly."""
    return {
        "optimizer": recipe.optimizer.state_dict(),
        "scheduler": recipe.schedule.state_dict(),
        "recipe": {**recipe.state_dict(), "callbacks": callbacks.state_dict()},
    }


def restore(recipe: Recipe, callbacks, state) -> None:
    """`checkpoint_fields` of a `TrainState` back into a fresh recipe and callbacks (the model's
    weights already loaded: the EMA and the optimizer state follow the parameters' device)."""
    recipe.optimizer.load_state_dict(state.optimizer)
    recipe.schedule.load_state_dict(state.scheduler)
    recipe.load_state_dict(state.recipe)
    callbacks.load_state_dict((state.recipe or {}).get("callbacks"))


def total_norm(grads: list, device):
    """The L2 norm of all `grads` together, as `clip_grad_norm_` computes it (without clipping)."""
    import torch

    if not grads:
        return torch.zeros((), device=device)
    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
    if get_total_norm is not None:
        return get_total_norm(grads, foreach=None)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach()) for g in grads]))


def run_capability(device, control, rank: int) -> tuple[int, int] | None:
    """The lowest compute capability over the ranks' GPUs (None on CPU), the same on every rank."""
    import torch

    mine = tuple(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None
    found = control.gather(mine, rank)
    lowest = None
    if found is not None:
        gpus = [c for c in found if c is not None]
        lowest = min(gpus) if gpus and len(gpus) == len(found) else None
    return control.broadcast(lowest)


class CompiledForward:
    """`trainer.compile`: the model's `forward` compiled in place (no `_orig_mod.` in its keys, and DDP
    wraps the same module), before DDP. Compilation happens at the first call; if that raises, the
    forward goes back to eager with one warning, and the caller runs the micro-batch again."""

    def __init__(self, model, console, backend: str = "inductor"):
        import torch

        self.model, self.console, self.pending = model, console, True
        model.forward = torch.compile(model.forward, backend=backend)

    def call(self, run_forward):
        """`run_forward()` (the first micro-batch's forward and loss); on a compile failure, again eagerly."""
        if not self.pending:
            return run_forward()
        self.pending = False
        try:
            return run_forward()
        except Exception as exc:  # any: a compiler error takes many shapes; eager decides whether it is the model's
            del self.model.forward  # the class's own forward again
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            why = f"{type(exc).__name__}: {first}"
            self.console.put("warning", text=f"trainer.compile: the model did not compile ({why}); training eagerly")
            return run_forward()
