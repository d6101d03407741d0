"""When to add or give back a data host: a pure function of what the trainer measured (issue 42).

Ray Data's own cluster autoscaler adds a node of each type once logical utilisation passes 75 %
and keeps adding while the trainer backpressures it (ray-project/ray#45331): it never reads the
trainer's wait. Cachew (USENIX ATC'22) scales tf.data service workers on the client's batch time
instead: one more worker while the batch time improves by more than 7 %, one fewer while it
worsens by less than 3 %. This policy reads what smlaunch measures every step, over the latest
`autoscale.window_steps` steps:

* the ranks' **data wait** (share of step time spent waiting for the batch), the signal;
* the **measured rate** (images/s of all ranks) and the **GPU-bound rate** (images over the
  steps' time less the wait: what the trainer would take if data were free);
* the data hosts' **CPU busy share** (the per-host sampler), when known.

and the advisor's model (`launcher.report.advisor`: FastFlow's min(GPU-bound rate, pipeline
rate), the pipeline's rate proportional to its hosts) to predict the rate with one host more or
fewer. So a host is added only when the model says it raises the rate by more than `ADD_MIN_GAIN`
(a GPU-bound trainer gets none, whatever the wait) and the chain's own clock does not say the
hosts there are already enough (a size the policy would give a host back from: the wait then
comes from elsewhere, e.g. a host's first seconds; bench/elastic.py on 2 cores added a third
host on a window at 33 images/s while the clock read 140), and given back only when one host
fewer would still make `RELEASE_HEADROOM` more than the trainer takes. Between the two (the wait under
the target but not under half of it) nothing changes, unless the chain's own clock says one host
fewer would make `BAND_RELEASE_HEADROOM` times what the trainer takes (the wait is then not the
chain's, and holding the hosts only pays for them); after a change nothing changes for
`cooldown_s`, nor while a requested host has not joined: the hysteresis that keeps a job from
flapping between sizes; a release that starved the trainer is not made again for a while
(`STABILISE_COOLDOWNS`). Every decision says why, with the numbers and the price per hour.

What a host is worth is judged by the job's cost per trained image, the GPU hosts counted (issue
57): a host is added only where the rate it adds pays for it (`Prices`): at ml.g5.xlarge and
ml.c5.xlarge prices a second data host must add about 13 %, and the dearer the GPU hosts against
a data host, the less it must add; a data host that adds nothing never pays. And
while the chain's workers warm (the first `WARM_WINDOWS` windows after the first step and after each
epoch's start), a wait alone adds nothing: the chain's own clock must show the hosts short of what
the trainer takes (bench/elastic.py on 2 cores: a second host 21 s in, on a first window of 45 %
wait, where one host fed the trainer for the rest of the phase).
"""

from __future__ import annotations

from dataclasses import dataclass

