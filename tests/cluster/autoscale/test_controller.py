"""The elastic data hosts' loop (issue 42) against a model of a cluster: hosts join a tick after
they are asked for, a drained host leaves a tick later, and the trainer's steps follow FastFlow's
min(trainer, hosts x chain rate). No Ray: the loop reaches the cluster only through its callables."""

import dataclasses
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
        return DataHostsAccess(joined=lambda: list(self.joined), want=self.want, drain=self.drain, cpu_busy=self.busy)

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
        for _ in range(steps):  # the chain's clock: 2 slots a host, each 2 / per_host s an image
            loop.on_step(
                {
                    "step_time_s": step_s,
                    "data_wait_s": wait_s,
                    "images_per_s": rate,
                    "chain_s": images * 2 / self.per_host,
                    "chain_rows": images,
                }
            )


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
    loop = ElasticDataHosts(
        CFG, cluster.access(), price_per_host_h=0.204, log=lines.append, clock=lambda: clock[0], slots_per_host=2
    )
    sizes = run(cluster, loop, clock, ticks=14)
    # one host more per 30 s cooldown (3 ticks of 10 s), each after the last joined (the chain's clock
    # confirming the shortage in the windows after each join): 1 -> 4 hosts, then held
    assert sizes[-1] == 4 and sizes == sorted(sizes)
    changes = [e for e in loop.timeline if e["change"]]
    assert [e["hosts"] for e in changes] == [1, 2, 3]
    assert all(b["t"] >= a["t"] for a, b in zip(changes, changes[1:], strict=False))
    assert lines[0].startswith("autoscale: +1 data host (1 -> 2): data wait 69.7 %, 100 images/s, $0.41/h")
    assert changes[0]["usd_per_h"] == 0.408 and changes[0]["data_wait_pct"] == 69.7

    cluster.trainer = 150.0  # the trainer got slower (a bigger model): two hosts more than it needs
    sizes = run(cluster, loop, clock, ticks=8)  # its best of the last 90 s (policy.PEAK_S) still reads 330
    assert sizes == [4] * 8 and "its best lately: 330" in loop.tick().reason
    sizes = run(cluster, loop, clock, ticks=8)
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

    failing = ElasticDataHosts(
        CFG, DataHostsAccess(joined=broken, want=print, drain=print), None, lines.append, period_s=0.05
    ).start()
    import time

    time.sleep(0.3)
    failing.stop()
    assert lines and lines[0] == (
        "autoscale: this decision failed, the hosts stay as they are: RuntimeError: GCS unreachable"
    )


def test_a_capacity_model_that_reads_high_flips_a_few_times_then_holds_the_size_that_feeds():
    """The CPU share says one host would do; it makes only 80 of the 150 images/s the trainer takes.
    Each release to one host starves the trainer and is undone, and the size that starved is not
    released to again for 5 cooldowns, then 10, 20, ...: the flips thin out instead of recurring."""
    clock, lines = [0.0], []
    cluster = ModelCluster(hosts=2, per_host=80.0, trainer=150.0)
    cluster.busy = lambda: 0.2  # reads low: the model's capacity per host is 5x what the chain makes
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=None, log=lines.append, clock=lambda: clock[0])
    sizes = run(cluster, loop, clock, ticks=120)  # 20 minutes
    flips = sum(1 for a, b in zip(sizes, sizes[1:], strict=False) if a != b)
    releases = [i for i, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False)) if b < a]
    assert 2 <= len(releases) <= 4, sizes
    gaps = [b - a for a, b in zip(releases, releases[1:], strict=False)]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0], (releases, sizes)  # each later than the last
    assert flips <= 2 * len(releases) + 1 and sizes[-1] == 2, sizes  # +1: the release before the first tick
    assert any("starved the trainer after the last release" in e["reason"] for e in loop.timeline)


def test_an_epochs_first_step_is_left_out_of_the_window_a_pass_starting_over_is_no_starvation():
    clock, lines = [0.0], []
    cluster = ModelCluster(hosts=2, per_host=100.0, trainer=150.0)  # two hosts feed it
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=0.204, log=lines.append, clock=lambda: clock[0])
    steps = iter(range(10_000))
    for _ in range(12):  # short epochs: every 4th step waits 2 s for the pass to start over
        for _ in range(10):
            step = next(steps)
            start = step % 4 == 0
            loop.on_step(
                {
                    "step": step,
                    "epoch": step // 4,
                    "step_time_s": 2.2 if start else 0.2,
                    "data_wait_s": 2.0 if start else 0.002,
                    "images_per_s": 150.0,
                }
            )
        clock[0] += 10.0
        loop.tick()
    assert cluster.wanted == 2 and not lines, lines  # counted in, each window would wait ~77 %
    assert loop.summary()["epoch_start_steps_left_out"] == 30


