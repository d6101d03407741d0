"""Bad data that only a running pipeline meets, in a real local job (three simulated hosts): the
job ends, non-zero, with its `sm-launch: error:` line naming the channel and the sample, and the
same reason in the head's failure file. Ray's own worker logs also reach stderr; the launcher's
error is the one and last `sm-launch:` line. Bad data fails the same way on a retry, so the
first rank that meets it ends the job (the launcher does not wait for Ray Train's `max_failures`
restarts, left at their default here). An undecodable image skipped under `max_corrupted_records`
(the job goes on) is asserted on a job that trains anyway:
tests/launcher/test_user_data_jobs.py's image folder job.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from smlaunch.pipelines.formats import tfrecord
from smlaunch.pipelines.formats.example import encode_example

ROOT = Path(__file__).resolve().parents[2]


def run_job(tmp: Path, *overrides: str) -> tuple[subprocess.CompletedProcess, str]:
    args = [
        sys.executable,
        "-m",
        "smlaunch.launcher.cli",
        str(ROOT / "configs" / "tiny.yaml"),
        "--set",
        f"run.dir={tmp}",
        "--set",
        "run.name=r",
        "--set",
        "model.num_classes=10",
        "--set",
        "trainer.steps=4",
    ]
    for item in overrides:
        args += ["--set", item]
    result = subprocess.run(args, capture_output=True, text=True, timeout=480)
    errors = [line for line in result.stderr.splitlines() if line.startswith("sm-launch:")]
    assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr[-3000:]
    failure = tmp / "r" / "hosts" / "algo-1" / "opt" / "ml" / "output" / "failure"
    assert failure.read_text() == errors[0].removeprefix("sm-launch: error: ") + "\n"
    return result, errors[0]


@pytest.mark.ray
def test_an_undecodable_image_names_the_channel_and_the_sample(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    tfrecord.write_records(
        data / "part-0.tfrecord",
        [
            encode_example({"image/encoded": b"not an image %d" % i, "image/class/label": i % 10, "id": 1000 + i})
            for i in range(64)
        ],
    )
    result, line = run_job(tmp_path, f"channels.train.source={data}")
    assert result.returncode == 1
    assert re.fullmatch(
        r"sm-launch: error: channel 'train': sample id 10\d\d: undecodable image \(cannot identify "
        r"image file; 1[45] bytes starting b'not an i'\)",
        line,
    ), line


@pytest.mark.ray
def test_an_empty_pipe_fifo_ends_the_job_instead_of_looping_on_empty_epochs(tmp_path):
    """The channel's one object is empty, so every epoch's FIFO opens and closes with no byte."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.tfrecord").write_bytes(b"")
    result, line = run_job(tmp_path, f"channels.train.source={data}", "channels.train.input_mode=Pipe")
    assert result.returncode == 1
    assert line == (
        "sm-launch: error: channel 'train': epoch 1 gave the train workers no full batch of "
        "trainer.batch_size=32 (a step needs one); the channel is empty or too small "
        "(an empty Pipe FIFO?)"
    )


def _folder_with_undecodable_images(root: Path, bad: int) -> Path:
    """300 digits as PNGs in class folders, one of them copied byte for byte to a second file, and
    `bad` files of one class that no decoder reads."""
    from support.user_layouts import CLASSES, digits, write_image_folder

    write_image_folder(root, digits("train")[:300])
    first = sorted((root / CLASSES[3]).glob("*.png"))[0]
    (root / CLASSES[3] / "copy.png").write_bytes(first.read_bytes())
    for n in range(bad):
        (root / CLASSES[5] / f"bad-{n}.png").write_bytes(b"not an image %d" % n)
    return root


@pytest.mark.ray
def test_undecodable_images_over_max_corrupted_records_end_the_job_naming_the_file(tmp_path):
    folder = _folder_with_undecodable_images(tmp_path / "data", bad=2)
    result, line = run_job(
        tmp_path,
        f"channels.train.source={folder}",
        "channels.train.record_format=image_folder",
        "channels.train.max_corrupted_records=1",
    )
    assert result.returncode == 1
    assert re.fullmatch(
        r"sm-launch: error: channel 'train': more than max_corrupted_records=1 corrupt records; the "
        r"last: channel 'train': digit-5/bad-[01]\.png \(sample id \d+\): undecodable image \(cannot "
        r"identify image file; 14 bytes starting b'not an i'\)",
        line,
    ), line
