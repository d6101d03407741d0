"""The loop `bench/user_loop.py` runs twice: under `sm-launch` (`trainer.loop`) and under a plain
`TorchTrainer`. Written as Ray's docs write one; it only notes when each step ended (wall clock), so
the bench reads the first step and the steady images/s the same way on both sides."""

import time


def train_func(config):
    import timm
    import torch
    import torch.nn.functional as F

    import ray.train
    import ray.train.torch

    model = ray.train.torch.prepare_model(timm.create_model("resnet10t", num_classes=10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    shard = ray.train.get_dataset_shard("train")
    ends, step = [], 0
    while step < config["steps"]:
        for batch in shard.iter_torch_batches(batch_size=config["batch_size"]):
            loss = F.cross_entropy(model(batch["image"].float() / 127.5 - 1), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            ends.append(time.time())
            ray.train.report({"step": step, "loss": loss.item()})
            if step == config["steps"]:
                break
    return {"step_ends": ends, "batch_size": config["batch_size"]}
