"""The reference job of `bench/startup.py`: configs/hetero.yaml's shape written with Ray alone, as
plainly as Ray's docs write it. A head that trains and a data node, two local Ray nodes labelled
`ray-subcluster=train|data`; the digits' 1,437 training images as PNG bytes, decoded by a
`map_batches` pinned to the data node by label; a `TorchTrainer` with one CPU worker building
timm's resnet10t and taking 20 SGD steps of 64 images.

It prints one JSON line: `cluster_up_s`, `train_workers_up_s`, `model_built_s`, `first_batch_s`,
`first_step_s`, `last_step_s`, seconds after this
process was created (so Python's start and the imports count, as they do for `sm-launch`). Not a
script of its own (`make bench` runs `startup.py`, which runs this in a fresh process):

    PYTHONPATH=bench python -c "import ray_reference_job; ray_reference_job.main()"
"""

from __future__ import annotations

import io
import json
import time

STEPS = 20
LABELS = {"train": {"ray-subcluster": "train"}, "data": {"ray-subcluster": "data"}}


def digits_png_rows() -> list[dict]:
    """scikit-learn's digits, the split configs/hetero.yaml trains on (80 %, stratified), as 32x32 PNGs."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    train, _ = train_test_split(np.arange(len(digits.target)), test_size=0.2, random_state=0, stratify=digits.target)
    rows = []
    for i in train:
        pixels = (digits.images[i] * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels, mode="L").resize((32, 32)).save(buf, format="PNG")
        rows.append({"png": buf.getvalue(), "label": int(digits.target[i])})
    return rows


def decode(batch: dict) -> dict:
    import numpy as np
    from PIL import Image

    images = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in batch["png"]]
    return {"image": np.stack(images).transpose(0, 3, 1, 2).copy(), "label": batch["label"]}


def train_loop(config: dict) -> dict:
    marks = {"train_workers_up_s": time.time() - config["t0"]}
    import ray.train
    import timm
    import torch
    import torch.nn.functional as F

    model = timm.create_model("resnet10t", num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    marks["model_built_s"] = time.time() - config["t0"]
    shard = ray.train.get_dataset_shard("train")
    for step, batch in enumerate(shard.iter_torch_batches(batch_size=64), start=1):
        marks.setdefault("first_batch_s", time.time() - config["t0"])
        loss = F.cross_entropy(model(batch["image"].float() / 127.5 - 1), batch["label"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        marks.setdefault("first_step_s", time.time() - config["t0"])
        marks["last_step_s"] = time.time() - config["t0"]
        if step == STEPS:
            break
    return marks


def main() -> None:
    import psutil

    t0 = psutil.Process().create_time()
    import ray
    from ray.cluster_utils import Cluster
    from ray.data import ExecutionOptions
    from ray.train import DataConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "labels": LABELS["train"], "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1, labels=LABELS["data"])
    ray.init(address=cluster.address)
    cluster_up_s = time.time() - t0
    ds = ray.data.from_items(digits_png_rows()).map_batches(decode, batch_size=64, label_selector=LABELS["data"])
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"t0": t0},
        scaling_config=ScalingConfig(num_workers=1, label_selector=LABELS["train"]),
        datasets={"train": ds},
        dataset_config=DataConfig(execution_options={"train": ExecutionOptions(label_selector=LABELS["data"])}),
    )
    marks = trainer.fit().return_value
    print(
        json.dumps({"cluster_up_s": round(cluster_up_s, 2), **{k: round(v, 2) for k, v in marks.items()}}), flush=True
    )
    ray.shutdown()
    cluster.shutdown()
