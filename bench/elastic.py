"""Elastic data hosts against fixed sizes (issue 42): `sm-launch run --address` with `autoscale:` on
a Ray cluster whose autoscaler starts real raylets (Ray's fake multi-node provider,
`cluster.autoscale.fake_cluster`), side by side with the same job on fixed data groups.

The chain costs a fixed wait per image (`pipelines.ops.stand_ins.fixed_cost`), so on this machine
each data host adds capacity as a real one would (its 2 Ray CPUs make 2 x 1000 / ms images/s)
without using the cores. The run has two phases of equal length, the same for every job:

1. **heavy**: the chain too slow for the trainer on one host (`--heavy-ms` per image);
2. **light**: the chain `--light-ms` per image, which one host feeds.

Jobs, one after the other on fresh clusters: **elastic** (starting on 1 data host, `autoscale:`
from 1 to `--max-hosts`), then **fixed N** for N = 1, 2, ... up to the first size whose wait over
the heavy phase (after the same settling time elastic was given) is at most the target: the
smallest fixed size that holds the wait. For each: the ranks' data wait per phase, and the data
host-seconds over the run (joined data nodes sampled every second from the first step to the end).

    python bench/elastic.py [--phase-s 120] [--heavy-ms 28] [--light-ms 1] [--max-hosts 4] [--copies 12]
                            [--resume DIR --budget-s S]

`--resume DIR` keeps each finished job's results in DIR and reuses them on the next run, and
`--budget-s` starts no job that would end past that many seconds (exit 3: run again to go on):
so the bench can be split over calls of a machine lent for minutes at a time (the device's 16
cores, where extra nodes add real CPUs; this machine's 2 do not).

Ends with `RESULT elastic wait_pct_after=<elastic's wait once at target, heavy phase>
time_to_target_s=<first step to the first window under the target> host_seconds_ratio=<elastic over
the smallest fixed size that holds the target> goal=wait_pct_after<=5,time_to_target_s<=120,
host_seconds_ratio<=0.8`, and draws `bench/results/elastic.png`.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA_LABELS = {"ray-subcluster": "data", "sm-group": "data_group"}
TARGET = 5.0
WINDOW = 10
"""Steps per data-wait reading, the loop's `autoscale.window_steps`."""


