"""Which process started sm-launch, and whether SageMaker's SIGTERM can reach it. Standard library
only: the entry script imports this before anything is installed.

SageMaker stops a job (StopTrainingJob, MaxRuntime, a spot interruption) as `docker stop` does:
SIGTERM to the container's PID 1, SIGKILL 120 s later. In container mode sm-launch is PID 1. Under
the training toolkit the signal goes to whatever the image runs as PID 1:

- the toolkit's `train` or a forwarding init gets it and, for `train`, exits at once without a word
  to its child (toolkit issue #125): the launcher watches its supervisor (`stopping.watch_supervisor`)
  and stops when it is gone;
- a PID 1 with no SIGTERM handler (a bash entry script, as in AWS's framework images, or `train`
  itself) never sees it: the kernel drops signals to a namespace's init that it does not handle
  (pid_namespaces(7)). Nothing in the container learns of the stop; `pid1_ignores_sigterm` lets
  the entry script say so at start.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

SUPERVISOR_ENV = "SMLAUNCH_SUPERVISOR"
"""Where the entry script passes `supervisor()` to the launcher it execs."""
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "busybox"})


def process_stat(pid: int) -> tuple[str, int, str] | None:
    """(state, parent pid, start time in clock ticks) of `pid` from /proc, None if it is gone.
    The start time tells a process from a later one that reuses its pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    return fields[0], int(fields[1]), fields[19]


def supervisor(pid: int | None = None) -> str | None:
    """`pid:start` of the process that started `pid` (default: this one), looking through shells
    (`sh -c ...`). None for PID 1 itself and for a supervisor that is PID 1: it cannot exit
    without the whole container going (PID 1's exit kills its namespace), so there is nothing to watch."""
    pid = os.getpid() if pid is None else pid
    while pid != 1 and (stat := process_stat(pid)) is not None:
        parent = stat[1]
        parent_stat = process_stat(parent) if parent > 1 else None
        if parent_stat is None:
            return None
        try:
            comm = Path(f"/proc/{parent}/comm").read_text().strip()
        except OSError:
            return None
        if comm not in SHELLS:
            return f"{parent}:{parent_stat[2]}"
        pid = parent
    return None


def is_alive(watched: str) -> bool:
    """Whether `pid:start` (from `supervisor`) still runs: an exited process left unreaped (a
    zombie) is gone, and so is a pid now held by a later process."""
    pid, start = watched.split(":", 1)
    stat = process_stat(int(pid))
    return stat is not None and stat[0] not in ("Z", "X") and stat[2] == start


def pid1_ignores_sigterm() -> str | None:
    """PID 1's name if it has no SIGTERM handler (its `SigCgt` mask), so the kernel drops a `docker
    stop`'s signal to it; None if it has one, if this process is PID 1, or if /proc says nothing."""
    if os.getpid() == 1:
        return None
    try:
        status = dict(line.split(":", 1) for line in Path("/proc/1/status").read_text().splitlines() if ":" in line)
        caught = int(status["SigCgt"].strip(), 16)
        name = status["Name"].strip()
    except (OSError, KeyError, ValueError):
        return None
    return None if caught >> (signal.SIGTERM - 1) & 1 else name
