"""The per-worker training loop run by Ray Train, with honest step timing.

Each step is timed in two parts: waiting for the next batch from Ray Data, and computing
(forward, backward, optimizer; synchronised on GPU so the clock sees the work). Their ratio is
what says whether the GPU starves. Images arrive as uint8 CHW and are normalised here, on the
worker's device.
"""

from __future__ import annotations

import json
import math
import os
import time


def train_loop(config: dict) -> dict:
    import torch
    import ray.train
    import ray.train.torch

    from smlaunch.trainers.model import create_model
    from smlaunch.trainers.stop_poll import StopPoll

    t = config["trainer"]
    torch.manual_seed(config["seed"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    model = ray.train.torch.prepare_model(
        create_model(config["model"], config["num_classes"], config["image_size"]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=t["learning_rate"], weight_decay=t["weight_decay"])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(config["total_steps"]))
    hosts = config["host_names"]
    host_rows = torch.zeros(len(hosts) + 1, dtype=torch.long)  # last slot: unknown host
    steps: list[dict] = []
    validation: list[dict] = []
    step = epoch = 0
    stop = StopPoll(world, device)
    stopped = False
    shard = ray.train.get_dataset_shard("train")
    while not stopped and not _done(t, step, epoch):
        epoch += 1
        batches = iter(shard.iter_torch_batches(batch_size=t["batch_size"], drop_last=True, prefetch_batches=2))
        model.train()
        while not (t["steps"] and step >= t["steps"]):
            start = time.perf_counter()
            batch = next(batches, None)
            waited = time.perf_counter() - start
            if batch is None:
                break
            _count_hosts(host_rows, batch["host"])
            images = _normalise(batch["image"], device, config["normalize"])
            loss = torch.nn.functional.cross_entropy(model(images), batch["label"].to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - start
            step += 1
            record = {"step": step, "epoch": epoch, "loss": round(loss.item(), 5),
                      "step_time_s": round(elapsed, 5), "data_wait_s": round(waited, 5),
                      "images_per_s": round(len(images) * world / elapsed, 2)}
            steps.append(record)
            if rank == 0 and (step % t["log_every"] == 0 or step == 1):
                print(f"step={step} loss={record['loss']:.4f} images_per_sec={record['images_per_s']:.1f} "
                      f"data_wait_pct={100 * waited / elapsed:.1f}", flush=True)
            if stop.requested():
                # Issue 6 (trainer) makes this checkpoint resumable; here it is the hook.
                _checkpoint(model, optimizer, step, epoch, rank)
                if rank == 0:
                    print(f"stopped at step={step} on request; checkpoint reported", flush=True)
                stopped = True
                break
            if t["checkpoint_interval"] and step % t["checkpoint_interval"] == 0:
                _checkpoint(model, optimizer, step, epoch, rank)
        if t["epochs"] and not stopped:
            validation.append(_validate(model, device, host_rows, step, epoch, world, config["normalize"]))
    if not t["epochs"] and not stopped:
        validation.append(_validate(model, device, host_rows, step, epoch, world, config["normalize"]))
    host_rows = _all_reduce(host_rows, world)
    if rank == 0 and not stopped:
        _save_model(model, config, step, validation[-1])
    return {"steps": steps, "validation": validation, "epochs": epoch, "stopped_at_step": step if stopped else None,
            "host_rows": {name: int(n) for name, n in zip(hosts + ["unknown"], host_rows.tolist())}}


def _warmup_cosine(total: int | None):
    """LR factor per step: linear warmup, then cosine to zero over `total` (constant if unknown)."""
    warmup = max(1, min(100, (total or 1000) // 10))

    def factor(s: int) -> float:
        ramp = min(1.0, (s + 1) / warmup)
        return ramp if not total else ramp * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))

    return factor


def _done(t: dict, step: int, epoch: int) -> bool:
    return step >= t["steps"] if t["steps"] else epoch >= t["epochs"]


def _normalise(images, device, norm: dict):
    """uint8 CHW -> (x / 255 - mean) / std on the device: the wire carries a quarter of float32's bytes."""
    import torch

    mean = torch.tensor(norm["mean"], device=device).view(1, -1, 1, 1) * 255.0
    std = torch.tensor(norm["std"], device=device).view(1, -1, 1, 1) * 255.0
    return images.to(device, non_blocking=True).float().sub_(mean).div_(std)


def _count_hosts(host_rows, host_column) -> None:
    import torch

    index = host_column.long()
    index[index < 0] = len(host_rows) - 1
    host_rows += torch.bincount(index, minlength=len(host_rows))


def _validate(model, device, host_rows, step: int, epoch: int, world: int, norm: dict) -> dict:
    import torch
    import ray.train

    model.eval()
    totals = torch.zeros(3, dtype=torch.float64)  # correct, rows, summed loss
    with torch.no_grad():
        for batch in ray.train.get_dataset_shard("validation").iter_torch_batches(batch_size=256):
            _count_hosts(host_rows, batch["host"])
            logits = model(_normalise(batch["image"], device, norm))
            labels = batch["label"].to(device)
            totals += torch.tensor([(logits.argmax(1) == labels).sum().item(), len(labels),
                                    torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()],
                                   dtype=torch.float64)
    model.train()
    correct, rows, loss = _all_reduce(totals, world).tolist()
    result = {"step": step, "epoch": epoch, "accuracy": round(correct / max(rows, 1), 5),
              "loss": round(loss / max(rows, 1), 5), "rows": int(rows)}
    print(f"validation step={step} accuracy={result['accuracy']:.4f} loss={result['loss']:.4f}", flush=True)
    return result


def _all_reduce(tensor, world: int):
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(tensor)
    return tensor


def _unwrap(model):
    return getattr(model, "module", model)


def _checkpoint(model, optimizer, step: int, epoch: int, rank: int) -> None:
    """Report a checkpoint; every rank calls `report` (a barrier), rank 0 writes the files."""
    import tempfile

    import torch
    import ray.train

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if rank == 0:
            torch.save({"model": _unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step, "epoch": epoch}, os.path.join(tmp, "state.pt"))
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        ray.train.report({"step": step}, checkpoint=checkpoint)


def _save_model(model, config: dict, step: int, final: dict) -> None:
    import torch

    model_dir = config["model_dir"]
    os.makedirs(model_dir, exist_ok=True)
    torch.save(_unwrap(model).state_dict(), os.path.join(model_dir, "model.pt"))
    card = {"model": config["model"], "num_classes": config["num_classes"],
            "input_size": [3, config["image_size"], config["image_size"]],
            "normalisation": {"input": "uint8 CHW", "x": "(x / 255 - mean) / std", **config["normalize"]},
            "steps": step,
            "final_validation": final, "config_sha256": config["config_sha256"],
            "load": f"timm.create_model({config['model']!r}, num_classes={config['num_classes']}); "
                    "model.load_state_dict(torch.load('model.pt'))"}
    with open(os.path.join(model_dir, "model.json"), "w") as f:
        json.dump(card, f, indent=2)
