"""The loop that keeps a job's data hosts at the size its trainer needs (issue 42).

Every `period_s` it reads the trainer's latest `window_steps` step records (fed by the launcher's
progress thread, `on_step`), the data hosts' CPU share and which data hosts have joined; asks the
policy (`policy.decide`); and acts on a change: a bigger request to the autoscaler, or a smaller
one and a drain of the host that joined last (the one whose chain holds the fewest blocks of the
epoch). Each change is a console line and a timeline entry (hosts, data wait, images/s, $/h),
which the report keeps; holds are kept once a minute, so a day-long run's timeline stays a few
thousand entries. Ray is reached only through the callables given, so the loop is tested without
a cluster and runs the same against KubeRay's autoscaler or the fake multi-node provider.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from smlaunch.cluster.autoscale.policy import (
    ADD_MIN_GAIN,
    FEED_DEADLINE_S,
    PEAK_S,
    STABILISE_COOLDOWNS,
    WARM_WINDOWS,
    Decision,
    Prices,
    Window,
    decide,
)

BUSY_EVERY_S = 1.0
BUSY_SAMPLES = 30
"""The data hosts' CPU share is read every `BUSY_EVERY_S` (an instant's reading: the slots taken
by chain tasks); a decision reads the mean of those taken over the window's steps (at least
`BUSY_MIN_SAMPLES`, of the latest `BUSY_SAMPLES` since the last change). Over 30 s whatever the
window, the share still held the heavy chain's half a minute after it went light, and the release
it allowed came 70 s into bench/elastic.py's light phase."""
BUSY_MIN_SAMPLES = 5
FED_TICKS = 2
"""Decisions in a row whose full window reaches the rate the hosts of an add should bring before
they count as feeding: one window of a noisy step (bench/elastic.py beside a busy core, seed 8 of
its replay) read a host still importing its chain as feeding, and a third host was added."""
HOLD_EVERY_S = 60.0
"""A decision that changes nothing enters the timeline at most this often."""
JOIN_POLL_S = BUSY_EVERY_S
"""While hosts asked for have not all joined, the loop looks for them this often, not once a
period: a host joined is published to the chain's tasks (`placement.publish`) and counted in Ray
Data's budget (`recount`) at the tick that sees it, so a tick once a period left a host up and idle
for up to a period (2.5 s on average at 5 s) at the time the trainer waits the most, after an add."""


@dataclass(frozen=True)
class DataHostsAccess:
    """What the loop needs of the cluster, as callables (`requests.DataHostRequests`, `requests.drain`, ...)."""

    joined: Callable[[], list[str]]
    """Node ids of the data hosts that have joined and are not draining, oldest first."""
    want: Callable[[int], None]
    """Ask the autoscaler for this many data hosts."""
    drain: Callable[[str, str], None]
    """Give one node back: (node id, why)."""
    cpu_busy: Callable[[], float | None] = lambda: None
    """The data hosts' CPU share busy (0-1) over the last period, where known."""
    recount: Callable[[], None] = lambda: None
    """The joined hosts changed: have Ray Data's budget count them now (`DataHostRequests.recount`)."""


