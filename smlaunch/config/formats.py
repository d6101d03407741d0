"""What each channel record format is: the table every layer reads instead of comparing format
names (`CHANNEL_FORMATS`, one `Format` per format).

It holds facts, not readers: the config's choices and default fields, the channel rules
(streamable in Pipe, SageMaker's record wrapper, fields or class folders), the listing (which
files are data, whether the data names the classes), which reader a format's layout picks, and
the words of the messages (what the files are called, how a derived id's place reads). The
config, the cluster plans and the readers all need it, so it sits at the bottom, with the config;
the readers, and how each format's files look from their first bytes, are
`smlaunch.pipelines.formats`. Adding a format is a `Format` here, a reader module there, and
their tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

LAYOUTS = ("records", "tar", "row_groups", "images")
"""How a format's files hold samples, which picks its reader (`pipelines.rows.unit_samples`):
framed records one after another (a sample per record), tar members grouped by key, Parquet row
groups (the unit a read task takes, listed from each file's footer), one image file per sample
under its class folder (classes from the folder names)."""

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""torchvision's `IMG_EXTENSIONS`: what a class folder's image files end with."""


def every_name(prefix: str, names: list[str]) -> list[str]:
    """Every (non-hidden) file is data."""
    return names


def class_images(prefix: str, names: list[str]) -> list[str]:
    """torchvision's rule: an image extension, under a class folder (none at the top level)."""
    return [name for name in names if name.lower().endswith(IMAGE_EXTENSIONS)] if prefix else []


def not_metadata(prefix: str, names: list[str]) -> list[str]:
    """Not Spark's `_SUCCESS` or `_metadata`."""
    return [name for name in names if not name.startswith("_")]


@dataclass(frozen=True)
class Format:
    name: str
    layout: str
    """One of `LAYOUTS`."""
    files: str
    """What the channel's files are, in an error: `tar shards`."""
    fields: Mapping[str, str | None] | None = None
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


_TF_EXAMPLE = {"image": "image/encoded", "label": "image/class/label", "id": "id"}
"""The `tf.train.Example` features TensorFlow's image pipelines write."""

CHANNEL_FORMATS: dict[str, Format] = {
    spec.name: spec
    for spec in (
        Format("tfrecord", "records", "files", fields=_TF_EXAMPLE),
        Format("recordio", "records", "files", fields=_TF_EXAMPLE, sagemaker_wrapper="RecordIO"),
        Format(
            "image_folder",
            "images",
            "images in class folders",
            fields=None,
            pipe_problem="the FIFO carries the objects' bytes without their paths, and the class folders in "
            "the paths are the labels",
            classes_from_data=True,
            place="{rel}",
            data_names=class_images,
        ),
        Format(
            "webdataset",
            "tar",
            "tar shards",
            fields={"image": "jpg;jpeg;png;webp", "label": "cls", "id": None},
            field_kind="extensions",
            place="{rel} sample at byte {member}",
        ),
        Format(
            "parquet",
            "row_groups",
            "Parquet files",
            fields={"image": "image", "label": "label", "id": None},
            field_kind="columns",
            pipe_problem="a Parquet file is read from its footer, which a stream reaches last",
            classes_from_data=True,
            place="{rel} row {member}",
            data_names=not_metadata,
        ),
    )
}
"""A channel's `record_format` -> what it is (`Format`): the one table of formats."""

RecordFormat = Literal["tfrecord", "recordio", "image_folder", "webdataset", "parquet"]
"""A channel's `record_format`, as the config's type: the keys of `CHANNEL_FORMATS` (a test holds
the two to each other)."""

BUILTIN_FORMAT = "tfrecord"
"""The record format of the builtin datasets' shards (`pipelines.builtin`)."""
