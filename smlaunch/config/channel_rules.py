"""Which channel layouts SageMaker can deliver, in one place that every path calls.

A channel combines an input mode, an S3 data type, a record format and optionally a file system.
Some combinations cannot work: SageMaker refuses some when the job is created (FastFile takes an
S3 prefix only; a file system channel is File mode only), and some it accepts but no reader can
use (Pipe concatenates a channel's objects into one stream, so an image folder loses the paths
that hold its labels, and a Parquet file is read from its footer, which a stream reaches last).
`channel_problem` names the first such problem in one line that says what to use instead; the
config schema calls it at load, so `plan`, `run` and `submit` all refuse the same channels.
"""

from __future__ import annotations

from smlaunch.config.formats import BUILTIN_FORMAT, CHANNEL_FORMATS

RECORD_FORMATS = tuple(CHANNEL_FORMATS)
CLASSES_FROM_DATA = tuple(name for name, spec in CHANNEL_FORMATS.items() if spec.classes_from_data)
"""Formats whose class count the data tells without a full pass: class folders, Parquet statistics."""
MANIFEST_SUFFIXES = (".manifest", ".jsonl")
"""A source ending so is a manifest, not a folder or prefix; `s3_data_type` says which kind."""


def channel_problem(ch) -> str | None:
    """The first reason SageMaker (or a reader) cannot deliver channel `ch`, or None."""
    fmt, mode = ch.record_format, ch.input_mode
    if ch.s3_data_type == "S3Prefix" and ch.file_system is None and ch.source.lower().endswith(MANIFEST_SUFFIXES):
        return (
            f"source {ch.source} looks like a manifest; set s3_data_type: ManifestFile (a JSON list of the "
            "channel's objects) or AugmentedManifestFile (JSON Lines, with attribute_names)"
        )
    if ch.s3_data_type == "AugmentedManifestFile":
        if mode == "FastFile":
            return (
                f"input_mode: FastFile reads an S3 prefix only, but source {ch.source} is an augmented "
                "manifest; use Pipe"
            )
        if ch.attribute_names is None:
            return (
                f"attribute_names: source {ch.source} is an augmented manifest; name its attributes "
                "(image -ref, label[, id])"
            )
        if mode != "Pipe" or CHANNEL_FORMATS[fmt].sagemaker_wrapper != "RecordIO":
            wrapping = [name for name, spec in CHANNEL_FORMATS.items() if spec.sagemaker_wrapper == "RecordIO"]
            return (
                f"attribute_names (an augmented manifest) needs input_mode: Pipe and record_format: "
                f"{' or '.join(wrapping)}, as SageMaker delivers one RecordIO record per attribute"
            )
    elif ch.attribute_names is not None:
        return f"attribute_names belong to an augmented manifest, but s3_data_type is {ch.s3_data_type}"
    if ch.source.startswith("builtin:") and (fmt != BUILTIN_FORMAT or ch.s3_data_type != "S3Prefix" or ch.file_system):
        return (
            f"source {ch.source} is a builtin dataset of {BUILTIN_FORMAT} files; use record_format: {BUILTIN_FORMAT} "
            "without a manifest or file_system"
        )
    if ch.s3_data_type == "ManifestFile" and mode == "FastFile":
        return (
            "input_mode: FastFile takes an S3 prefix only (SageMaker: S3DataType must be S3Prefix), but "
            "s3_data_type is ManifestFile; use input_mode: File or Pipe"
        )
    if mode == "Pipe" and CHANNEL_FORMATS[fmt].pipe_problem:
        return (
            f"record_format: {fmt} cannot be read in input_mode: Pipe ({CHANNEL_FORMATS[fmt].pipe_problem}); use "
            "input_mode: File or FastFile"
        )
    if ch.file_system is not None:
        if mode != "File":
            return (
                f"file_system: SageMaker mounts {ch.file_system.type} channels in File mode only; set "
                f"input_mode: File (not {mode})"
            )
        if ch.s3_data_type != "S3Prefix" or ch.s3_distribution != "FullyReplicated":
            return (
                "file_system: a file system has no S3 data type or distribution (every host sees every file, "
                "and smlaunch splits them among the hosts); remove s3_data_type and s3_distribution"
            )
        if ch.source.startswith("s3://"):
            return "file_system: source must be a local directory (mounted in the file system's place locally)"
    if ch.fields is not None:
        if CHANNEL_FORMATS[fmt].fields is None:
            return f"fields: record_format {fmt} takes labels from the class folders; remove fields"
        if ch.s3_data_type == "AugmentedManifestFile":
            return "fields: an augmented manifest names its attributes in attribute_names; remove fields"
        named = sorted(set(ch.fields) - set(RENAMED))
        if named and fmt not in NAMED_FIELD_FORMATS:
            return (
                f"fields: {', '.join(named)}: fields beyond image, label and id are read from record_format "
                f"{' or '.join(NAMED_FIELD_FORMATS)} (not yet {fmt})"
            )
    return None


RENAMED = ("image", "label", "id")
"""Fields a channel's `fields` may rename while the format's defaults give the others."""
NAMED_FIELD_FORMATS = ("parquet", "webdataset", "tfrecord", "recordio")
"""Formats whose readers take any fields (`fields` naming more than image, label and id)."""


def names_whole_batch(fields: dict | None) -> bool:
    """Whether a channel's `fields` lists its whole batch (it names more than image, label and id),
    rather than renaming those over the format's defaults."""
    return bool(fields) and not set(fields or ()) <= set(RENAMED)


def resolved_fields(record_format: str, fields: dict | None) -> dict[str, str | None]:
    """The batch's fields and where each is in the records. `fields` naming only image, label and
    id renames those over the format's defaults; naming any other field lists the whole batch
    (`channel.check_fields`): image and label are then read only if named. `id` is always there
    (None: derived from where a sample is)."""
    base = dict(CHANNEL_FORMATS[record_format].fields or {"image": None, "label": None, "id": None})
    if not fields:
        return base
    if not names_whole_batch(fields):
        return {**base, **fields}
    return {"image": None, "label": None, "id": None, **fields}
