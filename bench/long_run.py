"""A day-long run on 80 hosts through the real report code, and the per-step control exchange at
128 ranks (issue 38, item 5).

**Report.** 864,000 synthetic step records (a day at 10 steps/s) go through `series.StepLog`, as
rank 0 keeps them (`trainers.loop`); a day of host samples at the sampler's 0.5 s goes through
`cluster.sampler`'s bounded series for one GPU host (8 GPUs) and one CPU host, whose series stand
for 16 GPU hosts (128 ranks) and 64 CPU data hosts (each host's actor folds its own day, so the
bench folds two and copies them with per-host values). Then `launcher.report.job_report.build_report` and
`write_report` (report.json, summary.md, three PNGs, TensorBoard) as at the end of a job:
report_mb is report.json's size, render_s the time of `write_report`.

**Control exchange.** Every step, every rank joins one all-reduce of nine float64 numbers
(`trainers.control.Control.exchange`) on a gloo group. Its latency is measured here with 2 and 4
local processes through the real `Control._all_reduce`, and beside it gloo's own all-reduce (a
ring: 2 (n - 1) sequential hops, the algorithm the exchange used before). The hop is the 2-process
latency over the algorithm's hops at 2; the estimate at 128 ranks is that hop times the hops at
128 (ring: 254; recursive doubling: 7). Loopback hops are shorter than a network's, so the figure
is a lower bound; the step it is compared with is ResNet-50 at batch 256 per A100 (`--step-ms`).

    python bench/long_run.py [--steps 864000] [--hosts 80] [--step-ms 300]

Ends with `RESULT long_run report_mb=<x> render_s=<x> goal=report_mb<=50,render_s<=30` and
`RESULT control_exchange est_128_ranks_ms=<x> pct_of_step=<x> goal=pct<=1`.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_S = 0.5
"""The sampler's default interval (`monitor.sample_interval_s`)."""


def feed_steps(steps: int, rate: float):
    """`steps` records at `rate` steps/s through rank 0's `StepLog`, with a slow step now and then."""
    from tqdm import tqdm

    from smlaunch.series import StepLog

    rng, log, t = random.Random(0), StepLog(), 1_000_000.0
    for step in tqdm(range(1, steps + 1), desc="step records", unit="step", mininterval=2, file=sys.stdout):
        step_s = (1 / rate) * (3.0 if rng.random() < 0.001 else rng.uniform(0.9, 1.1))
        t += step_s
        log.add(
            {
                "step": step,
                "t": round(t, 3),
                "epoch": 1 + (step - 1) // 5000,
                "loss": round(2 / math.log(step + 2), 5),
                "step_time_s": round(step_s, 5),
                "data_wait_s": round(step_s * rng.uniform(0, 0.1), 5),
                "images_per_s": round(2048 / step_s, 2),
            }
        )
    return log


def host_day(seconds: float, gpus: int, start: float):
    """A day of one host's samples through the sampler's bounded series; its items and width."""
    from tqdm import tqdm

    from smlaunch.cluster.sampler import MAX_SAMPLES
    from smlaunch.series import Buckets, merge_samples

    rng = random.Random(gpus)
    kept = Buckets(MAX_SAMPLES, new=lambda x: {"n": 1, **x}, merge=merge_samples)
    for i in tqdm(
        range(int(seconds / SAMPLE_S)), desc=f"samples, {gpus}-GPU host", unit="sample", mininterval=2, file=sys.stdout
    ):
        sample = {
            "t": round(start + i * SAMPLE_S, 3),
            "cpu_pct": rng.uniform(20, 95),
            "host_cpu_pct": rng.uniform(20, 95),
            "iowait_pct": rng.uniform(0, 5),
            "mem_pct": rng.uniform(30, 60),
            "net_sent_bps": rng.randrange(10**9),
            "net_recv_bps": rng.randrange(10**9),
        }
        if gpus:
            sample["gpu_pct"] = [rng.uniform(60, 100) for _ in range(gpus)]
            sample["gpu_mem_pct"] = [rng.uniform(40, 80) for _ in range(gpus)]
        kept.add(sample)
    return kept.items, kept.width