ADD_MIN_GAIN = 0.07
"""Add a host only if the model predicts at least this much more rate (Cachew's 7 %)."""
RELEASE_HEADROOM = 1.30
"""Give a host back only if one fewer would still make this times the GPU-bound rate. The CPU-busy
model reads capacity high (a chain slot between tasks counts as free), so the margin is wide: at
1.10 the loop gave back a host that was needed (tests/launcher/attached/test_elastic.py, 2 <-> 3)."""
BAND_RELEASE_HEADROOM = 2.0
"""Within the band (the wait under the target, not under half of it) a host is given back only where
the chain's own clock says one fewer would make this times what the trainer takes: the wait is then
not the chain's, and no host the loop holds lowers it. A floor of a few per cent from elsewhere (the
train host's own CPUs, a loaded machine) otherwise kept every host a heavy phase had added for the
rest of the run: tests/launcher/attached/test_elastic.py beside a busy core held a 1 ms chain on
2 hosts for 4 minutes at 3-8 % wait, 10-step windows never under 2.5 %. Wider than
`RELEASE_HEADROOM`: the clock reads a little high, and at the smaller size the same clock refuses
an add back (over 1.3x: the wait is not the chain's), so it must read well clear of the trainer."""
STABILISE_COOLDOWNS = 5
"""After a release starved the trainer (a host added right back), no release to that size for
this many cooldowns, twice as long each time it happens again (the controller keeps count): the
scale-down stabilisation window of Kubernetes' HorizontalPodAutoscaler, with a backoff, so a
capacity model that reads high (bench/elastic.py: 1 host "can make 232 images/s" where it made
78) costs a few flips, not one a minute."""
CONFIRM_BELOW = 2.0
"""A wait over the target but under this times it adds a host only when the window before was
over the target too: one window of a few seconds is noisy (bench/elastic.py: a 10-step window at
9.3 % where 2 hosts held 0.1 % over the phase added a third, given back 15 s later). A wait this
far over acts at once, as a job starting on too few hosts needs, unless the chain's own clock
says the hosts there make what the trainer takes: then the gap is start-up (a host that joined
seconds ago: 20 % at 2 hosts, which held 0.1 % once warm, added a third) or overhead the clock
does not see, and only a wait that lasts tells which."""
BUSY_FLOOR = 0.05
"""A CPU share below this is read as this: the capacity it implies is then a lower bound."""
PEAK_S = 90.0
"""A release must feed the trainer's best GPU-bound rate of the windows of this many seconds, not
only the latest window's: a trainer slowed for a while (a checkpoint, a host joining on a shared
machine: bench/elastic.py on 2 cores read 24 images/s of a trainer that takes 60 while a new host's
workers started) would otherwise lose a host it needs once it recovers, and get it back a
cooldown later."""
FEED_DEADLINE_S = 90.0
"""After the hosts of an add joined, how long the loop waits for them to feed (a full window beating
the rate the add was decided on by `ADD_MIN_GAIN`) before it may add again: a host up is not a host
feeding (its workers start and import the chain: bench/elastic.py beside a busy core, 38 s from the
node up to its first rows), and the window of those seconds reads as the size's shortage. Counting
the joined host as feeding, the loop read half the rate a host and added a third where two fed the
trainer, in 36 of 40 replays of that pass. Past the deadline the wait decides again."""
WARM_WINDOWS = 3
"""Windows after the first step, after each epoch's start and after asked-for hosts join in which an
add needs the chain's own clock to confirm the shortage (the controller says when:
`decide(warming=...)`)."""


@dataclass(frozen=True)
class Prices:
    """USD per hour of the job's train hosts (all of them) and of one data host, at the advisor's
    prices (`cluster.prices`, `monitor.prices`): the job's cost per trained image. Either may be
    unknown (None); then no decision turns on cost."""

    train_h: float | None
    data_host_h: float | None

    def per_million_images(self, hosts: int, images_per_s: float) -> float | None:
        """USD per million images trained at `images_per_s` on `hosts` data hosts; None where unknown."""
        if self.train_h is None or self.data_host_h is None or images_per_s <= 0:
            return None
        return 1e6 * (self.train_h + hosts * self.data_host_h) / 3600 / images_per_s


