"""What the train loop does besides stepping: normalising on the device, counting rows per host,
validating, and summing across ranks."""

from __future__ import annotations


def normalise(images, device, norm: dict):
    """uint8 CHW -> (x / 255 - mean) / std on the device: the wire carries a quarter of float32's bytes."""
    import torch

    mean = torch.tensor(norm["mean"], device=device).view(1, -1, 1, 1) * 255.0
    std = torch.tensor(norm["std"], device=device).view(1, -1, 1, 1) * 255.0
    return images.to(device, non_blocking=True).float().sub_(mean).div_(std)


def count_hosts(host_rows, batch, host_prep=None) -> None:
    """Add a batch's rows to the per-host totals by the host that produced them (last slot:
    unknown); with `host_prep`, only the rows whose chain time was measured, and that time."""
    import torch

    index = batch["host"].to(host_rows.device).long()
    index[index < 0] = len(host_rows) - 1
    host_rows += torch.bincount(index, minlength=len(host_rows))
    if host_prep is not None and "prep_s" in batch:
        seconds = batch["prep_s"].to(host_prep.device, dtype=host_prep.dtype)
        timed = seconds >= 0  # a worker's first batch (imports) is marked -1
        host_rows -= torch.bincount(index[~timed], minlength=len(host_rows))
        host_prep.index_add_(0, index[timed], seconds[timed])


def all_reduce(tensor, world: int):
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(tensor)
    return tensor


def validate(model, batches, task, device, host_rows, step: int, epoch: int, control, autocast) -> dict:
    """The task's metrics over the validation set, the same dict on every rank: `task.measure`'s
    per-batch means (the loss, a user's `task.evaluate`) averaged over all ranks' rows, a batch's
    mean weighed by its rows; and the whole-set metrics (`trainers.metrics`: accuracy, a user's
    `task.metrics`) updated with every row of every rank once and computed together.

    Ranks' shards may differ in batches (a shard can even be empty: a few large blocks split over
    many ranks), so nothing inside the loop may be a collective. A DDP model's forward is one: it
    broadcasts the buffers (BatchNorm statistics) from rank 0 on every call, so a rank with more
    batches waited in that broadcast while the others waited in the final all-reduce, for ever. The
    buffers are broadcast once here, before the loop, and the forward runs on the bare module (the
    EMA's average, with `trainer.ema`). The means meet on rank 0 as Python numbers
    (`control.gather`): an empty shard knows no metric names, and a user's metrics are only known by
    name once computed."""
    import torch

    from smlaunch.trainers.metrics import compute_all

    net = getattr(model, "module", model)
    if control.world > 1:
        import torch.distributed as dist

        for buffer in net.buffers():  # every rank validates with rank 0's statistics, as DDP's forward would
            dist.broadcast(buffer, 0)
    was_training = net.training
    net.eval()
    whole = {name: metric.to(device) for name, metric in task.metrics().items()}
    sums: dict[str, float] = {}
    rows = 0
    with torch.no_grad():
        for batch in batches:
            count_hosts(host_rows, batch)
            n = len(batch["id"])
            with autocast():
                means, pair = task.measure(net, task.inputs(batch, device))
            for name, value in means.items():
                sums[name] = sums.get(name, 0.0) + float(value) * n
            if pair is not None:
                for metric in whole.values():
                    metric.update(*pair)
            rows += n
    net.train(was_training)
    computed = compute_all(whole, "task.metrics")  # a collective: every rank, every metric, in order
    parts = control.gather((sums, rows), control.rank)
    result = None
    if parts is not None:
        total = sum(n for _, n in parts)
        names = list(dict.fromkeys(name for part, _ in parts for name in part))
        result = {
            "step": step,
            "epoch": epoch,
            **{name: round(value, 6) for name, value in computed.items()},
            **{name: round(sum(part.get(name, 0.0) for part, _ in parts) / max(total, 1), 5) for name in names},
            "rows": int(total),
        }
    return control.broadcast(result)
