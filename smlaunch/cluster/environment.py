"""Reading this machine once, at the edge: its CPUs and GPUs, and its PID 1 (SageMaker's job files: `sagemaker_env`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from smlaunch.cluster.plan import LocalEnvironment

SIMULATED_HOST_ENV = "SMLAUNCH_SIMULATED_HOST"
"""Set by `sm-launch simulate` for its host processes: they are no containers, so this machine's
PID 1 says nothing about how a stop would reach them."""


def detect_local_environment() -> LocalEnvironment:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    from smlaunch.cluster.process_tree import read_pid1

    return LocalEnvironment(
        cpus=cpus,
        gpus=count_gpus(),
        started=time.strftime("%Y%m%d-%H%M%S"),
        memory_bytes=_memory_bytes(),
        pid1=None if os.environ.get(SIMULATED_HOST_ENV) else read_pid1(),
    )


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def count_gpus() -> int:
    """GPUs `nvidia-smi -L` lists (the toolkit's method), 0 without a driver; bounded to 10 s."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
