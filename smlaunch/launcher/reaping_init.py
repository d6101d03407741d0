#!/usr/bin/env python3
"""smlaunch-init: a PID 1 under which a SageMaker stop reaches sm-launch started by the toolkit.

SageMaker stops a job by sending SIGTERM to the container's PID 1. The training toolkit's `train`
has no handler: it dies at once without a word to its child (toolkit issue #125). sm-launch then
notices its supervisor is gone and stops at the next step boundary with a checkpoint
(`launcher.job.stopping.watch_supervisor`), if it is still alive to do so. Under the usual inits it
is not: tini, `docker --init` and dumb-init return as soon as their child does, and PID 1's exit
kills every process of the container's PID namespace (pid_namespaces(7)). A bash entry script as
PID 1 has no handler, so the kernel drops the signal and nothing learns of the stop.

This init does what a stop needs: it runs its arguments as its child, forwards SIGTERM (and
SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) to that child only, reaps every process the kernel
hands it, and exits only when no other process is left, with the child's status (128 + signal
for a signal, as a shell reports it). Each adopted process that exits (sm-launch, once `train`
is gone) gets one line on stdout, the container's log: `smlaunch-init: pid 57 (python3) exited 143`.
After the child is gone the others get `SMLAUNCH_INIT_GRACE_S` (default 115, inside SageMaker's
120 s) before they are killed, so a leftover process never keeps a finished job billed.

Standard library only, one file: put it in the image as its entrypoint,

    COPY reaping_init.py /usr/local/bin/smlaunch-init
    ENTRYPOINT ["python3", "/usr/local/bin/smlaunch-init"]

and SageMaker's `docker run <image> train` makes `train` its child. sm-launch recognises it by the
name it gives itself (`/proc/1/comm`: smlaunch-init) and says at start that a stop will be clean.
"""

import ctypes
import os
import signal
import sys
import time

NAME = b"smlaunch-init"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_NAME = 15


def _set_name() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, ctypes.c_char_p(NAME), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _status(code: int, status: int) -> int:
    """A waitid result as a shell would report it: the exit code, or 128 + the signal."""
    return status if code == os.CLD_EXITED else 128 + status


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: smlaunch-init COMMAND [ARG...]", file=sys.stderr)
        return 2
    _set_name()
    child = os.fork()
    if child == 0:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"smlaunch-init: cannot run {argv[0]}: {e}", file=sys.stderr, flush=True)
            os._exit(127)
    child_status: int | None = None

    def forward(signum, frame) -> None:
        if child_status is None:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    deadline = None
    grace_s = float(os.environ.get("SMLAUNCH_INIT_GRACE_S", "115"))
    while True:
        try:
            if deadline is None:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
            else:  # the child is gone: the others get until the deadline
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT | os.WNOHANG)
                if info is None:
                    if time.monotonic() > deadline:
                        print(f"smlaunch-init: processes still running {grace_s:g} s after {argv[0]} exited; "
                              "killing them", flush=True)
                        if os.getpid() == 1:  # kill(-1) from PID 1: every other process of its namespace only
                            os.kill(-1, signal.SIGKILL)
                        deadline = float("inf")
                    time.sleep(0.1)
                    continue
        except ChildProcessError:
            break
        name = _comm(info.si_pid)
        os.waitpid(info.si_pid, 0)
        status = _status(info.si_code, info.si_status)
        if info.si_pid == child:
            child_status = status
            deadline = time.monotonic() + grace_s
        else:
            print(f"smlaunch-init: pid {info.si_pid} ({name}) exited {status}", flush=True)
    return child_status if child_status is not None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
