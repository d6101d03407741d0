"""Training-loop overhead: the project's loop through Ray Train vs a plain PyTorch loop (benchmark 6).

Both train the same timm model on the same materialised tensors (uint8 CHW images and labels, made
once), in one process each, with the same threads, optimizer and batch size:

- **plain**: a `for` loop over the tensors: normalise, forward, backward, AdamW step.
- **ray**: `smlaunch.trainers.loop.train_loop` in a `TorchTrainer` with one worker, reading the
  same rows from a materialised Ray Dataset through `iter_torch_batches`, as a real run does
  (host counting, step timing, stop polling, prefetch) but with no checkpoints.

Steps/s is measured inside each loop over the steps after `--warmup` (a step's time includes
fetching its batch), so process and cluster start-up are not counted, only the per-step cost.
The plain loop runs before and after the Ray run and the two are averaged: on a small shared VM
the speed of the same loop drifts by tens of percent from minute to minute.

    python bench/train_overhead.py [--model resnet18] [--size 64] [--batch 32] [--steps 60]

Ends with `RESULT train_overhead ratio=<ray steps/s over plain steps/s> goal=0.95`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]


def tensors(args):
    import torch

    g = torch.Generator().manual_seed(0)
    n = args.batch * (args.steps + args.warmup)
    return (
        torch.randint(0, 256, (n, 3, args.size, args.size), dtype=torch.uint8, generator=g),
        torch.randint(0, 10, (n,), generator=g),
    )


def plain(args, images, labels) -> float:
    import torch

    from smlaunch.trainers.evaluate import normalise
    from smlaunch.trainers.model import create_model

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = create_model(args.model, 10, args.size).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    norm = {"mean": [0.5] * 3, "std": [0.5] * 3}
    times = []
    for i in range(args.steps + args.warmup):
        start = time.perf_counter()
        x, y = images[i * args.batch : (i + 1) * args.batch], labels[i * args.batch : (i + 1) * args.batch]
        loss = torch.nn.functional.cross_entropy(model(normalise(x, torch.device("cpu"), norm)), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return len(times[args.warmup :]) / sum(times[args.warmup :])


def through_ray(args, images, labels, tmp: str) -> float:
    import dataclasses

    import ray
    import ray.data
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from smlaunch.cluster.plan import LocalEnvironment, build_plan
    from smlaunch.config import load_config
    from smlaunch.launcher.job.train_spec import train_spec
    from smlaunch.trainers.loop import train_loop

    cfg = load_config(
        ROOT / "configs" / "tiny.yaml",
        [
            f"model.name={args.model}",
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
    spec = dataclasses.replace(train_spec(cfg, plan), model_dir=f"{tmp}/model", checkpoint_dir=f"{tmp}/checkpoints")
    ray.init(
        num_cpus=args.threads + 1,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={
            "env_vars": {"OMP_NUM_THREADS": str(args.threads)},
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
            scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": args.threads}),
            run_config=RunConfig(storage_path=f"{tmp}/ray", name="bench"),
            datasets={"train": rows(images, labels), "validation": rows(images[:64], labels[:64])},
        )
        steps = trainer.fit().return_value["steps"][args.warmup :]
    finally:
        ray.shutdown()
    total = sum(s["step_time_s"] for s in steps)
    print(f"ray: batch wait {100 * sum(s['data_wait_s'] for s in steps) / total:.1f} % of step time")
    return len(steps) / total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    images, labels = tensors(args)
    before = plain(args, images, labels)
    with tempfile.TemporaryDirectory() as tmp:
        ray_rate = through_ray(args, images, labels, tmp)
    time.sleep(5)  # let the Ray processes finish exiting before the second plain run
    after = plain(args, images, labels)
    plain_rate = (before + after) / 2  # plain runs bracket the Ray run: machine drift averages out
    print(f"plain runs before and after: {before:.2f} and {after:.2f} steps/s")
    print(
        f"{args.model} {args.size}px batch {args.batch}, {args.threads} thread{'' if args.threads == 1 else 's'}, "
        f"{args.steps} timed steps, "
        f"CPU ({os.cpu_count()} cores)"
    )
    print(f"plain PyTorch loop: {plain_rate:.2f} steps/s")
    print(f"smlaunch loop in Ray Train: {ray_rate:.2f} steps/s")
    report_result(f"RESULT train_overhead ratio={ray_rate / plain_rate:.2f} goal=0.95")
    return 0


if __name__ == "__main__":
    sys.exit(main())
