"""Per-host utilisation sampling: one small actor pinned to every host, gathered on the head.

SageMaker Debugger's lesson was that a CPU/GPU heat map sampled about twice a second is enough
to see a GPU idling while the data loader's CPUs sit at 100 %. Each host runs a `HostSampler`
(zero CPUs, so it never takes a slot from the pipeline or the trainer) that samples on its own
thread every `interval_s` and keeps the series until the head asks for it at the end of the run.

What a sample holds:
* `cpu_pct`: CPU time of this Ray node's processes (its raylet and every worker under it) as a
  percentage of the CPUs the node offers Ray. On a SageMaker host that is the host's Ray work;
  in a local simulation, where every "host" shares this machine, it is still that host's share.
* `host_cpu_pct`, `iowait_pct`, `mem_pct`, `net_sent_bps`, `net_recv_bps`: the machine's, from
  psutil (on a simulated cluster every host reports the same machine).
* `gpu_pct`, `gpu_mem_pct`: per-GPU lists from NVML (`nvidia-ml-py`) where a driver is present.
* `n`: how many samples it stands for. A host keeps at most `MAX_SAMPLES` (`series.Buckets`): past
  that, adjacent samples merge into their means and the reported `interval_s` doubles, so a day
  on 80 hosts stays a few MB in report.json, a heat map column per sample and a bounded
  TensorBoard file, with every sample's load still counted in the means.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

MAX_SAMPLES = 512
"""Per host; past it adjacent samples merge pairwise and the interval doubles (about the heat map's 600 columns)."""


class HostSampler:
    """Ray actor body: `start()` begins sampling, `samples()` returns and keeps the series."""

    def __init__(self, host: str, node_cpus: float | None, interval_s: float, gpus: int | None = None):
        from smlaunch.series import Buckets, merge_samples

        self.host, self.interval_s, self.gpus = host, interval_s, gpus
        self.node_cpus = max(node_cpus or _node_cpus(), 1e-9)
        self.series = Buckets(MAX_SAMPLES, new=lambda x: {"n": 1, **x}, merge=merge_samples)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="smlaunch-sampler", daemon=True)
            self._thread.start()
        return self.host

    def samples(self) -> dict:
        return {
            "host": self.host,
            "interval_s": self.interval_s * self.series.width,
            "samples": list(self.series.items),
        }

    def end_processes(self, pids: list[int]) -> list[int]:
        """SIGKILL these processes of this host (actors Ray restarts elsewhere once the host drains:
        `Samplers.release`); the ones that were there."""
        import os
        import signal

        ended = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                ended.append(pid)
            except OSError:  # gone already, or not ours
                pass
        return ended

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.samples()

    def _run(self) -> None:
        import psutil

        node = _node_root()
        # A simulated CPU host shares the machine's GPUs with the simulated GPU host: it reports
        # only the GPUs it offers Ray (none), so the heat map shows each GPU once.
        gpus = _nvml_handles()[: self.gpus] if self.gpus is not None else _nvml_handles()
        psutil.cpu_percent()
        cpu_times = psutil.cpu_times()
        net = psutil.net_io_counters()
        tree = _tree_cpu_seconds(node)
        last = time.monotonic()
        while not self._stop.wait(self.interval_s):
            now = time.monotonic()
            elapsed = max(now - last, 1e-6)
            tree_now, times_now, net_now = _tree_cpu_seconds(node), psutil.cpu_times(), psutil.net_io_counters()
            busy = sum(times_now) - sum(cpu_times)
            sample = {
                "t": round(time.time(), 3),
                "cpu_pct": round(100 * max(tree_now - tree, 0.0) / (elapsed * self.node_cpus), 1),
                "host_cpu_pct": psutil.cpu_percent(),
                "iowait_pct": round(
                    100 * (getattr(times_now, "iowait", 0.0) - getattr(cpu_times, "iowait", 0.0)) / busy, 1
                )
                if busy > 0
                else 0.0,
                "mem_pct": psutil.virtual_memory().percent,
                "net_sent_bps": round((net_now.bytes_sent - net.bytes_sent) / elapsed),
                "net_recv_bps": round((net_now.bytes_recv - net.bytes_recv) / elapsed),
            }
            if gpus:
                sample.update(_gpu_sample(gpus))
            self.series.add(sample)
            tree, cpu_times, net, last = tree_now, times_now, net_now, now


