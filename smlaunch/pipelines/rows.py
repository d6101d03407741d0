"""From a channel's records to the rows the pipeline takes: `image` bytes, `label`, `id`.

Two layouts arrive as records: a `tf.train.Example` per record (`image/encoded`,
`image/class/label`, `id`), or an augmented manifest's attributes, one record each, regrouped by
the channel's `attribute_names` (image, label, and an optional id; without one the id is the
CRC-32C of the image, so it still names the sample in the report). Rows leave in Arrow blocks of
`channel.block_rows` (the chain's batch size), so a stream is never held whole. Corrupt records
go to the channel's skip policy.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import google_crc32c
import pyarrow as pa

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.errors import DataError
from smlaunch.pipelines.corrupt import skip_policy
from smlaunch.pipelines.formats import RecordError, iter_records
from smlaunch.pipelines.formats.example import decode_example
from smlaunch.pipelines.manifest import group_attributes

IMAGE_KEY, LABEL_KEY, ID_KEY = "image/encoded", "image/class/label", "id"


def channel_records(channel: ChannelPlan, stream, source: str) -> Iterator[bytes]:
    """The records of one file or FIFO of `channel`, corrupt ones handled by its skip policy."""
    return iter_records(stream, channel.record_format, source,
                        on_corrupt=skip_policy(channel.name, channel.max_corrupted_records))


def row_blocks(channel: ChannelPlan, source: str, records: Iterable[bytes]) -> Iterator[pa.Table]:
    """Arrow blocks of decoded rows; every error names the channel, the source and the record."""
    names = channel.attribute_names
    units = group_attributes(records, len(names), source) if names else records
    rows: dict[str, list] = {"image": [], "label": [], "id": []}
    try:
        for n, unit in enumerate(units):
            try:
                image, label, sample = _manifest_row(unit, names) if names else _example_row(unit)
            except (DataError, KeyError, IndexError, ValueError) as exc:
                need = (f"attributes {', '.join(names)} (image, integer label[, integer id])" if names
                        else f"features {IMAGE_KEY}, {LABEL_KEY}, {ID_KEY}")
                raise DataError(f"channel '{channel.name}': {source} {'row' if names else 'record'} {n}: "
                                f"{exc!s} (need {need})") from None
            rows["image"].append(image)
            rows["label"].append(label)
            rows["id"].append(sample)
            if len(rows["id"]) == channel.block_rows:
                yield _table(rows)
                rows = {"image": [], "label": [], "id": []}
    except RecordError as exc:
        raise DataError(f"channel '{channel.name}': {exc}") from None
    except DataError as exc:
        message = str(exc)
        raise DataError(message if message.startswith("channel '") else f"channel '{channel.name}': {message}") from None
    if rows["id"]:
        yield _table(rows)


def _example_row(record: bytes) -> tuple[bytes, int, int]:
    example = decode_example(record)
    return example[IMAGE_KEY][0], int(example[LABEL_KEY][0]), int(example[ID_KEY][0])


def _manifest_row(attributes: tuple[bytes, ...], names) -> tuple[bytes, int, int]:
    image = attributes[0]
    label = int(attributes[1].decode())
    sample = int(attributes[2].decode()) if len(names) > 2 else google_crc32c.value(image)
    return image, label, sample


def _table(rows) -> pa.Table:
    return pa.table({"image": pa.array(rows["image"], pa.binary()),
                     "label": pa.array(rows["label"], pa.int64()),
                     "id": pa.array(rows["id"], pa.int64())})