def every_host(plan, gpu_day: tuple, cpu_day: tuple) -> dict:
    """Each host's series: the GPU or CPU host's, its CPU % scaled per host so the heat map varies."""
    out = {}
    for i, host in enumerate(plan.hosts):
        items, width = gpu_day if host.subcluster == "train" else cpu_day
        scale = 0.5 + (i % 10) / 20
        out[host.name] = {
            "host": host.name,
            "interval_s": SAMPLE_S * width,
            "samples": [{**x, "cpu_pct": round(x["cpu_pct"] * scale, 1)} for x in items],
        }
    return out


def plan_of(hosts: int, tmp: str):
    from smlaunch.cluster.plan import LocalEnvironment, build_plan
    from smlaunch.config import load_config

    gpu_hosts = max(1, hosts // 5)
    cfg = load_config(
        ROOT / "configs" / "tiny.yaml",
        [
            f"run.dir={tmp}",
            "cluster.instance_groups.0.instance_type=ml.p4d.24xlarge",
            f"cluster.instance_groups.0.instance_count={gpu_hosts}",
            "cluster.instance_groups.1.instance_type=ml.c5.4xlarge",
            f"cluster.instance_groups.1.instance_count={hosts - gpu_hosts}",
        ],
    )
    return cfg, build_plan(cfg, LocalEnvironment(cpus=2, gpus=0, started="t"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exchange_rank(rank: int, world: int, port: int, calls: int, out) -> None:
    import torch
    import torch.distributed as dist

    from smlaunch.trainers.control import Control

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    control, values = Control(world, rank), [1.0, 1.0, 0.0, 0.0, 2.5, 4.0, 1024.0, 0.01, 0.3]  # the exchange's nine

    def ring(v):
        tensor = torch.tensor(v, dtype=torch.float64)
        dist.all_reduce(tensor)
        return tensor.tolist()

    for name, call in (("control", control._all_reduce), ("ring", ring)):
        times = []
        for i in range(calls + calls // 10):
            dist.barrier()
            started = time.perf_counter()
            call(values)
            if i >= calls // 10:  # the first tenth warms up
                times.append(time.perf_counter() - started)
        if rank == 0:
            out[(name, world)] = statistics.median(times)
    dist.destroy_process_group()


def exchange_latency(worlds: list[int], calls: int) -> dict:
    """Median seconds of one exchange all-reduce, per (algorithm, world size)."""
    import torch.multiprocessing as mp

    out = mp.Manager().dict()
    for world in worlds:
        mp.spawn(_exchange_rank, args=(world, _free_port(), calls, out), nprocs=world, join=True)
    return dict(out)


def long_run(args) -> None:
    from smlaunch.launcher.report.job_report import build_report, write_report
    from smlaunch.series import CAPACITY, TAIL

    started = time.perf_counter()
    log = feed_steps(args.steps, args.rate)
    fed_s = time.perf_counter() - started
    day_s = log.last["t"] - log.head[0]["t"]
    first_t = log.head[0]["t"] - log.head[0]["step_time_s"]
    gpu_day, cpu_day = host_day(day_s, 8, first_t), host_day(day_s, 0, first_t)
    with tempfile.TemporaryDirectory() as tmp:
        cfg, plan = plan_of(args.hosts, tmp)
        result = {
            "steps": list(log.recent),
            "step_series": log.to_dict(),
            "validation": [],
            "epochs": log.last["epoch"],
            "final_step": log.count,
            "host_rows": {h.name: 1000 for h in plan.hosts},
            "chain_by_host": {
                h.name: {"train_rows": 1000, "chain_s": 50.0} for h in plan.hosts if h.subcluster == "data"
            },
        }
        built = time.perf_counter()
        report = build_report(
            plan,
            result,
            256,
            {},
            every_host(plan, gpu_day, cpu_day),
            cfg.monitor.model_dump(),
            epoch_images=5000 * 2048,
        )
        build_s = time.perf_counter() - built
        print("rendering report.json, summary.md, 3 PNGs and TensorBoard ...", flush=True)
        rendered = time.perf_counter()
        path = write_report(report, Path(tmp) / "out")
        render_s = time.perf_counter() - rendered
        report_mb = path.stat().st_size / 2**20
        tb_mb = sum(p.stat().st_size for p in (path.parent / "tensorboard").iterdir()) / 2**20
        pngs_kb = sum((path.parent / p).stat().st_size for p in ("throughput.png", "data_wait.png", "utilisation.png"))
    print(
        f"{log.count} steps over {day_s / 3600:.1f} h fed in {fed_s:.1f} s ({1e6 * fed_s / log.count:.1f} us a step "
        f"on rank 0); kept: {len(log.buckets.items)} buckets of {log.buckets.width} steps (cap {CAPACITY}), "
        f"the last {len(log.recent)} exact (cap {TAIL})"
    )
    print(
        f"{len(plan.hosts)} hosts ({plan.train_workers} train ranks): {len(gpu_day[0])} samples a host of "
        f"{SAMPLE_S * gpu_day[1]:g} s each; build_report {build_s:.1f} s"
    )
    print(
        f"report.json {report_mb:.2f} MB, TensorBoard {tb_mb:.2f} MB, PNGs {pngs_kb / 1024:.0f} KB; "
        f"write_report {render_s:.1f} s"
    )
    report_result(f"RESULT long_run report_mb={report_mb:.2f} render_s={render_s:.1f} goal=report_mb<=50,render_s<=30")


def control_exchange(args) -> int:
    print(f"control exchange: {args.calls} timed all-reduces of 9 float64 per world size ...", flush=True)
    latency = exchange_latency(sorted(set(args.worlds) | {2}), args.calls)
    for (name, world), seconds in sorted(latency.items()):
        print(f"  {name:8} {world} ranks: {1e6 * seconds:7.1f} us")
    rounds = {
        "control": lambda n: math.ceil(math.log2(n)) + (0 if n & (n - 1) == 0 else 2),
        "ring": lambda n: 2 * (n - 1),
    }
    estimates = {}
    for name, hops in rounds.items():
        hop = latency[(name, 2)] / hops(2)
        estimates[name] = hop * hops(128)
        checks = ", ".join(
            f"{n} ranks predicted {1e6 * hop * hops(n):.0f} us, measured {1e6 * latency[(name, n)]:.0f}"
            for n in sorted(args.worlds)
            if n > 2
        )
        print(
            f"  {name:8} hop {1e6 * hop:.1f} us; {checks}; at 128 ranks {hops(128)} hops = "
            f"{1e3 * estimates[name]:.2f} ms = {100 * estimates[name] / (args.step_ms / 1e3):.2f} % of a "
            f"{args.step_ms:g} ms step"
        )
    est_ms = 1e3 * estimates["control"]
    report_result(
        f"RESULT control_exchange est_128_ranks_ms={est_ms:.2f} pct_of_step={100 * est_ms / args.step_ms:.2f} "
        f"goal=pct<=1"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=864_000)
    parser.add_argument("--rate", type=float, default=10.0, help="steps per second")
    parser.add_argument("--hosts", type=int, default=80, help="a fifth of them GPU hosts with 8 GPUs each")
    parser.add_argument("--step-ms", type=float, default=300.0, help="the step the exchange is compared with")
    parser.add_argument("--calls", type=int, default=2000, help="timed exchanges per world size")
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4], help="world sizes timed (2 gives the hop)")
    parser.add_argument("--skip-report", action="store_true", help="time the control exchange only")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not args.skip_report:
        long_run(args)
    return control_exchange(args)


if __name__ == "__main__":
    sys.exit(main())
