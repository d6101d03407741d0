"""A Ray Data source over a Pipe-mode channel: each host's FIFOs, read there, one epoch per pass.

A FIFO exists only on its host and takes one reader, so each receiving host gets a reader actor
pinned to it by its `sm-host` label (`PipeHostReader`, named per channel and host). It keeps the
host's epoch counter: every pass of the dataset (every epoch of training, every validation)
opens the next `<channel>_<epoch>` FIFO there, streams it in Arrow blocks of decoded examples, and
closes it before the next. Read tasks, one per host, pull blocks from their host's actor, so
memory stays bounded by a few blocks however long the stream is.

Each sample exactly once per epoch: with `ShardedByS3Key` a host reads all it receives; with
`FullyReplicated` every host receives everything, so host i of n keeps the records whose
CRC-32C is i modulo n, a split that does not depend on the order each host's stream comes in.

A lost host cannot be recovered from: its FIFO was read by an actor that died with it, and a
stream cannot be replayed (Ray would retry the read task, or re-run it to reconstruct a lost
block, and the retry would either wait forever for an actor pinned to a host that is gone or
start the next FIFO as if it were this one). So a read whose host is gone, or whose reader died,
fails at once with a `PipeHostLost` naming the channel, the host and the FIFO; the run ends with
that line and a new run resumes from the last complete checkpoint (`trainer.resume`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import AbstractContextManager
from functools import partial
from typing import BinaryIO

import google_crc32c
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from smlaunch.cluster.labels import host_selector
from smlaunch.cluster.plan import ChannelPlan
from smlaunch.errors import DataError
from smlaunch.pipelines.budget import tune_this_execution
from smlaunch.pipelines.formats import CHANNEL_FORMATS
from smlaunch.pipelines.rows import channel_records, record_samples, row_blocks, webdataset_samples
from smlaunch.pipelines.sources.channels import channel_dir
from smlaunch.pipelines.sources.fifo import DEFAULT_TIMEOUT_S, PipeEpochs
from smlaunch.pipelines.sources.host_loss import host_alive, lost_error, reader_name

START_MARGIN_S = 60.0
"""Beyond the FIFO's own timeout, how long a read waits for its host's reader to start (scheduling)."""


@ray.remote(num_cpus=0, max_restarts=0)
class PipeHostReader:
    """This host's side of one Pipe channel: the epoch counter and the open FIFO."""

    def __init__(
        self,
        channel: ChannelPlan,
        opt_ml: str | None,
        keep: tuple[int, int] | None,
        timeout_s: float,
        num_classes: int | None = None,
    ):
        self.channel = channel
        self.num_classes = num_classes
        self.keep = keep
        self.epochs = PipeEpochs(channel_dir(opt_ml, channel.name).parent, channel.name, timeout_s=timeout_s)
        self._context: AbstractContextManager[BinaryIO] | None = None
        self._blocks: Iterator | None = None
        self._tasks: collections.deque = collections.deque(maxlen=16)

    def current_epoch(self) -> int:
        """The epoch being read (or, between epochs, the last one read)."""
        return max(self.epochs.next_epoch - (self._context is None), 0)

    def start_epoch(self, task: str | None = None) -> int:
        """Open the next FIFO for the read task `task`. A task seen before is Ray running a read
        again (a retry after its worker died, or lineage reconstruction of a lost block): the
        blocks it had taken are gone and the next FIFO is another epoch, so it fails instead of
        quietly mixing epochs."""
        if task is not None and task in self._tasks:
            raise DataError(
                f"channel '{self.channel.name}': Ray ran the read of Pipe-mode FIFO "
                f"{self.channel.name}_{self.epochs.next_epoch - (self._context is None)} again after it "
                "died or lost a block; Pipe mode cannot replay a stream: run again with trainer.resume=true"
            )
        self._tasks.append(task)
        self._close()
        epoch = self.epochs.next_epoch
        self._context = self.epochs.next()
        stream = self._context.__enter__()
        source = f"{stream.name} (epoch {epoch})"
        if CHANNEL_FORMATS[self.channel.record_format].layout == "tar":
            samples = webdataset_samples(self.channel, stream, source)
            if self.keep is not None:
                samples = (s for s in samples if _mine(s[1] or s[0].encode(), *self.keep))
        else:
            records = channel_records(self.channel, stream, source)
            if self.keep is not None:
                records = _keep_share(records, *self.keep, len(self.channel.attribute_names or ()) or 1)
            samples = record_samples(self.channel, records, source)
        self._blocks = row_blocks(self.channel, samples, self.num_classes)
        return epoch

    def next_block(self):
        """The next Arrow block of this epoch, or None once the FIFO is exhausted (then closed)."""
        if self._blocks is None:
            raise RuntimeError(f"channel '{self.channel.name}': next_block with no epoch open (call start_epoch)")
        try:
            return next(self._blocks)
        except StopIteration:
            self._close()
            return None
        except BaseException:
            self._close()
            raise

    def _close(self) -> None:
        if self._context is not None:
            context, self._context, self._blocks = self._context, None, None
            context.__exit__(None, None, None)


