"""Channel layouts SageMaker cannot deliver are refused at load, in one line saying what to use; the
ones it can are accepted. (`sm-launch plan` shows the same line: tests/launcher/test_plan_user_data.py.)"""

import pytest
from pydantic import ValidationError

from smlaunch.config.channel import ChannelConfig
from smlaunch.config.channel_rules import resolved_fields

FSX = {"type": "FSxLustre", "id": "fs-0123456789abcdef0", "directory": "/abcd/train"}


@pytest.mark.parametrize(
    "keys, expected",
    [
        (
            {"record_format": "image_folder", "input_mode": "Pipe"},
            "record_format: image_folder cannot be read in input_mode: Pipe (the FIFO carries the objects' bytes "
            "without "
            "their paths, and the class folders in the paths are the labels); use input_mode: File or FastFile",
        ),
        (
            {"record_format": "parquet", "input_mode": "Pipe"},
            "record_format: parquet cannot be read in input_mode: Pipe (a Parquet file is read from its footer",
        ),
        (
            {"source": "s3://b/train.manifest", "s3_data_type": "ManifestFile", "input_mode": "FastFile"},
            "input_mode: FastFile takes an S3 prefix only (SageMaker: S3DataType must be S3Prefix), but s3_data_type "
            "is "
            "ManifestFile; use input_mode: File or Pipe",
        ),
        (
            {
                "source": "s3://b/train.manifest",
                "s3_data_type": "AugmentedManifestFile",
                "input_mode": "FastFile",
                "attribute_names": ["source-ref", "class"],
                "record_format": "recordio",
            },
            "input_mode: FastFile reads an S3 prefix only, but source s3://b/train.manifest is an augmented "
            "manifest; use Pipe",
        ),
        (
            {"source": "s3://b/train.manifest"},
            "source s3://b/train.manifest looks like a manifest; set s3_data_type: ManifestFile",
        ),
        (
            {"file_system": FSX, "input_mode": "FastFile"},
            "file_system: SageMaker mounts FSxLustre channels in File mode only; set input_mode: File (not FastFile)",
        ),
        (
            {"file_system": FSX, "s3_distribution": "ShardedByS3Key"},
            "file_system: a file system has no S3 data type or distribution",
        ),
        (
            {"record_format": "image_folder", "fields": {"label": "y"}},
            "fields: record_format image_folder takes labels from the class folders",
        ),
        (
            {"source": "builtin:digits/train", "record_format": "webdataset"},
            "is a builtin dataset of tfrecord files; use record_format: tfrecord",
        ),
        ({"file_system": {**FSX, "id": "fsx-1"}}, "String should match pattern"),
    ],
)
def test_undeliverable_channels_are_refused_in_one_line(keys, expected):
    with pytest.raises(ValidationError) as info:
        ChannelConfig(**{"source": "/data/train", **keys})
    message = str(info.value)
    assert expected in message, message


@pytest.mark.parametrize(
    "keys",
    [
        {"record_format": "image_folder", "input_mode": "FastFile", "s3_distribution": "ShardedByS3Key"},
        {"record_format": "webdataset", "input_mode": "Pipe"},
        {"record_format": "parquet", "input_mode": "FastFile", "fields": {"image": "jpg", "id": "key"}},
        {
            "record_format": "tfrecord",
            "s3_data_type": "ManifestFile",
            "source": "s3://b/list.manifest",
            "input_mode": "Pipe",
        },
        {"record_format": "webdataset", "file_system": {**FSX, "type": "EFS"}},
    ],
)
def test_deliverable_channels_load(keys):
    ChannelConfig(**{"source": "/data/train", **keys})


def test_fields_fall_back_to_each_formats_defaults():
    assert resolved_fields("tfrecord", None) == {"image": "image/encoded", "label": "image/class/label", "id": "id"}
    assert resolved_fields("webdataset", None) == {"image": "jpg;jpeg;png;webp", "label": "cls", "id": None}
    parquet = ChannelConfig(source="/d", record_format="parquet", fields={"label": "target"})
    assert resolved_fields("parquet", parquet.fields) == {"image": "image", "label": "target", "id": None}
