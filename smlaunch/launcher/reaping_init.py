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
for a signal, as a shell reports it; after a stop that is `train`'s 143, and SageMaker marks the
job Stopped whatever it is). Each adopted process that exits (sm-launch, once `train` is gone) gets
one line on stdout, the container's log: `smlaunch-init: pid 57 (python3) exited 143`. Once the
child is gone the others get `SMLAUNCH_INIT_GRACE_S` (default 115, inside SageMaker's 120 s) after
a stop, 10 s after a normal end, then SIGTERM, then SIGKILL 5 s later: a leftover process keeps a
finished job billed for 15 s at most. Not PID 1 (under `docker run --init`), it makes itself a
child subreaper (prctl), so orphans still come to it and it still waits for them.

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
from types import FrameType
from typing import TypedDict

NAME = b"smlaunch-init"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36


class _State(TypedDict):
    child: int | None
    """The child's pid, once forked."""
    status: int | None
    """The child's status, once reaped."""
    signalled: int | None
    """The first forwarded signal."""
    pending: list[int]
    """Signals that came before the fork, forwarded once it is done."""


def _prctl(option: int, value) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _set_name() -> None:
    _prctl(PR_SET_NAME, ctypes.c_char_p(NAME))


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
    if os.getpid() != 1:  # under another init (docker run --init): orphans still come here
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    state: _State = {"child": None, "status": None, "signalled": None, "pending": []}

    def forward(signum: int, frame: FrameType | None) -> None:
        state["signalled"] = state["signalled"] or signum
        if state["child"] is None:  # not forked yet: passed on as soon as it is
            state["pending"].append(signum)
        elif state["status"] is None:
            try:
                os.kill(state["child"], signum)
            except ProcessLookupError:
                pass

    for sig in FORWARDED:  # before the fork, so a stop that comes during it is not lost
        signal.signal(sig, forward)
    child = os.fork()
    if child == 0:
        # as subprocess's restore_signals: Python ignores SIGPIPE and SIGXFSZ, and an exec keeps that
        for sig in (*FORWARDED, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"smlaunch-init: cannot run {argv[0]}: {e}", file=sys.stderr, flush=True)
            os._exit(127)
    state["child"] = child
    for signum in state["pending"]:
        forward(signum, None)
    return _reap(child, state, argv[0])


def _reap(child: int, state: _State, name: str) -> int:
    """Reap every process until none is left; the child's status. Once the child is gone the others
    get `SMLAUNCH_INIT_GRACE_S` (115 s, inside SageMaker's 120) after a stop, 10 s after a normal
    end, then SIGTERM, then SIGKILL 5 s later."""
    deadline: float | None = None
    escalation = iter((signal.SIGTERM, signal.SIGKILL))
    while True:
        try:
            flags = os.WEXITED | os.WNOWAIT | (os.WNOHANG if deadline is not None else 0)
            info = os.waitid(os.P_ALL, 0, flags)
        except ChildProcessError:
            break
        if info is None:  # the child is gone and others still run
            assert deadline is not None, "waitid returns no process only with WNOHANG, once the deadline is set"
            if time.monotonic() > deadline:
                sig = next(escalation, None)
                if sig is not None:
                    print(
                        f"smlaunch-init: processes still running after {name} exited; sending "
                        f"{signal.Signals(sig).name}",
                        flush=True,
                    )
                    _signal_the_rest(sig)
                deadline = time.monotonic() + 5
            time.sleep(0.1)
            continue
        comm = _comm(info.si_pid)
        os.waitpid(info.si_pid, 0)
        status = _status(info.si_code, info.si_status)
        if info.si_pid == child:
            state["status"] = status
            grace = float(os.environ.get("SMLAUNCH_INIT_GRACE_S", "115")) if state["signalled"] else 10.0
            deadline = time.monotonic() + grace
        else:
            print(f"smlaunch-init: pid {info.si_pid} ({comm}) exited {status}", flush=True)
    return state["status"] if state["status"] is not None else 0


def _signal_the_rest(sig: int) -> None:
    """`sig` to every process left: all of the namespace from PID 1, else each child of this subreaper."""
    if os.getpid() == 1:
        os.kill(-1, sig)  # from PID 1: every other process of its namespace, never itself
        return
    try:
        children = open(f"/proc/self/task/{os.getpid()}/children").read().split()
    except OSError:
        children = []
    for pid in children:
        try:
            os.kill(int(pid), sig)
        except (ProcessLookupError, ValueError):
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