@dataclass(frozen=True)
class Window:
    """The trainer's latest steps, summed over ranks as the step records give them."""

    steps: int
    data_wait_pct: float
    images_per_s: float
    gpu_bound_images_per_s: float
    data_cpu_busy: float | None = None
    """Mean share (0-1) of the data hosts' CPUs busy over the window; None where not sampled."""
    chain_images_per_s_per_host: float | None = None
    """What a data host's chain slots make by the chain's own clock (slots / seconds per image, the
    rows' `prep_s`), with no scheduling gaps: an upper bound; None where not timed."""
    chain_images_per_s_without_hosts: float | None = None
    """What the train hosts' spare CPUs would make of the same chain by its clock, where the data
    hosts may go to none (`autoscale.min_data_hosts: 0`, the epoch read from a sealed cache); else None."""

    @classmethod
    def of(
        cls,
        records: list[dict],
        data_cpu_busy: float | None = None,
        slots_per_host: float | None = None,
        slots_without_hosts: float | None = None,
    ) -> Window:
        """From step records (`trainers.control.record`: step_time_s, data_wait_s, images_per_s,
        chain_s, chain_rows and, with a cache, tail_s); `slots_without_hosts`: the chain tasks the
        train hosts run at once once no data host is left (None: the hosts may not go to none now).

        With no data host only the chain's rest runs (the epochs read the cached prefix), so that
        capacity is timed by the rest's clock (`tail_s`, the part of `chain_s` after the prefix):
        the records of the epoch that wrote the cache tell it as well as a cached epoch's. Timed by
        the whole chain, the hosts went only once a window of the next epoch's steps had come
        (bench/elastic.py's cached arm: 14 s after the seal, the epoch's start and a window, at two
        hosts; the blocks they made by then kept them up 14 s more)."""
        time_s = sum(r["step_time_s"] for r in records)
        wait_s = sum(min(r["data_wait_s"], r["step_time_s"]) for r in records)
        images = sum(r["images_per_s"] * r["step_time_s"] for r in records)
        chain_s, chain_rows = sum(r.get("chain_s", 0.0) for r in records), sum(r.get("chain_rows", 0) for r in records)
        tail_s = sum(r.get("tail_s", 0.0) for r in records)
        per_slot = chain_rows / chain_s if chain_rows and chain_s > 0 else None
        per_host = slots_per_host * per_slot if slots_per_host and per_slot else None
        rest = chain_rows / tail_s if chain_rows and tail_s > 0 else per_slot
        without = slots_without_hosts * rest if slots_without_hosts and rest else None
        return cls(
            steps=len(records),
            data_wait_pct=100 * wait_s / time_s if time_s else 0.0,
            images_per_s=images / time_s if time_s else 0.0,
            gpu_bound_images_per_s=images / (time_s - wait_s) if time_s > wait_s else 0.0,
            data_cpu_busy=data_cpu_busy,
            chain_images_per_s_per_host=per_host,
            chain_images_per_s_without_hosts=without,
        )


@dataclass(frozen=True)
class Decision:
    hosts: int
    """Data hosts wanted after this decision."""
    change: int
    """Hosts added (positive) or given back (negative) by this decision: `hosts` less the hosts joined."""
    reason: str
    predicted_images_per_s: float | None = None
    """The model's rate at `hosts`, where it has one."""

    def line(self, before: int, window: Window, prices: Prices | None) -> str:
        """The console line (and the report timeline's text) of this decision."""
        n = abs(self.change)
        what = (
            f"{'+' if self.change > 0 else '-'}{n} data host{'s' if n > 1 else ''} ({before} -> {self.hosts})"
            if self.change
            else f"{before} data hosts kept"
        )
        per_host = prices.data_host_h if prices else None
        cost = f", ${self.hosts * per_host:.2f}/h for data hosts" if per_host else ""
        per_m = prices.per_million_images(before, window.images_per_s) if prices else None
        cost += f", ${per_m:.2f} per million images so far" if per_m is not None else ""
        return (
            f"autoscale: {what}: data wait {window.data_wait_pct:.1f} %, {window.images_per_s:.0f} images/s"
            f"{cost}; {self.reason}"
        )


def capacity_per_host(window: Window, hosts: int, target_pct: float) -> float | None:
    """Images/s one data host's chain can make: the measured rate per host when the pipeline is the
    limit (the trainer waits); else the chain's own clock where it was timed, the rate over the
    hosts' busy share where not; None where neither tells.

    The busy share misreads both ways: high when slots sit free between tasks (bench/elastic.py:
    4 hosts "could make" 177 images/s each where they made 31), low when tasks hold their slots
    waiting on backpressure, the trainer taking all it wants: the chain went light and the share
    still read 59 images/s a host for 43 s, where the chain's clock read 1,299, and the host it kept
    was paid for. The chain's clock (its seconds per row, task overhead left out) reads a little high,
    which `RELEASE_HEADROOM` covers; a release that starves the trainer anyway is undone and not
    made again for a while."""
    if hosts <= 0 or window.images_per_s <= 0:
        return None
    if window.data_wait_pct > target_pct:
        return window.images_per_s / hosts
    if window.chain_images_per_s_per_host:
        return window.chain_images_per_s_per_host
    if window.data_cpu_busy is not None:  # an idle chain (under the floor) counts as at the floor: a lower bound
        return window.images_per_s / hosts / min(max(window.data_cpu_busy, BUSY_FLOOR), 1.0)
    return None


def predicted_rate(per_host: float, hosts: int, gpu_bound: float) -> float:
    """FastFlow's model: the slower of the trainer and the pipeline."""
    return min(gpu_bound, per_host * hosts) if gpu_bound > 0 else per_host * hosts


