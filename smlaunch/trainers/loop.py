"""The per-worker training loop run by Ray Train, with honest step timing and resumable state.

Each optimizer step is timed in two parts: waiting for the next batch(es) from Ray Data, and
computing (forward, backward, optimizer; synchronised on GPU so the clock sees the work). Their
ratio is what says whether the GPU starves. Images arrive as uint8 CHW and are normalised here,
on the worker's device.

State resumes from, in order: the checkpoint Ray Train hands a restarted worker group (a worker
crashed; `FailureConfig`) or a newer complete one of the same run that it had not registered yet,
or the newest complete checkpoint of an earlier run found by the
driver (`config["resume_from"]`). The data position is the epoch and the batches already taken
from it; on resume those batches are drawn and skipped, so the epoch keeps its length.
"""

from __future__ import annotations

import contextlib
import tempfile
import time


def train_loop(config: dict) -> dict:
    import torch
    import ray.train
    import ray.train.torch

    from smlaunch.cluster.board import Outbox
    from smlaunch.pipelines.host_loss import LostHostGuard
    from smlaunch.trainers.accounting import Accountant, EpochIds, gather
    from smlaunch.trainers.evaluate import all_reduce, count_hosts, normalise, validate
    from smlaunch.trainers.model import create_model
    from smlaunch.trainers.optim import build_optimizer, build_schedule
    from smlaunch.trainers.stop_poll import StopPoll

    # A restart after a Pipe or ShardedByS3Key host was lost fails at once, before building a model.
    guard = LostHostGuard(config.get("fragile_channels", []))
    guard.check(force=True)
    t = config["trainer"]
    torch.manual_seed(config["seed"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    raw_model = create_model(config["model"], config["num_classes"], config["image_size"])
    optimizer = build_optimizer(raw_model, t)
    schedule = build_schedule(optimizer, t, config["total_steps"])
    state, resumed = _resume_state(config)
    step = epochs_done = position = 0
    outbox = Outbox(enabled=rank == 0)  # the launcher's console: progress, metric lines, notes
    if state is not None:
        raw_model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["scheduler"])
        step, epochs_done, position = state["step"], state["epochs_done"], state["position"]
        outbox.put("resumed", step=step, text=f"resumed from {resumed} at step {step}, epoch {epochs_done + 1}, "
                                              f"batch {position}")
    model = ray.train.torch.prepare_model(raw_model)
    autocast = _autocast(t["precision"], device)
    accum = t["grad_accum_steps"]
    hosts = config["host_names"]
    host_rows = torch.zeros(len(hosts) + 1, dtype=torch.long, device=device)  # last slot: unknown host
    train_rows = torch.zeros_like(host_rows)
    train_prep = torch.zeros(len(hosts) + 1, dtype=torch.float64, device=device)  # chain seconds, train rows
    steps: list[dict] = []
    validation: list[dict] = []
    stop = StopPoll(world, device)
    stopped = False
    shard = ray.train.get_dataset_shard("train")
    save = _Saver(config, rank, raw_model, optimizer, schedule)
    seen, books = EpochIds(), Accountant("train", config.get("epoch_rows"), world)
    resumed_at = position
    while not stopped and not _done(t, step, epochs_done):
        # On GPU, batches are pinned and copied to the device while the previous step computes.
        # The last batch of an epoch may be partial: its ids are counted, it is not trained on.
        batches = _full_batches(shard.iter_torch_batches(
            batch_size=t["batch_size"], drop_last=False, device=device, prefetch_batches=t["prefetch_batches"],
            pin_memory=device.type == "cuda"), t["batch_size"], seen)
        for _ in range(position):  # the data position of a resumed epoch
            skipped = next(batches, None)
            if skipped is not None:
                seen.add(skipped["id"], skipped=True)
        model.train()
        exhausted = False
        while not exhausted and not (t["steps"] and step >= t["steps"]):
            start = time.perf_counter()
            waited, images_seen, losses = 0.0, 0, []
            for micro in range(accum):
                before = time.perf_counter()
                batch = next(batches, None)
                waited += time.perf_counter() - before
                if batch is None:
                    exhausted = True
                    break
                position += 1
                seen.add(batch["id"])
                count_hosts(host_rows, batch)
                count_hosts(train_rows, batch, train_prep)
                sync = micro == accum - 1 or world == 1
                with (contextlib.nullcontext() if sync else model.no_sync()), autocast():
                    loss = torch.nn.functional.cross_entropy(
                        model(normalise(batch["image"], device, config["normalize"])).float(),
                        batch["label"].to(device))
                (loss / accum).backward()
                losses.append(loss.detach())
                images_seen += len(batch["label"])
            if exhausted:  # a partial accumulation at the epoch's end is dropped, on every rank alike
                optimizer.zero_grad(set_to_none=True)
                break
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - start
            step += 1
            loss_value = torch.stack(losses).mean().item()
            record = {"step": step, "t": round(time.time(), 3), "epoch": epochs_done + 1, "loss": round(loss_value, 5),
                      "step_time_s": round(elapsed, 5), "data_wait_s": round(waited, 5),
                      "images_per_s": round(images_seen * world / elapsed, 2)}
            steps.append(record)
            outbox.put("step", **record)
            guard.check()
            if stop.requested():
                guard.check(force=True)
                save(step, epochs_done, position, record)
                outbox.put("note", text=f"stopped at step {step} on request; checkpoint written")
                stopped = True
                break
            if t["checkpoint_interval"] and step % t["checkpoint_interval"] == 0:
                guard.check(force=True)
                save(step, epochs_done, position, record)
        if exhausted:
            if position < accum:  # no step in this epoch, nor in any after it: stop instead of looping
                from smlaunch.errors import DataError
                from smlaunch.text import plural

                raise DataError(f"channel 'train': epoch {epochs_done + 1} gave this worker "
                                f"{plural(position, 'full batch', 'full batches')} of trainer.batch_size="
                                f"{t['batch_size']}, fewer than the {accum} a step "
                                "needs; the channel is empty or too small (an empty Pipe FIFO?)")
            guard.check(force=True)  # an epoch a lost host cut short must not pass for a whole one
            books.close_epoch(gather(*seen.take(), world, rank), epochs_done + 1, True, resumed_at)
            epochs_done, position, resumed_at = epochs_done + 1, 0, 0
            if t["epochs"] or t["validation_every_epochs"] and epochs_done % t["validation_every_epochs"] == 0:
                validation.append(validate(model, device, host_rows, step, epochs_done, world,
                                           config["normalize"], autocast))
                outbox.put("validation", **validation[-1])
    if position:  # the epoch the step count (or a stop) cut short
        books.close_epoch(gather(*seen.take(), world, rank), epochs_done + 1, False, resumed_at)
    if not stopped:
        if not validation or validation[-1]["step"] != step:
            validation.append(validate(model, device, host_rows, step, epochs_done + (position > 0), world,
                                       config["normalize"], autocast))
            outbox.put("validation", **validation[-1])
        if not t["checkpoint_interval"] or step % t["checkpoint_interval"]:
            guard.check(force=True)
            save(step, epochs_done, position, steps[-1] if steps else {})
        if rank == 0:
            from smlaunch.trainers.export import save_model

            save_model(raw_model, config, step, {"loss": steps[-1]["loss"] if steps else None,
                                                 "validation": validation[-1]})
    host_rows, train_rows, train_prep = (all_reduce(x, world) for x in (host_rows, train_rows, train_prep))
    outbox.flush(wait=True)
    # One way of counting epochs everywhere: the 1-based epoch a step belongs to. The run ends in
    # epoch `epoch`, which is complete unless the step count or a stop cut it short.
    return {"steps": steps, "validation": validation, "epochs": epochs_done + (position > 0),
            "epochs_complete": epochs_done, "final_step": step,
            "stopped_at_step": step if stopped else None, "resumed_from": resumed,
            "resumed_at_step": state["step"] if state is not None else None,
            "sample_accounting": books.report(),
            "host_rows": {name: int(n) for name, n in zip(hosts + ["unknown"], host_rows.tolist())},
            "chain_by_host": {name: {"train_rows": int(n), "chain_s": round(sec, 4)}
                              for name, n, sec in zip(hosts + ["unknown"], train_rows.tolist(), train_prep.tolist())
                              if n}}


def _full_batches(batches, batch_size: int, seen):
    """Full batches only; a final partial one is counted in `seen` (delivered, not trained on). The
    source is drawn to its end, so the epoch ends for Ray Data as it did with `drop_last`."""
    for batch in batches:
        if len(batch["id"]) < batch_size:
            seen.add(batch["id"], partial=True)
            continue
        yield batch


def _resume_state(config: dict) -> tuple[dict | None, str | None]:
    import ray.train

    from smlaunch.trainers.checkpoints import load_state

    restarted = ray.train.get_checkpoint()  # this fit restarted after a worker failed
    if restarted is not None:
        newer = _same_on_every_rank(_newer_complete(restarted.path))
        if newer is not None:
            return load_state(newer), f"the last checkpoint of this run ({newer})"
        with restarted.as_directory() as directory:
            return load_state(directory), f"the last checkpoint of this run ({restarted.path})"
    if config.get("resume_from"):
        return load_state(config["resume_from"]), config["resume_from"]
    return None, None


def _newer_complete(registered: str) -> str | None:
    """A complete checkpoint of this run newer than the one Ray Train registered, if any.

    Ray Train registers a reported checkpoint after the report returns; a worker killed in
    between left a complete `step-N` (meta.json and hash checked) that the restarted group is not
    handed. Resuming from the registered one would redo two intervals instead of at most one
    (seen in tests/reliability/test_train_failures.py: killed after step 20, handed step 10)."""
    from pathlib import Path

    from smlaunch.trainers.checkpoints import is_complete

    registered = Path(registered)
    if not registered.parent.is_dir():
        return None
    for candidate in sorted(registered.parent.glob("step-*"), reverse=True):
        if candidate.name <= registered.name:
            return None
        if is_complete(candidate):
            return str(candidate)
    return None


def _same_on_every_rank(value):
    """Rank 0's answer on every rank, so all ranks load one state even if their disks differ."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    import ray.train.torch

    box = [value]
    device = ray.train.torch.get_device() if dist.get_backend() == "nccl" else None
    dist.broadcast_object_list(box, src=0, device=device)
    return box[0]


class _Saver:
    """Report a checkpoint: every rank calls `ray.train.report` (a barrier), rank 0 writes the files."""

    def __init__(self, config, rank, model, optimizer, schedule):
        self.config, self.rank = config, rank
        self.model, self.optimizer, self.schedule = model, optimizer, schedule

    def __call__(self, step: int, epochs_done: int, position: int, record: dict) -> None:
        import ray.train

        from smlaunch.trainers.checkpoints import checkpoint_name, write_state

        metrics = {"step": step, "loss": record.get("loss")}
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if self.rank == 0:
                write_state(tmp, {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                                  "scheduler": self.schedule.state_dict(), "step": step, "epoch": epochs_done + 1,
                                  "epochs_done": epochs_done, "position": position,
                                  "config_sha256": self.config["config_sha256"]})
                checkpoint = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=checkpoint, checkpoint_dir_name=checkpoint_name(step))


def _autocast(precision: str, device):
    """bf16 autocast on GPU ('auto' or 'bf16'); plain fp32 otherwise."""
    import torch

    if device.type == "cuda" and precision in ("auto", "bf16"):
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def _done(t: dict, step: int, epochs_done: int) -> bool:
    return step >= t["steps"] if t["steps"] else epochs_done >= t["epochs"]
