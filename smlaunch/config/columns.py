"""The columns the reader and the chain add to every row for the trainer's bookkeeping, named once.

A row leaves the reader with the sample's `id` and, from a File or FastFile channel, its place in
the epoch's order (`pos`, and `seek`: where its file can be read on from after it;
`pipelines.order`). The chain adds the host that made it (`host`), its share of the chain's
time (`prep_s`) and, with a cache, its share of the time of the ops after the cached prefix
(`tail_s`). The built-in loop reads them for the exactly-once accounting, the resume position,
the per-host report and the elastic data hosts' clock; none of them is a field a model, a loss
or a user's function sees, nor a name a channel's `fields` may take.
"""

from __future__ import annotations

POSITION_COLUMNS = ("pos", "seek")
"""A row's place in the epoch's order, where the channel has one."""
BOOKKEEPING_COLUMNS = ("id", *POSITION_COLUMNS, "host", "prep_s", "tail_s")
"""Every column the reader and the chain add; `id` is also a field (a sample's own id, if it has one)."""
ADDED_COLUMNS = BOOKKEEPING_COLUMNS[1:]
"""The ones that are never a field's name (`id` may be: a channel names where a sample's id is)."""
