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
the target but not under half of it) nothing changes, and after a change nothing changes for
`cooldown_s`, nor while a requested host has not joined: the hysteresis that keeps a job from
flapping between sizes; a release that starved the trainer is not made again for a while
(`STABILISE_COOLDOWNS`). Every decision says why, with the numbers and the price per hour.
"""

from __future__ import annotations

from dataclasses import dataclass

ADD_MIN_GAIN = 0.07
"""Add a host only if the model predicts at least this much more rate (Cachew's 7 %)."""
RELEASE_HEADROOM = 1.30
"""Give a host back only if one fewer would still make this times the GPU-bound rate. The CPU-busy
model reads capacity high (a chain slot between tasks counts as free), so the margin is wide: at
1.10 the loop gave back a host that was needed (tests/launcher/attached/test_elastic.py, 2 <-> 3)."""
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

    @classmethod
    def of(cls, records: list[dict], data_cpu_busy: float | None = None,
           slots_per_host: float | None = None) -> "Window":
        """From step records (`trainers.control.record`: step_time_s, data_wait_s, images_per_s,
        chain_s and chain_rows)."""
        time_s = sum(r["step_time_s"] for r in records)
        wait_s = sum(min(r["data_wait_s"], r["step_time_s"]) for r in records)
        images = sum(r["images_per_s"] * r["step_time_s"] for r in records)
        chain_s, chain_rows = sum(r.get("chain_s", 0.0) for r in records), sum(r.get("chain_rows", 0) for r in records)
        per_host = slots_per_host * chain_rows / chain_s if slots_per_host and chain_rows and chain_s > 0 else None
        return cls(steps=len(records), data_wait_pct=100 * wait_s / time_s if time_s else 0.0,
                   images_per_s=images / time_s if time_s else 0.0,
                   gpu_bound_images_per_s=images / (time_s - wait_s) if time_s > wait_s else 0.0,
                   data_cpu_busy=data_cpu_busy, chain_images_per_s_per_host=per_host)


@dataclass(frozen=True)
class Decision:
    hosts: int
    """Data hosts wanted after this decision."""
    change: int
    """+1, -1 or 0."""
    reason: str
    predicted_images_per_s: float | None = None
    """The model's rate at `hosts`, where it has one."""

    def line(self, before: int, window: Window, price_per_host_h: float | None) -> str:
        """The console line (and the report timeline's text) of this decision."""
        what = {1: f"+1 data host ({before} -> {self.hosts})", -1: f"-1 data host ({before} -> {self.hosts})",
                0: f"{before} data hosts kept"}[self.change]
        cost = f", ${self.hosts * price_per_host_h:.2f}/h for data hosts" if price_per_host_h else ""
        return (f"autoscale: {what}: data wait {window.data_wait_pct:.1f} %, {window.images_per_s:.0f} images/s"
                f"{cost}; {self.reason}")


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


def decide(window: Window, hosts: int, cfg, since_change_s: float, pending: int = 0,
           too_few: dict[int, float] | None = None, sustained: bool = True) -> Decision:
    """The next size for `hosts` joined data hosts under `cfg` (`config.autoscale.AutoscaleConfig`);
    `pending`: hosts asked for that have not joined yet; `too_few`: sizes that starved the trainer
    right after a release, and the seconds their stabilisation has left (no release to them);
    `sustained`: an earlier window, with no step of this one, was over the target too, and none
    under it since (the controller tracks it; `CONFIRM_BELOW`)."""
    target = cfg.target_data_wait_pct
    hold = lambda why, predicted=None: Decision(hosts, 0, why, predicted)  # noqa: E731
    if pending:
        return hold(f"waiting for {pending} requested host{'s' if pending > 1 else ''} to join")
    if hosts < cfg.min_data_hosts:
        return Decision(cfg.min_data_hosts, 1, f"below autoscale.min_data_hosts ({cfg.min_data_hosts})")
    if hosts > cfg.max_data_hosts:
        return Decision(cfg.max_data_hosts, -1, f"above autoscale.max_data_hosts ({cfg.max_data_hosts})")
    if since_change_s < cfg.cooldown_s:
        return hold(f"cooling down ({since_change_s:.0f} of {cfg.cooldown_s:g} s since the last change)")
    if window.steps < cfg.window_steps or window.images_per_s <= 0:
        return hold(f"measuring: {window.steps} of autoscale.window_steps ({cfg.window_steps}) steps since the "
                    "last change")
    per_host = capacity_per_host(window, hosts, target)
    gpu_bound = window.gpu_bound_images_per_s
    if window.data_wait_pct > target:
        if hosts >= cfg.max_data_hosts:
            return hold(f"over the {target:g} % target, but at autoscale.max_data_hosts ({cfg.max_data_hosts})")
        if per_host is None:  # no data host yet: the chain runs on the train hosts
            return Decision(hosts + 1, 1, f"over the {target:g} % target with no data host")
        clock = (window.chain_images_per_s_per_host or 0.0) * hosts if gpu_bound > 0 else 0.0
        if clock and clock >= gpu_bound * RELEASE_HEADROOM:
            return hold(f"over the {target:g} % target, but by the chain's own clock {hosts} hosts make "
                        f"{clock:.0f} images/s, over {RELEASE_HEADROOM:g}x the {gpu_bound:.0f} the trainer "
                        "takes: the wait is not the chain's (a host starting, the read, the train hosts' CPUs)")
        enough = bool(clock) and clock >= gpu_bound
        if not sustained and (enough or window.data_wait_pct < target * CONFIRM_BELOW):
            why = (f", and by the chain's own clock {hosts} hosts make {clock:.0f} of the {gpu_bound:.0f} images/s "
                   "the trainer takes") if enough else ""
            return hold(f"over the {target:g} % target in this window only{why}: a host if the next is over too")
        more = predicted_rate(per_host, hosts + 1, gpu_bound)
        if more < window.images_per_s * (1 + ADD_MIN_GAIN):
            return hold(f"over the {target:g} % target, but one more host would give {more:.0f} images/s "
                        f"(the trainer takes {gpu_bound:.0f}): less than {ADD_MIN_GAIN:.0%} more", more)
        return Decision(hosts + 1, 1, f"over the {target:g} % target; {hosts + 1} hosts should make {more:.0f} "
                                      f"images/s (+{more / window.images_per_s - 1:.0%}; the trainer takes "
                                      f"{gpu_bound:.0f})", more)
    if window.data_wait_pct < target / 2 and hosts > cfg.min_data_hosts:
        if per_host is None:
            return hold("under the target, but the data hosts' CPU use is not known: no host given back")
        fewer = per_host * (hosts - 1)
        left = (too_few or {}).get(hosts - 1, 0.0)
        if left > 0:
            return hold(f"under the target, but {hosts - 1} hosts starved the trainer after the last release "
                        f"(no release to {hosts - 1} for {left:.0f} s more)")
        if fewer >= gpu_bound * RELEASE_HEADROOM:
            return Decision(hosts - 1, -1, f"under half the {target:g} % target; {hosts - 1} hosts can make "
                                           f"{fewer:.0f} images/s, the trainer takes {gpu_bound:.0f}",
                            predicted_rate(per_host, hosts - 1, gpu_bound))
        return hold(f"under the target, but {hosts - 1} hosts could make only {fewer:.0f} images/s of the "
                    f"{gpu_bound:.0f} the trainer takes", fewer)
    return hold(f"within the {target:g} % target")
