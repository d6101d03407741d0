"""This host's Ray node as a child process that cannot outlive the launcher.

`ray stop` kills every Ray process on a machine, which is wrong when several simulated hosts
share one, and a launcher killed with SIGKILL would leave `ray start` daemons running (and a
billed host busy). So each host runs `ray start --block` as its own child: SIGTERM to that child
makes Ray kill exactly the processes of this node, and the kernel sends it SIGTERM when the
launcher dies (PR_SET_PDEATHSIG). The token reaches it through the environment, never argv.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1
RAY_CLI = "from ray.scripts.scripts import main; main()"


def die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except OSError:  # not Linux: the launcher's own cleanup still stops the node
        pass


def start_args(
    host, *, head_address: str | None, node_ip: str, port: int, temp_dir: str, object_store_bytes: int | None = None
) -> list[str]:
    """`ray start` arguments for `host` (a HostPlan): head when `head_address` is None.

    Each node gets its own temp dir (sockets, logs, spill files), as a real host has its own
    /tmp: in a shared one Ray numbers socket files with a check-then-create race, and two
    simulated hosts starting at once bind the same plasma socket ("Address already in use").
    """
    args = [
        "start",
        f"--node-ip-address={node_ip}",
        f"--num-cpus={host.num_cpus}",
        f"--temp-dir={temp_dir}",
        f"--num-gpus={host.num_gpus}",
        "--labels=" + ",".join(f"{k}={v}" for k, v in host.labels.items()),
        "--disable-usage-stats",
        "--block",
    ]
    if head_address is None:
        args += ["--head", f"--port={port}", "--include-dashboard=false", "--dashboard-host=127.0.0.1"]
    else:
        args += [f"--address={head_address}"]
    if object_store_bytes:
        args.append(f"--object-store-memory={object_store_bytes}")
    return args


def worker_pool_env(num_cpus: int) -> dict[str, str]:
    """The raylet settings of a host of `num_cpus` Ray CPUs: its idle workers kept up to the tasks
    the job runs on it at once (a chain task and a read task per CPU, and the validation
    channel's), every path that starts a node (local, SageMaker, KubeRay pods) passing them to its raylet.

    Ray keeps at most `num_cpus` idle workers by default (`num_workers_soft_limit`) and kills the
    rest after a second idle. The job's read tasks take no CPU of Ray's (`dataset.read_channel`),
    so a data host runs twice its CPUs in tasks: between tasks Ray killed workers and started new
    ones, and each new one imported torch again for its first chain task. On a 4-CPU node, a pass
    over 100,000 small JPEGs started 3-9 workers and used 500-650 us of CPU per image; with the
    pool kept, none and 274-282 us (7,000 images/s against 3,500-3,900; BENCHMARKS.md, scale
    2026-11-29, evening)."""
    return {"RAY_num_workers_soft_limit": str(2 * num_cpus + 2)}


def keep_ray_logs(session_logs: Path, target: Path, max_file_bytes: int = 50 * 2**20) -> Path | None:
    """Copy a Ray session's `logs/` to `target` (files over `max_file_bytes` left out), so they
    outlive the node's temp dir; None when there was nothing to copy."""

    def too_big(directory, names):
        return [
            n
            for n in names
            if (Path(directory) / n).is_file() and (Path(directory) / n).stat().st_size > max_file_bytes
        ]

    if not session_logs.is_dir():
        return None
    try:
        shutil.copytree(session_logs, target, ignore=too_big, dirs_exist_ok=True, symlinks=True)
    except (OSError, shutil.Error):
        return None
    return target


class RayNode:
    """`ray start --block ...` run as a child; `stop()` ends this node's processes and only them."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str], temp_dir: str | None = None):
        self.args = args
        self.temp_dir = temp_dir
        self.log_path = log_path
        self.env = env
        self.process: subprocess.Popen | None = None

    def start(self) -> RayNode:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", RAY_CLI, *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        return self

    def exit_code(self) -> int | None:
        """None while the node runs."""
        return None if self.process is None else self.process.poll()

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text[-lines:])

    def stop(self, timeout_s: float = 20.0, keep_temp: bool = False) -> None:
        """SIGTERM (Ray kills its node's processes), then SIGKILL the group after `timeout_s`.

        The node's temp dir (Ray's logs) is removed unless `keep_temp`, kept to diagnose a failure.
        """
        self._stop(timeout_s)
        if self.temp_dir and not keep_temp:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _stop(self, timeout_s: float) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=5)
