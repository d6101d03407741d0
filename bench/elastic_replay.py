"""The elastic loop replayed against the rates a bench run measured (issue 80, item 7): the verdict
of bench/elastic.py, with its spread.

One real elastic job says little about the policy: on a 2-core machine the moment a host is given
back moves by tens of seconds from run to run (the same code gave a cost ratio of 0.907 and 1.057
five hours apart), more than the margin to the goal. So the bench measures, in its real jobs, what
the policy acts on: the trainer's rate with free data, what one data host delivers in each phase
and what the chain's own clock says it makes, how long an asked host takes to join and to feed,
how long a host given back stays up (and paid), and the noise of a step's time and of the hosts'
supply. Then it runs the loop itself (`ElasticDataHosts`, with `decide`, its cooldowns and
windows, on a clock of its own) against a model of the job built from those numbers, `REPLAYS`
times with fresh noise, and the fixed sizes the same way: the ratios' median and their 10th and
90th percentiles are the verdict, and the real jobs' own ratios are shown beside them (a real
ratio outside that spread says the model misses something).

The model is a fluid one, step by step: the joined hosts fill a buffer of `BUFFER_BATCHES`
batches (the trainer's prefetch, which Ray Data's backpressure bounds) at their rate times a
per-step noise; a step takes its compute time (the trainer's rate, times noise) and waits where
the buffer holds less than a batch. A host asked for is paid from when it joins and feeds from
`warm_s` later; a host given back feeds nothing from the decision and is paid until it is gone.
Left out: a host starting that slows the trainer on a shared machine, and Ray Data's own start of
an epoch (both arms pay it alike).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

BATCH = 32
BUFFER_BATCHES = 4
REPLAYS = 200
PERIOD_S = 5.0
"""The loop's decision period (`launcher.attached.elastic.PERIOD_S`)."""


@dataclass(frozen=True)
class Measured:
    """What one pass of real jobs measured: the model's inputs."""

    trainer: float
    """Images/s the trainer takes with data free (its steps' compute time), whatever the hosts up: on
    one machine the hosts' processes take the trainer's cores in ways a cluster's do not (in one slow
    pass the trainer made 51 images/s in the elastic job and 63 beside fixed 2; a replay with a rate
    per host count, read from the jobs, swung that pass's verdict to 0.81), and the replay judges
    the policy, not the machine."""
    host_rates: tuple[float, ...]
    """Images/s one data host delivers, per phase (the heavy one measured where it was the limit)."""
    clocks: tuple[float, ...]
    """Images/s one data host makes by the chain's own clock, per phase (what the loop reads)."""
    phase_s: float
    join_s: float
    """From a host asked for to its node up (paid from then)."""
    warm_s: float
    """From a node up to its first rows (its workers importing the chain)."""
    leave_s: float
    """From a host given back to its node gone (paid until then)."""
    step_cv: float
    supply_cv: float
    slots_per_host: int = 2
    epochs: int | None = None
    """The cached arm: epochs of `epoch_rows`, the first heavy (writing the cache), the rest light."""
    epoch_rows: int = 0
    seal_s: float = 0.0
    """From epoch 1's end to the cache sealed (rank 0's step between the epochs)."""
    spare_slots: int = 0
    """The train hosts' chain slots at none (`cache_setup.without_data_hosts`)."""
    zero_rate: float = 0.0
    """Images/s the train hosts deliver of the rest of the chain with no data host."""
    zero_clock: float = 0.0
    """The same by the chain's clock, per slot."""
    trainer_at_zero: float = 0.0
    """The trainer's rate with no data host (the chain shares its CPUs)."""
    epoch_start_s: float = 0.0
    """The wait of an epoch's first step (Ray Data's execution starting over, the shuffle buffer
    filling), epochs 2 on: both arms pay it."""


@dataclass
class _Host:
    node: str
    up_at: float
    feeds_at: float
    gone_at: float = math.inf
    given_back_at: float = math.inf


