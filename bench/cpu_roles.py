"""Where this machine's CPU goes during a bench job on a fake cluster, by role: the trainer (Ray
Train's workers), the other Ray workers on the train host (the chain's, Ray Data's coordinator), the
head's daemons (GCS, raylet, agents, the autoscaler's monitor), the data hosts (every process the
monitor started), the job's driver (`sm-launch run` and what it started outside Ray), and this bench
process.

On one 2-core machine every role shares the trainer's cores, where on a real cluster only the
trainer runs on the GPU. bench/elastic.py's cached arm read the trainer at 58-71 images/s with no
data host against 75 beside fixed 2: the roles' CPU over the same epochs says who took the rest.

A process's CPU is read from its own counters every time `sample` is called; one that ends between
two calls loses what it used since the last (call it every few seconds: a second's worth is small).
"""

from __future__ import annotations

import os

ROLES = ("trainer", "Ray workers on the train host", "head daemons", "data hosts", "driver", "bench")
QUEUED = "trainer runnable, not running"
"""Not a role: the time the trainer's threads were ready to run and waited for a core (the second
field of each thread's `/proc/PID/task/TID/schedstat`), which a busy machine adds to its steps."""
KEYS = (*ROLES, QUEUED)


class CpuByRole:
    """Cumulative CPU seconds by role since the first `sample`, for the cluster whose temporary
    folder is `cluster_tmp` and the driver `driver_pid`."""

    def __init__(self, cluster_tmp: str, driver_pid: int):
        self.tmp, self.driver = cluster_tmp, driver_pid
        self.last: dict[int, float] = {}
        self.total = dict.fromkeys(KEYS, 0.0)
        self.last_thread: dict[tuple[int, int], float] = {}
        self.thread_total: dict[str, float] = {}
        self.thread_series: list[tuple[float, dict[str, float]]] = []
        self.series: list[tuple[float, dict[str, float]]] = []

    def sample(self, now: float) -> None:
        import psutil

        procs = {}
        for proc in psutil.process_iter(["pid", "ppid", "cmdline", "cpu_times"]):
            if proc.info["cpu_times"] is not None:
                procs[proc.info["pid"]] = proc.info
        under_monitor = set()
        under_driver = set()
        for info in procs.values():
            line = " ".join(info["cmdline"] or [])
            if self.tmp in line and "monitor.py" in line:
                under_monitor |= _descendants(procs, info["pid"])
            if info["pid"] == self.driver:
                under_driver |= _descendants(procs, info["pid"]) | {info["pid"]}
        for pid, info in procs.items():
            role = self._role(pid, " ".join(info["cmdline"] or []), under_monitor, under_driver)
            if role is None:
                continue
            used = info["cpu_times"].user + info["cpu_times"].system
            self.total[role] += max(0.0, used - self.last.get(pid, 0.0))
            self.last[pid] = used
            if role == "trainer":
                self.total[QUEUED] += self._queued_by_thread(pid)
        self.series.append((now, dict(self.total)))
        self.thread_series.append((now, dict(self.thread_total)))

    def _queued_by_thread(self, pid: int) -> float:
        """The seconds the threads of `pid` waited, runnable, for a core since the last sample (the
        second field of each thread's `schedstat`), added up by thread name too (`comm`: the
        trainer's compute, Ray Data's iterator, the core worker's threads)."""
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return 0.0
        added = 0.0
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    queued = int(f.read().split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                continue
            key = (pid, int(tid))
            waited = max(0.0, queued - self.last_thread.get(key, 0.0))
            self.thread_total[name] = self.thread_total.get(name, 0.0) + waited
            self.last_thread[key] = queued
            added += waited
        return added

    def _role(self, pid: int, line: str, under_monitor: set[int], under_driver: set[int]) -> str | None:
        if pid == os.getpid():
            return "bench"
        if pid in under_monitor:
            return "data hosts"
        if "RayTrainWorker" in line:
            return "trainer"
        if line.startswith("ray::") and "Agent" not in line:
            return "Ray workers on the train host"
        if self.tmp in line or line.startswith("ray::"):
            return "head daemons"
        if pid in under_driver:
            return "driver"
        return None


def _descendants(procs: dict[int, dict], root: int) -> set[int]:
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, info in procs.items() if info["ppid"] == parent and pid not in found]
        found.update(children)
        frontier += children
    return found


def cores_between(series: list[tuple[float, dict[str, float]]], start: float, end: float) -> dict[str, float]:
    """Each role's mean cores used from the first sample at or after `start` to the last at or
    before `end`."""
    inside = [(t, s) for t, s in series if start <= t <= end]
    if len(inside) < 2:
        return {}
    (t0, a), (t1, b) = inside[0], inside[-1]
    return {key: (b.get(key, 0.0) - a.get(key, 0.0)) / (t1 - t0) for key in KEYS}


def describe(cores: dict[str, float]) -> str:
    return ", ".join(f"{role} {value:.2f}" for role, value in cores.items()) if cores else "no samples"


def queued_by_thread(series: list[tuple[float, dict[str, float]]], start: float, end: float, top: int = 4) -> str:
    """The trainer's threads that waited most for a core from `start` to `end`: seconds a second."""
    inside = [(t, s) for t, s in series if start <= t <= end]
    if len(inside) < 2:
        return "no samples"
    (t0, a), (t1, b) = inside[0], inside[-1]
    rates = sorted(((b[k] - a.get(k, 0.0)) / (t1 - t0), k) for k in b)[::-1][:top]
    return ", ".join(f"{name} {rate:.3f}" for rate, name in rates)
