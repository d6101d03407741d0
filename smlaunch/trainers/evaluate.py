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


def validate(model, batches, device, host_rows, step: int, epoch: int, world: int, norm: dict, autocast) -> dict:
    """Accuracy and mean loss over this rank's validation shard (`batches`), summed over ranks.

    Ranks' shards may differ in batches (a shard can even be empty: a few large blocks split over
    many ranks), so nothing inside the loop may be a collective. A DDP model's forward is one: it
    broadcasts the buffers (BatchNorm statistics) from rank 0 on every call, so a rank with more
    batches waited in that broadcast while the others waited in the final all-reduce, for ever. The
    buffers are broadcast once here, before the loop, and the forward runs on the wrapped module."""
    import torch

    net = getattr(model, "module", model)
    if world > 1:
        import torch.distributed as dist

        for buffer in net.buffers():  # every rank validates with rank 0's statistics, as DDP's forward would
            dist.broadcast(buffer, 0)
    net.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # correct, rows, summed loss (NCCL: on device)
    with torch.no_grad():
        for batch in batches:
            count_hosts(host_rows, batch)
            with autocast():
                logits = net(normalise(batch["image"], device, norm)).float()
            labels = batch["label"].to(device)
            totals += torch.stack([(logits.argmax(1) == labels).sum().double(),
                                   torch.tensor(float(len(labels)), dtype=torch.float64, device=device),
                                   torch.nn.functional.cross_entropy(logits, labels, reduction="sum").double()])
    net.train()
    correct, rows, loss = all_reduce(totals, world).tolist()
    return {"step": step, "epoch": epoch, "accuracy": round(correct / max(rows, 1), 5),
            "loss": round(loss / max(rows, 1), 5), "rows": int(rows)}
