"""Asking Ray's autoscaler for data hosts by label, beside Ray Data's own requests (issue 42).

`ray.autoscaler.sdk.request_resources` sets one cluster-wide constraint: the last call wins, on
every Ray version 2.60 ships (`autoscaler/v2/sdk.py`: "future requests will overwrite"). Ray Data
and Ray Train make their requests through one detached actor, `AutoscalingCoordinator`, which
merges its requesters' bundles and sends the merge with `request_resources` every 20 s, an empty
merge included (`ray/data/_internal/cluster_autoscaler/default_autoscaling_coordinator.py`). A
launcher's own `request_resources` would so be overwritten within 20 s. It registers instead as a
requester of that coordinator, whose client Ray Data uses itself: its bundles are added to every
merge, with the data hosts' label selector on each, and no subcluster reservation (which would
take the hosts' CPUs out of Ray Data's own budget). A request expires after `EXPIRE_S`, so a
thread sends it again every `REFRESH_S` while it stands.

The coordinator also counts each subcluster's nodes for Ray Data's budget, at the same 20 s
tick: a host that joined ran no chain task until then (bench/elastic.py: a window at 2 hosts made
what 1 had, and a third was added). `recount` makes it count again at once, as Ray Data's own
callers do before they pin work to nodes (`get_reserved_resources(recompute=True)`).

A smaller request frees only idle hosts, and a data host running the chain is never idle: one to
give back is drained (`drain`): Ray schedules nothing new there, lets what runs finish, and the
autoscaler ends the node once its raylet exits, with no idle timeout. The smaller request must be
in the autoscaler's hands before the drain: with the old one still standing, the autoscaler sees
a host missing (the draining one no longer counts) and starts a replacement, which the loop then
gives back too (tests/launcher/attached/test_elastic.py saw sizes 1, 2, 3, 2, 2, 1 once in 14
runs). So `want` returns a smaller request only once the coordinator has forwarded it.
"""

from __future__ import annotations

import threading
import time

EXPIRE_S = 180.0
REFRESH_S = 60.0
FORWARDED_S = 10.0
"""How long `want` waits for a smaller request to reach the autoscaler (a coordinator call or two)."""
REQUESTER = "smlaunch-data-hosts"


class DataHostRequests:
    """Hold the autoscaler to `hosts` data hosts of `cpus_per_host` CPUs carrying `labels`."""

    def __init__(self, labels: dict[str, str], cpus_per_host: float, requester: str = REQUESTER):
        self.labels, self.cpus_per_host, self.requester = dict(labels), cpus_per_host, requester
        self.hosts: int | None = None
        self._changed = threading.Event()
        self._closed = False
        self._recount = False
        self._asked = self._forwarded = 0
        """`want` calls made, and how many of them the coordinator has forwarded to the autoscaler."""
        self._forwarded_cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="smlaunch-data-host-requests", daemon=True)
        self._started = False

    def want(self, hosts: int) -> None:
        """Ask for `hosts` hosts from now on (0: none of ours; Ray Data's requests still stand). A
        smaller request returns once the autoscaler has it (at most `FORWARDED_S`), so a `drain`
        that follows starts no replacement."""
        smaller = self.hosts is not None and hosts < self.hosts
        with self._forwarded_cond:
            self.hosts = max(0, hosts)
            self._asked += 1
            asked = self._asked
        self._wake()
        if smaller:
            with self._forwarded_cond:
                if not self._forwarded_cond.wait_for(lambda: self._forwarded >= asked, FORWARDED_S):
                    import logging

                    logging.getLogger("smlaunch").warning(
                        f"autoscale: the request for {hosts} data hosts did not reach the autoscaler within "
                        f"{FORWARDED_S:g} s; it may start a host in place of one given back"
                    )

    def recount(self) -> None:
        """Have the coordinator count the cluster's nodes now (the data hosts joined or left), not at
        its next tick: Ray Data's budget for the chain then follows them within a second."""
        self._recount = True
        self._wake()

    def _wake(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()
        self._changed.set()

    def close(self) -> None:
        """Withdraw the request (the hosts go once idle, after the autoscaler's idle timeout)."""
        self._closed = True
        self._changed.set()
        if self._started:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        # The coordinator's client is not thread-safe: this thread is its only caller.
        from smlaunch._ray_compat import autoscaling_coordinator

        coordinator = autoscaling_coordinator(self.requester)
        while True:
            self._changed.wait(REFRESH_S)
            self._changed.clear()
            if self._closed:
                coordinator.cancel_request()
                return
            with self._forwarded_cond:
                hosts, asked = self.hosts, self._asked
            if hosts is None:
                if self._recount:
                    self._recount = False
                    _recount_nodes(self.requester)
                continue
            if hosts:
                coordinator.request_resources(
                    [{"CPU": float(self.cpus_per_host)}] * hosts, EXPIRE_S, label_selectors=[dict(self.labels)] * hosts
                )
            else:
                coordinator.cancel_request()
            if self._recount or asked > self._forwarded:
                # The coordinator's calls run in order: once this one returns, the request above was
                # merged and sent to the autoscaler (`request_resources` sends an updated one at once).
                self._recount = False
                _recount_nodes(self.requester)
            with self._forwarded_cond:
                self._forwarded = asked
                self._forwarded_cond.notify_all()


def _recount_nodes(requester: str) -> None:
    """One tick of Ray Data's autoscaling coordinator now: its view of the nodes, and every
    requester's reservation (Ray Data's budgets) from it. Ray 2.60's `get_reserved_resources` takes
    `recompute`; where a later Ray drops it, the coordinator's own 20 s tick still comes."""
    import ray

    from smlaunch._ray_compat import coordinator_actor

    try:
        ray.get(coordinator_actor().get_reserved_resources.remote(requester, recompute=True), timeout=30)
    except Exception as exc:  # the coordinator's next tick counts them anyway
        import logging

        logging.getLogger("smlaunch").warning(
            f"autoscale: Ray Data's coordinator did not recount the nodes now "
            f"({type(exc).__name__}); its budget follows at its next tick (20 s)"
        )


def labelled_nodes(labels: dict[str, str]) -> list[dict]:
    """The alive nodes carrying every one of `labels` (`ray.nodes()` entries)."""
    import ray

    return [
        n for n in ray.nodes() if n.get("Alive") and all((n.get("Labels") or {}).get(k) == v for k, v in labels.items())
    ]


def drain(node_id: str, why: str, deadline_s: float = 0.0) -> None:
    """Give the node back: no new task or actor lands there, those running finish, then its raylet
    exits and the autoscaler ends it. Lower the request first (`DataHostRequests.want`), or the
    autoscaler starts a replacement. Ray's reason is PREEMPTION, the one a busy node accepts
    (IDLE_TERMINATION is refused there); `deadline_s` 0: none (nothing kills it at a deadline anyway)."""
    from smlaunch._ray_compat import drain_node

    deadline_ms = time.time_ns() // 1_000_000 + int(deadline_s * 1000) if deadline_s else 0
    accepted, refusal = drain_node(node_id, why, deadline_ms)
    if not accepted:
        raise RuntimeError(f"Ray refused to drain node {node_id[:12]}: {refusal}")
