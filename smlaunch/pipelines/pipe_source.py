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

from smlaunch.pipelines.channels import channel_dir
from smlaunch.pipelines.datasource import example_blocks
from smlaunch.pipelines.formats import iter_records
from smlaunch.pipelines.pipe import DEFAULT_TIMEOUT_S, PipeEpochs


@ray.remote(num_cpus=0, max_restarts=0)
class PipeHostReader:
    """This host's side of one Pipe channel: the epoch counter and the open FIFO."""

    def __init__(self, channel: str, opt_ml: str | None, record_format: str, keep: tuple[int, int] | None,
                 timeout_s: float):
        self.channel = channel
        self.format = record_format
        self.keep = keep
        self.epochs = PipeEpochs(channel_dir(opt_ml, channel).parent, channel, timeout_s=timeout_s)
        self._context = None
        self._blocks = None

    def start_epoch(self) -> int:
        self._close()
        epoch = self.epochs.next_epoch
        self._context = self.epochs.next()
        stream = self._context.__enter__()
        records = iter_records(stream, self.format, f"{stream.name} (epoch {epoch})")
        if self.keep is not None:
            index, count = self.keep
            records = (r for r in records if google_crc32c.value(r) % count == index)
        self._blocks = example_blocks(self.channel, f"{self.channel}_{epoch}", records)
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


class PipeChannelDatasource(Datasource):
    def __init__(self, channel: str, roots: dict[str, str | None], record_format: str, distribution: str,
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        self.channel = channel
        self.roots = roots  # host -> its /opt/ml (None: the host's own)
        self.format = record_format
        self.distribution = distribution
        self.timeout_s = timeout_s

    def get_name(self) -> str:
        return f"Pipe[{self.channel}]"

    def estimate_inmemory_data_size(self) -> None:
        return None  # a stream: unknown until read

    def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> list[ReadTask]:
        hosts = sorted(self.roots)
        tasks = []
        for i, host in enumerate(hosts):
            keep = (i, len(hosts)) if self.distribution == "FullyReplicated" and len(hosts) > 1 else None
            meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
            tasks.append(ReadTask(partial(_read_host, self.channel, host, self.roots[host], self.format, keep,
                                          self.timeout_s), meta, per_task_row_limit=per_task_row_limit))
        return tasks


def _read_host(channel, host, opt_ml, record_format, keep, timeout_s):
    reader = PipeHostReader.options(
        name=f"smlaunch-pipe-{channel}-{host}", namespace="smlaunch", get_if_exists=True, lifetime="detached",
        label_selector={"sm-host": host}).remote(channel, opt_ml, record_format, keep, timeout_s)
    ray.get(reader.start_epoch.remote())
    pending = reader.next_block.remote()
    while True:
        block = ray.get(pending)
        if block is None:
            return
        pending = reader.next_block.remote()  # the next block is read while this one moves on
        yield block
