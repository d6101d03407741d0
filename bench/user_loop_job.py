"""The loop `bench/user_loop.py` runs twice: under `sm-launch` (`trainer.loop`) and under a plain
`TorchTrainer`. Written as Ray's docs write one; it only notes when each step ended (wall clock), so
the bench reads the first step, the steady images/s and the data wait the same way on both sides."""

import time


def train_func(config):
    import ray.train
    import ray.train.torch
    import timm
    import torch
    import torch.nn.functional as F

    model = ray.train.torch.prepare_model(timm.create_model("resnet10t", num_classes=10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    shard = ray.train.get_dataset_shard("train")
    ends, waits, step = [], [], 0
    while step < config["steps"]:
        asked = time.time()
        for batch in shard.iter_torch_batches(batch_size=config["batch_size"]):
            waits.append(time.time() - asked)
            loss = F.cross_entropy(model(batch["image"].float() / 127.5 - 1), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            ends.append(time.time())
            ray.train.report({"step": step, "loss": loss.item()})
            if step == config["steps"]:
                break
            asked = time.time()
    return {"step_ends": ends, "waits": waits, "batch_size": config["batch_size"], "threads": torch.get_num_threads()}