@dataclass
class Run:
    """One replayed job: its steps (end time, images, time, wait), hosts and what it paid for."""

    steps: list[tuple[float, int, float, float]] = field(default_factory=list)
    host_seconds: float = 0.0
    end: float = 0.0
    sizes: list[int] = field(default_factory=list)

    def wait_pct(self, start: float, end: float) -> float:
        chosen = [s for s in self.steps if start <= s[0] < end]
        time_s = sum(s[2] for s in chosen)
        return 100 * sum(s[3] for s in chosen) / time_s if time_s else math.nan

    def images_per_s(self, start: float, end: float) -> float:
        chosen = [s for s in self.steps if start <= s[0] < end]
        time_s = sum(s[2] for s in chosen)
        return sum(s[1] for s in chosen) / time_s if time_s else math.nan

    def usd_per_image(self, train_h: float, data_h: float) -> float:
        images = sum(s[1] for s in self.steps)
        return (train_h * self.end + data_h * self.host_seconds) / 3600 / images

    def time_to_target(self, target: float, before: float, window: int = 10) -> float:
        """Seconds to the end of the first `window`-step run under `target` % wait, before `before`."""
        for i in range(0, len(self.steps) - window + 1, window):
            chunk = self.steps[i : i + window]
            if chunk[-1][0] >= before:
                break
            if 100 * sum(s[3] for s in chunk) / sum(s[2] for s in chunk) <= target:
                return chunk[-1][0]
        return math.inf


