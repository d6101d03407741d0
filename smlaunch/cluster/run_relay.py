"""The run's relay: how Ray workers reach the launcher, through one actor on the driver's node.

The launcher owns the console. Ray's forwarding of every worker's stdout (`log_to_driver`) is off
by default, because it prefixes each line with `(RayTrainWorker pid=...)` and colour codes and
mixes our lines with Ray's own. So what a train worker or a data task has to tell the user
travels here instead: step records (for the progress bar and the metric lines), validation
results, notes such as "resumed from ..." and warnings such as a skipped corrupt record.

One small actor (zero CPUs) on the driver's node keeps the events until the launcher drains them,
twice a second. Senders never wait for it while training: `EventSender` buffers events and sends them
at most every `FLUSH_S`, so a step pays for a list append, not a remote call. The events are
also in the report (steps, validation) when the run ends, so a lost event costs a console line,
never data.
"""

from __future__ import annotations

import functools
import time

NAME = "smlaunch-relay"
NAMESPACE = "smlaunch"
FLUSH_S = 0.5
MAX_EVENTS = 100_000
"""Held between drains; past it the oldest step records are dropped (a launcher that stopped draining)."""


@functools.lru_cache(maxsize=1)
def _actor_class():
    import ray

    @ray.remote(num_cpus=0, max_restarts=0)
    class RunRelay:
        def __init__(self):
            self.events: list[dict] = []
            self.fatal: dict | None = None
            self.orders: dict[str, tuple[int, dict | None]] = {}

        def set_order(self, channel: str, base: int, resume: dict | None) -> None:
            self.orders[channel] = (base, resume)

        def order(self, channel: str) -> tuple[int, dict | None]:
            return self.orders.get(channel, (0, None))

        def push(self, events: list[dict]) -> None:
            self.fatal = self.fatal or next((e for e in events if e.get("kind") == "fatal"), None)
            self.events.extend(events)
            if len(self.events) > MAX_EVENTS:
                steps = [i for i, e in enumerate(self.events) if e.get("kind") == "step"]
                drop = set(steps[: len(self.events) - MAX_EVENTS])
                self.events = [e for i, e in enumerate(self.events) if i not in drop]

        def drain(self) -> list[dict]:
            out, self.events = self.events, []
            return out

        def ending_error(self) -> dict | None:
            """The first error a rank posted as one no restart mends (`trainers.failures`), if any."""
            return self.fatal

    return RunRelay


def kill_named(name: str, namespace: str, timeout_s: float = 10) -> None:
    """End the actor of that name, if any, and wait until the name is free: `ray.kill` returns
    before the GCS releases it, and creating the successor at once failed with
    ActorAlreadyExistsError (seen in the suite, for the corrupt-record counter)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError:
            return
        ray.kill(actor)
        if time.monotonic() > deadline:
            raise RuntimeError(f"Ray actor {namespace}/{name} still holds its name {timeout_s:g} s after it was killed")
        time.sleep(0.05)


def start_relay():
    """The run's relay on this (the driver's) node; a relay left by an earlier run is replaced."""
    import ray

    kill_named(NAME, NAMESPACE)
    here = {"ray.io/node-id": ray.get_runtime_context().get_node_id()}
    return _actor_class().options(name=NAME, namespace=NAMESPACE, label_selector=here).remote()


def find_relay():
    """The run's relay from any worker, or None (a run without a launcher draining it)."""
    import ray

    try:
        return ray.get_actor(NAME, namespace=NAMESPACE)
    except ValueError:
        return None


def send_event(kind: str, wait_s: float = 0, **fields) -> None:
    """Send one event now (a data task's warning, a rare note); with `wait_s`, wait up to that long
    until the relay holds it (a worker about to raise: its process may end before a send)."""
    relay = find_relay()
    if relay is not None:
        ref = relay.push.remote([{"kind": kind, "t": time.time(), **fields}])
        if wait_s:
            import ray

            try:
                ray.get(ref, timeout=wait_s)
            except ray.exceptions.RayError:
                pass  # best effort: the caller goes on (a rank raises its error either way)


def ending_error() -> dict | None:
    """The first error a rank posted that no restart mends, or None (also without a relay)."""
    relay = find_relay()
    if relay is None:
        return None
    import ray

    return ray.get(relay.ending_error.remote(), timeout=10)


def set_order(channel: str, base: int, resume: dict | None) -> None:
    """Tell the reader of `channel` the epochs done before this worker group started, and the
    position to resume the next one from (`pipelines.position`); see `order_state`."""
    relay = find_relay()
    if relay is not None:
        import ray

        ray.get(relay.set_order.remote(channel, base, resume), timeout=30)


def order_state(channel: str) -> tuple[int, dict | None]:
    """(epochs done before this group's first pass, resume position or None) of `channel`, as the
    train workers posted it: what a pass's read tasks need to read the right epoch's order
    (`file_reader`). Without a relay (a Dataset read outside a run): (0, None)."""
    relay = find_relay()
    if relay is None:
        return 0, None
    import ray

    return ray.get(relay.order.remote(channel), timeout=30)


class EventSender:
    """A worker's buffered sender: `put` is a list append; events go out every `FLUSH_S`."""

    def __init__(self, enabled: bool = True):
        self.relay = find_relay() if enabled else None
        self.pending: list[dict] = []
        self.sent_at = time.monotonic()

    def put(self, kind: str, **fields) -> None:
        if self.relay is None:
            return
        self.pending.append({"kind": kind, "t": time.time(), **fields})
        if kind != "step" or time.monotonic() - self.sent_at >= FLUSH_S:
            self.flush()

    def flush(self, wait: bool = False) -> None:
        """Send what is pending; `wait` blocks until the relay holds it (the end of a run)."""
        if self.relay is None or not (self.pending or wait):
            return  # with `wait`, even an empty push: it runs after every earlier push of this worker
        ref = self.relay.push.remote(self.pending)
        self.pending, self.sent_at = [], time.monotonic()
        if wait:
            import ray

            try:
                ray.get(ref, timeout=10)
            except Exception:  # the console line is lost, the report still has it
                pass
