"""A Ray Data source over a File or FastFile channel, read on the hosts that hold it.

Paths are relative to `/opt/ml/input/data/<channel>`; a read task looks up the host it runs on
(its node's `sm-host` label) and opens that host's copy, as a task on a SageMaker host reads its
own `/opt/ml`. Each sample is read once per pass:

* FullyReplicated: every receiving host holds every file, so the files are split among read
  tasks and a task reads its share wherever it lands.
* ShardedByS3Key: each host holds different files. Ray Data places read tasks by one selector
  for all of them, so a task that lands on another host than the one holding its files streams
  them from a generator task pinned to that host (zero CPUs, so two hosts each waiting for the
  other's CPU cannot deadlock).

Records stream out in small Arrow blocks, never a whole file at once. Reads are deterministic
(same files, same order, same block sizes), which is what makes Ray's retries and lineage
reconstruction after a lost host deliver each sample once (see `host_loss`).
"""

from __future__ import annotations

from functools import partial

import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.errors import DataError
from smlaunch.pipelines.channels import channel_dir
from smlaunch.pipelines.fastfile import open_channel_file
from smlaunch.pipelines.host_loss import host_alive, sharded_lost_error
from smlaunch.pipelines.rows import channel_records, row_blocks

Files = list[tuple[str, int]]


class ChannelDatasource(Datasource):
    """`files` maps each receiving host to what it holds (relative path, size); `roots` maps it to
    its /opt/ml (None: the host's own, on SageMaker)."""

    def __init__(self, channel: ChannelPlan, files: dict[str, Files], roots: dict[str, str | None]):
        self.channel = channel
        self.files = files
        self.roots = roots

    def get_name(self) -> str:
        return f"Channel[{self.channel.name}]"

    def estimate_inmemory_data_size(self) -> int:
        return sum(size for files in self.shares().values() for _, size in files)

    def shares(self) -> dict[str | None, Files]:
        """Files to read once, by the host that must read them (None: any receiving host)."""
        if self.channel.distribution == "ShardedByS3Key":
            return dict(self.files)
        return {None: next(iter(self.files.values()))}

    def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> list[ReadTask]:
        shares = self.shares()
        tasks = []
        for host, files in shares.items():
            groups = max(1, min(max(1, parallelism // len(shares)), len(files)))
            for g in range(groups):
                mine = files[g::groups]
                if not mine:
                    continue
                meta = BlockMetadata(num_rows=None, size_bytes=sum(s for _, s in mine), exec_stats=None,
                                     input_files=tuple(rel for rel, _ in mine))
                tasks.append(ReadTask(partial(_read_files, self.channel, host, [rel for rel, _ in mine], self.roots),
                                      meta, per_task_row_limit=per_task_row_limit))
        return tasks


def _read_files(channel: ChannelPlan, holder: str | None, files: list[str], roots: dict[str, str | None]):
    host = ray.get_runtime_context().get_node_labels().get("sm-host")
    if holder is not None and host != holder:
        # The holder's files are on no other host: if it is gone (this is a retry after it died),
        # a task pinned to it would wait forever; say so instead. The streaming task is not
        # retried (`max_retries=0`) because this task, retried by Ray Data, starts it again.
        if not host_alive(holder):
            raise sharded_lost_error(channel.name, holder, roots.get(holder), files)
        stream = ray.remote(_read_here).options(num_returns="streaming", num_cpus=0, max_retries=0,
                                                label_selector={"sm-host": holder})
        try:
            for ref in stream.remote(channel, holder, files, roots):
                yield ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError):
            if not host_alive(holder):
                raise sharded_lost_error(channel.name, holder, roots.get(holder), files) from None
            raise
        return
    yield from _read_here(channel, host, files, roots)


def _read_here(channel: ChannelPlan, host: str, files: list[str], roots: dict[str, str | None]):
    if host not in roots:
        raise DataError(f"channel '{channel.name}': read task landed on host {host}, which does not "
                        f"receive the channel (hosts: {sorted(roots)})")
    directory = channel_dir(roots[host], channel.name)
    for rel in files:
        try:
            stream = open_channel_file(directory, rel)
        except OSError as exc:
            raise DataError(f"channel '{channel.name}': cannot open {directory}/{rel} on {host}: "
                            f"{exc.strerror or exc}") from None
        with stream:
            yield from row_blocks(channel, f"{directory}/{rel}", channel_records(channel, stream, f"{directory}/{rel}"))
