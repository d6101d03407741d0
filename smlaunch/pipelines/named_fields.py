"""Rows of a channel that names its own fields (`channels.<name>.fields` beyond image, label, id).

Such a batch is whatever the user's task needs: float feature columns and a target for a
regression, token ids, a mask beside an image. Each named field leaves under its batch name, as
the data holds it (Arrow's type: a float column stays float, a list column a list), so the `map`
ops and the user's loss see the user's own names and dtypes. Every row also gets its `id` (the
named id column, or one derived from where the row is, as for image rows: `rows.derived_id`).

The checks are the ones an image row gets, for the fields that are there: a null in any named
field, an empty image, a label that is not a class index. A bad row goes to the channel's
corrupt-record policy, naming the file and row; the good rows of its row group go on.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.errors import DataError


def batch_fields(channel: ChannelPlan) -> dict[str, str | None]:
    """Batch name -> the data's name, for every field the channel's rows carry (id: None when derived)."""
    image, label, ident = channel.fields
    return {"image": image, "label": label, "id": ident, **dict(channel.more)}


def is_named(channel: ChannelPlan) -> bool:
    """Whether the channel lists its own fields (not the built-in image and label): a `fields`
    naming anything but image, label and id (`config.channel_rules.resolved_fields`). An image
    folder's fields are all None and it is not named."""
    return bool(channel.more)


def named_table(
    channel: ChannelPlan, table: pa.Table, fields: dict, num_classes: int | None, ids: pa.Array, where: str, start: int
) -> pa.Table:
    """`table`'s rows as a block of the named fields and `ids`, bad rows dropped under the channel's
    policy (or the first one raised); `where` names the file, `start` its first row's number."""
    import pyarrow.compute as pc

    from smlaunch.pipelines.corrupt import skip_policy

    bad: dict[int, str] = {}
    columns = {}
    for name, column in fields.items():
        if not column or name == "id":
            continue
        values = table.column(column).combine_chunks()
        _mark(bad, values.is_null(), f"no {name} (column {column} is null)")
        if name == "image":
            _mark(bad, pc.equal(pc.binary_length(values), 0), "an empty image")
        elif name == "label":
            if not pa.types.is_integer(values.type):
                raise DataError(
                    f"channel '{channel.name}': {where}: the label column {column} holds {values.type}, "
                    "not integer class indexes"
                )
            values = values.cast(pa.int64())
            out = (
                pc.less(values, 0)
                if num_classes is None
                else pc.or_(pc.less(values, 0), pc.greater_equal(values, num_classes))
            )
            _mark(bad, out, f"a label that is not a class index 0..{(num_classes or 0) - 1}")
        columns[name] = values
    policy = skip_policy(channel.name, channel.max_corrupted_records)
    for row in sorted(bad):
        error = DataError(f"channel '{channel.name}': {where} row {start + row}: {bad[row]}")
        if policy is None or not policy(error):
            raise error
    block = pa.table({**columns, "id": ids})
    if bad:
        keep = np.ones(table.num_rows, bool)
        keep[list(bad)] = False
        block = block.filter(pa.array(keep))
    return block


def _mark(bad: dict[int, str], mask, reason: str) -> None:
    """Rows where `mask` (a boolean Arrow array; null counts as false) holds, with their first reason."""
    hits = np.flatnonzero(mask.fill_null(False).to_numpy(zero_copy_only=False))
    for row in hits.tolist():
        bad.setdefault(row, reason)


class NamedSample(tuple):
    """One record's named fields, `(where, {batch name: value or None}, id or None)`: what a
    record reader (WebDataset members) yields for a channel naming its fields, where it yields a
    `rows.Sample` of image, label and id otherwise."""

    def __new__(cls, where: str, values: dict, ident):
        return super().__new__(cls, (where, values, ident))


class NamedCheck:
    """A `NamedSample` as a row of its fields and `id`, or None when a field is missing (or the
    label is no class) and the channel's corrupt-record policy skips it; past the policy, a
    `DataError` naming the record. Values stay as the record holds them (a WebDataset member's
    bytes: a `decode_image` or `map` op reads them), but for `label`, an integer."""

    def __init__(self, channel: ChannelPlan, num_classes: int | None):
        from smlaunch.pipelines.corrupt import skip_policy

        self.channel, self.num_classes = channel, num_classes
        self.policy = skip_policy(channel.name, channel.max_corrupted_records)
        self.sources = {name: source for name, source in batch_fields(channel).items() if source and name != "id"}

    def __call__(self, sample: NamedSample) -> dict | None:
        where, values, ident = sample
        try:
            if isinstance(ident, Exception):  # the record itself did not parse
                raise DataError(str(ident))
            row = {name: self._value(name, values.get(name)) for name in self.sources}
            if ident is None:
                raise DataError(f"no id ({self.channel.fields[2]})")
            row["id"] = int(ident.strip() if isinstance(ident, (bytes, str)) else ident)
        except (DataError, ValueError, TypeError) as exc:
            error = DataError(f"channel '{self.channel.name}': {where}: {exc}")
            if self.policy is None or not self.policy(error):
                raise error from None
            return None
        return row

    def _value(self, name: str, value):
        if value is None or (isinstance(value, (bytes, bytearray)) and not value):
            raise DataError(f"no {name} ({self.sources[name]})")
        if name != "label":
            return value
        try:
            label = int(value.strip() if isinstance(value, (bytes, str)) else value)
        except (TypeError, ValueError):
            raise DataError(f"label {value!r} is not an integer class index") from None
        if label < 0 or (self.num_classes is not None and label >= self.num_classes):
            raise DataError(f"label {label} is not a class index 0..{(self.num_classes or 0) - 1}")
        return label


def row_columns(channel: ChannelPlan) -> tuple[str, ...]:
    """A named channel's row columns, in the order `NamedCheck` makes them."""
    return tuple(name for name, source in batch_fields(channel).items() if source and name != "id") + ("id",)
