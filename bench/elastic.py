"""Elastic data hosts against fixed sizes (issues 42, 57): `sm-launch run --address` with `autoscale:`
on a Ray cluster whose autoscaler starts real raylets (Ray's fake multi-node provider,
`cluster.autoscale.fake_cluster`), side by side with the same job on fixed data groups.

The chain costs a fixed wait per image (`pipelines.ops.stand_ins.fixed_cost`), so on this machine
each data host adds capacity as a real one would (its 2 Ray CPUs make 2 x 1000 / ms images/s)
without using the cores. The data hosts' processes run at the lowest priority (nice 19,
`AutoscalingCluster.lower_worker_priority`): on one machine they share the trainer's cores, where a
real data host has its own, and a host starting mid-run (raylet, agents, chain workers importing
torch) took the trainer from 57 to 31 images/s for 20 s. The bench means the same on every
machine: it first measures the trainer's rate with free data (a fixed job of one host at 0 ms an
image, `--probe-s`; the rate over the steps' compute time in its last 25 s, once the chain has
filled Ray Data's budget), then sets the two phases, of equal length, from it:

1. **heavy**: one host makes 0.6x what the trainer takes (`--heavy-share`);
2. **light**: one host makes 3x (`--light-share`).

Jobs, one after the other on fresh clusters: **elastic** (starting on 1 data host, `autoscale:`
from 1 to `--max-hosts`), then **fixed N** for N = 1, 2, ... up to the first size whose wait over
the heavy phase (after the same settling time elastic was given) is at most the target: the
smallest (so cheapest) fixed size that holds the wait. For each: the ranks' data wait per phase;
the job's cost per image, the GPU host counted (the train host over the run and the data hosts
joined, sampled every second, at `cluster.prices`' ml.g5.xlarge and ml.c5.xlarge, over the images
trained); and the trainer's images/s once both jobs are fed (from the settling time to the end).
The whole pass runs twice: as is, and with a busy loop on one core (a slower trainer, measured
again), each with its own phases.

    python bench/elastic.py [--phase-s 120] [--probe-s 70] [--max-hosts 4] [--copies 12]
                            [--heavy-ms MS --light-ms MS] [--only normal|slow] [--resume DIR --budget-s S]

`--heavy-ms`/`--light-ms` fix the phases instead (no probe). `--resume DIR` keeps each finished
job's results in DIR and reuses them on the next run, and `--budget-s` starts no job that would
end past that many seconds (exit 3: run again to go on): so the bench can be split over calls of a
machine lent for minutes at a time.

Ends with `RESULT elastic wait_pct_after=<elastic's wait once at target, heavy phase; the worse of
the two passes> time_to_target_s=<first step to the first window under the target; the later>
cost_ratio=<elastic's cost per image over the cheapest fixed size holding the target>
trainer_ratio=<elastic's images/s once fed over that size's> cost_ratio_slow=... trainer_ratio_slow=...
goal=...`, and draws `bench/results/elastic.png` and `elastic-slow.png`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA_LABELS = {"ray-subcluster": "data", "sm-group": "data_group"}
TARGET = 5.0
WINDOW = 10
"""Steps per data-wait reading, the loop's `autoscale.window_steps`."""
SLOTS = 2
"""Ray CPUs of a data host: chain tasks it runs at once."""
PROBE_TAIL_S = 25.0
"""The free-data job's trainer rate is read over its last this many seconds."""
TRAIN_TYPE, DATA_TYPE = "ml.g5.xlarge", "ml.c5.xlarge"
GOAL = (
    "wait_pct_after<=5,time_to_target_s<=120,cost_ratio<=0.9,trainer_ratio>=0.97,cost_ratio_slow<=0.9,"
    "trainer_ratio_slow>=0.97"
)


