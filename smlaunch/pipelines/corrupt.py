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
"""

from __future__ import annotations

from typing import Callable

import ray

from smlaunch.errors import DataError

ACTOR_NAME = "smlaunch-corrupt-records"
NAMESPACE = "smlaunch"
ASK_TIMEOUT_S = 30.0
KEEP_MESSAGES = 10


@ray.remote(num_cpus=0, max_restarts=0)
class CorruptRecords:
    """Counts corrupt records per channel against the channel's allowance."""

    def __init__(self, limits: dict[str, int]):
        self.limits = limits
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

    def summary(self) -> dict:
        return {channel: {"skipped": min(n, self.limits.get(channel, 0)), "limit": self.limits.get(channel, 0),
                          "first": self.messages.get(channel, [])} for channel, n in self.counts.items()}


_counter = None
"""The driver's handle: an actor lives as long as a handle to it does."""


def start_counter(limits: dict[str, int]):
    """The run's counter (one per Ray namespace `smlaunch`; a previous one is replaced)."""
    global _counter
    try:
        ray.kill(ray.get_actor(ACTOR_NAME, namespace=NAMESPACE))
    except ValueError:
        pass
    # On the driver's node (the head): anywhere else it dies with its host, and with it the run's
    # count and the report (a data host lost mid-epoch took it down).
    here = {"ray.io/node-id": ray.get_runtime_context().get_node_id()}
    _counter = CorruptRecords.options(name=ACTOR_NAME, namespace=NAMESPACE, label_selector=here).remote(limits)
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
            from smlaunch.cluster.board import post

            post("warning", text=f"channel '{channel}': skipped a corrupt record: {error}")
            return True
        raise DataError(f"channel '{channel}': more than max_corrupted_records={limit} corrupt records; "
                        f"the last: {error}")

    return on_corrupt


def corrupt_summary() -> dict:
    """Per channel: corrupt records skipped, the allowance, the first messages ({} when none)."""
    try:
        counter = ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    except ValueError:
        return {}
    return ray.get(counter.summary.remote(), timeout=ASK_TIMEOUT_S)
