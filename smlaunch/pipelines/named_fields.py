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
    """Whether the channel lists its own fields (not the built-in image and label)."""
    return bool(channel.more) or channel.fields[0] is None or channel.fields[1] is None


def named_table(channel: ChannelPlan, table: pa.Table, fields: dict, num_classes: int | None, ids: pa.Array,
                where: str, start: int) -> pa.Table:
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
                raise DataError(f"channel '{channel.name}': {where}: the label column {column} holds {values.type}, "
                                "not integer class indexes")
            values = values.cast(pa.int64())
            out = pc.less(values, 0) if num_classes is None else \
                pc.or_(pc.less(values, 0), pc.greater_equal(values, num_classes))
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
