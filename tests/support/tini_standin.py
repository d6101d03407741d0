"""A stand-in for tini where tini is not installed: what a stop meets under it, nothing more.

tini runs its arguments as its child, forwards SIGTERM and the like to that child, reaps zombies,
and returns the child's exit code as soon as the child exits (its main loop: `if (child_exitcode
!= -1) return child_exitcode;`), whatever else still runs. As a PID namespace's init, that return
kills every other process of the namespace. It names itself `tini` (`/proc/1/comm`), as the
binary does. tests/launcher/job/test_pid1_kinds.py checks this stand-in against the real tini
where one is installed.
"""

import ctypes
import os
import signal
import sys


def main(argv: list[str]) -> int:
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(b"tini"), 0, 0, 0)  # PR_SET_NAME
    child = os.fork()
    if child == 0:
        os.execvp(argv[0], argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda signum, frame: os.kill(child, signum))
    while True:
        pid, status = os.wait()
        if pid == child:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