def _keep_share(records, index: int, count: int, group: int):
    """This host's share of a replicated stream: the units (a record, or a manifest line's `group`
    records) whose first record's CRC-32C is `index` modulo `count`."""
    unit: list[bytes] = []
    for record in records:
        unit.append(record)
        if len(unit) == group:
            if _mine(unit[0], index, count):
                yield from unit
            unit = []
    yield from unit  # an incomplete tail: let the reader report it


def _mine(data: bytes, index: int, count: int) -> bool:
    return google_crc32c.value(data) % count == index


class PipeChannelDatasource(Datasource):
    def __init__(
        self,
        channel: ChannelPlan,
        roots: dict[str, str | None],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        num_classes: int | None = None,
    ):
        self.channel = channel
        self.num_classes = num_classes
        self.roots = roots  # host -> its /opt/ml (None: the host's own)
        self.timeout_s = timeout_s

    def get_name(self) -> str:
        return f"Pipe[{self.channel.name}]"

    def estimate_inmemory_data_size(self) -> None:
        return None  # a stream: unknown until read

    def block_count(self) -> int:
        """What `read_channel` asks Ray Data for: one per stream (host), so Ray does not split a
        stream's blocks, which already leave as they fill (`dataset.use_block_size`). Its split
        (200 planned blocks over a task per host) cut each 100-200 ways into blocks of a few rows,
        whose cost per block then set the pace (BENCHMARKS.md, formats: 2,600 blocks for 20,000
        rows; a Pipe job's data wait 13 % -> 0.3 %)."""
        return len(self.roots)

    def read_slots(self) -> int:
        """Read tasks that run at once: one per stream. Each waits on its host's reader actor,
        which does the reading, so the tasks take no CPU of Ray's (`dataset.read_channel`): with
        one, a stream held a 1-CPU data host's only CPU for the whole epoch, away from the chain."""
        return len(self.roots)

    def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> list[ReadTask]:
        tune_this_execution()  # planning runs in the process that executes (see `pipelines.budget`)
        hosts = sorted(self.roots)
        tasks = []
        for i, host in enumerate(hosts):
            replicated = self.channel.distribution == "FullyReplicated" and len(hosts) > 1
            keep = (i, len(hosts)) if replicated else None
            meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
            tasks.append(
                ReadTask(
                    partial(_read_host, self.channel, host, self.roots[host], keep, self.timeout_s, self.num_classes),
                    meta,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks


def _read_host(channel: ChannelPlan, host, opt_ml, keep, timeout_s, num_classes=None):
    if not host_alive(host):  # a retry, or a lost block being rebuilt, after the host died
        raise lost_error(channel.name, channel.hosts, host, opt_ml, None)
    reader = PipeHostReader.options(  # type: ignore[attr-defined]  # mypy drops class decorators: an ActorClass
        name=reader_name(channel.name, host),
        namespace="smlaunch",
        get_if_exists=True,
        lifetime="detached",
        label_selector=host_selector(host),
    ).remote(channel, opt_ml, keep, timeout_s, num_classes)
    epoch = None
    try:
        task = ray.get_runtime_context().get_task_id()
        epoch = ray.get(reader.start_epoch.remote(task), timeout=timeout_s + START_MARGIN_S)
        pending = reader.next_block.remote()
        while True:
            block = ray.get(pending)
            if block is None:
                return
            pending = reader.next_block.remote()  # the next block is read while this one moves on
            yield block
    except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as exc:
        raise lost_error(channel.name, channel.hosts, host, opt_ml, epoch) from exc
    except ray.exceptions.GetTimeoutError:
        if not host_alive(host):
            raise lost_error(channel.name, channel.hosts, host, opt_ml, epoch) from None
        raise DataError(
            f"channel '{channel.name}': the Pipe-mode reader on host {host} did not start within "
            f"{timeout_s + START_MARGIN_S:.0f} s"
        ) from None
