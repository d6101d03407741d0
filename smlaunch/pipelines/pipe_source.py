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
"""

from __future__ import annotations

from functools import partial

import google_crc32c
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.pipelines.channels import channel_dir
from smlaunch.pipelines.pipe import DEFAULT_TIMEOUT_S, PipeEpochs
from smlaunch.pipelines.rows import channel_records, row_blocks


@ray.remote(num_cpus=0, max_restarts=0)
class PipeHostReader:
    """This host's side of one Pipe channel: the epoch counter and the open FIFO."""

    def __init__(self, channel: ChannelPlan, opt_ml: str | None, keep: tuple[int, int] | None, timeout_s: float):
        self.channel = channel
        self.keep = keep
        self.epochs = PipeEpochs(channel_dir(opt_ml, channel.name).parent, channel.name, timeout_s=timeout_s)
        self._context = None
        self._blocks = None

    def start_epoch(self) -> int:
        self._close()
        epoch = self.epochs.next_epoch
        self._context = self.epochs.next()
        stream = self._context.__enter__()
        source = f"{stream.name} (epoch {epoch})"
        records = channel_records(self.channel, stream, source)
        if self.keep is not None:
            records = _keep_share(records, *self.keep, len(self.channel.attribute_names or ()) or 1)
        self._blocks = row_blocks(self.channel, source, records)
        return epoch

    def next_block(self):
        """The next Arrow block of this epoch, or None once the FIFO is exhausted (then closed)."""
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
            if google_crc32c.value(unit[0]) % count == index:
                yield from unit
            unit = []
    yield from unit  # an incomplete tail: let the reader report it


class PipeChannelDatasource(Datasource):
    def __init__(self, channel: ChannelPlan, roots: dict[str, str | None], timeout_s: float = DEFAULT_TIMEOUT_S):
        self.channel = channel
        self.roots = roots  # host -> its /opt/ml (None: the host's own)
        self.timeout_s = timeout_s

    def get_name(self) -> str:
        return f"Pipe[{self.channel.name}]"

    def estimate_inmemory_data_size(self) -> None:
        return None  # a stream: unknown until read

    def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> list[ReadTask]:
        hosts = sorted(self.roots)
        tasks = []
        for i, host in enumerate(hosts):
            replicated = self.channel.distribution == "FullyReplicated" and len(hosts) > 1
            keep = (i, len(hosts)) if replicated else None
            meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
            tasks.append(ReadTask(partial(_read_host, self.channel, host, self.roots[host], keep, self.timeout_s),
                                  meta, per_task_row_limit=per_task_row_limit))
        return tasks


def _read_host(channel: ChannelPlan, host, opt_ml, keep, timeout_s):
    reader = PipeHostReader.options(
        name=f"smlaunch-pipe-{channel.name}-{host}", namespace="smlaunch", get_if_exists=True, lifetime="detached",
        label_selector={"sm-host": host}).remote(channel, opt_ml, keep, timeout_s)
    ray.get(reader.start_epoch.remote())
    pending = reader.next_block.remote()
    while True:
        block = ray.get(pending)
        if block is None:
            return
        pending = reader.next_block.remote()  # the next block is read while this one moves on
        yield block
