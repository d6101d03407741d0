"""The `channels:` section: each input channel, as SageMaker's InputDataConfig names one (its
source, input mode, record format, distribution), plus what smlaunch adds (the fields a sample
has, how an epoch is ordered, how many corrupt records may be skipped).
"""

from __future__ import annotations

import difflib
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from smlaunch.config.base import StrictModel
from smlaunch.config.columns import ADDED_COLUMNS
from smlaunch.config.formats import RecordFormat

FIELD_NAME = re.compile(r"^[A-Za-z_]\w{0,63}$")
BUILTIN_FIELDS = ("image", "label", "id")
"""The fields the built-in classification task reads (`id`: a sample's id in the exactly-once accounting)."""


def check_fields(fields: dict[str, str]) -> dict[str, str]:
    """`fields` maps a batch's names to the data's: Parquet columns, TFRecord features or WebDataset
    extensions (`;` between alternatives). Naming only image, label and id renames those, the other
    two keeping the format's defaults; naming any other field lists the whole batch: only the fields
    named are read (and `id`, derived from where a sample is when not named)."""
    for name, source in fields.items():
        if not FIELD_NAME.match(str(name)) or name in ADDED_COLUMNS:
            raise ValueError(
                f"fields: {name!r} is not a field name (a Python identifier, not one of {', '.join(ADDED_COLUMNS)})"
            )
        if not isinstance(source, str) or not source.strip():
            raise ValueError(f"fields.{name}: name the data's column, feature or extension (got {source!r})")
    return fields


class FileSystemConfig(StrictModel):
    """An FSx for Lustre or EFS file system mounted at the channel's directory (SageMaker's
    FileSystemDataSource; File mode only; `submit` needs `sagemaker.vpc`)."""

    type: Literal["FSxLustre", "EFS"]
    """Which file system: FSx for Lustre or EFS."""
    id: str = Field(pattern=r"^fs-[0-9a-f]{8,40}$")
    """The file system's id, `fs-...`."""
    directory: str = Field(pattern=r"^/")
    """DirectoryPath: for FSx for Lustre `/<mount name>/<path>`, for EFS a path in the file system."""
    access_mode: Literal["ro", "rw"] = "ro"
    """How SageMaker mounts it: read-only or read-write."""


class ShuffleConfig(StrictModel):
    """How a channel's samples are mixed for SGD (`pipelines.order`): a new order of its files (or
    Parquet row groups) every epoch, seeded by the job's `seed` and the epoch, `open_units` of them
    read at a time by each read task, a sample of each in turn, and a shuffle buffer of
    `buffer_rows` before the trainer's batches (train channel only)."""

    enabled: bool | None = None
    """On: a new order of the channel's files (Parquet row groups) every epoch, seeded by `seed` and the
    epoch. Off: one order fixed by the channel's name. Default: on for the `train` channel, off for the
    others (validation reads one fixed order)."""
    open_units: int = Field(default=2048, ge=1, le=1_000_000)
    """Files (or Parquet row groups) open at once across a pass's read tasks, shared by them (at
    least one each; at most 1,024 files, 64 FastFile objects or 8 Parquet row groups per task): a
    batch mixes samples of about this many units. Memory per task: a descriptor and 8 KiB per
    file, up to 8 MiB of read-ahead per FastFile object, a decoded row group per Parquet unit. A
    checkpoint holds the drawn rows of the units open (a few KiB)."""
    buffer_rows: int = Field(default=1024, ge=0)
    """Rows of the trainer's shuffle buffer per train worker, after the chain (`trainers.shuffle_buffer`):
    each batch is drawn at random from it; it keeps half the rows received so far up to this size,
    so the first batch needs two batches' rows, not 1.5x the buffer as Ray Data's
    `local_shuffle_buffer_size`. About buffer_rows x 3 x crop^2 bytes per worker, on its device
    (1024 rows at 224 px: 154 MB of GPU memory). 0: none."""


