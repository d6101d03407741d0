"""Utilisation samplers on a real 3-node cluster: every host sampled, busy work seen on its host."""

from __future__ import annotations

import time

import pytest

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.cluster.sampler import Samplers
from smlaunch.config import load_config

FIELDS = {"t", "cpu_pct", "host_cpu_pct", "iowait_pct", "mem_pct", "net_sent_bps", "net_recv_bps"}


@pytest.mark.ray
def test_every_host_is_sampled_and_a_busy_host_shows_it(data_cluster, configs, tmp_path):
    ray = data_cluster  # the session's 3 one-CPU hosts: algo-1 (train), algo-2 and algo-3 (data)
    cfg = load_config(configs / "tiny.yaml", [f"run.dir={tmp_path}"])
    plan = build_plan(cfg, LocalEnvironment(cpus=3, gpus=0, started="t"))

    def _spin(seconds: float) -> str:  # defined here: Ray ships it by value, not by module name
        import ray

        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        return ray.get_runtime_context().get_node_labels()["sm-host"]

    samplers = Samplers(plan, interval_s=0.1)
    # Not waited for at the start (the job goes on while they come up); each answers with its host.
    assert sorted(ray.get(samplers.started, timeout=60)) == ["algo-1", "algo-2", "algo-3"]
    time.sleep(0.5)
    busy_from = time.time()
    spin = ray.remote(_spin).options(num_cpus=1, label_selector={"sm-host": "algo-2"})
    assert ray.get(spin.remote(2.0), timeout=60) == "algo-2"
    busy_to = time.time()
    series = samplers.gather(timeout_s=20)

    assert sorted(series) == ["algo-1", "algo-2", "algo-3"]
    for host, s in series.items():
        assert len(s["samples"]) >= 15, host  # 2.5 s at 0.1 s
        assert FIELDS <= set(s["samples"][-1]), host
        assert "gpu_pct" not in s["samples"][-1]  # no GPU on this machine

    def mean_cpu(host: str) -> float:
        window = [x["cpu_pct"] for x in series[host]["samples"] if busy_from + 0.3 <= x["t"] <= busy_to]
        return sum(window) / len(window)

    # algo-2 offers 1 CPU and a task spun on it: about 100 % of its slot; algo-3 stayed idle.
    assert mean_cpu("algo-2") > 60
    assert mean_cpu("algo-3") < 25
