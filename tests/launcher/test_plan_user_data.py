"""`sm-launch plan` on the users' layouts: a folder that is not of the declared format is named by
what it is, with the format it looks like; an undeliverable combination and a missing class count
fail in one line; a right layout plans. Each exits 2 with one line, before anything starts."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from support.user_layouts import digits, write_image_folder, write_parquet, write_webdataset


def plan(configs, tmp_path, channel: dict, **model) -> subprocess.CompletedProcess:
    cfg = yaml.safe_load((configs / "tiny.yaml").read_text())
    cfg["channels"]["train"] = channel
    cfg["model"].update(model)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", "plan", str(path)], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    rows = digits("validation")[:40]
    write_image_folder(root / "folder", rows)
    write_webdataset(root / "wds", rows, shards=2)
    write_parquet(root / "pq", rows, files=1)
    return root


@pytest.mark.parametrize(
    "layout, declared, expected",
    [
        (
            "folder",
            "tfrecord",
            r"README.txt is text, not a tfrecord file \(channel record_format: tfrecord\); \d+.png is a "
            r"PNG image; did you mean record_format: image_folder\?",
        ),
        (
            "wds",
            "tfrecord",
            re.escape(
                "is a tar archive (a WebDataset shard?), not a tfrecord file (channel "
                "record_format: tfrecord); did you mean record_format: webdataset?"
            ),
        ),
        (
            "pq",
            "webdataset",
            re.escape(
                "is a Parquet file, not a webdataset file (channel record_format: webdataset); "
                "did you mean record_format: parquet?"
            ),
        ),
        ("wds", "image_folder", re.escape("holds no images in class folders (<class>/<image>.jpg, ...);")),
    ],
)
def test_a_layout_of_another_format_is_named_with_the_format_it_looks_like(
    configs, tmp_path, layouts, layout, declared, expected
):
    result = plan(configs, tmp_path, {"source": str(layouts / layout), "record_format": declared}, num_classes=10)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sm-launch: error: ") and "channels.train.source: " in lines[0]
    assert re.search(expected, lines[0]), lines[0]


def test_an_empty_class_folder_is_refused_as_torchvision_does(configs, tmp_path, layouts):
    (layouts / "folder" / "digit-x").mkdir(exist_ok=True)
    try:
        result = plan(configs, tmp_path, {"source": str(layouts / "folder"), "record_format": "image_folder"})
    finally:
        (layouts / "folder" / "digit-x").rmdir()
    assert result.returncode == 2 and "class folder digit-x in " in result.stderr, result.stderr


def test_image_folder_and_parquet_plan_without_num_classes_and_webdataset_needs_it(configs, tmp_path, layouts):
    assert (
        plan(
            configs,
            tmp_path,
            {"source": str(layouts / "folder"), "record_format": "image_folder", "s3_distribution": "ShardedByS3Key"},
        ).returncode
        == 0
    )
    assert (
        plan(
            configs, tmp_path, {"source": str(layouts / "pq"), "record_format": "parquet", "input_mode": "FastFile"}
        ).returncode
        == 0
    )
    result = plan(
        configs, tmp_path, {"source": str(layouts / "wds"), "record_format": "webdataset", "input_mode": "Pipe"}
    )
    assert result.returncode == 2
    assert "model.num_classes: required for a webdataset train channel" in result.stderr, result.stderr


def test_an_undeliverable_combination_fails_at_plan(configs, tmp_path, layouts):
    result = plan(configs, tmp_path, {"source": str(layouts / "pq"), "record_format": "parquet", "input_mode": "Pipe"})
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "channels.train: record_format: parquet cannot be read in input_mode: Pipe" in result.stderr
