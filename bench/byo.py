"""Bring your own model and task: what the seam costs (issue 54).

1. **factory_ratio**: the train loop's steps/s with the model and loss given as the user's
   (`model.factory` returning a timm model, `task.loss` a cross-entropy of their own, in
   bench/byo_user.py) over the built-in path (the same timm model by `model.name`, the built-in
   classification), both through `trainers.loop.train_loop` in a one-worker `TorchTrainer` on the
   same materialised rows, as bench/train_overhead.py runs it; the two take turns (A B A B) and
   each keeps its best, so the VM's drift hits both. Goal >= 0.98.
2. **mask_ops_ratio**: the chain's rows/s on images and their masks (decode both, one random crop
   and one flip moving both, both to CHW) over the same chain on the images alone: what moving a
   mask costs, in-process on one core. And, for the same joint work, torchvision.transforms.v2
   (`tv_tensors.Image` + `tv_tensors.Mask` through `RandomResizedCrop` and `RandomHorizontalFlip`,
   decoding with torchvision.io as ours does) against ours: `tv2_ratio` is ours over theirs (>= 1:
   ours is as fast, and kept).

    python bench/byo.py [--model resnet18] [--size 64] [--batch 32] [--steps 40] [--rows 2048]

Ends with `RESULT byo factory_ratio=... mask_ops_ratio=... tv2_ratio=... goal=0.98`.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


def loop_rate(args, images, labels, tmp: str, byo: bool) -> float:
    """Steps/s of the timed steps of one `train_loop` run (built-in, or the user's factory and task)."""
    import ray
    import ray.data
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from smlaunch.cluster.plan import LocalEnvironment, build_plan
    from smlaunch.config import load_config
    from smlaunch.launcher.job.train_spec import train_spec
    from smlaunch.trainers.loop import train_loop

    model = (
        [
            f"model={{factory: 'byo_user:timm_model', params: {{name: {args.model}, num_classes: 10, "
            f"image_size: {args.size}}}}}",
            "task={loss: 'byo_user:cross_entropy', evaluate: 'byo_user:accuracy'}",
        ]
        if byo
        else [f"model.name={args.model}"]
    )
    cfg = load_config(
        ROOT / "configs" / "tiny.yaml",
        [
            *model,
            f"trainer.batch_size={args.batch}",
            f"trainer.steps={args.steps + args.warmup}",
            "trainer.checkpoint_interval=0",
            "trainer.learning_rate=0.001",
            "trainer.weight_decay=0.05",
            "trainer.resume=false",
            f"pipeline.ops.1.size={args.size}",
            f"run.dir={tmp}",
            "run.name=bench",
            "trainer.validation_every_epochs=0",
        ],
    )
    plan = build_plan(cfg, LocalEnvironment(cpus=2, gpus=0, started="t"))
    spec = dataclasses.replace(
        train_spec(cfg, plan, data_classes=10), model_dir=f"{tmp}/model", checkpoint_dir=f"{tmp}/checkpoints-{byo}"
    )
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={
            "env_vars": {"OMP_NUM_THREADS": "1", "SM_LAUNCH_CODE_DIR": str(HERE)},
            "worker_process_setup_hook": "smlaunch.cluster.worker_setup.setup",
        },
    )
    try:

        def rows(imgs, labs):
            return ray.data.from_items(
                [{"image": imgs[i].numpy(), "label": int(labs[i]), "id": i, "host": 0} for i in range(len(labs))]
            ).materialize()

        trainer = TorchTrainer(
            train_loop,
            train_loop_config=spec,
            scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=f"{tmp}/ray", name=f"bench-{byo}-{time.time_ns()}"),
            datasets={"train": rows(images, labels), "validation": rows(images[:64], labels[:64])},
        )
        steps = trainer.fit().return_value["steps"][args.warmup :]
    finally:
        ray.shutdown()
    return len(steps) / sum(s["step_time_s"] for s in steps)