def decide(
    window: Window,
    hosts: int,
    cfg,
    since_change_s: float,
    pending: int = 0,
    too_few: dict[int, float] | None = None,
    sustained: bool = True,
    warming: bool = False,
    prices: Prices | None = None,
    trainer_peak: float | None = None,
    unfed_s: float | None = None,
    rate_before_add: float | None = None,
) -> Decision:
    """The next size for `hosts` joined data hosts under `cfg` (`config.autoscale.AutoscaleConfig`);
    `pending`: hosts asked for that have not joined yet; `too_few`: sizes that starved the trainer
    right after a release, and the seconds their stabilisation has left (no release to them);
    `sustained`: an earlier window, with no step of this one, was over the target too, and none
    under it since (the controller tracks it; `CONFIRM_BELOW`); `warming`: the window is one of the
    first `WARM_WINDOWS` after the first step or an epoch's start; `prices`: what the job pays;
    `trainer_peak`: the trainer's best GPU-bound rate of the recent windows (`PEAK_S`), what a
    release must still feed; `unfed_s`: seconds since the hosts of the latest add joined, while no
    window has shown them feeding yet (`FEED_DEADLINE_S`), and `rate_before_add` the rate that add
    was decided on."""
    target = cfg.target_data_wait_pct

    def hold(why: str, predicted: float | None = None) -> Decision:
        return Decision(hosts, 0, why, predicted)

    if pending:
        return hold(f"waiting for {pending} requested host{'s' if pending > 1 else ''} to join")
    if hosts < cfg.min_data_hosts:
        return Decision(
            cfg.min_data_hosts, cfg.min_data_hosts - hosts, f"below autoscale.min_data_hosts ({cfg.min_data_hosts})"
        )
    if hosts > cfg.max_data_hosts:
        return Decision(
            cfg.max_data_hosts, cfg.max_data_hosts - hosts, f"above autoscale.max_data_hosts ({cfg.max_data_hosts})"
        )
    if since_change_s < cfg.cooldown_s:
        return hold(f"cooling down ({since_change_s:.0f} of {cfg.cooldown_s:g} s since the last change)")
    if window.steps < cfg.window_steps or window.images_per_s <= 0:
        return hold(
            f"measuring: {window.steps} of autoscale.window_steps ({cfg.window_steps}) steps since the last change"
        )
    per_host = capacity_per_host(window, hosts, target)
    gpu_bound = window.gpu_bound_images_per_s
    if window.data_wait_pct > target:
        none_left = _to_none_over_the_target(window, hosts, cfg, too_few, trainer_peak)
        if none_left is not None:
            return none_left
        if hosts >= cfg.max_data_hosts:
            return hold(f"over the {target:g} % target, but at autoscale.max_data_hosts ({cfg.max_data_hosts})")
        if unfed_s is not None:
            before = f" ({rate_before_add:.0f} before the add)" if rate_before_add else ""
            return hold(
                f"over the {target:g} % target, but the host added {unfed_s:.0f} s ago has not raised the rate yet: "
                f"{window.images_per_s:.0f} images/s{before}; waiting up to {FEED_DEADLINE_S:g} s for its first rows"
            )
        if per_host is None:  # no data host: the chain runs on the train hosts
            if not sustained:  # as at any size, one short window (an epoch's start) adds nothing
                return hold(
                    f"over the {target:g} % target in this window only, with no data host: one if the next is over too"
                )
            without = window.chain_images_per_s_without_hosts or 0.0
            if warming and gpu_bound > 0 and without >= max(gpu_bound, trainer_peak or 0.0) * RELEASE_HEADROOM:
                return hold(
                    f"over the {target:g} % target with no data host while the epoch's workers warm, and by the "
                    f"chain's own clock the train hosts' spare CPUs make {without:.0f} images/s: a host if the wait "
                    "outlasts the warm-up"
                )
            # Past the warm-up, no clock check: an epoch that reads the files with no data host runs
            # the chain one task at a time (its budget is the empty data bucket's), which the chain's
            # clock of one task does not see (tests/launcher/attached/test_elastic_zero.py: a 30 % wait
            # held where the clock read 30x). The clock above is there only over a sealed cache.
            return Decision(hosts + 1, 1, f"over the {target:g} % target with no data host")
        clock = (window.chain_images_per_s_per_host or 0.0) * hosts if gpu_bound > 0 else 0.0
        if clock and clock >= gpu_bound * RELEASE_HEADROOM:
            return hold(
                f"over the {target:g} % target, but by the chain's own clock {hosts} hosts make "
                f"{clock:.0f} images/s, over {RELEASE_HEADROOM:g}x the {gpu_bound:.0f} the trainer "
                "takes: the wait is not the chain's (a host starting, the read, the train hosts' CPUs)"
            )
        now = window.images_per_s
        if warming:  # the wait may be the workers starting: only the chain's clock can say it is short
            if not clock or window.chain_images_per_s_per_host is None:  # a clock is there only with a rate
                return hold(
                    f"over the {target:g} % target while the chain's workers warm (the first "
                    f"{WARM_WINDOWS} windows of the run or an epoch), with no chain clock to confirm a "
                    "shortage: a host if the wait outlasts the warm-up"
                )
            per_host = window.chain_images_per_s_per_host
            now = predicted_rate(per_host, hosts, gpu_bound)
        else:
            enough = bool(clock) and clock >= gpu_bound
            if not sustained and (enough or window.data_wait_pct < target * CONFIRM_BELOW):
                why = (
                    (
                        f", and by the chain's own clock {hosts} hosts make {clock:.0f} of the {gpu_bound:.0f} "
                        "images/s the trainer takes"
                    )
                    if enough
                    else ""
                )
                return hold(f"over the {target:g} % target in this window only{why}: a host if the next is over too")
        more = predicted_rate(per_host, hosts + 1, gpu_bound)
        if more < now * (1 + ADD_MIN_GAIN):
            clocked = (
                (f" by the chain's own clock ({hosts} hosts make {clock:.0f} images/s while its workers warm)")
                if warming
                else ""
            )
            return hold(
                f"over the {target:g} % target, but one more host would give {more:.0f} images/s{clocked} "
                f"(the trainer takes {gpu_bound:.0f}): less than {ADD_MIN_GAIN:.0%} more",
                more,
            )
        paid = prices.per_million_images(hosts, now) if prices else None
        paying = prices.per_million_images(hosts + 1, more) if prices else None
        if paid is not None and paying is not None and paying >= paid:
            return hold(
                f"over the {target:g} % target, but {hosts + 1} hosts would make {more:.0f} images/s at "
                f"${paying:.2f} per million images, against ${paid:.2f} now: the job would pay more per image",
                more,
            )
        cost = f"; ${paid:.2f} -> ${paying:.2f} per million images" if paying is not None else ""
        return Decision(
            hosts + 1,
            1,
            f"over the {target:g} % target; {hosts + 1} hosts should make {more:.0f} "
            f"images/s (+{more / now - 1:.0%}; the trainer takes {gpu_bound:.0f}){cost}",
            more,
        )
    in_band = window.data_wait_pct >= target / 2
    chain_rate = window.chain_images_per_s_per_host
    if hosts > cfg.min_data_hosts and (chain_rate or not in_band):
        return _release(window, hosts, cfg, chain_rate if in_band else per_host, in_band, too_few, prices, trainer_peak)
    return hold(f"within the {target:g} % target")