def _node_cpus() -> float:
    """CPUs this Ray node offers (a SageMaker plan knows only its own host's count)."""
    import ray

    me = ray.get_runtime_context().get_node_id()
    node = next((n for n in ray.nodes() if n["NodeID"] == me), None)
    return float(node["Resources"].get("CPU", 0)) if node else float(os.cpu_count() or 1)


def _node_root():
    """The raylet that started this worker: every task and actor of the node runs under it."""
    import psutil

    me = psutil.Process(os.getpid())
    parent = me.parent()
    return parent if parent is not None and "raylet" in " ".join(parent.cmdline()[:1] + [parent.name()]) else me


def _tree_cpu_seconds(root) -> float:
    import psutil

    total = 0.0
    try:
        processes = [root] + root.children(recursive=True)
    except psutil.Error:
        return 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:  # a worker that exited between the listing and the read
            continue
    return total


def _nvml_handles() -> list:
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # no package, no driver, no GPU: the host is sampled without GPU fields
        return []


def _gpu_sample(handles: list) -> dict:
    import pynvml

    util: list[float | None] = []
    mem: list[float | None] = []
    for handle in handles:
        try:
            util.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            mem.append(round(100 * info.used / max(info.total, 1), 1))
        except pynvml.NVMLError:
            util.append(None)
            mem.append(None)
    return {"gpu_pct": util, "gpu_mem_pct": mem}


class Samplers:
    """The head's handle on every host's sampler: started before training, gathered after."""

    def __init__(self, plan, interval_s: float):
        import ray

        from smlaunch.cluster.labels import host_selector

        actor = ray.remote(HostSampler)
        pinned = {
            h.name: actor.options(num_cpus=0, max_restarts=0, label_selector=host_selector(h.name)) for h in plan.hosts
        }
        # Any: Ray's stubs type an actor's methods as plain functions, without `.remote`.
        self.actors: dict[str, Any] = {
            h.name: pinned[h.name].remote(h.name, h.num_cpus, interval_s, h.num_gpus) for h in plan.hosts
        }
        # Not waited for: each sampler starts sampling as soon as its process is up, and the job
        # does not queue behind three process starts (`gather` waits for them, with a deadline).
        self.started = [a.start.remote() for a in self.actors.values()]  # refs to each host's name
        self.released: dict[str, dict] = {}
        """The series of hosts given back mid-run (`release`), for `gather`."""

    def release(self, name: str, pids: list[int] | None = None, timeout_s: float = 10) -> None:
        """A host given back while the job runs (elastic data hosts, `autoscale.min_data_hosts: 0`),
        once it drains: its series now, and its sampler ended, since a live actor keeps a drained node
        up (on the fake cluster the drained host stayed for minutes, its sampler the one actor there).
        `pids`: other actors' processes there that Ray restarts elsewhere once killed (the draining
        host takes no new actor): the sampler, on that host, ends them first. A host with no sampler
        (one that joined mid-run) is left alone."""
        import ray

        actor = self.actors.pop(name, None)
        if actor is None:
            return
        if pids:
            try:
                ray.get(actor.end_processes.remote(list(pids)), timeout=timeout_s)
            except Exception as exc:  # the host stays up until they end: a cost, not a failure
                import logging

                logging.getLogger("smlaunch").warning(
                    f"host {name}: its actors {list(pids)} were not ended ({type(exc).__name__}); it stays up "
                    "until they are"
                )
        try:
            self.released[name] = ray.get(actor.stop.remote(), timeout=timeout_s)
        except Exception as exc:
            self.released[name] = {"host": name, "samples": [], "error": type(exc).__name__}
        ray.kill(actor, no_restart=True)

    def gather(self, timeout_s: float = 30) -> dict[str, dict]:
        """Every host's series; a host that does not answer in time is reported empty, not waited for."""
        import ray

        refs = {name: actor.stop.remote() for name, actor in self.actors.items()}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        out = dict(self.released)
        for name, ref in refs.items():
            try:
                out[name] = (
                    ray.get(ref, timeout=0) if ref in ready else {"host": name, "samples": [], "error": "no answer"}
                )
            except Exception as exc:  # a lost host's actor died with it
                out[name] = {"host": name, "samples": [], "error": type(exc).__name__}
        for actor in self.actors.values():
            ray.kill(actor, no_restart=True)
        return out