class SlowJoins(ModelCluster):
    """Hosts join `join_periods` periods after they are asked for, and make nothing in their first
    period (worker processes starting), as a fake node's do on 2 cores."""

    join_periods = 4
    warm_periods = 1

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.asked_for, self.warming = 0, {}

    def advance(self, loop, steps: int = 10) -> None:
        self.warming = {node: left - 1 for node, left in self.warming.items() if left > 1}
        if len(self.joined) < self.wanted:
            self.asked_for += 1
            if self.asked_for >= self.join_periods:
                self.asked_for = 0
                node = next(self.ids)
                self.joined.append(node)
                self.warming[node] = self.warm_periods
        working = len(self.joined) - len(self.warming)
        rate = min(self.trainer, self.per_host * working)
        step_s = 256 / rate
        for _ in range(steps):
            loop.on_step({"step_time_s": step_s, "data_wait_s": step_s - 256 / self.trainer, "images_per_s": rate})


def test_the_window_and_the_cooldown_start_when_the_asked_for_host_has_joined():
    clock, lines = [0.0], []
    cluster = SlowJoins(hosts=1, per_host=100.0, trainer=150.0)  # two hosts feed it
    recounts = []
    access = dataclasses.replace(cluster.access(), recount=lambda: recounts.append(len(cluster.joined)))
    loop = ElasticDataHosts(CFG, access, price_per_host_h=0.204, log=lines.append, clock=lambda: clock[0])
    sizes = run(cluster, loop, clock, ticks=16)
    assert recounts == [2]  # Ray Data's budget counts the host the tick it is seen, not at the coordinator's 20 s
    # measured from the ask, the window at the join (40 s later, past the 30 s cooldown) held the new
    # host's first, idle period and a third host was added
    assert sizes[-1] == 2 and cluster.wanted == 2, (sizes, lines)
    assert len(lines) == 1 and lines[0].startswith("autoscale: +1 data host (1 -> 2)")


def test_while_an_asked_for_host_joins_the_loop_looks_every_second_not_once_a_period():
    """A host up is published to the chain's tasks at the tick that sees it: with one tick a period,
    an added host sat up and idle for up to a period, while the trainer waited the most."""
    import threading
    import time

    cluster = ModelCluster(hosts=1, per_host=100.0, trainer=150.0)
    seen, looks = threading.Event(), []

    def joined() -> list[str]:
        looks.append(time.monotonic())
        return list(cluster.joined)

    access = dataclasses.replace(cluster.access(), joined=joined, recount=seen.set)
    two = CFG.model_copy(update={"min_data_hosts": 2})
    loop = ElasticDataHosts(two, access, price_per_host_h=None, log=lambda line: None, period_s=60.0)
    assert loop.tick().change == 1 and cluster.wanted == 2  # below the minimum: one asked for
    loop.start()
    try:
        time.sleep(1.5)
        cluster.joined.append("node-late")  # up 1.5 s after the ask
        up = time.monotonic()
        assert seen.wait(timeout=10.0), "the joined host was not seen within 10 s"
        assert time.monotonic() - up < 2.5  # the next look, not the period's 60 s
        time.sleep(2.5)
        assert [t for t in looks if t > up + 1.5] == []  # joined: one decision a period again
    finally:
        loop.stop()


def test_the_windows_after_a_join_are_a_warm_up_a_host_up_is_not_yet_a_host_feeding():
    """A host that makes nothing for its first four periods (its workers starting: 15 s on 2 cores in
    bench/elastic.py) leaves the window after the cooldown starved too; read as a shortage it added a
    third host where two feed the trainer. As a warm-up it adds none without the chain's clock."""
    clock, lines = [0.0], []
    cluster = SlowJoins(hosts=1, per_host=100.0, trainer=150.0)
    cluster.warm_periods = 4  # past the 30 s cooldown: the window after it holds the idle host
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=0.204, log=lines.append, clock=lambda: clock[0])
    sizes = run(cluster, loop, clock, ticks=16)
    assert sizes[-1] == 2 and cluster.wanted == 2, (sizes, lines)
    assert len(lines) == 1 and lines[0].startswith("autoscale: +1 data host (1 -> 2)")
    assert any("while the chain's workers warm" in e["reason"] for e in loop.timeline), loop.timeline