def _to_none_over_the_target(
    window: Window, hosts: int, cfg, too_few: dict[int, float] | None, trainer_peak: float | None
) -> Decision | None:
    """Every data host back while the trainer waits over the target, where over a sealed cache the
    train hosts' spare CPUs alone would make `RELEASE_HEADROOM` x what the trainer takes, by the
    chain's own clock (`Window.chain_images_per_s_without_hosts`); None otherwise. A cached epoch
    with a data host reads the prefix's pixels there and moves them through the object store to the
    chain's task; with none, the read runs the rest of the chain where it reads and moves only the
    cropped rows (`pipelines.dataset.tail_in_read`). bench/cache_zero.py's 1-CPU data host held
    the trainer at an 8-11 % wait through the cached epochs, and the hosts stayed ("at
    autoscale.max_data_hosts"), where the clock said the train host's 3 spare CPUs made 11x."""
    without, gpu_bound = window.chain_images_per_s_without_hosts or 0.0, window.gpu_bound_images_per_s
    takes = max(gpu_bound, trainer_peak or 0.0)
    if not hosts or cfg.min_data_hosts or gpu_bound <= 0 or without < takes * RELEASE_HEADROOM:
        return None
    if (too_few or {}).get(0, 0.0) > 0:
        return None
    return Decision(
        0,
        -hosts,
        f"over the {cfg.target_data_wait_pct:g} % target, but by the chain's own clock no data host (the chain on "
        f"the train hosts' spare CPUs, its rest in the reads) can make {without:.0f} images/s, over "
        f"{RELEASE_HEADROOM:g}x the {takes:.0f} the trainer takes: the wait is the cached rows' move to the data hosts",
        predicted_rate(without, 1, gpu_bound),
    )


