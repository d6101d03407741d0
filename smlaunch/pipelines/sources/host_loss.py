"""Channels whose samples a lost host takes with it, and the trainer-side check that notices.

With `FullyReplicated` File or FastFile channels every receiving host holds every file, so Ray's
task retries and lineage reconstruction deliver a lost host's share from another host (the reads
are deterministic, so a retry repeats itself and Ray drops what it had already delivered). Two
kinds of channel cannot be recovered that way:

* Pipe mode, any distribution: the FIFO was read by an actor that died with the host, and a
  stream cannot be replayed.
* `ShardedByS3Key`: the lost host held files no other host has.

For both, Ray's retry is worse than useless: Ray assumes a task repeats itself, so a retry that
fails (or yields other data) before reaching the output the first attempt had already given is
dropped as a repeat, and the epoch just ends short (seen with a Pipe channel). So the read side
raises what it can, and the train workers also check (`LostHostGuard`) that the hosts of such
channels are alive: before each checkpoint and at each epoch's end every rank, and between steps
rank 0 alone, every 2 s, whose verdict the ranks' per-step exchange (`trainers.control`) hands to
all of them (a poll of Ray's node table per rank, 128 ranks x every 2 s, is what it replaced). No
checkpoint and no epoch is then taken as whole from a channel that lost a host, and the run ends
with one line naming the channel, the host and the file. Ray marks a node dead after its health
checks fail (seconds), so a few steps may still run on what the pipeline had buffered.
"""

from __future__ import annotations

import time

from smlaunch.cluster.labels import host_label
from smlaunch.errors import DataError
from smlaunch.pipelines.sources.channels import channel_dir
from smlaunch.pipelines.sources.fifo import fifo_path


class HostLost(DataError):
    """A host holding samples no other host has was lost mid-run."""


def alive_hosts() -> set[str]:
    """Host names (`host_label()`) of the Ray nodes that are alive."""
    import ray

    return {n.get("Labels", {}).get(host_label()) for n in ray.nodes() if n.get("Alive")}


def host_alive(host: str) -> bool:
    return host in alive_hosts()


def fragile_channels(plan) -> list[dict]:
    """The plan's channels a lost host cannot be recovered from, as plain data for the workers."""
    return [
        {
            "name": c.name,
            "hosts": list(c.hosts),
            "roots": {h: plan.host(h).opt_ml for h in c.hosts},
            "pipe": c.input_mode == "Pipe",
        }
        for c in plan.channels
        if c.input_mode == "Pipe" or c.distribution == "ShardedByS3Key"
    ]


def sharded_lost_error(channel: str, host: str, opt_ml: str | None, files=()) -> HostLost:
    where = f"{opt_ml}/input/data/{channel}" if opt_ml else f"/opt/ml/input/data/{channel}"
    named = f" ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''})" if files else ""
    return HostLost(
        f"channel '{channel}': host {host} was lost, and with it the ShardedByS3Key files under "
        f"{where}{named} that no other host holds, so this epoch cannot finish with every sample once: "
        "run the job again with trainer.resume=true to continue from the last complete checkpoint"
    )


def train_host_lost_error(host: str) -> HostLost:
    return HostLost(
        f"train host {host} was lost, and with it its train workers: the group cannot go on without "
        "them; run the job again with trainer.resume=true to continue from the last complete "
        "checkpoint (trainer.max_workers can shrink the group to the GPUs left)"
    )


class LostHostGuard:
    """Run by the train workers: raise as soon as a host of a fragile channel, or another train
    host, is gone (a group missing a rank would otherwise wait in its next collective).

    `check` raises; `error` returns what `check` would raise (None: every host is alive, or the
    last look is younger than `interval_s`), so rank 0 can hand it to the others first."""

    def __init__(self, channels: list[dict], interval_s: float = 2.0, train_hosts: tuple[str, ...] = ()):
        self.channels, self.interval_s = channels, interval_s
        self.train_hosts = train_hosts if len(train_hosts) > 1 else ()
        self._last = float("-inf")

    def check(self, force: bool = False) -> None:
        error = self.error(force)
        if error is not None:
            raise error

    def error(self, force: bool = False) -> HostLost | PipeHostLost | None:
        if not (self.channels or self.train_hosts) or (not force and time.monotonic() - self._last < self.interval_s):
            return None
        self._last = time.monotonic()
        alive = alive_hosts()
        for host in self.train_hosts:
            if host not in alive:
                return train_host_lost_error(host)
        for channel in self.channels:
            for host in channel["hosts"]:
                if host in alive:
                    continue
                if channel["pipe"]:
                    return lost_error(channel["name"], channel["hosts"], host, channel["roots"].get(host))
                return sharded_lost_error(channel["name"], host, channel["roots"].get(host))
        return None


class PipeHostLost(DataError):
    """A host feeding a Pipe-mode channel was lost: the stream cannot be replayed."""


def reader_name(channel: str, host: str) -> str:
    return f"smlaunch-pipe-{channel}-{host}"


def lost_error(channel: str, hosts, host: str, opt_ml, epoch: int | None = None) -> PipeHostLost:
    """The error for a lost host, naming its FIFO; when the reader died with the host, the epoch is
    the one the channel's other hosts are reading (every host reads the same epoch)."""
    if epoch is None:
        epoch = _sibling_epoch(channel, hosts, host)
    fifo = fifo_path(
        channel_dir(opt_ml, channel).parent if opt_ml else "/opt/ml/input/data",
        channel,
        "<epoch>" if epoch is None else epoch,
    )
    return PipeHostLost(
        f"channel '{channel}': host {host} was lost while streaming Pipe-mode FIFO {fifo}; "
        "Pipe mode cannot replay a stream, so this epoch cannot finish with every sample once: "
        "run the job again with trainer.resume=true to continue from the last complete checkpoint"
    )


def _sibling_epoch(channel: str, hosts, lost: str) -> int | None:
    import ray

    for host in hosts:
        if host == lost:
            continue
        try:
            reader = ray.get_actor(reader_name(channel, host), namespace="smlaunch")
            return ray.get(reader.current_epoch.remote(), timeout=10)
        except (ValueError, ray.exceptions.RayError):
            continue
    return None
