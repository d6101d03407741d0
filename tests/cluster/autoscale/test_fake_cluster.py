"""The fake cluster's priorities (`smlaunch.cluster.autoscale.fake_cluster.lower_priority`): on one
machine its data hosts must run below the trainer, and Linux keeps a priority (and a scheduling
policy) per thread."""

import os
import subprocess
import sys

from smlaunch.cluster.autoscale.fake_cluster import lower_priority

THREADS = """
import threading, time
for _ in range(3):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("up", flush=True)
time.sleep(60)
"""


def niceness(pid: int) -> list[int]:
    return [os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]


def policies(pid: int) -> list[int]:
    return [os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]


def test_every_thread_of_a_process_goes_down_not_only_its_first():
    proc = subprocess.Popen([sys.executable, "-c", THREADS], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        before = niceness(proc.pid)
        assert len(before) == 4 and len(set(before)) == 1, before
        # what psutil's `nice()` does: the first thread alone
        os.setpriority(os.PRIO_PROCESS, proc.pid, 19)
        assert sorted(niceness(proc.pid)) == sorted([19, *before[1:]]), niceness(proc.pid)
        assert lower_priority(proc.pid, 19, idle=False) == 3
        assert niceness(proc.pid) == [19] * 4 and os.SCHED_IDLE not in policies(proc.pid)
        # and each under SCHED_IDLE: a waking trainer takes the core from them at once
        assert lower_priority(proc.pid, 19) == 4
        assert policies(proc.pid) == [os.SCHED_IDLE] * 4 and niceness(proc.pid) == [19] * 4
        assert lower_priority(proc.pid, 19) == 0  # cheap to call again: nothing to set
    finally:
        proc.kill()
        proc.wait(timeout=10)  # reaped: its /proc entry is gone
    assert lower_priority(proc.pid, 19) == 0  # gone: nothing, no error
