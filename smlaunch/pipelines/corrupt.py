"""Corrupt records: fail by default, or skip up to a channel's `max_corrupted_records` and count them.

A skip decision must be global to the channel, not per read task, or a limit of 10 would let
10 per task through. Corruption is rare (the TF extension added its skip option after about one
CRC failure in 645 million Pipe records, ../shared/notes/sagemaker.md §5.2), so every corrupt
record asks one named actor, synchronously; the actor keeps the count per channel and the first
messages, and the run report shows them. A channel with no allowance never touches the actor.

A corrupt record is counted once, however often it is read: the next epoch (or a retried read
task) meets the same bytes at the same place, and the reader's message names the file and the
byte offset. Counting it again would fail a multi-epoch run on its second pass over one record
the allowance covers.

An image no decoder reads is met later, by the chain (`ops.chain`), which knows the sample's id
but not its file; it goes to the same actor (`undecodable_sample`), which names the file from the
id (`places.SamplePlaces`) and counts it against the same allowance.
"""

from __future__ import annotations

from collections.abc import Callable

import ray

from smlaunch.errors import DataError

ACTOR_NAME = "smlaunch-corrupt-records"
NAMESPACE = "smlaunch"
ASK_TIMEOUT_S = 30.0
KEEP_MESSAGES = 10


@ray.remote(num_cpus=0, max_restarts=0)
class CorruptRecords:
    """Counts corrupt records per channel against the channel's allowance."""

    def __init__(self, limits: dict[str, int], places: dict | None = None):
        self.limits = limits
        self.places = places or {}
        self.counts: dict[str, int] = {}
        self.messages: dict[str, list[str]] = {}
        self.known: dict[str, set[str]] = {}

    def report(self, channel: str, message: str) -> str:
        """Record a corrupt record: "skip" (a new one, within the allowance), "again" (one already
        skipped) or "fail" (over the allowance)."""
        known = self.known.setdefault(channel, set())
        if message in known:
            return "again"
        known.add(message)
        self.counts[channel] = self.counts.get(channel, 0) + 1
        kept = self.messages.setdefault(channel, [])
        if len(kept) < KEEP_MESSAGES:
            kept.append(message)
        return "skip" if self.counts[channel] <= self.limits.get(channel, 0) else "fail"

    def sample(self, channel: str, sample_id: int, reason: str) -> tuple[str, str]:
        """`report` an unusable sample the chain met, by id: (verdict, the message, naming the
        sample's file and member when its id leads to one)."""
        places = self.places.get(channel)
        place = places.find(sample_id) if places is not None else None
        where = f"{place} (sample id {sample_id})" if place else f"sample id {sample_id}"
        message = f"channel '{channel}': {where}: {reason}"
        return self.report(channel, message), message

    def summary(self) -> dict:
        return {
            channel: {
                "skipped": min(n, self.limits.get(channel, 0)),
                "limit": self.limits.get(channel, 0),
                "first": self.messages.get(channel, []),
            }
            for channel, n in self.counts.items()
        }


_counter = None
"""The driver's handle: an actor lives as long as a handle to it does."""


def start_counter(limits: dict[str, int], places: dict | None = None):
    """The run's counter (one per Ray namespace `smlaunch`; a previous one is replaced); `places`:
    channel -> `SamplePlaces`, to name the file of a sample the chain cannot decode."""
    from smlaunch.cluster.run_relay import kill_named

    global _counter
    kill_named(ACTOR_NAME, NAMESPACE)
    # On the driver's node (the head): anywhere else it dies with its host, and with it the run's
    # count and the report (a data host lost mid-epoch took it down).
    here = {"ray.io/node-id": ray.get_runtime_context().get_node_id()}
    _counter = CorruptRecords.options(  # type: ignore[attr-defined]  # mypy drops class decorators: an ActorClass
        name=ACTOR_NAME, namespace=NAMESPACE, label_selector=here
    ).remote(limits, places)
    return _counter


def skip_policy(channel: str, limit: int) -> Callable[[Exception], bool] | None:
    """The `on_corrupt` callback for a reader of `channel`: None (fail at once) when nothing may be skipped."""
    if limit <= 0:
        return None

    def on_corrupt(error: Exception) -> bool:
        counter = ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
        verdict = ray.get(counter.report.remote(channel, str(error)), timeout=ASK_TIMEOUT_S)
        if verdict == "again":
            return True
        if verdict == "skip":
            from smlaunch.cluster.run_relay import send_event

            send_event("warning", text=f"channel '{channel}': skipped a corrupt record: {error}")
            return True
        raise DataError(
            f"channel '{channel}': more than max_corrupted_records={limit} corrupt records; the last: {error}"
        )

    return on_corrupt


def undecodable_sample(channel: str, limit: int, sample_id: int, reason: str) -> None:
    """An image of `channel` that no decoder reads: returns when it is to be skipped (within
    `limit`, or skipped before), else raises a one-line `DataError` naming the channel, the file
    and member (when the id leads to them, `places`) and the sample id."""
    counter = None
    if ray.is_initialized():
        try:
            counter = ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
        except ValueError:
            pass
    if counter is None:  # no run's counter (a chain called on its own): nothing to name the file with
        raise DataError(f"channel '{channel}': sample id {sample_id}: {reason}")
    verdict, message = ray.get(counter.sample.remote(channel, sample_id, reason), timeout=ASK_TIMEOUT_S)
    if verdict == "again":
        return
    if verdict == "skip":
        from smlaunch.cluster.run_relay import send_event

        send_event("warning", text=f"channel '{channel}': skipped a corrupt record: {message}")
        return
    if limit <= 0:
        raise DataError(message)
    raise DataError(
        f"channel '{channel}': more than max_corrupted_records={limit} corrupt records; the last: {message}"
    )


def corrupt_summary() -> dict:
    """Per channel: corrupt records skipped, the allowance, the first messages ({} when none)."""
    try:
        counter = ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    except ValueError:
        return {}
    return ray.get(counter.summary.remote(), timeout=ASK_TIMEOUT_S)
