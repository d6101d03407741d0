"""Whole `sm-launch` jobs on data in the users' layouts, written by their tools (tests/support/user_layouts.py),
on the local 3-host cluster: they must learn the digits, read every sample once, and keep rows on
the data hosts. Each job mixes two layouts (train and validation) to keep the suite short; every
format in every mode is read in tests/pipelines/sources/test_user_layouts.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from support.user_layouts import (
    CLASSES,
    digits,
    write_image_folder,
    write_parquet,
    write_slim_tfrecords,
    write_webdataset,
)


def job_config(configs, tmp_path, name: str, channels: dict, **sections) -> str:
    cfg = yaml.safe_load((configs / "tiny.yaml").read_text())
    cfg["channels"] = channels
    cfg["run"] = {"dir": str(tmp_path), "name": name, **sections.pop("run", {})}
    for key, value in sections.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def run_job(config: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", config], capture_output=True, text=True, timeout=420
    )


def report_of(tmp_path, name: str) -> dict:
    return json.loads((tmp_path / name / "hosts/algo-1/opt/ml/output/data/report.json").read_text())


@pytest.mark.ray
def test_image_folder_sharded_with_an_undecodable_image_skipped_and_hugging_face_parquet_over_fastfile(
    configs, tmp_path
):
    """Train: PNGs in class folders (PIL), File mode, ShardedByS3Key over the two data hosts; no
    model.num_classes: the ten class folders give it. One file no decoder reads is skipped under
    `max_corrupted_records: 1`: once in the whole run though every epoch meets it, counted and named
    in the report; a byte-identical copy of another image is a sample of its own, each drawn once per
    epoch. Validation: a Hugging Face style Parquet file (image struct) from the local S3 server in
    FastFile mode. (The skip rode on a job of its own in tests/reliability/test_bad_inputs_in_jobs.py:
    one job fewer.)"""
    import re

    write_image_folder(tmp_path / "train", digits("train"))
    first_three = sorted((tmp_path / "train" / CLASSES[3]).glob("*.png"))[0]
    (tmp_path / "train" / CLASSES[3] / "copy.png").write_bytes(first_three.read_bytes())
    (tmp_path / "train" / CLASSES[5] / "bad-0.png").write_bytes(b"not an image 0")
    write_parquet(tmp_path / "validation", digits("validation"), files=1, row_group_size=120)
    config = job_config(
        configs,
        tmp_path,
        "folders",
        {
            "train": {
                "source": str(tmp_path / "train"),
                "record_format": "image_folder",
                "s3_distribution": "ShardedByS3Key",
                "max_corrupted_records": 1,
            },
            "validation": {
                "source": "s3://user-data/validation/",
                "record_format": "parquet",
                "input_mode": "FastFile",
            },
        },
        run={"s3_seed": {"s3://user-data/validation/": str(tmp_path / "validation")}},
        trainer={"steps": 90},
    )
    result = run_job(config)  # 1438 decodable rows: 44 full batches an epoch, so two epochs and two steps
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(
        r"WARNING: channel 'train': skipped a corrupt record: channel 'train': digit-5/bad-0\.png "
        r"\(sample id \d+\): undecodable image",
        result.stdout,
    ), result.stdout[-3000:]
    report = report_of(tmp_path, "folders")
    assert report["classes"] == CLASSES
    corrupt = report["corrupt_records"]["train"]
    assert (corrupt["skipped"], corrupt["limit"], len(corrupt["first"])) == (1, 1, 1), corrupt
    assert "digit-5/bad-0.png (sample id " in corrupt["first"][0]
    assert report["summary"]["corrupt_records_skipped"] == 1
    epochs = report["sample_accounting"]["epochs"]
    assert [e["complete"] for e in epochs[:2]] == [True, True], epochs
    for e in epochs[:2]:  # the 1437 digits and the copy, not the bad file
        assert (e["distinct"], e["duplicated"], e["missing"]) == (1438, 0, 0), e
    assert report["validation"][-1]["rows"] == 360
    assert report["summary"]["validation_accuracy"] > 0.3  # chance is 0.1
    assert report["summary"]["data_node_row_fraction"] == 1.0
    model = tmp_path / "folders/hosts/algo-1/opt/ml/model"
    assert json.loads((model / "classes.json").read_text()) == CLASSES


@pytest.mark.ray
def test_webdataset_streamed_in_pipe_mode_and_slim_tfrecords_on_a_shared_file_system(configs, tmp_path):
    """Train: WebDataset shards (TarWriter) streamed through Pipe-mode FIFOs, replicated to both data
    hosts, which split the stream. Validation: TF-Slim shards without ids (the `tfrecord` package)
    on an FSx-style file system mounted on both data hosts."""
    write_webdataset(tmp_path / "train", digits("train"), shards=4)
    write_slim_tfrecords(tmp_path / "fsx", digits("validation"), shards=2)
    config = job_config(
        configs,
        tmp_path,
        "streams",
        {
            "train": {"source": str(tmp_path / "train"), "record_format": "webdataset", "input_mode": "Pipe"},
            "validation": {
                "source": str(tmp_path / "fsx"),
                "record_format": "tfrecord",
                "file_system": {"type": "FSxLustre", "id": "fs-0123456789abcdef0", "directory": "/abcd/val"},
            },
        },
        model={"num_classes": 10},
        trainer={"steps": 50},
    )
    result = run_job(config)
    assert result.returncode == 0, result.stderr[-3000:]
    report = report_of(tmp_path, "streams")
    first = report["sample_accounting"]["epochs"][0]
    assert (first["complete"], first["distinct"], first["duplicated"], first["missing"]) == (True, 1437, 0, 0), first
    assert report["validation"][-1]["rows"] == 360
    assert report["summary"]["validation_accuracy"] > 0.3
    assert report["summary"]["data_node_row_fraction"] == 1.0
    for host in ("algo-2", "algo-3"):
        assert (tmp_path / f"streams/hosts/{host}/opt/ml/input/data/validation").is_symlink()