def test_a_host_that_joined_is_not_counted_as_feeding_until_the_rate_shows_it():
    """A host that makes nothing for eight periods, past the warm-up windows (bench/elastic.py beside
    a busy core: 38 s from the node up to its first rows): counted as feeding, the window after the
    warm-up read half the rate a host and added a third where two feed the trainer. The loop holds
    until two windows in a row reach halfway to the rate the add predicted."""
    clock, lines = [0.0], []
    cluster = SlowJoins(hosts=1, per_host=100.0, trainer=150.0)
    cluster.warm_periods = 8
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=0.204, log=lines.append, clock=lambda: clock[0])
    sizes = run(cluster, loop, clock, ticks=24)
    assert sizes[-1] == 2 and cluster.wanted == 2, (sizes, lines)
    assert len(lines) == 1 and lines[0].startswith("autoscale: +1 data host (1 -> 2)")
    held = [e["reason"] for e in loop.timeline if "has not raised the rate yet" in e["reason"]]
    assert held and "100 before the add" in held[0], loop.timeline


def test_a_host_that_never_feeds_holds_the_loop_only_until_the_deadline():
    """A joined host that never makes a row (its workers failing) must not stop the loop for good:
    past `FEED_DEADLINE_S` the wait decides again, and a third host comes."""
    from smlaunch.cluster.autoscale.policy import FEED_DEADLINE_S

    clock, lines = [0.0], []
    cluster = SlowJoins(hosts=1, per_host=100.0, trainer=150.0)
    cluster.warm_periods = 1000
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=0.204, log=lines.append, clock=lambda: clock[0])
    sizes = run(cluster, loop, clock, ticks=24)
    added = [line for line in lines if line.startswith("autoscale: +1 data host (2 -> 3)")]
    assert cluster.wanted >= 3 and added, (sizes, lines)
    joined_at = 10.0 * (sizes.index(2) + 1)
    third_at = 10.0 * (next(i for i, n in enumerate(sizes) if n == 3) + 1)
    assert third_at - joined_at > FEED_DEADLINE_S, (sizes, lines)


def test_the_cpu_share_is_read_over_the_windows_steps_not_the_last_half_minute():
    cluster = ModelCluster(hosts=2, per_host=100.0, trainer=150.0)
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=None, log=lambda line: None)
    now = 1_000_000.0
    loop.busy.extend([(now - 30 + i, 1.0) for i in range(22)] + [(now - 8 + i, 0.2) for i in range(8)])
    window = [{"t": now - 6 + i, "step_time_s": 0.5} for i in range(6)]  # the chain went light 8 s ago
    assert abs(loop._busy_over(window) - 0.2) < 1e-9
    assert abs(loop._busy_over(window[-1:]) - 0.2) < 1e-9  # one step: the latest 5 samples
    assert abs(loop._busy_over([]) - (22 + 8 * 0.2) / 30) < 1e-9  # no step times: all there are


def test_a_wait_a_little_over_the_target_adds_a_host_only_when_the_next_window_is_over_too():
    """One window at 9 % among windows under the target adds nothing; two in a row, with no step
    in common, add one; a wait far over the target (a job starting on too few hosts) adds at once."""
    clock, lines = [0.0], []
    cluster = ModelCluster(hosts=2, per_host=100.0, trainer=190.0)  # 0 % wait
    loop = ElasticDataHosts(CFG, cluster.access(), price_per_host_h=None, log=lines.append, clock=lambda: clock[0])
    run(cluster, loop, clock, ticks=5)
    cluster.trainer = 220.0  # 9 % wait
    run(cluster, loop, clock, ticks=1)
    assert not lines and "in this window only" in loop.tick().reason
    cluster.trainer = 190.0
    run(cluster, loop, clock, ticks=3)
    assert not lines and len(cluster.joined) == 2
    cluster.trainer = 220.0
    run(cluster, loop, clock, ticks=2)  # two windows over in a row
    assert lines and lines[0].startswith("autoscale: +1 data host (2 -> 3): data wait 9.1 %"), lines
    far = ModelCluster(hosts=1, per_host=100.0, trainer=330.0)
    lines.clear()
    loop = ElasticDataHosts(
        CFG, far.access(), price_per_host_h=None, log=lines.append, clock=lambda: clock[0], slots_per_host=2
    )
    run(far, loop, clock, ticks=1)  # the chain's clock confirms the shortage in the first window
    assert lines and lines[0].startswith("autoscale: +1 data host (1 -> 2): data wait 69.7 %"), lines


