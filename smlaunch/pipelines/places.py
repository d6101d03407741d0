"""From a sample id back to where the sample is: the file (and record, row or byte) of an image the
chain could not decode.

The chain sees a batch of `image`, `label` and `id`, not the file each row came from. A sample
without an id of its own has one derived from its place (`rows.derived_id`: a hash of its file's
path in the channel plus its record index, row or byte offset times an odd constant, modulo
2^63), and adding that multiple can be undone: for each listed file, `(id - hash(path)) x
constant^-1` is the member the id would have there, and only the sample's own file gives one
within the file's size (another file does with odds of its size in 2^63). So a place costs the
rows nothing; the counter actor (`corrupt`) holds each channel's `SamplePlaces` and finds an id's
place in one vectorised pass over the listing (~10 ms for a million files), only when an image
fails. An id the data gives (a `fields.id`) and a Pipe stream's ids (from the image bytes) lead
nowhere: those messages name the sample id alone.
"""

from __future__ import annotations

from array import array
from typing import Iterable

import numpy as np

from smlaunch.pipelines.rows import ID_MASK, MEMBER_STEP, derived_ids

_STEP_INVERSE = pow(MEMBER_STEP, -1, 1 << 63)
_MEMBER_FLOOR = 1 << 20
"""Members allowed in any file, however small (a Parquet file's rows may outnumber its bytes)."""


class SamplePlaces:
    """The places of one File, FastFile or file-system channel's samples: its listed files (every
    host's, for ShardedByS3Key) and what a member of them is in `record_format`."""

    def __init__(self, record_format: str, files: Iterable[tuple[str, int]]):
        listed = files if isinstance(files, list) else list(files)
        self.record_format = record_format
        self.paths = "".join(rel for rel, _ in listed)  # one string: pickled to the actor in ms, not s
        self.lengths = array("I", [len(rel) for rel, _ in listed])
        # An image folder's member is always 0; other formats' is bounded by the file's size.
        self.sizes = None if record_format == "image_folder" else np.array([size for _, size in listed], np.uint64)
        self._bases: np.ndarray | None = None

    @classmethod
    def of(cls, record_format: str, listing) -> SamplePlaces:
        """From a `sources.listing.ChannelListing`."""
        hosts = list(listing.files.values())
        return cls(record_format, hosts[0] if len(hosts) == 1 else [unit for files in hosts for unit in files])

    def _rel(self, index: int) -> str:
        start = sum(self.lengths[:index])
        return self.paths[start:start + self.lengths[index]]

    def find(self, sample_id: int) -> str | None:
        """`<path>` (an image folder's file), `<path> record N`, `<path> row N` or `<path> sample
        at byte N`, relative to the channel directory; None when no listed file gives `sample_id`."""
        if not self.lengths:
            return None
        if self._bases is None:
            rels, start = [], 0
            for length in self.lengths:
                rels.append(self.paths[start:start + length])
                start += length
            self._bases = np.array(derived_ids(rels), dtype=np.uint64)
        members = ((np.uint64(sample_id) - self._bases) * np.uint64(_STEP_INVERSE)) & np.uint64(ID_MASK)
        if self.record_format == "image_folder":
            hits = np.flatnonzero(members == 0)
        else:
            hits = np.flatnonzero(members < np.maximum(self.sizes, _MEMBER_FLOOR))
        if not len(hits):
            return None
        index = int(hits[0])
        rel, member = self._rel(index), int(members[index])
        if self.record_format == "image_folder":
            return rel
        if self.record_format == "webdataset":
            return f"{rel} sample at byte {member}"
        return f"{rel} {'row' if self.record_format == 'parquet' else 'record'} {member}"
