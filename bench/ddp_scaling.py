"""DDP scaling of CPU stand-in workers on one host (issue 20's benchmark).

The project's own loop (`smlaunch.trainers.loop.train_loop` in a `TorchTrainer`, as a run uses
it) trains the same timm model on the same in-memory rows with 1, 2 and 4 workers at the same
*global* batch (per-worker batch = global / workers), one CPU thread per worker, gloo backend.
Data comes from a materialised Ray Dataset, so what changes between the runs is only the number of
ranks: each computes a smaller batch, and every step ends with the gradient all-reduce.

- **images/s** over the steps after `--warmup` (the loop's own step records: images of all ranks
  over the mean rank's step time);
- **efficiency_N** = images/s with N workers / (N x images/s with 1): 1.0 is perfect scaling;
- **allreduce share**: what the gradient all-reduce adds to a step, measured separately in the same
  worker group: alternating steps with DDP's sync and without it (`no_sync`), same batch; the
  difference over the synced step's time is the part of a step the all-reduce costs beyond what
  overlaps with the backward pass.

The number of workers that fit is this machine's cores: beyond them the stand-ins share cores and
efficiency says more about the machine than about DDP. Real multi-GPU NCCL scaling (NVLink, EFA)
cannot be measured on the machines this project has (one GPU at most); see BENCHMARKS.md.

    python bench/ddp_scaling.py [--model resnet18] [--size 64] [--global-batch 64] [--workers 1 2 4]

Ends with `RESULT ddp_scaling efficiency_2=<x> efficiency_4=<y> allreduce_share_2=<z> goal=0.8`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]


def sync_cost(config: dict) -> dict:
    """Per rank: mean seconds of a DDP step with gradient sync and of one without (`no_sync`)."""
    import ray.train
    import ray.train.torch
    import torch

    from smlaunch.trainers.evaluate import normalise
    from smlaunch.trainers.model import create_model

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(create_model(config["model"], 10, config["size"]).train())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(ray.train.get_context().get_world_rank())
    x = torch.randint(0, 256, (config["batch"], 3, config["size"], config["size"]), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 10, (config["batch"],), generator=g)
    norm = {"mean": [0.5] * 3, "std": [0.5] * 3}
    times = {"sync": [], "no_sync": []}
    for i in range(2 * (config["steps"] + config["warmup"])):
        kind = "sync" if i % 2 else "no_sync"
        torch.distributed.barrier()  # each step starts together, as in training
        start = time.perf_counter()
        with model.no_sync() if kind == "no_sync" else torch.enable_grad():
            loss = torch.nn.functional.cross_entropy(model(normalise(x, torch.device("cpu"), norm)), y)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= 2 * config["warmup"]:
            times[kind].append(time.perf_counter() - start)
    return {kind: sum(t) / len(t) for kind, t in times.items()}


def run(args, workers: int, images, labels, tmp: str) -> tuple[float, float | None]:
    """images/s of the project's loop with `workers` ranks, and the all-reduce share of a step."""
    import ray
    import ray.data
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from smlaunch.cluster.plan import LocalEnvironment, build_plan
    from smlaunch.config import load_config
    from smlaunch.launcher.job.train_spec import train_spec
    from smlaunch.trainers.loop import train_loop

    batch = args.global_batch // workers
    cfg = load_config(
        ROOT / "configs" / "tiny.yaml",
        [
            f"model.name={args.model}",
            f"trainer.batch_size={batch}",
            f"trainer.steps={args.steps + args.warmup}",
            "trainer.checkpoint_interval=0",
            "trainer.learning_rate=0.001",
            "trainer.weight_decay=0.05",
            "trainer.resume=false",
            f"pipeline.ops.1.size={args.size}",
            f"run.dir={tmp}",
            f"run.name=w{workers}",
            "trainer.validation_every_epochs=0",
            f"cluster.instance_groups.0.gpus={workers}",
        ],
    )
    plan = build_plan(cfg, LocalEnvironment(cpus=os.cpu_count() or 2, gpus=0, started="t"))
    assert len(plan.workers) == workers, plan.workers
    spec = dataclasses.replace(
        train_spec(cfg, plan), model_dir=f"{tmp}/w{workers}/model", checkpoint_dir=f"{tmp}/w{workers}/checkpoints"
    )
    ray.init(
        num_cpus=workers + 1,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={
            "env_vars": {"OMP_NUM_THREADS": "1"},
            "worker_process_setup_hook": "smlaunch.cluster.worker_setup.setup",
        },
    )
    try:

        def rows(imgs, labs):
            return ray.data.from_items(
                [{"image": imgs[i].numpy(), "label": int(labs[i]), "id": i, "host": 0} for i in range(len(labs))]
            ).materialize()

        scaling = ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 1})
        trainer = TorchTrainer(
            train_loop,
            train_loop_config=spec,
            scaling_config=scaling,
            run_config=RunConfig(storage_path=f"{tmp}/ray", name=f"loop-{workers}"),
            datasets={"train": rows(images, labels), "validation": rows(images[:64], labels[:64])},
        )
        steps = trainer.fit().return_value["steps"][args.warmup :]
        share = None
        if workers > 1:
            config = {"model": args.model, "size": args.size, "batch": batch, "steps": args.steps // 2, "warmup": 2}
            probe = TorchTrainer(
                sync_cost,
                train_loop_config=config,
                scaling_config=scaling,
                run_config=RunConfig(storage_path=f"{tmp}/ray", name=f"sync-{workers}"),
            )
            cost = probe.fit().return_value
            share = max(cost["sync"] - cost["no_sync"], 0.0) / cost["sync"]
    finally:
        ray.shutdown()
    images_per_s = sum(s["images_per_s"] * s["step_time_s"] for s in steps) / sum(s["step_time_s"] for s in steps)
    return images_per_s, share


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    if 1 not in args.workers or any(args.global_batch % n for n in args.workers):
        parser.error("--workers must include 1 and divide --global-batch")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import torch
    from tqdm import tqdm

    g = torch.Generator().manual_seed(0)
    n = args.global_batch * (args.steps + args.warmup + 1)
    images = torch.randint(0, 256, (n, 3, args.size, args.size), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in tqdm(args.workers, desc="worker counts", unit="run"):
            results[workers] = run(args, workers, images, labels, tmp)
            time.sleep(3)  # let the previous cluster's processes exit
    cores = os.cpu_count()
    print(
        f"{args.model} {args.size}px, global batch {args.global_batch}, {args.steps} timed steps, "
        f"one thread per worker, gloo, CPU ({cores} cores)"
    )
    print(f"{'workers':>7} {'batch/worker':>12} {'images/s':>9} {'efficiency':>10} {'allreduce share':>15}")
    base = results[1][0]
    metrics = {}
    for workers, (rate, share) in results.items():
        efficiency = rate / (workers * base)
        note = "  (more workers than cores: they share)" if cores and workers > cores else ""
        print(
            f"{workers:>7} {args.global_batch // workers:>12} {rate:>9.1f} {efficiency:>10.2f} "
            f"{'-' if share is None else f'{100 * share:.1f} %':>15}{note}"
        )
        if workers > 1:
            metrics[f"efficiency_{workers}"] = f"{efficiency:.2f}"
            metrics[f"allreduce_share_{workers}"] = f"{share:.2f}"
    report_result("RESULT ddp_scaling " + " ".join(f"{k}={v}" for k, v in sorted(metrics.items())) + " goal=0.8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
