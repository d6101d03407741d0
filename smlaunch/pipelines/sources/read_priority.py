"""A read task's work at a lower CPU priority than the chain's, in a thread of its own.

Read tasks take no CPU of Ray's (`dataset.read_channel`): one per CPU of a data host runs beside
the chain's tasks, also one per CPU, on the same cores. Small files are read far faster than the
chain decodes them, so at a pass's start the reads ran ahead on half the host's cores until Ray
Data's object-store budget held them back (47 blocks, 39 MiB, queued for the chain within 5 s of
a 1.28M-file pass), and the chain tasks the first batches waited for ran at half speed: on
bench/scale.py's 2-CPU data host the first batch came 6 s after the first block was read. Niced,
the reads take the cores the chain leaves: when the chain waits for blocks, they run at full speed.

A thread, not the process: the task's other thread hands the blocks to Ray, which the chain waits
for, and a process cannot raise its priority back without CAP_SYS_NICE (read tasks have worker
processes of their own, `dataset.READ_WORKER_ENV`, but a worker lives on for the next task); a
Linux thread is a task of its own to the scheduler, and its priority ends with it. Elsewhere
(macOS) the reads keep their priority.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections.abc import Iterator

READ_NICE = 10
"""How much lower the reads' priority is. Ray starts its workers at nice 15 (`RAY_worker_niceness`),
so the reads run at 19, the floor: a busy read thread gets about 30 % of what a busy chain process
gets when they compete (Linux weights 15 and 36). `SCHED_IDLE` (weight 3) was tried: a 4-CPU
node's pass was no faster, and with the train host's processes on the same cores (a local run) a
1-CPU data host's first step on the 1.28M-file folder came 5.2 s after the small folder's, against
1.7-3.1 s niced: reads at idle priority wait for every other process, not only the chain."""

_DONE = object()


def behind_the_chain(blocks: Iterator, ahead: int = 2) -> Iterator:
    """`blocks`, made in a thread at `READ_NICE` lower priority, at most `ahead` of the consumer;
    an error raised while making them is raised here, as it was."""
    handed: queue.Queue = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def hand(item) -> bool:
        while not stop.is_set():
            try:
                handed.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def make() -> None:
        _lower_this_thread()
        try:
            for block in blocks:
                if not hand((None, block)):
                    return
            hand((_DONE, None))
        except BaseException as exc:  # raised in the consumer's thread
            hand((exc, None))
        finally:
            with contextlib.suppress(Exception):
                close = getattr(blocks, "close", None)  # a generator's; a plain iterator has none
                if close is not None:
                    close()  # this thread ran it: its files are closed here

    maker = threading.Thread(target=make, name="smlaunch-read", daemon=True)
    maker.start()
    try:
        while True:
            try:
                error, block = handed.get(timeout=1.0)
            except queue.Empty:
                if maker.is_alive():
                    continue
                return
            if error is _DONE:
                return
            if error is not None:
                raise error
            yield block
    finally:
        stop.set()


def _lower_this_thread() -> None:
    if not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + READ_NICE)
