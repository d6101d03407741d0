"""The seed workload on a GPU: the GPU host alone vs the GPU host plus a simulated CPU host (5c).

`configs/seed-vit-blur.yaml` (ViT-S/16 on 224 px images, ten 11x11 Gaussian blurs per image) runs
twice on this machine, each host capped at its instance type's CPUs as far as the machine has
them:

- **alone**: only the ml.g5.xlarge group (4 vCPUs): the chain runs on the GPU host's own 4 CPUs,
  beside the trainer, as a job without CPU hosts does;
- **offload**: the same GPU host (4 CPUs) plus the ml.c5.4xlarge data host (16 vCPUs, or what
  this machine has left): the chain runs on the data host only.

Both train the same steps; the steady images/s and the data wait come from the run reports, the
GPU's name from torch. On a machine without a GPU the trainer runs on the CPU and the numbers say
nothing about starvation; the script still runs, 3 steps by default there, so `make bench` stays
runnable everywhere.

    python bench/seed_workload.py [--steps N (120 on a GPU, 3 without)] [--data-cpus N] [--keep DIR]

Ends with `RESULT seed_workload speedup=<offload/alone images/s> data_wait_pct=<offload> goal=2.2/5`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
GPU_HOST_CPUS = 4  # ml.g5.xlarge


def plan_for(tmp: Path, name: str, offload: bool, steps: int, data_cpus: int):
    from smlaunch.cluster.environment import detect_local_environment
    from smlaunch.cluster.plan import build_plan
    from smlaunch.config import load_config

    sets = [
        f"run.dir={tmp}",
        f"run.name={name}",
        f"trainer.steps={steps}",
        "trainer.checkpoint_interval=0",
        "trainer.validation_every_epochs=0",
        "trainer.resume=false",
    ]
    if not offload:
        sets += [
            "cluster.instance_groups=[{name: train_group, instance_type: ml.g5.xlarge, instance_count: 1}]",
            "channels.train.instance_groups=[train_group]",
            "channels.validation.instance_groups=[train_group]",
        ]
    cfg = load_config(ROOT / "configs" / "seed-vit-blur.yaml", sets)
    plan = build_plan(cfg, detect_local_environment())
    caps = {"train": min(GPU_HOST_CPUS, os.cpu_count() or 1), "data": data_cpus}
    hosts = tuple(dataclasses.replace(h, num_cpus=caps[h.subcluster]) for h in plan.hosts)
    return cfg, dataclasses.replace(plan, hosts=hosts)


def run(tmp: Path, name: str, offload: bool, args) -> dict:
    """One job in a process of its own: Ray reads its auth token once per process, so a second
    simulated cluster in the same process would be refused."""
    import json
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--only",
            name,
            "--dir",
            str(tmp),
            "--steps",
            str(args.steps),
            "--data-cpus",
            str(args.data_cpus),
        ],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    print(
        f"{name}: images_per_s={summary['images_per_s']} data_wait_pct={summary['data_wait_pct']} "
        f"verdict={summary['verdict']} train_gpu_pct={summary['train_gpu_pct']} "
        f"data_cpu_pct={summary['data_cpu_pct']}",
        flush=True,
    )
    return summary


def run_here(tmp: Path, name: str, args) -> None:
    import json

    from smlaunch import console
    from smlaunch.launcher.local.run import run_local

    console.setup(-1)  # stdout carries this run's summary as JSON; errors still reach stderr
    cfg, plan = plan_for(tmp, name, name == "offload", args.steps, args.data_cpus)
    print(
        f"{name}: " + ", ".join(f"{h.name} {h.subcluster} {h.num_cpus} CPU {h.num_gpus} GPU" for h in plan.hosts),
        file=sys.stderr,
        flush=True,
    )
    report = run_local(cfg, plan)
    print(
        json.dumps(
            {
                **report["summary"],
                "verdict": report["verdict"]["verdict"],
                "train_gpu_pct": report["utilisation"].get("train_gpu_pct"),
                "data_cpu_pct": report["utilisation"].get("data_cpu_pct"),
            }
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="default 120 with a GPU, 3 (a smoke run) without")
    parser.add_argument(
        "--data-cpus",
        type=int,
        default=max(1, min(16, (os.cpu_count() or 1) - GPU_HOST_CPUS)),
        help="CPUs of the simulated ml.c5.4xlarge (default: 16, or what is left)",
    )
    parser.add_argument("--only", choices=("alone", "offload"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--keep", metavar="DIR", help="keep both runs' directories (reports, plots) under DIR")
    args = parser.parse_args()
    if args.only:
        run_here(Path(args.dir), args.only, args)
        return 0
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (trainer on CPU)"
    if args.steps is None:
        args.steps = 120 if torch.cuda.is_available() else 3
    print(f"machine: {os.cpu_count()} CPUs, GPU {gpu}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(args.keep or scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        alone = run(tmp, "alone", False, args)
        offload = run(tmp, "offload", True, args)
    speedup = offload["images_per_s"] / alone["images_per_s"] if alone["images_per_s"] else 0.0
    print(
        f"GPU {gpu}: alone {alone['images_per_s']} images/s (data wait {alone['data_wait_pct']} %), "
        f"offload {offload['images_per_s']} images/s (data wait {offload['data_wait_pct']} %)"
    )
    report_result(f"RESULT seed_workload speedup={speedup:.2f} data_wait_pct={offload['data_wait_pct']} goal=2.2/5")
    return 0


if __name__ == "__main__":
    sys.exit(main())