class ElasticDataHosts:
    def __init__(
        self,
        cfg,
        access: DataHostsAccess,
        price_per_host_h: float | None,
        log: Callable[[str], None],
        period_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        slots_per_host: float | None = None,
        train_price_h: float | None = None,
    ):
        self.cfg, self.access, self.log = cfg, access, log
        self.prices = Prices(train_price_h, price_per_host_h)
        """The train hosts' $/h (all of them) and a data host's: the cost per image decisions judge by."""
        self.slots_per_host = slots_per_host
        """Chain tasks a data host runs at once (its Ray CPUs): the chain's own clock's capacity."""
        self.period_s, self.clock = period_s, clock
        self.records: collections.deque = collections.deque(maxlen=cfg.window_steps)
        self.timeline: list[dict] = []
        """{t, hosts, wanted, data_wait_pct, images_per_s, usd_per_h, change, reason} per decision kept."""
        self.wanted: int | None = None
        self.busy: collections.deque = collections.deque(maxlen=BUSY_SAMPLES)
        self.host_seconds = 0.0
        """Data hosts joined, integrated over the ticks: what the job paid for (`summary`)."""
        self.train_seconds = 0.0
        """The ticks' span: the train hosts' time over the same seconds (`summary`'s cost per image)."""
        self.images = 0.0
        """Images the steps trained (all of them, an epoch's first step too)."""
        self._ticked_at: float | None = None
        self._sizes: list[int] = []
        self._changed_at = -float("inf")
        self._last_change = 0
        self._too_few: dict[int, float] = {}
        """Size -> until when no release goes down to it (it starved the trainer after a release)."""
        self._starved: dict[int, int] = {}
        """Size -> how many releases to it starved the trainer (each doubles its stabilisation)."""
        self._held_at = -float("inf")
        self._epoch = None
        self._joining = False
        """A change asked for hosts that have not all joined yet."""
        self._rate_before_add: float | None = None
        """Images/s of the window that decided the latest add, until a full window after its hosts
        joined reaches `_fed_rate` (they feed) or `FEED_DEADLINE_S` pass: the hosts joined but not
        yet feeding (`decide(unfed_s=...)`)."""
        self._fed_rate = 0.0
        """Halfway from that rate to the one the add predicted (the rate before, plus `ADD_MIN_GAIN`,
        where it predicted none): a window's rate is noisy (a step's time varies by 45 % beside a busy
        core), and a window 7 % up read a host still importing its chain as feeding."""
        self._joined_at: float | None = None
        self._fed_ticks = 0
        """Decisions in a row whose window reached `_fed_rate` (`FED_TICKS` say the hosts feed)."""
        self._seen: set[str] | None = None
        self._steps_in = 0
        """Step records taken into windows so far."""
        self._over_since: int | None = None
        """`_steps_in` at the end of the first full window over the target, with none under it since
        (a wait that holds over two windows with no step in common: `policy.CONFIRM_BELOW`)."""
        self.epoch_starts = 0
        """Steps left out of the windows as the first of their epoch (`on_step`)."""
        self._peaks: collections.deque = collections.deque()
        """(clock, GPU-bound images/s) of the full windows of the last `PEAK_S`: the trainer's best lately."""
        self._warm_from = 0
        """`_steps_in` when the latest epoch began or the hosts asked for joined: the next
        `WARM_WINDOWS` windows are a warm-up. A host up is not yet a host feeding: its workers start
        and import the chain first (bench/elastic.py on 2 cores: 15 s from the node up to its first
        rows), and a window of those seconds read as a shortage added a third host where two fed
        the trainer (its slow pass, and a shorter trial run's normal one)."""
        self.floor_until_cached = cfg.min_data_hosts
        """With `autoscale.min_data_hosts: 0`, the fewest hosts while the epoch does not read a sealed
        cache (the hosts the channels are read on): the group goes to none only over a cache."""
        self.without_hosts: Callable[[], float | None] = lambda: None
        """The chain tasks the train hosts would run at once with no data host, while the group may
        go to none now (the epoch reads a sealed cache: the launcher sets this once it knows the
        cache); None where it may not."""
        self.on_drain: Callable[[str], None] = lambda node: None
        """Called with a node given back, once it drains: what the job keeps there ends (the launcher
        sets the host's sampler's release: a live actor keeps a drained node up)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_step(self, record: dict) -> None:
        """A step record (`trainers.control.record`), as the progress thread receives it. An epoch's
        first step is left out of the window: its wait is the pass starting over (a new Ray Data
        execution, the shuffle buffer filling), which more hosts barely shorten. Counted in, it read
        as starvation in every window that held it (bench/elastic.py on 16 cores, 3 s epochs: 1 -> 4
        hosts on windows of 97 % wait at 43 images/s, while the hosts had capacity to spare)."""
        epoch = record.get("epoch")
        with self._lock:
            self.images += record.get("images_per_s", 0.0) * record.get("step_time_s", 0.0)
            first_of_epoch = epoch is not None and epoch != self._epoch
            self._epoch = epoch
            if first_of_epoch:
                self.epoch_starts += 1
                self._warm_from = self._steps_in
            else:
                self.records.append(record)
                self._steps_in += 1

    def sample_busy(self) -> None:
        busy = self.access.cpu_busy()
        if busy is not None:
            self.busy.append((time.time(), busy))

    def tick(self, sample: bool = True) -> Decision:
        """One decision, acted on (`sample`: read the CPU share now too; the loop reads it every second)."""
        joined = self.access.joined()
        if self._seen is not None and set(joined) != self._seen:
            self.access.recount()
        self._seen = set(joined)
        now = self.clock()
        if self._ticked_at is not None:
            self.host_seconds += len(joined) * (now - self._ticked_at)
            self.train_seconds += now - self._ticked_at
        self._ticked_at = now
        if not self._sizes:
            self._sizes.append(len(joined))
        if sample:
            self.sample_busy()
        if self.wanted is None:
            self.wanted = len(joined)
        pending = max(0, self.wanted - len(joined))
        if self._joining and not pending:  # the hosts asked for are in: measure from now, as a warm-up
            self._joining = False
            self._joined_at = now
            self._restart_window(now)
            with self._lock:
                self._warm_from = self._steps_in
        with self._lock:
            records, steps_in, warm_from = list(self.records), self._steps_in, self._warm_from
        spare = self.without_hosts()
        cfg = self.cfg
        if spare is None and self.floor_until_cached > cfg.min_data_hosts:  # no cache sealed (or it was lost)
            cfg = cfg.model_copy(update={"min_data_hosts": self.floor_until_cached})
        window = Window.of(records, self._busy_over(records), self.slots_per_host, spare)
        unfed_s = self._unfed_s(window, now, pending)
        too_few = {n: until - now for n, until in self._too_few.items() if until > now}
        if window.steps >= self.cfg.window_steps:
            self._peaks.append((now, window.gpu_bound_images_per_s))
        while self._peaks and self._peaks[0][0] < now - PEAK_S:
            self._peaks.popleft()
        if cfg is not self.cfg and len(joined) < cfg.min_data_hosts and not pending:
            decision = Decision(
                cfg.min_data_hosts,
                cfg.min_data_hosts - len(joined),
                f"the epoch reads no sealed cache (lost, or not written yet): back to {cfg.min_data_hosts} data "
                f"host{'s' if cfg.min_data_hosts > 1 else ''} for the chain's prefix",
            )
        else:
            decision = self._decide(window, joined, cfg, now, pending, too_few, steps_in, warm_from, unfed_s)
        return self._act(decision, joined, window, now)

    def _unfed_s(self, window: Window, now: float, pending: int) -> float | None:
        """Seconds since the hosts of the latest add joined while no full window since has reached
        `_fed_rate`: they are up but not yet feeding; None once they feed, or
        after `FEED_DEADLINE_S` (a host that never feeds must not stop the loop for good)."""
        if self._rate_before_add is None or pending or self._joined_at is None:
            return None
        since = now - self._joined_at
        up = window.steps >= self.cfg.window_steps and window.images_per_s >= self._fed_rate
        self._fed_ticks = self._fed_ticks + 1 if up else 0
        if self._fed_ticks >= FED_TICKS or since > FEED_DEADLINE_S:
            self._rate_before_add = self._joined_at = None
            return None
        return since

    def _decide(self, window, joined, cfg, now, pending, too_few, steps_in, warm_from, unfed_s=None) -> Decision:
        return decide(
            window,
            len(joined),
            cfg,
            now - self._changed_at,
            pending,
            too_few,
            sustained=self._sustained(window, steps_in),
            warming=steps_in - warm_from <= WARM_WINDOWS * self.cfg.window_steps,
            prices=self.prices,
            trainer_peak=max((rate for _, rate in self._peaks), default=None),
            unfed_s=unfed_s,
            rate_before_add=self._rate_before_add,
        )

    def _act(self, decision: Decision, joined: list[str], window: Window, now: float) -> Decision:
        """A change asked of the cluster and logged; a hold kept in the timeline once a minute."""
        if decision.change > 0 and self._last_change < 0:  # the last release starved the trainer
            times = self._starved[len(joined)] = self._starved.get(len(joined), 0) + 1
            hold_s = STABILISE_COOLDOWNS * max(self.cfg.cooldown_s, self.period_s) * 2 ** (times - 1)
            self._too_few[len(joined)] = now + hold_s  # twice as long each time the same size starves
        if decision.change:
            self._last_change = decision.change
            self._sizes.append(decision.hosts)
            self.wanted = decision.hosts
            self.access.want(decision.hosts)
            if decision.change < 0:
                for node in joined[decision.hosts - len(joined) :]:  # the newest go first
                    self.access.drain(node, f"smlaunch: fewer data hosts ({decision.reason})")
                    self.on_drain(node)
            self._joining = decision.change > 0
            self._rate_before_add = window.images_per_s if decision.change > 0 else None
            predicted = decision.predicted_images_per_s
            gain = (predicted - window.images_per_s) / 2 if predicted else 0.0
            self._fed_rate = window.images_per_s + max(gain, ADD_MIN_GAIN * window.images_per_s)
            self._joined_at = None
            self._restart_window(now)
        if decision.change:
            self.log(decision.line(len(joined), window, self.prices))
        elif now - self._held_at >= HOLD_EVERY_S:
            self._held_at = now
        else:
            return decision
        self.timeline.append(
            {
                "t": round(time.time(), 3),
                "hosts": len(joined),
                "wanted": self.wanted,
                "data_wait_pct": round(window.data_wait_pct, 2),
                "images_per_s": round(window.images_per_s, 1),
                "usd_per_h": round(decision.hosts * self.prices.data_host_h, 3) if self.prices.data_host_h else None,
                "usd_per_million_images": _round(self.prices.per_million_images(len(joined), window.images_per_s)),
                "change": decision.change,
                "reason": decision.reason,
            }
        )
        return decision

    def _sustained(self, window: Window, steps_in: int) -> bool:
        """Whether a full window over the target follows an earlier one over it, with no step in
        common and none under the target between (`policy.CONFIRM_BELOW`)."""
        if window.steps < self.cfg.window_steps:
            return False
        if window.data_wait_pct <= self.cfg.target_data_wait_pct:
            self._over_since = None
            return False
        if self._over_since is None:
            self._over_since = steps_in
        return steps_in - self._over_since >= window.steps

    def _busy_over(self, records: list[dict]) -> float | None:
        """The mean CPU share over the samples taken since the window's first step began (records
        carry their wall time `t`), or over the latest `BUSY_MIN_SAMPLES` where fewer; None where none."""
        if not self.busy:
            return None
        began = records[0]["t"] - records[0].get("step_time_s", 0.0) if records and "t" in records[0] else -1e18
        chosen = [b for t, b in self.busy if t >= began]
        if len(chosen) < BUSY_MIN_SAMPLES:
            chosen = [b for _, b in list(self.busy)[-BUSY_MIN_SAMPLES:]]
        return sum(chosen) / len(chosen)

    def _restart_window(self, now: float) -> None:
        """The cooldown and the next window start now: at a change, and again when the hosts a change
        asked for have joined. Counted from the ask, the window after a join held the new host's
        first seconds (its worker processes starting, importing the chain) and read as starvation:
        bench/elastic.py added 2 -> 3 -> 4 hosts where fixed 2 held the wait at 0.1 %."""
        self._changed_at = now
        self._over_since = None
        with self._lock:
            self.records.clear()  # the next window measures the new size only
        self.busy.clear()

    def summary(self) -> dict:
        """The report's `autoscale` section: the sizes the job went through, its host-seconds, the timeline."""
        changes = [e for e in self.timeline if e["change"]]
        return {
            "sizes": list(self._sizes),
            "changes": len(changes),
            "added": sum(e["change"] > 0 for e in changes),
            "released": sum(e["change"] < 0 for e in changes),
            "data_host_seconds": round(self.host_seconds, 1),
            "epoch_start_steps_left_out": self.epoch_starts,
            "price_per_host_h": self.prices.data_host_h,
            "train_price_h": self.prices.train_h,
            "usd_per_million_images": _round(self._usd_per_million_images()),
            "target_data_wait_pct": self.cfg.target_data_wait_pct,
            "timeline": list(self.timeline),
        }

    def _usd_per_million_images(self) -> float | None:
        """What the job paid per million images over the loop's life, train hosts and data hosts."""
        if self.prices.train_h is None or self.prices.data_host_h is None or not self.images:
            return None
        usd = (self.prices.train_h * self.train_seconds + self.prices.data_host_h * self.host_seconds) / 3600
        return 1e6 * usd / self.images

    def start(self) -> ElasticDataHosts:
        self._thread = threading.Thread(target=self._run, name="smlaunch-elastic-data-hosts", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        """Stop deciding; the timeline for the report."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.period_s + 10)
        return self.timeline

    def _run(self) -> None:
        last = self.clock()
        while not self._stop.wait(min(BUSY_EVERY_S, JOIN_POLL_S, self.period_s)):
            try:
                self.sample_busy()
                due = self.period_s if not self._joining else min(JOIN_POLL_S, self.period_s)
                if self.clock() - last >= due:
                    last = self.clock()
                    self.tick(sample=False)
            except Exception as e:  # a failed decision must not end the run it serves
                self.log(f"autoscale: this decision failed, the hosts stay as they are: {type(e).__name__}: {e}")


def _round(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


@contextlib.contextmanager
def running(loop: ElasticDataHosts | None):
    """The loop deciding while the body trains (nothing without `autoscale:`)."""
    if loop is None:
        yield None
        return
    loop.access.joined()  # published before the first chain task
    loop.start()
    try:
        yield loop
    finally:
        loop.stop()
        from smlaunch.cluster.autoscale.placement import withdraw

        withdraw()
