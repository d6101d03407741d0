"""The real jobs of bench/elastic.py: a Ray cluster whose autoscaler starts real raylets (Ray's fake
multi-node provider, `cluster.autoscale.fake_cluster`), `sm-launch run --address` on it, and what
each job measured: its step records as the report keeps them, the data hosts up each second.

The chain costs a fixed wait per image (`pipelines.ops.stand_ins.fixed_cost`), so on this machine
each data host adds capacity as a real one would (its 2 Ray CPUs make 2 x 1000 / ms images/s)
without using the cores. The data hosts' processes run at the lowest priority (nice 19,
`AutoscalingCluster.lower_worker_priority`): on one machine they share the trainer's cores, where a
real data host has its own, and a host starting mid-run (raylet, agents, chain workers importing
torch) took the trainer from 57 to 31 images/s for 20 s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cpu_roles import CpuByRole  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA_LABELS = {"ray-subcluster": "data", "sm-group": "data_group"}
TARGET = 5.0
WINDOW = 10
"""Steps per data-wait reading, the loop's `autoscale.window_steps`."""
SLOTS = 2
"""Ray CPUs of a data host: chain tasks it runs at once."""
TRAIN_TYPE, DATA_TYPE = "ml.g5.xlarge", "ml.c5.xlarge"
COOLDOWN_S = 10


@dataclass(frozen=True)
class JobKind:
    """What one job is: `elastic` (the loop from `hosts` up to `max_hosts`) or fixed `hosts`;
    `cached`: the cache arm's workload (the chain's cost in its deterministic prefix, `epochs`
    epochs, a 4-CPU train host: an ml.g5.xlarge's 4 vCPUs), elastic with the cache on and the loop
    down to none, or fixed with the cache off (what it is judged against)."""

    hosts: int
    elastic: bool
    max_hosts: int
    crop: int = 128
    cached: bool = False
    epochs: int = 0


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


