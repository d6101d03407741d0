"""A Ray cluster with a real autoscaler on this machine: Ray's fake multi-node provider, whose
"nodes" are real raylets started by the autoscaler's monitor, labels included. The tests and
bench/elastic.py run elastic data hosts on it; on a laptop it is the way to try `autoscale:`
before a KubeRay cluster.

Started by hand (`ray start --head --autoscaling-config=...`), as ../shared/notes/ray.md says:
`ray.cluster_utils.AutoscalingCluster` needs the provider's example.yaml, which Ray's wheel lacks,
and its start and shutdown run `ray stop --force`, which would end every Ray process on the machine,
other tests' included. This one is ended by pid: every process whose command line names its own
temporary directory (the head's daemons, the monitor, each fake node's raylet and agents).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from smlaunch._ray_compat import FAKE_NODE_PROVIDER

HEAD_ID = "fffffffffffffffffffffffffffffffffffffffffffffffffff00000"
"""The provider's id for the head (what `RAY_OVERRIDE_NODE_ID_FOR_TESTING` makes it)."""


class AutoscalingCluster:
    """`node_types`: name -> {"resources": {...}, "labels": {...}, "max_workers": n[, "min_workers": n]},
    the worker types."""

    def __init__(
        self, node_types: dict[str, dict], head_labels: dict[str, str], head_cpus: int = 1, idle_timeout_s: float = 10.0
    ):
        from smlaunch.cluster.rendezvous import free_port

        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.tmp = Path(tempfile.mkdtemp(prefix="smas", dir="/tmp"))  # short: Ray's socket paths
        types = {
            "ray.head.default": {
                "resources": {"CPU": head_cpus},
                "labels": head_labels,
                "node_config": {},
                "max_workers": 0,
            }
        }
        for name, spec in node_types.items():
            types[name] = {
                "resources": spec["resources"],
                "labels": spec.get("labels", {}),
                "node_config": {},
                "min_workers": spec.get("min_workers", 0),
                "max_workers": spec["max_workers"],
            }
        config = {
            "cluster_name": self.tmp.name,
            "max_workers": sum(t["max_workers"] for t in node_types.values()),
            "idle_timeout_minutes": idle_timeout_s / 60,
            "upscaling_speed": 1.0,
            "provider": {
                "type": "external",
                "module": FAKE_NODE_PROVIDER,
                "gcs_address": self.address,
                "launch_multiple": True,
                "head_node_id": HEAD_ID,
                "use_node_id_as_ip": True,
                "disable_node_updaters": True,
                "disable_launch_config_check": True,
            },
            "auth": {"ssh_user": "ubuntu"},
            "available_node_types": types,
            "head_node_type": "ray.head.default",
            "file_mounts": {},
            "cluster_synced_files": [],
            "initialization_commands": [],
            "setup_commands": [],
            "head_setup_commands": [],
            "worker_setup_commands": [],
        }
        self.config = self.tmp / "autoscaling.yaml"
        self.config.write_text(yaml.safe_dump(config))
        self.env = {
            **os.environ,
            "RAY_FAKE_CLUSTER": "1",
            "RAY_enable_autoscaler_v2": "1",
            "RAY_CLOUD_INSTANCE_ID": HEAD_ID,
            "RAY_OVERRIDE_NODE_ID_FOR_TESTING": HEAD_ID,
            "AUTOSCALER_UPDATE_INTERVAL_S": "1",
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        self.env.pop("RAY_ADDRESS", None)
        self.head_labels, self.head_cpus = head_labels, head_cpus

    def start(self) -> AutoscalingCluster:
        import json

        ray = [sys.executable, "-m", "ray.scripts.scripts"]  # the `ray` CLI of this interpreter, wherever installed
        done = subprocess.run(
            [
                *ray,
                "start",
                "--head",
                "--node-ip-address=127.0.0.1",
                f"--port={self.port}",
                f"--num-cpus={self.head_cpus}",
                f"--labels={json.dumps(self.head_labels)}",
                "--include-dashboard=false",
                f"--temp-dir={self.tmp / 'ray'}",
                f"--autoscaling-config={self.config}",
            ],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray start failed: {done.stderr[-2000:]}")
        return self

    def lower_worker_priority(self, nice: int = 19) -> int:
        """Run the worker nodes below the head: every process the autoscaler's monitor started (the
        fake nodes' raylets, agents and workers), each thread of each, at the idle priority
        (`lower_priority`). Not the monitor itself: it is the head's, and a real head's autoscaler
        has its own CPU. On one machine the fake nodes share the head's cores; a real data host has
        its own, so a host that starts mid-run (its raylet, agents and chain workers importing torch:
        bench/elastic.py on 2 cores read the trainer at 31 images/s for 20 s after a join, 57 before
        and after) must not take the trainer's. Returns how many threads were set; call again after
        nodes start (each second, as bench/elastic.py does), it is cheap."""
        import psutil

        mine, count = str(self.tmp), 0
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                line = " ".join(proc.info["cmdline"] or [])
                if mine in line and "monitor.py" in line:
                    for p in proc.children(recursive=True):
                        count += lower_priority(p.pid, nice)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return count

    def count_nodes(self, labels: dict[str, str]) -> int:
        """Alive nodes carrying `labels`, asked by a driver of its own (a process that is not
        connected stays so; the answer is the cluster's, not a stale view)."""
        code = (
            f"import ray; ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False); "
            f"print('nodes:', sum(1 for n in ray.nodes() if n['Alive'] and all(n['Labels'].get(k) == v for k, v "
            f"in {dict(labels)!r}.items())))"
        )
        env = {
            k: v
            for k, v in self.env.items()
            if k not in ("RAY_OVERRIDE_NODE_ID_FOR_TESTING", "RAY_CLOUD_INSTANCE_ID", "RAY_FAKE_CLUSTER")
        }
        ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        if ran.returncode != 0:
            raise RuntimeError(f"could not count the nodes of {self.address}: {ran.stderr[-1000:]}")
        # The raylets' warnings reach this driver's stdout too, before or after the count (a node's
        # "12 PYTHON worker processes have been started" came last once): the count is the marked line.
        return int(next(line for line in ran.stdout.splitlines() if line.startswith("nodes: ")).split()[1])

    def stop(self, keep_logs: Path | None = None) -> None:
        """Every process of this cluster, by pid (never `ray stop`), then its directory. Found by
        the cluster's directory in their command line and as their children: a raylet's dashboard
        and runtime-env agents name themselves `ray::...` and were left running after every stop.
        `keep_logs`: a folder that keeps the autoscaler's and the GCS's logs (which nodes it started
        and ended, and why) once the directory goes."""
        import psutil

        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            for log in sorted((self.tmp / "ray").glob("session_2*/logs/*")):
                if log.name.startswith(("monitor.", "gcs_server.")) and log.is_file():
                    shutil.copy2(log, keep_logs / log.name)

        mine = str(self.tmp)
        for _ in range(3):
            found = []
            for proc in psutil.process_iter(["pid", "cmdline"]):
                try:
                    if proc.info["pid"] != os.getpid() and mine in " ".join(proc.info["cmdline"] or []):
                        found.append(proc)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            if not found:
                break
            for proc in list(found):  # a raylet's agents rename themselves (`ray::DashboardAgent`): its children
                try:
                    found += [c for c in proc.children(recursive=True) if c not in found]
                except psutil.NoSuchProcess:
                    pass
            for proc in found:
                try:
                    proc.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(found, timeout=5)
            time.sleep(0.5)
        shutil.rmtree(self.tmp, ignore_errors=True)


def lower_priority(pid: int, nice: int, idle: bool = True) -> int:
    """Every thread of process `pid` at `nice` and, with `idle`, under `SCHED_IDLE`; returns how
    many threads were changed. Linux keeps a priority per thread, and `setpriority(PRIO_PROCESS,
    pid)` (psutil's `nice()`) sets only the thread whose id is `pid`: a fake node's raylet lowered so
    kept 16 of its 28 threads at 0, and a Ray worker (whose first thread Ray sets to 15 once the
    others run) 20 of its 22. Nice 19 alone still left the trainer waiting for a core 0.1-0.2 s a
    second beside the data hosts (bench/elastic.py's cached arm, `cpu_roles`): under `SCHED_IDLE`
    a thread runs only on a core nothing else wants, and a waking trainer takes the core from it at
    once, as a real data host's work never delays the GPU host's. A thread started later inherits
    its starter's settings."""
    count = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:  # gone, or not Linux
        return 0
    for tid in map(int, threads):
        try:
            changed = False
            if os.getpriority(os.PRIO_PROCESS, tid) != nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                changed = True
            if idle and os.sched_getscheduler(tid) != os.SCHED_IDLE:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                changed = True
            count += changed
        except OSError:  # the thread ended, or a higher priority than ours (needs CAP_SYS_NICE)
            continue
    return count
