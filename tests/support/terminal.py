"""Run a command as a person does in a terminal: on a pseudo-terminal of a real size, reading what
it draws. Progress bars, colour and line editing only happen there, so bugs that only a terminal
shows (tqdm_ray's missing `initial` argument crashed every run in one) need this to be caught."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time


def run_in_terminal(
    argv: list[str], env: dict, timeout_s: float, columns: int = 120, rows: int = 40, cwd=None, on_output=None
) -> tuple[int, str]:
    """(exit status, everything the command wrote to its terminal), both stdout and stderr.
    `on_output(text, proc)`: called with everything written so far after each read (a person who
    presses Ctrl-C, or a test that sends a signal, once a line is on the screen)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True, start_new_session=True, cwd=cwd
    )
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the command and every process it started closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
                if on_output is not None:
                    on_output(b"".join(chunks).decode("utf-8", errors="replace"), proc)
            elif proc.poll() is not None and not _readable(master):
                break
        else:
            proc.kill()
            raise TimeoutError(f"{argv} still running after {timeout_s} s:\n{b''.join(chunks).decode()[-3000:]}")
        return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", errors="replace")
    finally:
        os.close(master)


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""Terminal control sequences (colours, cursor moves): a screen shows none of them."""


def screen_lines(output: str) -> list[str]:
    """The lines a person is left looking at: each line as its last carriage return left it, without
    control sequences, blank ones dropped."""
    lines = [ESCAPES.sub("", line).rsplit("\r", 1)[-1] for line in output.replace("\r\n", "\n").split("\n")]
    return [line for line in lines if line.strip()]
