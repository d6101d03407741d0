"""Which process started sm-launch, what the container's PID 1 is, and whether SageMaker's SIGTERM
can reach sm-launch through it. Standard library only: the entry script imports this before
anything is installed.

SageMaker stops a job (StopTrainingJob, MaxRuntime, a spot interruption) as `docker stop` does:
SIGTERM to the container's PID 1, SIGKILL 120 s later. In container mode sm-launch is PID 1. Under
the training toolkit the signal goes to whatever the image runs as PID 1, and what happens then
depends on it (`Pid1.kind`; tried in real PID namespaces by tests/launcher/job/test_pid1_kinds.py):

- an init that forwards the signal and exits when its child does (tini, `docker --init`,
  dumb-init, podman's catatonit): `train` has no handler and dies at once (toolkit issue #125), the
  init follows it, and PID 1's exit kills every process of the namespace (pid_namespaces(7)):
  sm-launch is killed before it can even record the stop;
- an init that forwards the signal and then waits until no other process is left
  (`launcher/reaping_init.py`, "smlaunch-init"): `train` dies, the launcher sees its supervisor
  gone (`stopping.watch_supervisor`), checkpoints and exits 143;
- a PID 1 with no SIGTERM handler (a bash entry script, as in AWS's framework images, or `train`
  itself): the kernel drops the signal, nothing in the container learns of the stop, and
  SageMaker's SIGKILL ends the job 120 s later.

For the two unsafe kinds (and a PID 1 this module does not know) the only protection left is to
checkpoint on a timer (`trainer.checkpoint_every_s`, `cluster.sagemaker.plan`).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

SUPERVISOR_ENV = "SMLAUNCH_SUPERVISOR"
"""Where the entry script passes `supervisor()` to the launcher it execs."""
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "busybox"})
EXITS_WITH_CHILD = frozenset({"tini", "tini-static", "docker-init", "dumb-init", "catatonit"})
"""Inits that return when their child exits (tini's main loop: `if (child_exitcode != -1) return
child_exitcode;`; `docker run --init` is tini as /sbin/docker-init; podman's is catatonit)."""
REAPING_INIT = "smlaunch-init"
"""The name (`/proc/1/comm`) `launcher/reaping_init.py` gives itself."""


def process_stat(pid: int) -> tuple[str, int, str] | None:
    """(state, parent pid, start time in clock ticks) of `pid` from /proc, None if it is gone.
    The start time tells a process from a later one that reuses its pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
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


@dataclass(frozen=True)
class Pid1:
    """The container's PID 1 as a stop will meet it."""

    name: str
    """`/proc/1/comm`."""
    command: str
    """`/proc/1/cmdline`, its words joined (cut to 160 characters)."""
    kind: str
    """`launcher` (sm-launch is PID 1: container mode), `reaping` (smlaunch-init), `exits_with_child`
    (tini and the like), `no_handler` (the kernel drops SIGTERM), `unknown` (a SIGTERM handler, an
    init this module does not know) or `unreadable` (/proc/1 says nothing here)."""

    @property
    def stop_is_clean(self) -> bool:
        """Whether a stop reaches sm-launch and lets it checkpoint and exit 143."""
        return self.kind in ("launcher", "reaping")

    def what_a_stop_does(self) -> str:
        """What a SageMaker stop will do under this PID 1, in a clause."""
        who = f"PID 1 is {self.name} ({self.command})"
        return {
            "launcher": "PID 1 is sm-launch itself (sagemaker.entry: container): a stop checkpoints at the next "
            "step boundary and exits 143",
            "reaping": f"{who}, which forwards SIGTERM to the toolkit and waits for every process: a stop "
            "checkpoints at the next step boundary and exits 143",
            "exits_with_child": f"{who}, which exits as soon as the toolkit does: a stop kills sm-launch with it, "
            "before any checkpoint",
            "no_handler": f"{who}, which has no SIGTERM handler: the kernel drops a stop's signal, nothing here "
            "learns of it, and SageMaker kills the job 120 s later without a checkpoint",
            "unknown": f"{who}, which handles SIGTERM: a stop checkpoints only if it forwards the signal to the "
            "toolkit and then waits until every other process has exited",
            "unreadable": "PID 1 cannot be read here (/proc/1): whether a stop reaches sm-launch is not known",
        }[self.kind]


def read_pid1(proc: Path = Path("/proc")) -> Pid1:
    """This PID namespace's PID 1, from /proc (`unreadable` where it does not say: no /proc, hidepid)."""
    if os.getpid() == 1:
        return Pid1("sm-launch", " ".join(_cmdline(Path("/proc/self"))), "launcher")
    try:
        name = (proc / "1" / "comm").read_text().strip()
        status = dict(line.split(":", 1) for line in (proc / "1" / "status").read_text().splitlines() if ":" in line)
        caught = int(status["SigCgt"].strip(), 16)
    except (OSError, KeyError, ValueError):
        return Pid1("?", "?", "unreadable")
    command = " ".join(_cmdline(proc / "1"))[:160] or name
    if name == REAPING_INIT:
        kind = "reaping"
    elif name in EXITS_WITH_CHILD:
        kind = "exits_with_child"
    elif not caught >> (signal.SIGTERM - 1) & 1:
        kind = "no_handler"
    else:
        kind = "unknown"
    return Pid1(name, command, kind)


def _cmdline(proc_pid: Path) -> list[str]:
    try:
        return [w for w in (proc_pid / "cmdline").read_bytes().decode(errors="replace").split("\0") if w]
    except OSError:
        return []