def job_config(work: Path, cost: Path, kind: JobKind) -> Path:
    import yaml

    cost_op = {
        "op": "user",
        "function": "smlaunch.pipelines.ops.stand_ins:fixed_cost",
        "params": {"ms_per_image_file": str(cost)},
    }
    crop = {"op": "random_resized_crop", "size": kind.crop, "scale": [0.7, 1.0]}
    if kind.cached:  # the cost in the prefix, declared deterministic: cached once, then only the crop runs
        ops = [{"op": "decode_image"}, {**cost_op, "deterministic": True}, crop, {"op": "to_uint8_chw"}]
    else:
        ops = [{"op": "decode_image"}, crop, cost_op, {"op": "to_uint8_chw"}]
    cfg = {
        "job": "elastic-bench",
        "cluster": {
            "instance_groups": [
                {"name": "train_group", "instance_type": TRAIN_TYPE, "instance_count": 1},
                {"name": "data_group", "instance_type": DATA_TYPE, "instance_count": max(1, kind.hosts)},
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
        "pipeline": {"batch_size": 32, "ops": ops},
        "model": {"name": "test_resnet"},
        "trainer": {
            "batch_size": 32,
            "learning_rate": 0.01,
            "log_every": 5,
            "validation_every_epochs": 0,
            "checkpoint_every_s": 0,
            **({"epochs": kind.epochs} if kind.epochs else {"steps": 1_000_000}),
        },
        "run": {"dir": str(work / "runs"), "name": "job"},
    }
    if kind.cached:
        cfg["pipeline"].update(cache=kind.elastic, cache_dir=str(work / "cache"))
    if kind.elastic:
        cfg["autoscale"] = {
            "min_data_hosts": 0 if kind.cached else 1,
            "max_data_hosts": kind.max_hosts,
            "target_data_wait_pct": TARGET,
            "cooldown_s": COOLDOWN_S,
            "window_steps": WINDOW,
        }
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_job(work: Path, kind: JobKind, phases: list[tuple[float, float]], timeout_s: float = 900) -> dict:
    """One job over `phases` ((seconds, ms an image), one after the other, then SIGTERM), or to its
    own end for `kind.epochs`; its step records, the data hosts up over time, its report and the
    launcher's lines."""
    import ray

    from smlaunch.cluster.autoscale.fake_cluster import AutoscalingCluster

    cost = work / "cost_ms"
    cost.write_text(str(phases[0][1]))
    config = job_config(work, cost, kind)
    top = kind.max_hosts if kind.elastic else kind.hosts
    cluster = AutoscalingCluster(
        {
            "data": {
                "resources": {"CPU": SLOTS},
                "labels": DATA_LABELS,
                "min_workers": 0 if kind.cached and kind.elastic else kind.hosts,
                "max_workers": top,
            }
        },
        head_labels={"ray-subcluster": "train", "sm-group": "train_group"},
        head_cpus=4 if kind.cached else 2,
        idle_timeout_s=6,
    ).start()
    cluster.lower_worker_priority()  # the data hosts' processes must not take the trainer's cores (see its docstring)
    env = {**cluster.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), cluster.env.get("PYTHONPATH")]))}
    for key in ("RAY_OVERRIDE_NODE_ID_FOR_TESTING", "RAY_CLOUD_INSTANCE_ID", "RAY_FAKE_CLUSTER"):
        env.pop(key, None)
    hosts_over_time: list[tuple[float, int]] = []
    try:
        if (
            kind.cached and kind.elastic
        ):  # no node-type minimum (the group may go to none): a driver of its own asks for the first
            ask_first_hosts(cluster, env, kind.hosts)
        started = time.monotonic()
        while cluster.count_nodes(DATA_LABELS) < kind.hosts:  # a fixed group is whole before the job starts
            cluster.lower_worker_priority()
            if time.monotonic() - started > 120:
                raise RuntimeError(f"the fake cluster started fewer than {kind.hosts} data nodes in 120 s")
            time.sleep(1)
        proc = subprocess.Popen(
            [sys.executable, "-m", "smlaunch", "run", str(config), "--address", cluster.address],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        cpu = CpuByRole(str(cluster.tmp), proc.pid)
        lines: list[str] = []
        stamped: list[tuple[float, str]] = []

        def read() -> None:
            for x in proc.stdout:
                lines.append(x.rstrip())
                stamped.append((time.time(), x.rstrip()))

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 300
        while not any(re.search(r"step=\d+ ", x) for x in lines):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the job ended or took 300 s before its first step:\n" + "\n".join(lines[-40:]))
            time.sleep(0.5)
        first = time.time()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        draining: list[tuple[float, str, list[str]]] = []
        name = f"{'elastic' if kind.elastic else 'fixed'} {kind.hosts}{' cached' if kind.cached else ''}"
        try:
            starts = [first + sum(seconds for seconds, _ in phases[:i]) for i in range(len(phases) + 1)]
            ends = first + (timeout_s if kind.epochs else starts[-1] - first)
            while time.time() < ends and (not kind.epochs or proc.poll() is None):
                now_ms = next((ms for (_, ms), end in zip(phases, starts[1:], strict=False) if time.time() < end), None)
                if now_ms is not None and cost.read_text() != str(now_ms):
                    cost.write_text(str(now_ms))
                alive = [n for n in ray.nodes() if n["Alive"] and n["Labels"].get("sm-group") == "data_group"]
                hosts_over_time.append((time.time(), len(alive)))
                cluster.lower_worker_priority()  # workers started since (Ray sets its workers' own, 15)
                if kind.cached:
                    lower_train_host_chain()
                draining += busy_while_draining({n["NodeID"] for n in alive}, draining)
                if len(hosts_over_time) % 5 == 1:
                    cpu.sample(time.time())
                print(f"  {name}: {time.time() - first:5.0f} s, {len(alive)} data hosts", end="\r", flush=True)
                time.sleep(1.0)
        finally:
            cpu.sample(time.time())
            ray.shutdown()
        print()
        if proc.poll() is None:
            if kind.epochs:
                raise RuntimeError(f"the {kind.epochs}-epoch job ran past {timeout_s:g} s:\n" + "\n".join(lines[-40:]))
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
        report = json.loads((work / "runs" / "job" / "output" / "data" / "report.json").read_text())
        steps = buckets(report)
        return {
            "first": first,
            "light_at": starts[1] if len(starts) > 2 else None,
            "end": starts[-1] if not kind.epochs else max(b["t"] for b in steps) + 1e-3,
            "hosts": hosts_over_time,
            "report": report,
            "draining": draining,
            "cpu": cpu.series,
            "cpu_threads": cpu.thread_series,
            "autoscale_lines": [x for x in lines if "autoscale: " in x and "data host" in x and " -> " in x],
            "cache_lines": [(t, x) for t, x in stamped if "cache: " in x],
        }
    finally:
        cluster.stop()


FEEDS_THE_TRAINER = ("RayTrainWorker", "SplitCoordinator", "Agent", "_StatsActor", "_AutoscalingCoordinator")
"""Ray processes on the train host that are not the chain's: the trainer, Ray Data's coordinator that
hands it the blocks, the node's agents and Ray Data's bookkeeping actors. They keep their priority."""


def lower_train_host_chain(nice: int = 19) -> None:
    """The chain's Ray workers on this machine at the idle priority (`fake_cluster.lower_priority`):
    with no data host the chain runs on the train host, and on one machine its processes share the
    trainer's cores, where a GPU host's spare vCPUs leave the GPU's compute alone (the trainer here
    computes on a core: in bench/elastic.py's smoke run the chain at none took it from 113 to 88
    images/s). Ray Data's coordinator is left as it is: on a GPU host it is on a spare vCPU too, and
    the trainer waits on it."""
    import psutil

    from smlaunch.cluster.autoscale.fake_cluster import lower_priority

    for proc in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(proc.info["cmdline"] or [])
            if line.startswith("ray::") and not any(name in line for name in FEEDS_THE_TRAINER):
                lower_priority(proc.pid, nice)  # each thread: Linux keeps a priority per thread
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def ask_first_hosts(cluster, env: dict, hosts: int, cpus: int = SLOTS) -> None:
    """`hosts` data hosts up before a job whose node type has no minimum, as KubeRay's `replicas`
    starts them (`sm-launch kuberay` with `min_data_hosts: 0`), asked by a driver of its own; the
    job's own request replaces it once the job stands."""
    code = (
        "import ray; from ray.autoscaler.sdk import request_resources; "
        f"ray.init(address={cluster.address!r}, logging_level='ERROR', log_to_driver=False); "
        f"request_resources(bundles=[{{'CPU': {cpus}}}] * {hosts}, bundle_label_selectors=[{DATA_LABELS!r}] * {hosts})"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=120)


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
