"""One optimizer step of the loop (`trainers.loop`): the task's loss over the step's micro-batches,
under DDP, autocast and accumulation, then the recipe's step (`trainers.recipe`: unscale, clip,
optimizer, schedule, EMA); what the step took, for the report.

DDP's own sync when every rank holds a full step, else a drain step with the gradients summed
explicitly (`control.sum_gradients`). A drain step runs the bare module, not the DDP wrapper:
even under `no_sync`, DDP's forward may broadcast buffers (after a synced step it does), a
collective the ranks without data would never join. The task (`trainers.task`) is called the same
way in both, the built-in classification as a user's loss.
"""

from __future__ import annotations

import contextlib
import time


def train_step(run, micro: list, all_full: bool, waited: float, started: float):
    """Trains `run` (a loop's `_Run`) one step on `micro`; its `StepNumbers`."""
    import torch

    from smlaunch.trainers.control import StepNumbers, sum_gradients
    from smlaunch.trainers.evaluate import count_hosts
    from smlaunch.trainers.task import METRIC_SLOTS, metric_values

    task, accum, recipe = run.task, run.trainer.grad_accum_steps, run.recipe
    losses, rows, chain, metrics = [], 0, [], []
    for i, batch in enumerate(micro):
        run.progress.record(batch)
        if run.mix is not None:
            run.mix.add(batch["label"])
        count_hosts(run.host_rows, batch)
        count_hosts(run.train_rows, batch, run.train_prep)
        model = run.model if all_full else run.raw_model
        defer = all_full and run.world > 1 and i < len(micro) - 1  # DDP syncs on the last micro-batch
        with run.model.no_sync() if defer else contextlib.nullcontext(), recipe.autocast():
            inputs = task.inputs(batch, run.device)
            if run.compiled is not None:  # the first forward compiles; a failure trains eagerly (`CompiledForward`)
                loss, numbers = run.compiled.call(lambda: task.loss(model, inputs))  # noqa: B023 (called at once)
            else:
                loss, numbers = task.loss(model, inputs)
        recipe.backward(loss / accum if all_full else loss)
        losses.append(loss.detach().float())
        if numbers:
            metrics.append(numbers)
        rows += len(batch["id"])
        if "prep_s" in batch:  # the chain's time for the rows it timed (a worker's first batch: -1)
            seconds = batch["prep_s"]
            timed = seconds >= 0
            rest = batch["tail_s"][timed].double().sum() if "tail_s" in batch else torch.zeros((), dtype=torch.float64)
            chain.append(torch.stack([seconds[timed].double().sum(), timed.double().sum(), rest.to(seconds.device)]))
    if not all_full:
        sum_gradients(run.raw_model, len(micro), run.world)
    outcome = recipe.step()
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    run.step += 1
    run.last_outcome = outcome  # for the loop's `on_step_end`, once the step's numbers are taken
    if outcome.group_lrs and run.rank == 0:  # rank 0's step record, one exchange later, names the groups' rates
        run.group_rates[run.step] = outcome.group_lrs
    loss_sum = torch.stack(losses).sum().item() if losses else 0.0
    chain_s, chain_rows, tail_s = torch.stack(chain).sum(0).tolist() if chain else (0.0, 0.0, 0.0)
    sums = (
        [sum(values) for values in zip(*(metric_values(m, task.metric_names) for m in metrics), strict=False)]
        if metrics
        else [0.0] * METRIC_SLOTS
    )
    return StepNumbers(
        loss_sum,
        len(micro),
        rows,
        waited,
        time.perf_counter() - started,
        chain_s,
        int(chain_rows),
        tuple(sums),
        len(metrics),
        outcome.lr,
        float(outcome.grad_norm),
        recipe.skipped,
        tail_s,
    )
