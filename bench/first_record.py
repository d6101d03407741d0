"""Time to the first record, per input mode, at 1x and 100x the dataset size (benchmark 4d).

Pipe and FastFile should start in the same time whatever the dataset's size (SageMaker's claim for
both: training starts without waiting for a download); File copies everything first, so it grows
with the data. The channel lives on a real S3-protocol server on 127.0.0.1 (moto), as TFRecord
shards: 1x is `--shards` shards of `--shard-mib` MiB; 100x makes each shard a hundred times larger
(the RESULT), and, as a second view, makes a hundred times as many shards. For each
mode and size, the clock runs from "the job starts" (the channel is delivered: File copies,
FastFile lists and writes its view, Pipe lists and starts the agent) to the first record read
through the channel's reader; the median of `--repeats` runs is kept.

    python bench/first_record.py [--shards 2] [--shard-mib 2] [--repeats 7]

Ends with `RESULT first_record pipe_ratio=<x> fastfile_ratio=<x> file_ratio=<x> goal=1.1`, each ratio
being the time at 100x over the time at 1x (goal for Pipe and FastFile; File is shown for contrast).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

from smlaunch.pipelines.formats import iter_records, tfrecord
from smlaunch.pipelines.sources.channels import copy_objects
from smlaunch.pipelines.sources.fastfile import open_channel_file, write_view
from smlaunch.pipelines.sources.fifo import open_epoch
from smlaunch.pipelines.sources.local_s3 import LocalS3
from smlaunch.pipelines.sources.objects import ObjectSource
from smlaunch.pipelines.sources.pipe_agent import PipeAgent

RECORD = 100 << 10


def make_shard(path: Path, mib: int) -> None:
    payload = bytes(range(256)) * (RECORD // 256)
    tfrecord.write_records(path, (payload for _ in range(mib * (1 << 20) // RECORD)))


def first_file(tmp: Path, source: ObjectSource) -> float:
    started = time.perf_counter()
    objects = source.list()
    target = tmp / "file"
    copy_objects(source, objects, target, link=False)  # a download, even from a folder
    with open(target / objects[0][0], "rb") as f:
        next(iter_records(f, "tfrecord"))
    took = time.perf_counter() - started
    shutil.rmtree(target)
    return took


def first_fastfile(tmp: Path, source: ObjectSource) -> float:
    started = time.perf_counter()
    objects = source.list()
    target = tmp / "fastfile"
    write_view(target, source, objects)
    with open_channel_file(target, objects[0][0]) as f:
        next(iter_records(f, "tfrecord"))
    took = time.perf_counter() - started
    shutil.rmtree(target)
    return took


def first_pipe(tmp: Path, source: ObjectSource) -> float:
    started = time.perf_counter()
    agent = PipeAgent(tmp / "pipe", "train", source.objects(), epochs=1, reader_wait_s=30).start()
    with open_epoch(tmp / "pipe", "train", 0, timeout_s=30) as stream:
        next(iter_records(stream, "tfrecord"))
    took = time.perf_counter() - started  # closing early ends the epoch, as on SageMaker
    agent.stop()
    return took


def server_floor(tmp: Path, source: ObjectSource) -> float:
    """The S3 server alone: list the prefix, then one ranged GET of the first block (no smlaunch code)."""
    from smlaunch.pipelines.sources.fastfile import BLOCK

    started = time.perf_counter()
    first = source.list()[0]
    source.read_range(first[0], 0, min(BLOCK, first[1]))
    return time.perf_counter() - started


def measure_all(source_of, datasets, modes, repeats, tmp) -> dict:
    times = {}
    for label, (count, mib) in datasets.items():
        source = source_of(label)
        for mode, measure in modes.items():
            runs = [measure(tmp, source) for _ in range(repeats)]
            times[mode, label] = statistics.median(runs)
            print(
                f"  {mode:12} {label:13} ({count:3d} x {mib:3d} MiB): first record after "
                f"{times[mode, label] * 1000:8.1f} ms (runs: {', '.join(f'{r * 1000:.1f}' for r in runs)})",
                flush=True,
            )
    return times


def ratios(times, modes, label) -> dict:
    return {mode: times[mode, label] / times[mode, "1x"] for mode in modes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--shard-mib", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    modes = {"pipe": first_pipe, "fastfile": first_fastfile, "file": first_file}
    # (shards, MiB per shard): 100x by larger objects (the RESULT), and by more objects.
    datasets = {
        "1x": (args.shards, args.shard_mib),
        "100x": (args.shards, 100 * args.shard_mib),
        "100x-objects": (100 * args.shards, args.shard_mib),
    }
    with tempfile.TemporaryDirectory() as tmp_name, LocalS3() as s3:
        tmp = Path(tmp_name)
        client = s3.client()
        client.create_bucket(Bucket="bench")
        for label, (count, mib) in datasets.items():
            make_shard(tmp / "shard.tfrecord", mib)
            print(f"writing {label}: {count} shards of {mib} MiB to a folder and to {s3.endpoint_url} ...", flush=True)
            for i in range(count):
                (tmp / "folder" / label).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(tmp / "shard.tfrecord", tmp / "folder" / label / f"part-{i:05d}.tfrecord")
                client.upload_file(str(tmp / "shard.tfrecord"), "bench", f"{label}/part-{i:05d}.tfrecord")
        os.environ.update({k: v for k, v in LocalS3.environment().items() if v})
        print("source: a local folder (our agents and readers only; File copies the bytes)")
        local = measure_all(lambda label: ObjectSource(str(tmp / "folder" / label)), datasets, modes, args.repeats, tmp)
        print("source: the local S3 server (moto builds a whole object for every GET, ranged or not)")
        remote = measure_all(
            lambda label: ObjectSource(f"s3://bench/{label}/", s3.endpoint_url),
            datasets,
            {**modes, "server_floor": server_floor},
            args.repeats,
            tmp,
        )
    for name, times, kinds in (("folder", local, modes), ("s3", remote, {**modes, "server_floor": None})):
        for label in ("100x", "100x-objects"):
            print(
                f"{name:6} {label:13} ratios: "
                + " ".join(f"{mode}={ratio:.2f}" for mode, ratio in ratios(times, kinds, label).items())
            )
    result = ratios(local, modes, "100x")
    report_result(
        f"RESULT first_record pipe_ratio={result['pipe']:.2f} fastfile_ratio={result['fastfile']:.2f} "
        f"file_ratio={result['file']:.2f} goal=1.1"
    )


if __name__ == "__main__":
    main()
