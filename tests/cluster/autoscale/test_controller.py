"""The elastic data hosts' loop (issue 42) against a model of a cluster: hosts join a tick after
they are asked for, a drained host leaves a tick later, and the trainer's steps follow FastFlow's
min(trainer, hosts x chain rate). No Ray: the loop reaches the cluster only through its callables."""

import itertools

from smlaunch.cluster.autoscale.controller import DataHostsAccess, ElasticDataHosts
from smlaunch.config.autoscale import AutoscaleConfig

CFG = AutoscaleConfig(min_data_hosts=1, max_data_hosts=4, target_data_wait_pct=5, cooldown_s=30, window_steps=10)


class ModelCluster:
    def __init__(self, hosts: int, per_host: float, trainer: float):
        self.ids = (f"node-{i}" for i in itertools.count(1))
        self.joined = [next(self.ids) for _ in range(hosts)]
        self.wanted, self.draining, self.drained = hosts, [], []
        self.per_host, self.trainer = per_host, trainer

    def access(self) -> DataHostsAccess:
        return DataHostsAccess(joined=lambda: list(self.joined), want=self.want, drain=self.drain,
                               cpu_busy=self.busy)

    def want(self, n: int) -> None:
        self.wanted = n

    def drain(self, node: str, why: str) -> None:
        self.joined.remove(node)  # no longer counted as it drains
        self.draining.append(node)
        self.drained.append(node)

    def busy(self) -> float:
        supply = self.per_host * len(self.joined)
        return min(1.0, self.trainer / supply) if supply else 1.0

    def advance(self, loop: ElasticDataHosts, steps: int = 10) -> None:
        """A period passes: asked-for hosts join, drained ones are gone, the trainer takes `steps` steps."""
        while len(self.joined) + len(self.draining) < self.wanted:
            self.joined.append(next(self.ids))
        self.draining.clear()
        rate = min(self.trainer, self.per_host * len(self.joined))
        images = 256
        step_s = images / rate
        wait_s = step_s - images / self.trainer
        for _ in range(steps):
            loop.on_step({"step_time_s": step_s, "data_wait_s": wait_s, "images_per_s": rate})


def run(cluster: ModelCluster, loop: ElasticDataHosts, clock: list, ticks: int, period_s: float = 10.0) -> list:
    sizes = []
    for _ in range(ticks):
        cluster.advance(loop)
        clock[0] += period_s
        loop.tick()
        sizes.append(len(cluster.joined))
    return sizes


def test_from_too_few_hosts_the_loop_adds_them_one_per_cooldown_then_gives_back_what_a_lighter_load_frees():
    clock, lines = [0.0], []
    cluster = ModelCluster(hosts=1, per_host=100.0, trainer=330.0)
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=0.204, log=lines.append, clock=lambda: clock[0])
    sizes = run(cluster, loop, clock, ticks=14)
    # one host more per 30 s cooldown (3 ticks of 10 s), each after the last joined: 1 -> 4 hosts, then held
    assert sizes[-1] == 4 and sizes == sorted(sizes)
    changes = [e for e in loop.timeline if e["change"]]
    assert [e["hosts"] for e in changes] == [1, 2, 3]
    assert all(b["t"] >= a["t"] for a, b in zip(changes, changes[1:]))
    assert lines[0].startswith("autoscale: +1 data host (1 -> 2): data wait 69.7 %, 100 images/s, $0.41/h")
    assert changes[0]["usd_per_h"] == 0.408 and changes[0]["data_wait_pct"] == 69.7

    cluster.trainer = 150.0  # the trainer got slower (a bigger model): two hosts more than it needs
    sizes = run(cluster, loop, clock, ticks=12)
    assert sizes[-1] == 2 and cluster.drained == ["node-4", "node-3"]  # the newest go first, one per cooldown
    assert lines[-1].startswith("autoscale: -1 data host (3 -> 2)") and "the trainer takes 150" in lines[-1]
    assert loop.stop() is loop.timeline


def test_holds_enter_the_timeline_once_a_minute_and_a_failed_decision_only_logs():
    clock, lines = [0.0], []
    cluster = ModelCluster(hosts=2, per_host=100.0, trainer=195.0)  # 2.5 % wait: the band
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=None, log=lines.append, clock=lambda: clock[0])
    run(cluster, loop, clock, ticks=30)  # 300 s of holds
    assert not lines and len(loop.timeline) == 5 and all(e["change"] == 0 for e in loop.timeline)
    assert loop.timeline[0]["usd_per_h"] is None

    def broken():
        raise RuntimeError("GCS unreachable")

    failing = ElasticDataHosts(CFG, DataHostsAccess(joined=broken, want=print, drain=print), None, lines.append,
                               period_s=0.05).start()
    import time

    time.sleep(0.3)
    failing.stop()
    assert lines and lines[0] == ("autoscale: this decision failed, the hosts stay as they are: RuntimeError: "
                                  "GCS unreachable")


def test_a_capacity_model_that_reads_high_flips_a_few_times_then_holds_the_size_that_feeds():
    """The CPU share says one host would do; it makes only 80 of the 150 images/s the trainer takes.
    Each release to one host starves the trainer and is undone, and the size that starved is not
    released to again for 5 cooldowns, then 10, 20, ...: the flips thin out instead of recurring."""
    clock, lines = [0.0], []
    cluster = ModelCluster(hosts=2, per_host=80.0, trainer=150.0)
    cluster.busy = lambda: 0.2  # reads low: the model's capacity per host is 5x what the chain makes
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=None, log=lines.append, clock=lambda: clock[0])
    sizes = run(cluster, loop, clock, ticks=120)  # 20 minutes
    flips = sum(1 for a, b in zip(sizes, sizes[1:]) if a != b)
    releases = [i for i, (a, b) in enumerate(zip(sizes, sizes[1:])) if b < a]
    assert 2 <= len(releases) <= 4, sizes
    gaps = [b - a for a, b in zip(releases, releases[1:])]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0], (releases, sizes)  # each later than the last
    assert flips <= 2 * len(releases) + 1 and sizes[-1] == 2, sizes  # +1: the release before the first tick
    assert any("starved the trainer after the last release" in e["reason"] for e in loop.timeline)