def replay(m: Measured, hosts: int, seed: int, autoscale=None, prices=None, min_hosts: int = 1) -> Run:
    """One job on `hosts` data hosts from the start: fixed, or under the loop with `autoscale`
    (`config.autoscale.AutoscaleConfig`) and `prices` ((train $/h, data host $/h))."""
    from smlaunch.cluster.autoscale.controller import DataHostsAccess, ElasticDataHosts

    rng = np.random.default_rng(seed)
    now = [0.0]
    fleet = [_Host(f"h{i}", 0.0, 0.0) for i in range(hosts)]
    sealed_at = [math.inf]

    def joined() -> list[str]:
        return [h.node for h in fleet if h.up_at <= now[0] and h.given_back_at == math.inf]

    def want(n: int) -> None:
        live = [h for h in fleet if h.given_back_at == math.inf]
        for _ in range(n - len(live)):
            up = now[0] + m.join_s
            fleet.append(_Host(f"h{len(fleet)}", up, up + m.warm_s))

    def drain(node: str, why: str) -> None:
        host = next(h for h in fleet if h.node == node)
        host.given_back_at, host.gone_at = now[0], now[0] + m.leave_s

    loop = None
    if autoscale is not None:
        loop = ElasticDataHosts(
            autoscale,
            DataHostsAccess(joined=joined, want=want, drain=drain),
            prices[1],
            lambda line: None,
            period_s=PERIOD_S,
            clock=lambda: now[0],
            slots_per_host=m.slots_per_host,
            train_price_h=prices[0],
        )
        loop.floor_until_cached = max(1, hosts) if min_hosts == 0 else min_hosts
        loop.without_hosts = lambda: m.spare_slots if now[0] >= sealed_at[0] else None
        loop.tick()
    run = Run()
    buffer, consumed, next_tick = float(BATCH), 0, PERIOD_S  # the first step begins as its batch arrives
    end = m.phase_s * len(m.host_rates) if m.epochs is None else math.inf
    epoch_of = (lambda: consumed // m.epoch_rows) if m.epochs else (lambda: 0)
    last_epoch = 0
    while now[0] < end and (m.epochs is None or epoch_of() < m.epochs):
        epoch = epoch_of()
        light = now[0] >= m.phase_s if m.epochs is None else now[0] >= sealed_at[0]
        phase = 1 if light else 0
        feeding = [h for h in fleet if h.feeds_at <= now[0] < h.given_back_at]
        supply = len(feeding) * m.host_rates[phase]
        clock = m.clocks[phase]
        trainer = m.trainer
        tail_clock = m.clocks[1] if m.epochs else None  # the step records' `tail_s`: the rest's clock, from epoch 1
        if not feeding and light and m.epochs:
            supply, clock, trainer = m.zero_rate, m.zero_clock * m.slots_per_host, m.trainer_at_zero
            tail_clock = clock
        starts = bool(m.epochs) and epoch != last_epoch
        last_epoch = epoch
        if starts:  # a new epoch: the buffer starts empty, after the measured stall
            buffer = 0.0
        if supply <= 0 and buffer < BATCH:  # nothing feeds (a host not yet joined): time passes, no step
            now[0] += 1.0
            next_tick = _decide_until(loop, now[0], next_tick)
            continue
        supply *= _noise(rng, m.supply_cv)
        compute = BATCH / trainer * _noise(rng, m.step_cv)
        wait = (m.epoch_start_s if starts else 0.0) + (0.0 if buffer >= BATCH else (BATCH - buffer) / supply)
        buffer = min(BUFFER_BATCHES * BATCH, max(0.0, buffer - BATCH) + supply * compute)
        step = wait + compute
        now[0] += step
        consumed += BATCH
        run.steps.append((now[0], BATCH, step, wait))
        if m.epochs and epoch == 0 and epoch_of() == 1:
            sealed_at[0] = now[0] + m.seal_s
        if loop is not None:
            loop.on_step(
                {
                    "t": now[0],
                    "epoch": epoch_of(),
                    "step_time_s": step,
                    "data_wait_s": wait,
                    "images_per_s": BATCH / step,
                    "chain_s": BATCH * m.slots_per_host / clock,
                    "chain_rows": BATCH,
                    **({"tail_s": BATCH * m.slots_per_host / tail_clock} if tail_clock else {}),
                }
            )
        next_tick = _decide_until(loop, now[0], next_tick)
    run.end = now[0]
    run.host_seconds = sum(max(0.0, min(h.gone_at, run.end) - h.up_at) for h in fleet if h.up_at < run.end)
    run.sizes = list(loop.summary()["sizes"]) if loop is not None else [hosts]
    return run


def _decide_until(loop, now: float, next_tick: float) -> float:
    """The loop's decisions due by `now`, one a `PERIOD_S`; when the next is due."""
    while loop is not None and now >= next_tick:
        loop.tick(sample=False)
        next_tick += PERIOD_S
    return next_tick


def _noise(rng, cv: float) -> float:
    """A factor of mean 1 and about `cv` spread (log-normal)."""
    sigma = math.sqrt(math.log1p(cv * cv))
    return float(rng.lognormal(-sigma * sigma / 2, sigma))


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """(median, 10th, 90th percentile) of the finite `values`."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return (math.nan, math.nan, math.nan)
    p10, p50, p90 = np.percentile(finite, [10, 50, 90])
    return float(p50), float(p10), float(p90)


def replay_pass(m: Measured, autoscale, prices: tuple[float, float], target: float, max_hosts: int) -> dict:
    """The phased pass replayed `REPLAYS` times: elastic from one host against the cheapest fixed
    size holding `target` over the heavy phase (after elastic's settling, as the real pass)."""
    out: dict[str, list[float]] = {"cost_ratio": [], "trainer_ratio": [], "wait_pct_after": [], "time_to_target_s": []}
    for seed in range(REPLAYS):
        elastic = replay(m, 1, seed, autoscale, prices)
        to_target = elastic.time_to_target(target, m.phase_s)
        settle = min(to_target, m.phase_s)
        fixed = None
        for n in range(1, max_hosts + 1):
            candidate = replay(m, n, 10_000 + seed)
            if candidate.wait_pct(settle, m.phase_s) <= target:
                fixed = candidate
                break
        if fixed is None:
            continue
        out["cost_ratio"].append(elastic.usd_per_image(*prices) / fixed.usd_per_image(*prices))
        out["trainer_ratio"].append(elastic.images_per_s(settle, elastic.end) / fixed.images_per_s(settle, fixed.end))
        out["wait_pct_after"].append(elastic.wait_pct(settle, m.phase_s))
        out["time_to_target_s"].append(to_target)
    return {name: percentiles(values) for name, values in out.items()}


def replay_cached(m: Measured, fixed: Measured, autoscale, prices: tuple[float, float], hosts: int) -> dict:
    """The cached arm replayed: elastic to none from `hosts`, against as many fixed hosts running the
    whole chain every epoch (`fixed`: its own trainer rate and epoch starts, the cache never sealed)."""
    out: dict[str, list[float]] = {"cost_ratio": [], "trainer_ratio": []}
    for seed in range(REPLAYS):
        elastic = replay(m, hosts, seed, autoscale, prices, min_hosts=0)
        alone = replay(fixed, hosts, 10_000 + seed)
        out["cost_ratio"].append(elastic.usd_per_image(*prices) / alone.usd_per_image(*prices))
        out["trainer_ratio"].append(elastic.images_per_s(0, elastic.end) / alone.images_per_s(0, alone.end))
    return {name: percentiles(values) for name, values in out.items()}


def spread(name: str, p: tuple[float, float, float], digits: int = 3) -> str:
    """`name=<median> name_p10=<...> name_p90=<...>` for the RESULT line."""
    return " ".join(f"{name}{suffix}={v:.{digits}f}" for suffix, v in zip(("", "_p10", "_p90"), p, strict=True))