def write_images(root: Path, copies: int) -> int:
    """scikit-learn's digits as PNG class folders, each image `copies` times (distinct files)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    n = 0
    for c in range(copies):
        for i, (image, label) in enumerate(zip(digits.images, digits.target, strict=False)):
            folder = root / f"digit-{label}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray((image * 255 / 16).astype(np.uint8)).save(folder / f"{c}-{i}.png")
            n += 1
    return n


def job_config(work: Path, cost: Path, elastic: bool, max_hosts: int, crop: int = 128) -> Path:
    import yaml

    cfg = {
        "job": "elastic-bench",
        "cluster": {
            "instance_groups": [
                {"name": "train_group", "instance_type": TRAIN_TYPE, "instance_count": 1},
                {"name": "data_group", "instance_type": DATA_TYPE, "instance_count": 1},
            ]
        },
        "channels": {
            "train": {
                "source": str(work / "train"),
                "record_format": "image_folder",
                "instance_groups": ["data_group"],
                "shuffle": {"buffer_rows": 64},
            }
        },
        "pipeline": {
            "batch_size": 32,
            "ops": [
                {"op": "decode_image"},
                {"op": "random_resized_crop", "size": crop, "scale": [0.7, 1.0]},
                {
                    "op": "user",
                    "function": "smlaunch.pipelines.ops.stand_ins:fixed_cost",
                    "params": {"ms_per_image_file": str(cost)},
                },
                {"op": "to_uint8_chw"},
            ],
        },
        "model": {"name": "test_resnet"},
        "trainer": {
            "batch_size": 32,
            "steps": 1_000_000,
            "learning_rate": 0.01,
            "log_every": 5,
            "validation_every_epochs": 0,
            "checkpoint_every_s": 0,
        },
        "run": {"dir": str(work / "runs"), "name": "elastic" if elastic else "fixed"},
    }
    if elastic:
        cfg["autoscale"] = {
            "min_data_hosts": 1,
            "max_data_hosts": max_hosts,
            "target_data_wait_pct": TARGET,
            "cooldown_s": 10,
            "window_steps": WINDOW,
        }
    path = work / ("elastic.yaml" if elastic else "fixed.yaml")
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_job(work: Path, hosts: int, elastic: bool, args, phases: list[tuple[float, float]]) -> dict:
    """One job over `phases` ((seconds, ms an image), one after the other); its step records, the
    data hosts joined over time and its report."""
    import ray

    from smlaunch.cluster.autoscale.fake_cluster import AutoscalingCluster

    cost = work / "cost_ms"
    cost.write_text(str(phases[0][1]))
    config = job_config(work, cost, elastic, args.max_hosts, args.crop)
    top = args.max_hosts if elastic else hosts
    cluster = AutoscalingCluster(
        {"data": {"resources": {"CPU": 2}, "labels": DATA_LABELS, "min_workers": hosts, "max_workers": top}},
        head_labels={"ray-subcluster": "train", "sm-group": "train_group"},
        head_cpus=2,
        idle_timeout_s=6,
    ).start()
    cluster.lower_worker_priority()  # the data hosts' processes must not take the trainer's cores (see its docstring)
    env = {**cluster.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), cluster.env.get("PYTHONPATH")]))}
    for key in ("RAY_OVERRIDE_NODE_ID_FOR_TESTING", "RAY_CLOUD_INSTANCE_ID", "RAY_FAKE_CLUSTER"):
        env.pop(key, None)
    hosts_over_time: list[tuple[float, int]] = []
    try:
        started = time.monotonic()
        while cluster.count_nodes(DATA_LABELS) < hosts:  # a fixed group is whole before the job starts
            cluster.lower_worker_priority()
            if time.monotonic() - started > 120:
                raise RuntimeError(f"the fake cluster started fewer than {hosts} data nodes in 120 s")
            time.sleep(1)
        proc = subprocess.Popen(
            [sys.executable, "-m", "smlaunch", "run", str(config), "--address", cluster.address],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: list[str] = []
        threading.Thread(target=lambda: [lines.append(x.rstrip()) for x in proc.stdout], daemon=True).start()
        deadline = time.monotonic() + 300
        while not any(re.search(r"step=\d+ ", x) for x in lines):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the job ended or took 300 s before its first step:\n" + "\n".join(lines[-40:]))
            time.sleep(0.5)
        first = time.time()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        draining: list[tuple[float, str, list[str]]] = []
        try:
            starts = [first + sum(seconds for seconds, _ in phases[:i]) for i in range(len(phases) + 1)]
            while time.time() < starts[-1]:
                now_ms = str(next(ms for (_, ms), end in zip(phases, starts[1:], strict=False) if time.time() < end))
                if cost.read_text() != now_ms:
                    cost.write_text(now_ms)
                alive = [n for n in ray.nodes() if n["Alive"] and n["Labels"].get("sm-group") == "data_group"]
                hosts_over_time.append((time.time(), len(alive)))
                cluster.lower_worker_priority()  # workers started since (Ray sets its workers' own, 15)
                draining += busy_while_draining({n["NodeID"] for n in alive}, draining)
                print(
                    f"  {'elastic' if elastic else f'fixed {hosts}'}: {time.time() - first:5.0f} s, "
                    f"{len(alive)} data hosts",
                    end="\r",
                    flush=True,
                )
                time.sleep(1.0)
        finally:
            ray.shutdown()
        print()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
        report = json.loads(
            (work / "runs" / ("elastic" if elastic else "fixed") / "output" / "data" / "report.json").read_text()
        )
        return {
            "first": first,
            "light_at": starts[1],
            "end": starts[-1],
            "hosts": hosts_over_time,
            "report": report,
            "draining": draining,
            "autoscale_lines": [x for x in lines if "autoscale: " in x and "data host (" in x],
        }
    finally:
        cluster.stop()


def busy_while_draining(data_nodes: set[str], seen: list[tuple[float, str, list[str]]]) -> list:
    """What each draining data node's raylet reports as keeping it up (its `node_activity`: tasks,
    workers, object store memory in use), where that changed since the last entry for the node:
    what a host given back waits on before it ends."""
    import ray
    from ray.autoscaler.v2.sdk import get_cluster_resource_state
    from ray.core.generated.autoscaler_pb2 import NodeStatus

    last = {node: activity for _, node, activity in seen}
    state = get_cluster_resource_state(ray._raylet.GcsClient(address=ray.get_runtime_context().gcs_address))
    out = []
    for n in state.node_states:
        node = n.node_id.hex()
        if node in data_nodes and n.status == NodeStatus.DRAINING and last.get(node) != list(n.node_activity):
            out.append((time.time(), node, list(n.node_activity)))
    return out


def buckets(report: dict) -> list[dict]:
    """The run's steps as the report keeps them, bounded (`smlaunch.series`): buckets of adjacent
    steps with their count `n`, end time `t` and summed `step_time_s` and `data_wait_s`."""
    return [
        {
            "t": b["t"],
            "n": b["n"],
            "time": b["sum"]["step_time_s"],
            "images": b["sum"]["images"],
            "wait": min(b["sum"]["data_wait_s"], b["sum"]["step_time_s"]),
        }
        for b in report["step_series"]["buckets"]
    ]


def windows(steps: list[dict]) -> list[tuple[float, float]]:
    """(end time, data wait %) of each run of at least `WINDOW` steps."""
    out, acc = [], []
    for b in steps:
        acc.append(b)
        if sum(x["n"] for x in acc) >= WINDOW:
            out.append((acc[-1]["t"], 100 * sum(x["wait"] for x in acc) / sum(x["time"] for x in acc)))
            acc = []
    return out


def wait_pct(steps: list[dict], start: float, end: float) -> float:
    chosen = [b for b in steps if start <= b["t"] < end]
    time_s = sum(b["time"] for b in chosen)
    return 100 * sum(b["wait"] for b in chosen) / time_s if time_s else float("nan")


def host_seconds(samples: list[tuple[float, int]]) -> float:
    return sum(n * (t2 - t1) for (t1, n), (t2, _) in zip(samples, samples[1:], strict=False))


def images_per_s(steps: list[dict], start: float, end: float, compute_only: bool = False) -> float:
    """Images trained over the steps ending in [start, end) per second of their time (of their time
    less the wait: the trainer's own rate, where `compute_only`)."""
    chosen = [b for b in steps if start <= b["t"] < end]
    time_s = sum(b["time"] - (b["wait"] if compute_only else 0.0) for b in chosen)
    return sum(b["images"] for b in chosen) / time_s if time_s else float("nan")


def usd_per_million_images(r: dict, prices: dict) -> float:
    """The job's cost per image from its first step to its end: the train host all along and the
    data hosts joined, over the images trained."""
    images = sum(b["images"] for b in r["steps"] if r["first"] <= b["t"] < r["end"])
    usd = (prices[TRAIN_TYPE] * (r["end"] - r["first"]) + prices[DATA_TYPE] * r["host_s"]) / 3600
    return 1e6 * usd / images if images else float("nan")


def job_seconds(seconds: float) -> float:
    """A job's wall time, roughly: its phases, plus the cluster's start, the job's first step and its end."""
    return seconds + 75


def best_cost_ratio(prices: dict, heavy_hosts: int, light_hosts: int) -> float:
    """What a policy that knew the phases could reach against fixed `heavy_hosts`: the heavy phase
    on as many, the light one on `light_hosts`, no start-up, the same images: the bound the GPU
    host's price sets (with ml.g5.xlarge at 6.9x ml.c5.xlarge, 2 heavy and 1 light: 0.944)."""
    train, data = prices[TRAIN_TYPE], prices[DATA_TYPE]
    return (2 * train + data * (heavy_hosts + light_hosts)) / (2 * train + data * 2 * heavy_hosts)


class BusyCore:
    """A busy loop pinned to one core for the slow pass: the trainer shares the machine with it."""

    def __enter__(self):
        code = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"
        self.proc = subprocess.Popen([sys.executable, "-c", code])
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase-s", type=float, default=120.0, help="seconds of each phase (heavy, then light)")
    parser.add_argument("--probe-s", type=float, default=70.0, help="seconds of the free-data job timing the trainer")
    parser.add_argument("--heavy-share", type=float, default=0.6, help="one host makes this times the trainer's rate")
    parser.add_argument("--light-share", type=float, default=3.0)
    parser.add_argument("--heavy-ms", type=float, help="fix the heavy phase's ms an image instead (no probe)")
    parser.add_argument("--light-ms", type=float, help="fix the light phase's ms an image instead")
    parser.add_argument("--max-hosts", type=int, default=4)
    parser.add_argument(
        "--copies",
        type=int,
        default=12,
        help="each digit this many times: epochs longer than a phase, as a real channel's are",
    )
    parser.add_argument("--crop", type=int, default=128, help="the chain's crop size: the trainer's speed")
    parser.add_argument("--only", choices=("normal", "slow"), help="run one pass only")
    parser.add_argument("--resume", type=Path, help="keep finished jobs here and reuse them (split runs)")
    parser.add_argument("--budget-s", type=float, help="start no job that would end past this many seconds")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the clusters and the busy loop stop with the bench
    from smlaunch.cluster.prices import price_table

    prices = price_table()
    began = time.monotonic()
    if args.resume:
        args.resume.mkdir(parents=True, exist_ok=True)
    work_root = Path(tempfile.mkdtemp(prefix="smlaunch-elastic-bench-"))
    try:
        images = write_images(work_root / "train", copies=args.copies)
        print(
            f"{images} images (scikit-learn's digits x{args.copies}, PNG class folders); each job: {args.phase_s:g} s "
            f"heavy, then {args.phase_s:g} s light; {TRAIN_TYPE} ${prices[TRAIN_TYPE]}/h, {DATA_TYPE} "
            f"${prices[DATA_TYPE]}/h",
            flush=True,
        )

        def job(name: str, hosts: int, elastic: bool, phases: list[tuple[float, float]]) -> dict:
            kept = args.resume / f"{name}.json" if args.resume else None
            if kept is not None and kept.exists():
                print(f"{name}: kept from {kept}", flush=True)
                return json.loads(kept.read_text())
            if args.budget_s and time.monotonic() - began + job_seconds(sum(x for x, _ in phases)) > args.budget_s:
                raise OutOfBudget(name)
            work = work_root / name
            work.mkdir()
            (work / "train").symlink_to(work_root / "train")
            r = run_job(work, hosts, elastic, args, phases)
            if kept is not None:
                kept.write_text(json.dumps(r))
            return r

        passes = {}
        for tag in ("normal", "slow"):
            if args.only in (None, tag):
                with BusyCore() if tag == "slow" else contextlib.nullcontext():
                    passes[tag] = run_pass(tag, job, args, prices)
        for tag, out in passes.items():
            print(f"{tag}: {out['line']}")
        worst_wait = max(o["wait_pct_after"] for o in passes.values())
        latest = max(o["time_to_target_s"] for o in passes.values())
        ratios = " ".join(
            f"cost_ratio{'' if tag == 'normal' else '_slow'}={o['cost_ratio']:.3f} "
            f"trainer_ratio{'' if tag == 'normal' else '_slow'}={o['trainer_ratio']:.3f}"
            for tag, o in passes.items()
        )
        report_result(
            f"RESULT elastic wait_pct_after={worst_wait:.2f} time_to_target_s={latest:.1f} {ratios} goal={GOAL}"
        )
        return 0
    except OutOfBudget as e:
        print(f"stopped before job {e} (--budget-s {args.budget_s:g}); run the same command again to go on")
        return 3
    finally:
        shutil.rmtree(work_root, ignore_errors=True)


def run_pass(tag: str, job, args, prices: dict) -> dict:
    """The trainer timed with free data, the phases set from it, then elastic and the fixed sizes."""
    prefix = "" if tag == "normal" else "slow-"
    if args.heavy_ms is not None and args.light_ms is not None:
        heavy, light, trainer = args.heavy_ms, args.light_ms, None
    else:
        probe = job(f"{prefix}probe", 1, False, [(args.probe_s, 0.0)])
        steps = buckets(probe["report"])
        # its last `PROBE_TAIL_S` only: until the chain has filled Ray Data's budget, it runs flat out on
        # the same cores and halves the trainer (2 cores: 30 images/s over 10-28 s, 55-68 after)
        trainer = images_per_s(steps, probe["end"] - PROBE_TAIL_S, probe["end"], compute_only=True)
        heavy = SLOTS * 1000 / (args.heavy_share * trainer)
        light = SLOTS * 1000 / (args.light_share * trainer)
        print(
            f"{tag}: the trainer takes {trainer:.1f} images/s with free data; heavy {heavy:.1f} ms an image (one "
            f"host makes {args.heavy_share:g}x), light {light:.1f} ms ({args.light_share:g}x)",
            flush=True,
        )
    phases = [(args.phase_s, heavy), (args.phase_s, light)]
    results, settle = {}, 0.0

    def measured(name: str, r: dict) -> dict:
        steps = r["steps"] = buckets(r["report"])
        r["wait_heavy"] = wait_pct(steps, r["first"] + settle, r["light_at"])
        r["wait_light"] = wait_pct(steps, r["light_at"], r["end"])
        r["host_s"] = host_seconds(r["hosts"])
        r["usd_per_m"] = usd_per_million_images(r, prices)
        results[name] = r
        print(
            f"{tag} {name}: data wait {r['wait_heavy']:.1f} % heavy (after {settle:.0f} s), {r['wait_light']:.1f} % "
            f"light; {r['host_s']:.0f} data-host-seconds; ${r['usd_per_m']:.2f} per million images; "
            f"{images_per_s(steps, r['first'] + settle, r['end']):.1f} images/s once fed",
            flush=True,
        )
        return r

    elastic = job(f"{prefix}elastic", 1, True, phases)
    steps = buckets(elastic["report"])
    under = [(t, w) for t, w in windows(steps) if t < elastic["light_at"] and w <= TARGET]
    time_to_target = (under[0][0] - elastic["first"]) if under else float("inf")
    settle = min(time_to_target, args.phase_s)
    measured("elastic", elastic)
    for line in elastic["autoscale_lines"]:
        print("  " + line.split("INFO smlaunch: ")[-1][:220])
    for t, node, activity in elastic.get("draining", []):
        print(f"  draining {node[-6:]} at {t - elastic['first']:.0f} s: {'; '.join(activity) or 'idle'}")
    fixed = None
    for n in range(1, args.max_hosts + 1):
        r = measured(f"fixed-{n}", job(f"{prefix}fixed-{n}", n, False, phases))
        if r["wait_heavy"] <= TARGET:
            fixed = r
            break
    cost_ratio = elastic["usd_per_m"] / fixed["usd_per_m"] if fixed else float("nan")
    bound = best_cost_ratio(prices, len(results) - 1, light_hosts=1) if fixed else float("nan")
    fed = lambda r: images_per_s(r["steps"], r["first"] + settle, r["end"])  # noqa: E731
    trainer_ratio = fed(elastic) / fed(fixed) if fixed else float("nan")
    draw(results, args, ROOT / "bench" / "results" / f"elastic{'' if tag == 'normal' else '-slow'}.png")
    smallest = f"none up to {args.max_hosts}" if fixed is None else f"fixed {len(results) - 1}"
    line = (
        f"trainer {trainer:.1f} images/s free; wait {elastic['wait_heavy']:.2f} % after {time_to_target:.0f} s; "
        if trainer
        else ""
    ) + (
        f"cheapest fixed size holding {TARGET:g} %: {smallest}; cost_ratio {cost_ratio:.3f} "
        f"(an oracle at once: {bound:.3f}), trainer_ratio {trainer_ratio:.3f}"
    )
    return {
        "wait_pct_after": elastic["wait_heavy"],
        "time_to_target_s": time_to_target,
        "cost_ratio": cost_ratio,
        "trainer_ratio": trainer_ratio,
        "line": line,
    }


class OutOfBudget(Exception):
    """The next job would end past `--budget-s`."""


def draw(results: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for name, r in results.items():
        t0 = r["first"]
        top.step(
            [t - t0 for t, _ in r["hosts"]],
            [n for _, n in r["hosts"]],
            where="post",
            lw=2 if name == "elastic" else 1,
            label=f"{name} ({r['host_s']:.0f} host-s, ${r['usd_per_m']:.2f} per million images)",
        )
        w = windows(r["steps"])
        bottom.plot([t - t0 for t, _ in w], [x for _, x in w], lw=2 if name == "elastic" else 1, label=name)
    for ax in (top, bottom):
        ax.axvline(args.phase_s, color="grey", ls=":", lw=1)
    bottom.axhline(TARGET, color="tab:red", ls="--", lw=1, label=f"target {TARGET:g} %")
    top.set_ylabel("data hosts joined")
    bottom.set_ylabel(f"data wait % ({WINDOW} steps)")
    bottom.set_xlabel(f"seconds since the first step (heavy chain, then light at {args.phase_s:g} s)")
    top.legend(fontsize=8)
    bottom.legend(fontsize=8)
    top.set_title("elastic data hosts vs fixed sizes")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
