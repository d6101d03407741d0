"""What a channel's record format is, as one record per format: the table every path reads
instead of comparing format names.

Each format's module (`tfrecord`, `recordio`, `webdataset`, `parquet`, `image_folder`) states its
`FORMAT`, and `formats.CHANNEL_FORMATS` collects them: the config's choices and default fields,
the channel rules (streamable in Pipe, SageMaker's record wrapper, fields or class folders), the
listing (which files are data, whether the data names the classes), the readers (what a read
task's unit is and which sample reader runs) and the messages (what the files are called, how a
derived id's place reads). Adding a format is a module with its `FORMAT`, its reader, and a test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

LAYOUTS = ("records", "tar", "row_groups", "images")
"""How a format's files hold samples, which picks its reader (`rows.unit_samples`):
framed records one after another (a sample per record), tar members grouped by key, Parquet row
groups (the unit a read task takes, listed from each file's footer), one image file per sample
under its class folder (classes from the folder names)."""


def every_name(prefix: str, names: list[str]) -> list[str]:
    """Every (non-hidden) file is data."""
    return names


@dataclass(frozen=True)
class Format:
    name: str
    layout: str
    """One of `LAYOUTS`."""
    files: str
    """What the channel's files are, in an error: `tar shards`."""
    matches: Callable[[bytes], bool]
    """Whether a file's first bytes (`sniff.HEAD_BYTES`) look like this format."""
    fields: dict[str, str | None] | None = None
    """Default `fields` (`image`, `label`, `id`): where a sample's parts are; None: the format
    takes labels from its layout (class folders) and a channel may not set fields."""
    field_kind: str = "features"
    """What `fields` name in this format, in a message: features, extensions, columns."""
    pipe_problem: str | None = None
    """Why a Pipe-mode FIFO cannot carry it (None: it streams)."""
    classes_from_data: bool = False
    """Whether the listing tells the class count (class folders, Parquet statistics)."""
    sagemaker_wrapper: str = "None"
    """SageMaker's `RecordWrapperType` for a manifest channel of this format: `RecordIO` is the
    only framing SageMaker can wrap an augmented manifest's attributes in."""
    place: str = "{rel} record {member}"
    """How a sample's place reads, from its derived id's file and member (`pipelines.places`);
    without `{member}`, a file is one sample."""
    data_names: Callable[[str, list[str]], list[str]] = every_name
    """Of a folder's sorted file names (`prefix`: the folder's path in the channel, `` at the top),
    the ones that are data: called once per folder, so a 1.28M-file listing pays no call per file."""

    def is_data(self, rel: str) -> bool:
        """Whether the file at `rel` (relative to the channel) is data."""
        prefix, _, name = rel.rpartition("/")
        return bool(self.data_names(prefix + "/" if prefix else "", [name]))
