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


def validate(model, device, host_rows, step: int, epoch: int, world: int, norm: dict, autocast) -> dict:
    """Accuracy and mean loss over this rank's validation shard, summed over ranks."""
    import torch
    import ray.train

    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # correct, rows, summed loss (NCCL: on device)
    with torch.no_grad():
        for batch in ray.train.get_dataset_shard("validation").iter_torch_batches(
                batch_size=256, device=device, pin_memory=device.type == "cuda"):
            count_hosts(host_rows, batch)
            with autocast():
                logits = model(normalise(batch["image"], device, norm)).float()
            labels = batch["label"].to(device)
            totals += torch.stack([(logits.argmax(1) == labels).sum().double(),
                                   torch.tensor(float(len(labels)), dtype=torch.float64, device=device),
                                   torch.nn.functional.cross_entropy(logits, labels, reduction="sum").double()])
    model.train()
    correct, rows, loss = all_reduce(totals, world).tolist()
    return {"step": step, "epoch": epoch, "accuracy": round(correct / max(rows, 1), 5),
            "loss": round(loss / max(rows, 1), 5), "rows": int(rows)}