class ChannelConfig(StrictModel):
    """A SageMaker input channel: where its data comes from, its layout and how the hosts see it
    (`docs/channels.md`). One channel must be named `train`; one named `validation` is optional, and the
    built-in loop validates on it only."""

    input_mode: Literal["File", "FastFile", "Pipe"] = "File"
    """`File`: copied to each receiving host before the job (locally, a folder that every host receives
    whole is linked instead); `FastFile`: listed at start, bytes fetched on first read; `Pipe`: streamed
    through one FIFO per epoch (locally fed by smlaunch's stand-in for SageMaker's agent)."""
    record_format: RecordFormat = "tfrecord"
    """The channel's layout (`docs/channels.md#layouts-and-input-modes`). `tfrecord`, `recordio`: files of
    `tf.train.Example` records (RecordIO also frames an augmented manifest's attribute records);
    `image_folder`: `<class>/<image>` files, torchvision's rules; `webdataset`: tar shards of
    `<key>.<ext>` members; `parquet`: a row per sample. `image_folder` and `parquet` cannot be `Pipe`."""
    fields: dict[str, str] | None = None
    """The batch's fields and where they are in the data (`check_fields`): the names of the image, the
    integer label and the optional integer id, as TFRecord features (default `image/encoded`,
    `image/class/label`, `id`), WebDataset extensions (default `jpg;jpeg;png;webp`, `cls`, none; `;`
    separates alternatives) or Parquet columns (default `image`, `label`, none). Naming only `image`,
    `label` and `id` renames those; naming any other field (Parquet, TFRecord/RecordIO, WebDataset) lists
    the whole batch, each field as the data holds it (`docs/byo.md#fields-and-the-batch`).

    A sample without an id gets one derived from where it is (63 bits: CRC-32 and CRC-32C of the file's
    path in the channel, plus the record index, row or byte offset times an odd constant; a Pipe
    stream's from the image bytes), stable across runs and hosts; an id named here must be present.
    Field names are identifiers, not `pos`, `seek`, `host`, `prep_s` or `tail_s`. Not for `image_folder`."""
    s3_data_type: Literal["S3Prefix", "ManifestFile", "AugmentedManifestFile"] = "S3Prefix"
    """SageMaker's `S3DataType`. `S3Prefix`: `source` is a folder or prefix. `ManifestFile`: `source` is a
    JSON manifest (`[{"prefix": ...}, "key", ...]`, local or `s3://`) listing the channel's objects (File
    or Pipe, not FastFile). `AugmentedManifestFile`: JSON Lines; needs `attribute_names`, `Pipe` and
    `recordio`. `attribute_names` alone still means `AugmentedManifestFile`."""
    s3_distribution: Literal["FullyReplicated", "ShardedByS3Key"] = "FullyReplicated"
    """SageMaker's `S3DistributionType`: every receiving host gets every object, or host i of n every
    n-th. Either way each sample is read once per epoch."""
    source: str
    """Where the data is: `builtin:digits/<split>` (1,797 32 px digits) or `builtin:synthetic/<split>`
    (2,880 224 px JPEGs, 10 classes of gratings, built once in about 15 s), `<split>` being `train` or
    `validation`; a local directory (checked at `plan`: it must exist and its files must start as
    `record_format` says, else the line says what they are and which format they look like);
    `s3://bucket/prefix/` (no other scheme: `hf://`, `gs://` are refused at load); or a manifest file
    (local path or `s3://`) as `s3_data_type` says. A source ending in `.manifest` or `.jsonl` must say
    its `s3_data_type`."""
    file_system: FileSystemConfig | None = None
    """A `FileSystemDataSource` channel: read from FSx for Lustre or EFS on SageMaker (File mode only;
    `submit` needs `sagemaker.vpc`). Locally `source` is mounted (a link, not a copy) at every receiving
    host's channel directory, and the hosts split its files so each sample is read once."""
    instance_groups: list[str] | None = None
    """Groups that receive the channel (SageMaker's `InstanceGroupNames`); default: every group but the
    train group."""
    max_corrupted_records: int = Field(default=0, ge=0)
    """Corrupt records to skip in the whole run before failing; 0: fail on the first. Each one skipped is
    logged and counted in the report, once however many epochs read it (the same file and byte offset;
    a Pipe stream's offsets are per epoch's FIFO). Images no decoder reads count too, named by file and
    member when their id was derived (by sample id when the data gave it)."""
    shuffle: ShuffleConfig = ShuffleConfig()
    """Data order: see `ShuffleConfig` (File and FastFile channels; a Pipe channel's order is SageMaker's)."""
    attribute_names: list[str] | None = Field(default=None, min_length=2, max_length=3)
    """An augmented manifest's AttributeNames: the image (a `-ref` attribute), the integer label,
    and optionally an integer sample id. Needs Pipe mode and record_format recordio."""

    @model_validator(mode="before")
    @classmethod
    def _augmented_by_attributes(cls, data):
        """`attribute_names` alone still means an augmented manifest, as before `s3_data_type` existed."""
        if isinstance(data, dict) and data.get("attribute_names") and "s3_data_type" not in data:
            return {**data, "s3_data_type": "AugmentedManifestFile"}
        return data

    @property
    def is_manifest(self) -> bool:
        """An augmented manifest (JSON Lines of attributes)."""
        return self.s3_data_type == "AugmentedManifestFile"

    @property
    def is_manifest_file(self) -> bool:
        """A ManifestFile: a JSON list of the channel's objects."""
        return self.s3_data_type == "ManifestFile"

    @model_validator(mode="after")
    def _deliverable(self):
        from smlaunch.config.channel_rules import channel_problem

        problem = channel_problem(self)
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("fields")
    @classmethod
    def _fields(cls, value):
        return None if value is None else check_fields(value)

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if value.startswith("builtin:") and value not in BUILTIN_SOURCES:
            close = difflib.get_close_matches(value, BUILTIN_SOURCES, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ValueError(f"unknown builtin source {value!r}; {hint}builtins: {', '.join(BUILTIN_SOURCES)}")
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", value)
        if scheme and scheme.group(1) != "s3":
            raise ValueError(
                f"{scheme.group(1)}:// sources are not supported; use a local folder, "
                "s3://bucket/prefix or builtin:<name>/<split>"
            )
        if value.startswith("s3://") and not re.match(r"s3://[a-z0-9][a-z0-9.\-]*(/|$)", value):
            raise ValueError(f"{value!r}: expected s3://bucket/prefix with a valid bucket name")
        return value


BUILTIN_SEEDS = ["builtin:digits", "builtin:synthetic"]
BUILTIN_SOURCES = [f"{seed}/{split}" for seed in BUILTIN_SEEDS for split in ("train", "validation")]