def _release(
    window: Window,
    hosts: int,
    cfg,
    per_host: float | None,
    in_band: bool,
    too_few: dict[int, float] | None,
    prices: Prices | None,
    trainer_peak: float | None,
) -> Decision:
    """One host back where one fewer would still feed the trainer's best lately with room to spare:
    under half the target by `per_host` (`capacity_per_host`), within the band only by the chain's
    own clock and with `BAND_RELEASE_HEADROOM`; else the hosts stay. Over a sealed cache
    (`Window.chain_images_per_s_without_hosts`) every host goes at once where the train hosts' spare
    CPUs alone have that room: the heavy prefix is over for the run, and going down a host a
    decision would keep each host but the first a cooldown and a window longer, paid for and idle."""
    target, gpu_bound = cfg.target_data_wait_pct, window.gpu_bound_images_per_s
    takes = max(gpu_bound, trainer_peak or 0.0)
    headroom = BAND_RELEASE_HEADROOM if in_band else RELEASE_HEADROOM
    without = window.chain_images_per_s_without_hosts or 0.0

    def hold(why: str, predicted: float | None = None) -> Decision:
        return Decision(hosts, 0, why, predicted)

    if without and (hosts == 1 or (without >= takes * headroom and (too_few or {}).get(0, 0.0) <= 0)):
        to, fewer, smaller = 0, without, "no data host (the chain on the train hosts' spare CPUs)"
    elif per_host is None:
        return hold("under the target, but the data hosts' CPU use is not known: no host given back")
    elif hosts == 1:  # the last host: only the train hosts' clock over a sealed cache lets it go
        return hold("under the target; the last data host stays: no chain clock says what the train hosts would make")
    else:
        to, fewer, smaller = hosts - 1, per_host * (hosts - 1), f"{hosts - 1} hosts"
    best = f" (its best lately: {takes:.0f})" if takes > gpu_bound else ""
    left = (too_few or {}).get(to, 0.0)
    if left > 0:
        return hold(
            f"under the target, but {to} hosts starved the trainer after the last release "
            f"(no release to {to} for {left:.0f} s more)"
        )
    if fewer >= takes * headroom:  # the same rate on fewer hosts
        after = predicted_rate(fewer, 1, gpu_bound)
        paid = prices.per_million_images(hosts, window.images_per_s) if prices else None
        paying = prices.per_million_images(to, after) if prices else None
        cost = f"; ${paid:.2f} -> ${paying:.2f} per million images" if paid is not None and paying is not None else ""
        if in_band:
            why = (
                f"within the {target:g} % target, and by the chain's own clock {smaller} can make "
                f"{fewer:.0f} images/s, over {BAND_RELEASE_HEADROOM:g}x the {gpu_bound:.0f} the trainer takes{best}: "
                "the wait is not the chain's"
            )
        else:
            why = (
                f"under half the {target:g} % target; {smaller} can make {fewer:.0f} images/s, the trainer "
                f"takes {gpu_bound:.0f}{best}"
            )
        return Decision(to, to - hosts, why + cost, after)
    if in_band:
        return hold(f"within the {target:g} % target", fewer)
    return hold(
        f"under the target, but {smaller} could make only {fewer:.0f} images/s of the "
        f"{gpu_bound:.0f} the trainer takes{best}",
        fewer,
    )
