"""A Ray Data source over a channel's record files, read on the hosts that hold them.

Paths are relative to `/opt/ml/input/data/<channel>`; each read task looks up the host it runs
on (its node's `sm-host` label) and opens that host's copy, as a task on a SageMaker host reads
its own `/opt/ml`. Records stream out in small Arrow blocks, never a whole file at once.
"""

from __future__ import annotations

from functools import partial
from typing import Iterable, Iterator

import pyarrow as pa
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from smlaunch.errors import DataError
from smlaunch.pipelines.channels import channel_dir
from smlaunch.pipelines.formats.example import decode_example
from smlaunch.pipelines.formats import RecordError, iter_records

BLOCK_ROWS = 256
IMAGE_KEY, LABEL_KEY, ID_KEY = "image/encoded", "image/class/label", "id"


class ChannelDatasource(Datasource):
    """File-mode record files (TFRecord or RecordIO) of `tf.train.Example` images; rows are
    `image` bytes, `label`, `id`. Files are split among read tasks, so each is read once."""

    def __init__(self, channel: str, files: list[tuple[str, int]], roots: dict[str, str | None],
                 record_format: str = "tfrecord"):
        self.channel = channel
        self.format = record_format
        self.files = files
        self.roots = roots  # host name -> that host's /opt/ml (None: the running host's own)

    def get_name(self) -> str:
        return f"Channel[{self.channel}]"

    def estimate_inmemory_data_size(self) -> int:
        return sum(size for _, size in self.files)

    def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> list[ReadTask]:
        groups = max(1, min(parallelism, len(self.files)))
        tasks = []
        for g in range(groups):
            files = self.files[g::groups]
            meta = BlockMetadata(num_rows=None, size_bytes=sum(s for _, s in files), exec_stats=None,
                                 input_files=tuple(rel for rel, _ in files))
            tasks.append(ReadTask(partial(_read_files, self.channel, [rel for rel, _ in files], self.roots, self.format),
                                  meta, per_task_row_limit=per_task_row_limit))
        return tasks


def _read_files(channel: str, files: list[str], roots: dict[str, str | None], record_format: str):
    host = ray.get_runtime_context().get_node_labels().get("sm-host")
    if host not in roots:
        raise DataError(f"channel '{channel}': read task landed on host {host}, which does not "
                        f"receive the channel (hosts: {sorted(roots)})")
    directory = channel_dir(roots[host], channel)
    for rel in files:
        path = f"{directory}/{rel}"
        yield from _read_one(channel, path, record_format)


def _read_one(channel: str, path: str, record_format: str):
    yield from example_blocks(channel, path, iter_records(path, record_format))


def example_blocks(channel: str, source: str, records: Iterable[bytes]) -> Iterator[pa.Table]:
    """Arrow blocks of `BLOCK_ROWS` decoded `tf.train.Example` images; errors name channel and source."""
    rows: dict[str, list] = {"image": [], "label": [], "id": []}
    try:
        for n, record in enumerate(records):
            try:
                example = decode_example(record)
                rows["image"].append(example[IMAGE_KEY][0])
                rows["label"].append(int(example[LABEL_KEY][0]))
                rows["id"].append(int(example[ID_KEY][0]))
            except (DataError, KeyError, IndexError) as exc:
                raise DataError(f"channel '{channel}': {source} record {n}: {exc!s} "
                                f"(need features {IMAGE_KEY}, {LABEL_KEY}, {ID_KEY})") from None
            if len(rows["id"]) == BLOCK_ROWS:
                yield _table(rows)
                rows = {"image": [], "label": [], "id": []}
    except RecordError as exc:
        raise DataError(f"channel '{channel}': {exc}") from None
    if rows["id"]:
        yield _table(rows)


def _table(rows):
    return pa.table({"image": pa.array(rows["image"], pa.binary()),
                     "label": pa.array(rows["label"], pa.int64()),
                     "id": pa.array(rows["id"], pa.int64())})
