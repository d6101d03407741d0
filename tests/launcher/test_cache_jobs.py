"""The chain's deterministic prefix cached across epochs (`pipeline.cache`, issue 80), on real
`sm-launch` jobs over a user's image folder.

A whole job of its own: no other job runs four epochs over an image folder with a deterministic
user op whose calls can be counted, and what is checked (how often the prefix ran, that the random
rest is drawn again each epoch, that each sample arrives once per epoch from the cache) needs the
whole run. The second job, after a source file changed, is cheap (two epochs) and checks the
fingerprint and the S3 cache together."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from support.user_layouts import digits, write_image_folder

OPS = """
import hashlib
import os

import numpy as np


def count(batch, rng, train, path):
    '''Deterministic: notes how many rows it was called on, returns the batch as it came.'''
    rows = len(next(iter(batch.values())))
    with open(path, "a") as out:
        out.write(f"{os.getpid()} {rows}\\n")
    return batch


def tail_digest(batch, rng, train, path):
    '''After the random crop: notes a digest of each row's pixels (random: it says nothing).'''
    with open(path, "a") as out:
        for image in batch["image"]:
            out.write(hashlib.sha256(np.ascontiguousarray(image).tobytes()).hexdigest()[:16] + "\\n")
    return batch
"""


def _config(folder: Path, epochs: int, **pipeline) -> dict:
    return {
        "job": "cached",
        "cluster": {
            "instance_groups": [
                {"name": "gpu", "instance_type": "ml.g5.xlarge", "instance_count": 1},
                {"name": "cpu", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            ]
        },
        "channels": {"train": {"source": "data/train", "record_format": "image_folder"}},
        "pipeline": {
            "batch_size": 64,
            "cache": "auto",
            "ops": [
                {"op": "decode_image"},
                {
                    "op": "map",
                    "function": "cache_ops:count",
                    "params": {"path": str(folder / "prefix.txt")},
                    "deterministic": True,
                },
                {"op": "resize", "size": 12},
                {"op": "random_resized_crop", "size": 10, "scale": [0.3, 1.0]},
                {"op": "horizontal_flip"},
                {"op": "map", "function": "cache_ops:tail_digest", "params": {"path": str(folder / "tail.txt")}},
                {"op": "to_uint8_chw"},
            ],
            **pipeline,
        },
        "model": {"name": "test_resnet"},
        "trainer": {"batch_size": 32, "epochs": epochs},
    }


def _sm_launch(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )


def _prefix_rows(folder: Path) -> int:
    """Rows the deterministic op ran on, the warm-up's one-row call left out."""
    lines = (folder / "prefix.txt").read_text().split()
    return sum(int(n) for n in lines[1::2]) - 1


@pytest.mark.ray
def test_four_epochs_run_the_prefix_once_per_image_draw_the_rest_anew_and_a_changed_file_rewrites_it(tmp_path, s3):
    folder = tmp_path / "project"
    rows = digits("train")
    write_image_folder(folder / "data" / "train", rows)
    (folder / "cache_ops.py").write_text(OPS)
    (folder / "job.yaml").write_text(yaml.safe_dump(_config(folder, 4), sort_keys=False))
    result = _sm_launch(folder, "job.yaml")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    images = len(rows)
    (line,) = [x for x in out.splitlines() if x.startswith("cache: on (auto: 4 epochs;")]
    assert "prefix: decode_image, cache_ops:count, resize runs once" in line and "epoch 1 writes it" in line, line
    # Shards of several batches (`store.shard_rows`: 2 calls a chain slot here; 128 MiB at most), read
    # back a batch-sized chunk at a time: the cached epochs' units are the chunks.
    shard_rows = int(re.search(r"shards of ([\d,]+) rows", line).group(1).replace(",", ""))
    assert shard_rows >= 128 and shard_rows % 64 == 0, line
    sealed = re.search(rf"cache: sealed, {images} rows in (\d+) shards \((\d+) chunks\)", out)
    assert sealed, out[-3000:]
    shards, chunks = int(sealed.group(1)), int(sealed.group(2))
    assert -(-images // shard_rows) <= shards < chunks and chunks >= -(-images // 64), (shards, chunks, shard_rows)
    # The prefix ran on every image once (epoch 1), not four times; the tail ran every epoch, drawn anew.
    assert _prefix_rows(folder) == images, _prefix_rows(folder)
    tails = (folder / "tail.txt").read_text().split()
    assert len(tails) == 4 * images + 1
    assert len(set(tails)) > 2 * images  # a frozen tail would give each image one output, in every epoch
    report = json.loads(next((folder / "runs").glob("*/hosts/algo-1/opt/ml/output/data/report.json")).read_text())
    epochs = report["sample_accounting"]["epochs"]
    assert [(e["complete"], e["distinct"], e["duplicated"]) for e in epochs] == [(True, images, 0)] * 4, epochs
    cached = [e["positions"] for e in epochs[1:]]
    assert all(p["units"] == p["units_done"] == chunks for p in cached), cached  # read as the cache's chunks
    fingerprint = line.split("fingerprint ")[1].split(":")[0]
    assert (folder / "runs" / "cache" / fingerprint / "FINAL").exists()
    indexes = [np.load(p) for p in (folder / "runs" / "cache" / fingerprint / "ids").glob("*.npz")]
    biggest = max(indexes, key=lambda index: len(index["ids"]))["rows"]
    assert 64 < biggest.sum() <= shard_rows and biggest.max() <= 64, biggest  # several chunks of a batch at most

    # A source file rewritten in place (same name): a new fingerprint, written again, here on S3.
    first = sorted((folder / "data" / "train").glob("digit-3/*.png"))[0]
    from PIL import Image

    changed = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(changed, "PNG")
    first.write_bytes(changed.getvalue())
    s3.create_bucket(Bucket="caches")
    (folder / "prefix.txt").unlink()
    again = _sm_launch(
        folder,
        "run",
        "job.yaml",
        "--set",
        "trainer.epochs=2",
        "--set",
        "pipeline.cache_dir=s3://caches/team",
        "--set",
        f"run.s3_endpoint={os.environ['AWS_ENDPOINT_URL']}",
    )
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-4000:]
    (line,) = [x for x in out.splitlines() if x.startswith("cache: on (auto: 2 epochs;")]
    new = line.split("fingerprint ")[1].split(":")[0]
    assert new != fingerprint and "epoch 1 writes it" in line, line
    assert _prefix_rows(folder) == images
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="caches", Prefix=f"team/{new}/")["Contents"]]
    assert f"team/{new}/FINAL" in keys and sum(k.endswith(".arrow") for k in keys) > 1