def write_images(root: Path, copies: int) -> int:
    """scikit-learn's digits as PNG class folders, each image `copies` times (distinct files)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    n = 0
    for c in range(copies):
        for i, (image, label) in enumerate(zip(digits.images, digits.target)):
            folder = root / f"digit-{label}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray((image * 255 / 16).astype(np.uint8)).save(folder / f"{c}-{i}.png")
            n += 1
    return n


def job_config(work: Path, cost: Path, elastic: bool, max_hosts: int, crop: int = 128) -> Path:
    import yaml

    cfg = {
        "job": "elastic-bench", "cluster": {"instance_groups": [
            {"name": "train_group", "instance_type": "ml.g5.xlarge", "instance_count": 1},
            {"name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 1}]},
        "channels": {"train": {"source": str(work / "train"), "record_format": "image_folder",
                               "instance_groups": ["data_group"], "shuffle": {"buffer_rows": 64}}},
        "pipeline": {"batch_size": 32, "ops": [
            {"op": "decode_image"}, {"op": "random_resized_crop", "size": crop, "scale": [0.7, 1.0]},
            {"op": "user", "function": "smlaunch.pipelines.ops.stand_ins:fixed_cost",
             "params": {"ms_per_image_file": str(cost)}},
            {"op": "to_uint8_chw"}]},
        "model": {"name": "test_resnet"},
        "trainer": {"batch_size": 32, "steps": 1_000_000, "learning_rate": 0.01, "log_every": 5,
                    "validation_every_epochs": 0, "checkpoint_every_s": 0},
        "run": {"dir": str(work / "runs"), "name": "elastic" if elastic else "fixed"}}
    if elastic:
        cfg["autoscale"] = {"min_data_hosts": 1, "max_data_hosts": max_hosts, "target_data_wait_pct": TARGET,
                            "cooldown_s": 10, "window_steps": WINDOW}
    path = work / ("elastic.yaml" if elastic else "fixed.yaml")
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_job(work: Path, hosts: int, elastic: bool, args) -> dict:
    """One job over both phases; its step records, the data hosts joined over time and its report."""
    import ray

    from smlaunch.cluster.autoscale.fake_cluster import AutoscalingCluster

    cost = work / "cost_ms"
    cost.write_text(str(args.heavy_ms))
    config = job_config(work, cost, elastic, args.max_hosts, args.crop)
    top = args.max_hosts if elastic else hosts
    cluster = AutoscalingCluster({"data": {"resources": {"CPU": 2}, "labels": DATA_LABELS, "min_workers": hosts,
                                           "max_workers": top}},
                                 head_labels={"ray-subcluster": "train", "sm-group": "train_group"}, head_cpus=2,
                                 idle_timeout_s=6).start()
    env = {**cluster.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), cluster.env.get("PYTHONPATH")]))}
    for key in ("RAY_OVERRIDE_NODE_ID_FOR_TESTING", "RAY_CLOUD_INSTANCE_ID", "RAY_FAKE_CLUSTER"):
        env.pop(key, None)
    hosts_over_time: list[tuple[float, int]] = []
    try:
        started = time.monotonic()
        while cluster.count_nodes(DATA_LABELS) < hosts:  # a fixed group is whole before the job starts
            if time.monotonic() - started > 120:
                raise RuntimeError(f"the fake cluster started fewer than {hosts} data nodes in 120 s")
            time.sleep(1)
        proc = subprocess.Popen([sys.executable, "-m", "smlaunch", "run", str(config), "--address", cluster.address],
                                env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
            light_at = first + args.phase_s
            while time.time() < first + 2 * args.phase_s:
                if time.time() >= light_at and cost.read_text() != str(args.light_ms):
                    cost.write_text(str(args.light_ms))
                alive = [n for n in ray.nodes() if n["Alive"] and n["Labels"].get("sm-group") == "data_group"]
                hosts_over_time.append((time.time(), len(alive)))
                draining += busy_while_draining({n["NodeID"] for n in alive}, draining)
                print(f"  {'elastic' if elastic else f'fixed {hosts}'}: {time.time() - first:5.0f} s, "
                      f"{len(alive)} data hosts", end="\r", flush=True)
                time.sleep(1.0)
        finally:
            ray.shutdown()
        print()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
        report = json.loads((work / "runs" / ("elastic" if elastic else "fixed") / "output" / "data"
                             / "report.json").read_text())
        return {"first": first, "light_at": light_at, "hosts": hosts_over_time, "report": report,
                "draining": draining,
                "autoscale_lines": [x for x in lines if "autoscale: " in x and "data host (" in x]}
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
    return [{"t": b["t"], "n": b["n"], "time": b["sum"]["step_time_s"], "wait": min(b["sum"]["data_wait_s"],
                                                                                   b["sum"]["step_time_s"])}
            for b in report["step_series"]["buckets"]]


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
    return sum(n * (t2 - t1) for (t1, n), (t2, _) in zip(samples, samples[1:]))


def job_seconds(args) -> float:
    """A job's wall time, roughly: both phases, plus the cluster's start, the job's first step and its end."""
    return 2 * args.phase_s + 75


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase-s", type=float, default=120.0, help="seconds of each phase (heavy, then light)")
    parser.add_argument("--heavy-ms", type=float, default=28.0)
    parser.add_argument("--light-ms", type=float, default=1.0)
    parser.add_argument("--max-hosts", type=int, default=4)
    parser.add_argument("--copies", type=int, default=12,
                        help="each digit this many times: epochs longer than a phase, as a real channel's are")
    parser.add_argument("--crop", type=int, default=128, help="the chain's crop size: the trainer's speed")
    parser.add_argument("--resume", type=Path, help="keep finished jobs here and reuse them (split runs)")
    parser.add_argument("--budget-s", type=float, help="start no job that would end past this many seconds")
    args = parser.parse_args()
    began = time.monotonic()
    if args.resume:
        args.resume.mkdir(parents=True, exist_ok=True)
    work_root = Path(tempfile.mkdtemp(prefix="smlaunch-elastic-bench-"))
    try:
        images = write_images(work_root / "train", copies=args.copies)
        print(f"{images} images (scikit-learn's digits x{args.copies}, PNG class folders); each job: {args.phase_s:g} s heavy "
              f"({args.heavy_ms:g} ms/image), {args.phase_s:g} s light ({args.light_ms:g} ms/image)", flush=True)
        results = {}

        def job(name: str, hosts: int, elastic: bool) -> dict:
            kept = args.resume / f"{name}.json" if args.resume else None
            if kept is not None and kept.exists():
                r = json.loads(kept.read_text())
                print(f"{name}: kept from {kept}", flush=True)
            else:
                if args.budget_s and time.monotonic() - began + job_seconds(args) > args.budget_s:
                    raise OutOfBudget(name)
                work = work_root / name
                work.mkdir()
                (work / "train").symlink_to(work_root / "train")
                r = run_job(work, hosts, elastic, args)
                if kept is not None:
                    kept.write_text(json.dumps(r))
            steps = r["steps"] = buckets(r["report"])
            r["wait_heavy"] = wait_pct(steps, r["first"] + settle, r["light_at"])
            r["wait_light"] = wait_pct(steps, r["light_at"], r["first"] + 2 * args.phase_s)
            r["host_s"] = host_seconds(r["hosts"])
            r["images_per_s"] = r["report"]["summary"]["images_per_s"]
            results[name] = r
            print(f"{name}: data wait {r['wait_heavy']:.1f} % heavy (after {settle:.0f} s), {r['wait_light']:.1f} % "
                  f"light; {r['host_s']:.0f} data-host-seconds; {r['images_per_s']} images/s", flush=True)
            return r

        settle = 0.0
        elastic = job("elastic", 1, True)
        under = [(t, w) for t, w in windows(elastic["steps"]) if t < elastic["light_at"] and w <= TARGET]
        time_to_target = (under[0][0] - elastic["first"]) if under else float("inf")
        settle = min(time_to_target, args.phase_s)
        elastic["wait_heavy"] = wait_pct(elastic["steps"], elastic["first"] + settle, elastic["light_at"])
        for line in elastic["autoscale_lines"]:
            print("  " + line.split("INFO smlaunch: ")[-1][:150])
        for change in (e for e in elastic["report"]["autoscale"]["timeline"] if e["change"]):
            gone = next((t for t, n in elastic["hosts"] if t >= change["t"] and n != change["hosts"]), None)
            lag = "not by the end" if gone is None else f"{gone - change['t']:.0f} s later"
            print(f"  {change['change']:+d} host decided at {change['t'] - elastic['first']:.0f} s; "
                  f"the joined data nodes changed {lag}")
        for t, node, activity in elastic.get("draining", []):
            print(f"  draining {node[-6:]} at {t - elastic['first']:.0f} s: {'; '.join(activity) or 'idle'}")
        fixed = None
        for n in range(1, args.max_hosts + 1):
            r = job(f"fixed-{n}", n, False)
            if r["wait_heavy"] <= TARGET:
                fixed = r
                break
        ratio = elastic["host_s"] / fixed["host_s"] if fixed else float("nan")
        smallest = (f"none up to {args.max_hosts} hosts" if fixed is None else
                    f"{len(results) - 1} hosts, {fixed['host_s']:.0f} data-host-seconds")
        print(f"elastic: {elastic['host_s']:.0f} data-host-seconds; smallest fixed size under {TARGET:g} %: {smallest}")
        draw(results, args, ROOT / "bench" / "results" / "elastic.png")
        print(f"RESULT elastic wait_pct_after={elastic['wait_heavy']:.2f} time_to_target_s={time_to_target:.1f} "
              f"host_seconds_ratio={ratio:.3f} goal=wait_pct_after<=5,time_to_target_s<=120,host_seconds_ratio<=0.8")
        return 0
    except OutOfBudget as e:
        print(f"stopped before job {e} (--budget-s {args.budget_s:g}); run the same command again to go on")
        return 3
    finally:
        shutil.rmtree(work_root, ignore_errors=True)


class OutOfBudget(Exception):
    """The next job would end past `--budget-s`."""


def draw(results: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for name, r in results.items():
        t0 = r["first"]
        top.step([t - t0 for t, _ in r["hosts"]], [n for _, n in r["hosts"]], where="post",
                 lw=2 if name == "elastic" else 1, label=f"{name} ({r['host_s']:.0f} host-s)")
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
