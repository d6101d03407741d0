"""A read task's work at a lower CPU priority than the chain's, in a thread of its own.

Read tasks take no CPU of Ray's (`dataset.read_channel`): one per CPU of a data host runs beside
the chain's tasks, also one per CPU, on the same cores. Small files are read far faster than the
chain decodes them, so at a pass's start the reads ran ahead on half the host's cores until Ray
Data's object-store budget held them back (47 blocks, 39 MiB, queued for the chain within 5 s of
a 1.28M-file pass), and the chain tasks the first batches waited for ran at half speed: on
bench/scale.py's 2-CPU data host the first batch came 6 s after the first block was read. At idle
priority (`SCHED_IDLE`, else niced), the reads take the cores the chain leaves: when the chain
waits for blocks, they run at full speed.

A thread, not the process: Ray runs read and chain tasks in the same worker processes, and a
process cannot raise its priority back without CAP_SYS_NICE; a Linux thread is a task of its own
to the scheduler, and its priority ends with it. Elsewhere (macOS) the reads keep their priority.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from typing import Iterator

READ_NICE = 10
"""How much lower the reads' priority is where `SCHED_IDLE` is refused (Linux nice levels: +10
from nice 0 gives a busy read thread about a tenth of what a busy chain process gets)."""

_DONE = object()


def behind_the_chain(blocks: Iterator, ahead: int = 2) -> Iterator:
    """`blocks`, made in a thread at a lower priority (`_lower_this_thread`), at most `ahead` of the consumer;
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
                blocks.close()  # this thread ran it: its files are closed here

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
    """This thread to `SCHED_IDLE` (which any thread may ask for itself), else `READ_NICE` lower.

    Ray starts its workers at nice 15 (`RAY_worker_niceness`), so the chain already runs at 15 and
    a read thread can go only 4 levels lower (19, the floor): about 30 % of a core beside one busy
    chain process, not a tenth. `SCHED_IDLE` weighs a thread below nice 19 (3 against 36 at nice 15:
    about 8 %), whatever the worker's own nice."""
    if not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + READ_NICE)
