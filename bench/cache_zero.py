"""bench/cache.py's second pair: the same 4-epoch job on a Ray cluster whose autoscaler starts real
raylets (`cluster.autoscale.fake_cluster`, as bench/elastic.py), uncached on a fixed data host, and
cached with `autoscale.min_data_hosts: 0`, where the data host is given back once the cache is
sealed and epochs 2-4 run the random rest of the chain on the train host's spare CPUs (issue 80,
item 6). The data host's CPU seconds are read from its processes (its raylet and every process under
it, sampled every half second until each ends), the same way for both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from elastic_jobs import DATA_LABELS, ROOT, ask_first_hosts  # bench/, this script's folder

DATA_CPUS = 1
"""The data host's Ray CPUs: bench/cache.py's 1-CPU data host."""


def attached_config(base: dict, data: Path, folder: Path, cache: bool) -> Path:
    """`base` (bench/cache.py's job) with the groups and channel of an attached run; the cache on a
    folder every simulated host sees, with `min_data_hosts: 0`, or off on a fixed host."""
    import yaml

    cfg = json.loads(json.dumps(base))
    cfg["cluster"] = {
        "instance_groups": [
            {"name": "train_group", "instance_type": "ml.g5.xlarge", "instance_count": 1},
            {"name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
        ]
    }
    cfg["channels"] = {
        "train": {"source": str(data), "record_format": "image_folder", "instance_groups": ["data_group"]}
    }
    cfg["pipeline"].update(cache=cache, cache_dir=str(folder / "cache"))
    cfg["run"] = {"dir": str(folder / "runs"), "name": "job"}
    if cache:
        cfg["autoscale"] = {
            "min_data_hosts": 0,
            "max_data_hosts": 1,
            "target_data_wait_pct": 5,
            "cooldown_s": 6,
            "window_steps": 10,
        }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


class DataHostCpu:
    """CPU seconds of the fake data nodes' processes (every process under the cluster's monitor,
    which starts them), each process's last reading kept once it ends (a process's last half second
    before it ends is missed)."""

    def __init__(self, cluster):
        self.cluster, self.seen, self._stop = cluster, {}, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        mine = str(self.cluster.tmp)
        while not self._stop.wait(0.5):
            for proc in psutil.process_iter(["pid", "cmdline"]):
                try:
                    if mine in " ".join(proc.info["cmdline"] or []) and "monitor.py" in " ".join(proc.info["cmdline"]):
                        for p in proc.children(recursive=True):
                            t = p.cpu_times()  # its own only: a reaped child's also lands in its parent's
                            self.seen[p.pid] = t.user + t.system
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join(timeout=5)

    def seconds(self) -> float:
        return sum(self.seen.values())


def run_attached(workdir: Path, data: Path, base: dict, cache: bool) -> dict:
    """One attached job to its end: its data host's CPU seconds, rows and images/s, and its sizes."""
    from smlaunch.cluster.autoscale.fake_cluster import AutoscalingCluster

    folder = workdir / ("zero-cached" if cache else "zero-uncached")
    folder.mkdir(parents=True)
    config = attached_config(base, data, folder, cache)
    cluster = AutoscalingCluster(
        {
            "data": {
                "resources": {"CPU": DATA_CPUS},
                "labels": DATA_LABELS,
                "min_workers": 0 if cache else 1,
                "max_workers": 1,
            }
        },
        head_labels={"ray-subcluster": "train", "sm-group": "train_group"},
        head_cpus=4,
        idle_timeout_s=6,
    ).start()
    env = {**cluster.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), cluster.env.get("PYTHONPATH")]))}
    for key in ("RAY_OVERRIDE_NODE_ID_FOR_TESTING", "RAY_CLOUD_INSTANCE_ID", "RAY_FAKE_CLUSTER"):
        env.pop(key, None)
    started = time.monotonic()
    try:
        with DataHostCpu(cluster) as cpu:
            if cache:
                ask_first_hosts(cluster, env, 1, cpus=DATA_CPUS)
            while cluster.count_nodes(DATA_LABELS) < 1:
                if time.monotonic() - started > 120:
                    raise RuntimeError("the fake cluster started no data node in 120 s")
                time.sleep(1)
            done = subprocess.run(
                [sys.executable, "-m", "smlaunch", "run", str(config), "--address", cluster.address],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=1800,
            )
            if done.returncode:
                raise SystemExit(f"attached job failed:\n{(done.stdout + done.stderr)[-3000:]}")
            time.sleep(1)
    finally:
        cluster.stop()
    report = json.loads((folder / "runs" / "job" / "output" / "data" / "report.json").read_text())
    rows = sum(e["rows"] for e in report["sample_accounting"]["epochs"])
    out = {
        "cache": cache,
        "cpu_s": round(cpu.seconds(), 2),
        "rows": rows,
        "cpu_per_row_ms": round(1000 * cpu.seconds() / rows, 3),
        "images_per_s": report["summary"]["images_per_s"],
        "sizes": (report.get("autoscale") or {}).get("sizes"),
        "wall_s": round(time.monotonic() - started, 1),
    }
    print(json.dumps(out), flush=True)
    return out
