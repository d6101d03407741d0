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

from collections.abc import Iterable

import numpy as np

from smlaunch.pipelines.rows import ID_MASK, MEMBER_STEP, derived_ids

_STEP_INVERSE = pow(MEMBER_STEP, -1, 1 << 63)
_MEMBER_FLOOR = 1 << 20
"""Members allowed in any file, however small (a Parquet file's rows may outnumber its bytes)."""


class SamplePlaces:
    """The places of one File, FastFile or file-system channel's samples: its listed files (every
    host's, for ShardedByS3Key) and what a member of them is in `record_format`."""

    def __init__(self, record_format: str, files: Iterable[tuple[str, int]]):
        from smlaunch.pipelines.formats import CHANNEL_FORMATS
        from smlaunch.pipelines.sources.file_list import FileList

        self.record_format = record_format
        self.place = CHANNEL_FORMATS[record_format].place
        """How a sample's place reads (`Format.place`)."""
        # Packed (one string, two arrays): pickled to the actor in ms, not s, and taken as listed:
        # unpacking 1.28M files into tuples and joining them again cost the driver 0.6 s.
        self.files = files if isinstance(files, FileList) else FileList.from_pairs(files)
        self._bases: np.ndarray | None = None

    @classmethod
    def of(cls, record_format: str, listing) -> SamplePlaces:
        """From a `sources.listing.ChannelListing` (every host's files, for ShardedByS3Key)."""
        from smlaunch.pipelines.sources.file_list import FileList

        return cls(record_format, FileList.concat(list(listing.files.values())))

    def find(self, sample_id: int) -> str | None:
        """`<path>` (an image folder's file), `<path> record N`, `<path> row N` or `<path> sample
        at byte N`, relative to the channel directory; None when no listed file gives `sample_id`."""
        if not len(self.files):
            return None
        if self._bases is None:
            self._bases = np.array(derived_ids(list(self.files.rels())), dtype=np.uint64)
        members = ((np.uint64(sample_id) - self._bases) * np.uint64(_STEP_INVERSE)) & np.uint64(ID_MASK)
        one_per_file = "{member}" not in self.place
        if one_per_file:
            hits = np.flatnonzero(members == 0)
        else:
            hits = np.flatnonzero(members < np.maximum(self.files.sizes.astype(np.uint64), _MEMBER_FLOOR))
        if not len(hits):
            return None
        index = int(hits[0])
        return self.place.format(rel=self.files._rel(index), member=int(members[index]))