def factory_ratio(args) -> float:
    import torch

    g = torch.Generator().manual_seed(0)
    n = args.batch * (args.steps + args.warmup)
    images = torch.randint(0, 256, (n, 3, args.size, args.size), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    rates: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for byo in (False, True):
                rates[byo].append(loop_rate(args, images, labels, tmp, byo))
                print(f"  {'factory + task' if byo else 'built-in      '}: {rates[byo][-1]:.2f} steps/s", flush=True)
                time.sleep(3)
    built_in, byo = max(rates[False]), max(rates[True])
    print(
        f"{args.model} {args.size}px batch {args.batch}, {args.steps} timed steps, best of {args.rounds}: built-in "
        f"{built_in:.2f} steps/s, the user's factory and task {byo:.2f}"
    )
    return byo / built_in


def samples(rows: int, side: int = 96):
    """JPEG images with PNG masks (a square of class 1), `side` px, as the segmentation job's."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    images, masks = [], []
    for _ in range(rows):
        image = rng.integers(0, 80, (side, side, 3), dtype=np.uint8)
        mask = np.zeros((side, side), np.uint8)
        top, left = (int(v) for v in rng.integers(0, side // 2, 2))
        size = side // 4
        image[top : top + size, left : left + size] = 200
        mask[top : top + size, left : left + size] = 1
        jpeg, png = io.BytesIO(), io.BytesIO()
        Image.fromarray(image).save(jpeg, format="JPEG", quality=90)
        Image.fromarray(mask).save(png, format="PNG")
        images.append(jpeg.getvalue())
        masks.append(png.getvalue())
    return np.array(images, dtype=object), np.array(masks, dtype=object)


def chain_rate(ops, batch: dict, rows: int, batch_rows: int = 64) -> float:

    from smlaunch.pipelines.ops.chain import Chain

    chain = Chain(ops, ["bench"], seed=1)
    chain({name: values[:batch_rows] for name, values in batch.items()})  # imports, warm
    started = time.perf_counter()
    for start in range(0, rows, batch_rows):
        chain({name: values[start : start + batch_rows] for name, values in batch.items()})
    return rows / (time.perf_counter() - started)


def tv2_rate(images, masks, size: int) -> float:
    """torchvision.transforms.v2 doing the same joint work, row by row as its users write it."""
    import torch
    from torchvision import tv_tensors
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms import v2

    transform = v2.Compose([v2.RandomResizedCrop(size, scale=(0.3, 1.0), antialias=True), v2.RandomHorizontalFlip()])

    def one(jpeg, png):
        image = decode_image(torch.frombuffer(bytearray(jpeg), dtype=torch.uint8), mode=ImageReadMode.RGB)
        mask = decode_image(torch.frombuffer(bytearray(png), dtype=torch.uint8), mode=ImageReadMode.GRAY)
        return transform(tv_tensors.Image(image), tv_tensors.Mask(mask))

    one(images[0], masks[0])
    started = time.perf_counter()
    for batch in range(0, len(images), 64):
        out = [one(i, m) for i, m in zip(images[batch : batch + 64], masks[batch : batch + 64], strict=False)]
        torch.stack([o[0] for o in out]), torch.stack([o[1] for o in out])
    return len(images) / (time.perf_counter() - started)


def mask_ratios(args) -> tuple[float, float]:
    import torch

    from smlaunch.config.op_specs import DecodeImage, HorizontalFlip, RandomResizedCrop, ToUint8CHW

    torch.set_num_threads(1)
    images, masks = samples(args.rows)
    ids = __import__("numpy").arange(args.rows)
    alone = [
        DecodeImage(op="decode_image"),
        RandomResizedCrop(op="random_resized_crop", size=args.size, scale=(0.3, 1.0)),
        HorizontalFlip(op="horizontal_flip"),
        ToUint8CHW(op="to_uint8_chw"),
    ]
    joint = [
        DecodeImage(op="decode_image"),
        DecodeImage(op="decode_image", field="mask", mode="L"),
        RandomResizedCrop(op="random_resized_crop", size=args.size, scale=(0.3, 1.0), masks=("mask",)),
        HorizontalFlip(op="horizontal_flip", masks=("mask",)),
        ToUint8CHW(op="to_uint8_chw"),
        ToUint8CHW(op="to_uint8_chw", field="mask"),
    ]
    rates = {"alone": [], "joint": [], "tv2": []}
    for _ in range(3):  # in turns, best of 3 each
        rates["alone"].append(chain_rate(alone, {"image": images, "id": ids}, args.rows))
        rates["joint"].append(chain_rate(joint, {"image": images, "mask": masks, "id": ids}, args.rows))
        rates["tv2"].append(tv2_rate(images, masks, args.size))
    best = {k: max(v) for k, v in rates.items()}
    print(
        f"chain on {args.rows} rows of 96 px, crop {args.size}, one core: images alone {best['alone']:.0f} rows/s, "
        f"images + masks {best['joint']:.0f} rows/s; torchvision.transforms.v2 with tv_tensors.Mask "
        f"{best['tv2']:.0f} rows/s"
    )
    return best["joint"] / best["alone"], best["joint"] / best["tv2"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=2048)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    sys.path.insert(0, str(HERE))  # byo_user, as the workers find it (SM_LAUNCH_CODE_DIR)
    mask, tv2 = mask_ratios(args)
    factory = factory_ratio(args)
    report_result(f"RESULT byo factory_ratio={factory:.3f} mask_ops_ratio={mask:.3f} tv2_ratio={tv2:.2f} goal=0.98")
    return 0


if __name__ == "__main__":
    sys.exit(main())
