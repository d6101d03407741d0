"""A user's Ray Train loop, written as Ray's documentation writes one (no sm-launch import): the
"train" shard through `iter_torch_batches`, `prepare_model`, a checkpoint through `ray.train.report`,
`get_checkpoint` to resume, and `get_preemption_info` to checkpoint before a spot node goes."""

import json
import os
import tempfile
import time

import ray.train
import ray.train.torch
import torch
import torch.nn.functional as F
from ray.train import Checkpoint


def train_func(config):
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    )
    model = ray.train.torch.prepare_model(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    rank = ray.train.get_context().get_world_rank()

    step, epoch = 0, 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, "state.pt"), weights_only=True)
        getattr(model, "module", model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, epoch = state["step"], state["epoch"]
    if config.get("start_file") and rank == 0:
        with open(config["start_file"], "w") as out:
            json.dump({"step": step, "resumed": checkpoint is not None}, out)

    def save(metrics):
        with tempfile.TemporaryDirectory() as folder:
            saved = None
            if rank == 0:
                torch.save(
                    {
                        "model": getattr(model, "module", model).state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "step": step,
                        "epoch": epoch,
                    },
                    os.path.join(folder, "state.pt"),
                )
                saved = Checkpoint.from_directory(folder)
            ray.train.report(metrics, checkpoint=saved)

    shard = ray.train.get_dataset_shard("train")
    seen, last_none = [], None
    while step < config["steps"]:
        for batch in shard.iter_torch_batches(batch_size=config["batch_size"]):
            images = batch["image"].float() / 255.0
            loss = F.cross_entropy(model(images), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            seen.append(sorted(batch.keys()))
            time.sleep(config.get("sleep_s", 0))
            metrics = {"step": step, "loss": loss.item(), "epoch": epoch}
            asked_at = time.time()
            preempted = ray.train.get_preemption_info()
            if preempted is None:
                last_none = asked_at
            else:
                if config.get("notice_file") and rank == 0:
                    with open(config["notice_file"], "w") as out:
                        json.dump(
                            {"step": step, "t": asked_at, "last_none": last_none, "ranks": preempted.preempted_ranks},
                            out,
                        )
                save(metrics)
                return {"preempted_at": step}
            if step % config["checkpoint_every"] == 0 or step >= config["steps"]:
                save(metrics)
            else:
                ray.train.report(metrics)
            if step == config.get("raise_at_step"):
                raise ValueError(f"the user's loop gave up at step {step}")
            if step >= config["steps"]:
                break
        epoch += 1
    return {"steps": step, "fields": seen[0] if seen else None, "resumed": checkpoint is not None}
