"""Hosts as containers: each in a PID namespace of its own (`unshare -pf --mount-proc`), whose PID 1
is the image's init or entry script. Used by the stop tests (tests/launcher/job)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAPING = [sys.executable, str(ROOT / "smlaunch" / "launcher" / "reaping_init.py")]
"""smlaunch-init, as the image recipe of docs/sagemaker.md runs it."""
STAND_IN = [sys.executable, str(ROOT / "tests" / "support" / "tini_standin.py")]


def refused() -> str | None:
    """Why this kernel (or user) cannot make PID namespaces; None where it can."""
    try:
        done = subprocess.run(["unshare", "-pf", "--mount-proc", "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return None if done.returncode == 0 else done.stderr.strip() or f"exit {done.returncode}"


def pid1_of(unshare: subprocess.Popen, timeout_s: float = 10) -> int:
    """The host pid of the namespace's PID 1: `unshare -f`'s only child."""
    deadline = time.monotonic() + timeout_s
    children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children")
    while time.monotonic() < deadline:
        if children.exists() and children.read_text().split():
            return int(children.read_text().split()[0])
        time.sleep(0.02)
    raise TimeoutError("unshare started no PID 1")


def launcher_pids(unshares: dict[str, subprocess.Popen]) -> dict[str, int]:
    """Each host's sm-launch (host pid), found below its namespace's PID 1."""
    import psutil

    found = {}
    for host, unshare in unshares.items():
        for child in psutil.Process(pid1_of(unshare)).children(recursive=True):
            if "smlaunch.launcher.cli" in " ".join(child.cmdline()):
                found[host] = child.pid
    return found


def pid_inside(pid: int) -> int:
    """`pid`'s number in its own (innermost) PID namespace."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    return pid


REFUSED = refused()
if REFUSED and os.environ.get("CI"):
    raise RuntimeError(f"CI's machine must run the PID-namespace tests, but unshare -pf fails: {REFUSED}")
needs_pid_namespaces = pytest.mark.skipif(REFUSED is not None, reason=f"this kernel refuses PID namespaces: {REFUSED}")
"""Where the kernel (or a container without CAP_SYS_ADMIN) refuses PID namespaces, a test of stops as
containers meet them cannot run; on CI that is an error, not a skip."""