def test_in_the_first_windows_a_wait_adds_a_host_only_where_the_chains_clock_confirms_a_shortage():
    """Issue 57: the first windows of a run (and of each epoch) hold the chain's workers starting.
    Without the chain's clock a wait there adds nothing until the warm-up is over; with it, a host
    comes at once where the clock reads the hosts short, and never where it reads them enough."""
    clock, lines = [0.0], []
    blind = ModelCluster(hosts=1, per_host=100.0, trainer=330.0)
    loop = ElasticDataHosts(CFG, blind.access(), price_per_host_h=None, log=lines.append, clock=lambda: clock[0])
    run(blind, loop, clock, ticks=3)  # 3 windows of 70 % wait, no clock: the warm-up
    assert not lines and "while the chain's workers warm" in loop.timeline[0]["reason"], loop.timeline
    run(blind, loop, clock, ticks=1)
    assert lines and lines[0].startswith("autoscale: +1 data host (1 -> 2): data wait 69.7 %"), lines
    lines.clear()
    fed = ModelCluster(hosts=1, per_host=100.0, trainer=90.0)
    loop = ElasticDataHosts(
        CFG,
        fed.access(),
        price_per_host_h=0.204,
        train_price_h=1.408,
        log=lines.append,
        clock=lambda: clock[0],
        slots_per_host=2,
    )
    for epoch in range(3):  # each epoch's first windows wait 40 % (the workers start); one host feeds it
        for i in range(4):
            slow = i < 2
            rate = 54.0 if slow else 90.0
            for _ in range(10):
                loop.on_step(
                    {
                        "epoch": epoch,
                        "step_time_s": 256 / rate,
                        "data_wait_s": 256 / rate - 256 / 90.0,
                        "images_per_s": rate,
                        "chain_s": 256 * 2 / 100.0,
                        "chain_rows": 256,
                    }
                )
            clock[0] += 10.0
            loop.tick()
    assert not lines and loop.summary()["sizes"] == [1], lines
    summary = loop.summary()
    assert summary["train_price_h"] == 1.408 and summary["usd_per_million_images"] > 0
    assert all(e["usd_per_million_images"] > 0 for e in summary["timeline"])


class TrainHostsToo(ModelCluster):
    """With no data host left, the train hosts' spare CPUs run the chain at `without` images/s."""

    def __init__(self, hosts: int, per_host: float, trainer: float, without: float):
        super().__init__(hosts, per_host, trainer)
        self.without = without

    def advance(self, loop: ElasticDataHosts, steps: int = 10) -> None:
        if self.joined or self.wanted:
            return super().advance(loop, steps)
        self.draining.clear()
        rate = min(self.trainer, self.without)
        for _ in range(steps):
            loop.on_step(
                {
                    "step_time_s": 256 / rate,
                    "data_wait_s": 256 / rate - 256 / self.trainer,
                    "images_per_s": rate,
                    "chain_s": 256 * 2 / self.per_host,
                    "chain_rows": 256,
                }
            )


def test_with_min_data_hosts_0_the_last_host_goes_only_over_a_sealed_cache_and_comes_back_when_it_is_lost():
    """`autoscale.min_data_hosts: 0` (issue 80): the host the channels are read on stays while the
    epoch reads them; once the cache is sealed it goes where the train hosts' spare CPUs (2 chain
    slots by the chain's clock: 200 images/s) feed the trainer's 100 with room to spare; and a lost
    cache (no `FINAL`) brings it back at once, whatever the wait."""
    clock, lines, sealed = [0.0], [], [False]
    cluster = TrainHostsToo(hosts=1, per_host=200.0, trainer=100.0, without=200.0)
    loop = ElasticDataHosts(
        CFG.model_copy(update={"min_data_hosts": 0}),
        cluster.access(),
        price_per_host_h=0.204,
        log=lines.append,
        clock=lambda: clock[0],
        slots_per_host=2,
    )
    loop.floor_until_cached = 1
    loop.without_hosts = lambda: 2 if sealed[0] else None
    assert run(cluster, loop, clock, ticks=8) == [1] * 8  # epoch 1: no cache yet
    assert not lines

    sealed[0] = True
    sizes = run(cluster, loop, clock, ticks=8)
    assert sizes[-1] == 0 and cluster.drained == ["node-1"]
    assert len(lines) == 1 and lines[0].startswith("autoscale: -1 data host (1 -> 0): data wait 0.0 %")
    assert "no data host (the chain on the train hosts' spare CPUs) can make 200 images/s" in lines[0]
    assert run(cluster, loop, clock, ticks=6) == [0] * 6  # fed at zero: nothing asked

    sealed[0] = False  # the cache is gone: the next epoch runs the whole chain
    cluster.advance(loop)
    clock[0] += 10.0
    decision = loop.tick()
    assert decision.change == 1 and decision.hosts == 1 and cluster.wanted == 1
    assert lines[-1].startswith("autoscale: +1 data host (0 -> 1)") and "reads no sealed cache" in lines[-1]
    assert loop.summary()["sizes"] == [1, 0, 1]
