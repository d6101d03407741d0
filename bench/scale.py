"""ImageNet-sized and beyond (issue 38): the listing, the data order and the resume state at 1.28M
files, and the resume state of a 100M-sample epoch.

Builds and caches in `--scratch` (progress shown): a 1000-class ImageNet-layout folder of
1,281,167 small valid JPEGs, and WebDataset and TFRecord channels of `--shard-samples` x 1000
samples written class by class (shard k holds class k only, as a converter walking class folders
writes them). Then, in one run:

* listing: `scale_listing.measure_listing` (ours against torchvision `ImageFolder`'s scan of the
  same folder, warm, and the driver's memory);
* the first step: `sm-launch configs/hetero.yaml` on the 1.28M-file folder and on one of 2 files
  per class, timed from the command to its `step=1` line, with a data host of 1 CPU and of 2
  (`DATA_HOST_TYPES`); the difference over ImageFolder's scan;
* reads by data host size (issue 53, `scale_reads`): on simulated data hosts of 1, 2 and 4 CPUs,
  the first chain batch's delay on the large folder over the small one (plus the listing; each
  folder `--first-step-runs` times in turns, the best counts), the object store's high-water
  mark through a whole pass of `--pass-files` files on a fresh node, and that pass's
  images/s against Ray Data's `read_binary_files` with the same chain, on the same host, the
  readers in turns (`--pass-turns` passes each, the best counts); with `fused` in `--parts`,
  each again with the read fused into the chain's task (`_fused`: an option weighed, not the job's);
* data order: one epoch of each class-sorted channel read as a train channel is (our reader,
  Ray Data, the trainer's shuffle buffer) on one local Ray node; distinct labels per batch of 256
  against a uniform random permutation's (and, for contrast, read the way the code read before
  this issue: one file at a time in a fixed order, no buffer);
* the resume state of the 1.28M-file epoch, from the positions that pass drew (its size at 20
  points through the epoch), and the time to resume at 60 %: the state read back, the pass
  planned without the files drawn, and its first batch, against a fresh pass's first batch;
* the resume state of a simulated 1.28M-file epoch and a simulated 100M-sample epoch (100,000
  shards of 1,000 samples) read by 128 ranks through 2,304 read tasks (32 CPU hosts of 72 vCPUs),
  each rank with a shuffle buffer and two batches prefetched (half of those rows drawn, at random):
  the state at 20 points through the epoch; `checkpoint_data_kib_1m` is the larger of the real
  pass's and this one's;
* training quality: `sm-launch configs/tiny.yaml` on the digits as WebDataset shards of one class
  each, against the same samples pre-shuffled across the shards, and against the class-sorted
  shards with the shuffle turned off (one fixed order, a file at a time, no buffer), `--steps` each.

    RESULT scale listing_ratio=<x> listing_rss_mb=<x> checkpoint_data_kib_1m=<x>
          checkpoint_data_kib_100m=<x> resume_s_1m=<x> labels_per_batch_ratio=<x>
          first_step_extra_ratio=<x> first_step_extra_ratio_job_1cpu=<x>
          first_step_extra_ratio_{1,2,4}cpu[_fused]=<x> object_store_peak_mb_{1,2,4}cpu[_fused]=<x>
          read_ratio_{1,2,4}cpu[_fused]=<x> goal=...

    python bench/scale.py [--scratch DIR] [--files 1281167] [--shard-samples 128] [--steps 300]
                          [--first-step-runs 3] [--pass-files 100000] [--pass-turns 2]
                          [--parts first,reads,fused,order,accuracy]

Only the `order` part first reads the whole 1.28M-file folder into the page cache (its passes
measure the order and the resume, not the disk); the first step and the reads take the folder as
the page cache holds it, as a job meets it (a VM of 24 GiB keeps about 5 GiB of it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
HOST = "algo-2"
CLASSES = 1000
BATCH = 256
POINTS = 20


def write_sorted_shards(folder: Path, fmt: str, per_class: int) -> Path:
    """`CLASSES` shards, shard k holding `per_class` samples of class k only (cached)."""
    from scale_listing import tiny_jpeg
    from tqdm import tqdm

    done = folder / ".complete"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    image = tiny_jpeg()
    for label in tqdm(range(CLASSES), desc=f"writing class-sorted {fmt} shards", unit="shard", mininterval=2):
        ids = range(label * per_class, (label + 1) * per_class)
        if fmt == "webdataset":
            import webdataset as wds

            with wds.TarWriter(str(folder / f"shard-{label:04d}.tar")) as sink:
                for ident in ids:
                    sink.write({"__key__": f"s{ident:08d}", "jpg": image, "cls": label})
        else:
            from tfrecord import TFRecordWriter

            writer = TFRecordWriter(str(folder / f"train-{label:05d}"))
            for ident in ids:
                writer.write(
                    {"image/encoded": (image, "byte"), "image/class/label": (label, "int"), "id": (ident, "int")}
                )
            writer.close()
    done.touch()
    return folder


def warm_page_cache(folder: Path) -> None:
    """Read every file once, class by class with 16 threads, so the passes below read from memory:
    a first pass over 1.28M files cold from this VM's disk, in a shuffled order, ran at 3,000 files/s
    (426 s), which measures the disk, not the order or the resume."""
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    def read_class(d: Path) -> int:
        return sum(len(f.read_bytes()) for f in d.iterdir())

    classes = sorted(p for p in folder.iterdir() if p.is_dir())
    started = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        total = sum(
            tqdm(
                pool.map(read_class, classes),
                total=len(classes),
                desc="warming the page cache",
                unit="class",
                mininterval=5,
            )
        )
    print(f"read {total / 2**20:.0f} MiB of image files in {time.perf_counter() - started:.1f} s", flush=True)


def start_ray(cpus: int):
    """A local Ray node of `cpus` CPUs labelled as data host HOST, its raylet and Ray Data set as
    the job sets a data host's (`worker_pool_env`, the block size)."""
    import ray

    from smlaunch.cluster.node import worker_pool_env

    os.environ.update(worker_pool_env(cpus))  # the raylet ray.init starts inherits it
    ray.init(
        address="local",
        num_cpus=cpus,
        labels={"ray-subcluster": "data", "sm-host": HOST},
        include_dashboard=False,
        object_store_memory=1 << 30,
        namespace="smlaunch-bench",
        log_to_driver=False,
    )
    from smlaunch.config import load_config
    from smlaunch.pipelines.dataset import block_bytes, use_block_size

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.label_selector = {"ray-subcluster": "data"}
    use_block_size(context, block_bytes(load_config(ROOT / "configs" / "hetero.yaml")))  # as the main job's run sets it
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    return ray


def channel_source(name: str, source: Path, fmt: str, cpus: int, shuffle: bool, listing=None):
    """A train channel of `source` delivered (linked) to HOST's /opt/ml, listed, as a ChannelDatasource."""
    from smlaunch.cluster.plan import channel_plan
    from smlaunch.config.channel import ChannelConfig
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel

    channel = channel_plan(
        name,
        ChannelConfig(source=str(source), record_format=fmt, shuffle={"enabled": shuffle}),
        (HOST,),
        block_rows=BATCH,
    )
    opt_ml = source.parent / f"opt-ml-{name}"
    target = opt_ml / "input" / "data" / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(source, target_is_directory=True)
    roots = {HOST: str(opt_ml)}
    listing = listing or list_channel(channel, roots)
    return ChannelDatasource(channel, listing, roots, num_classes=CLASSES, cpus={HOST: cpus}, ranks=1, seed=0)


def read_epoch(source, buffer_rows: int, on_batch=None) -> tuple[np.ndarray, float, float]:
    """One pass as a train worker draws it (through the loop's shuffle buffer): (labels in order,
    seconds to the first batch, seconds)."""
    from smlaunch.pipelines.dataset import read_channel
    from smlaunch.trainers.shuffle_buffer import ShuffleBuffer

    started = time.perf_counter()
    first = None
    labels = []
    batches = read_channel(source, source.channel).iter_batches(batch_size=BATCH, batch_format="numpy")
    if buffer_rows:
        batches = ShuffleBuffer(buffer_rows, BATCH, seed=0)(batches)
    for batch in batches:
        first = first or time.perf_counter() - started
        labels.append(batch["label"])
        if on_batch is not None:
            on_batch(batch)
    return np.concatenate(labels), first, time.perf_counter() - started


def mix_ratio(labels: np.ndarray) -> tuple[float, float]:
    from smlaunch.pipelines.order import labels_per_batch
    from smlaunch.trainers.mixing import uniform_labels_per_batch

    measured = labels_per_batch(labels, BATCH)
    return measured, measured / uniform_labels_per_batch(np.bincount(labels, minlength=CLASSES), BATCH)


def order_and_resume(folder: Path, scratch: Path, per_class: int, cpus: int) -> dict:
    """Labels per batch of the three class-sorted channels; the 1.28M epoch's resume state and resume time."""
    from smlaunch.cluster.run_relay import set_order, start_relay
    from smlaunch.pipelines.position import EpochPosition, state_bytes

    out: dict = {"mix": {}}
    channels = {
        "image_folder": folder,
        "webdataset": write_sorted_shards(scratch / "webdataset-sorted", "webdataset", per_class),
        "tfrecord": write_sorted_shards(scratch / "tfrecord-sorted", "tfrecord", per_class),
    }
    ray = start_ray(cpus)
    try:
        relay = start_relay()
        for fmt, path in channels.items():
            for mode, shuffle, buffer in (("ours", True, 1024), ("before", False, 0)):
                if fmt == "image_folder" and mode == "before":
                    continue  # a file is a sample: the fixed order was already a shuffle of the files
                source = channel_source(f"{fmt.replace('_', '')}{mode}", path, fmt, cpus, shuffle)
                positions, sizes = [], []
                keep = fmt == "image_folder" and mode == "ours"
                labels, first, took = read_epoch(source, buffer, positions.append if keep else None)
                measured, ratio = mix_ratio(labels)
                out["mix"][(fmt, mode)] = ratio
                print(
                    f"{fmt:12s} {mode:6s}: {len(labels)} rows in {took:.1f} s, {measured:.1f} distinct labels per "
                    f"batch of {BATCH}, {ratio:.2f}x a uniform random order's",
                    flush=True,
                )
                if not keep:
                    continue
                drawn = np.concatenate(positions)
                position, at_60 = EpochPosition(1), None
                marks = np.linspace(0, len(drawn), POINTS + 1).astype(int)
                for a, b in zip(marks[:-1], marks[1:], strict=False):
                    position.merge(drawn[a:b])
                    sizes.append(state_bytes(position.state()))
                    if at_60 is None and b >= 0.6 * len(drawn):
                        at_60 = (position.state(), b)
                out["state_kib_1m"] = max(sizes) / 1024
                print(
                    f"  resume state through the epoch ({POINTS} points): max {max(sizes) / 1024:.1f} KiB, "
                    f"{sizes[len(sizes) // 2] / 1024:.1f} KiB at mid-epoch; done units at the end: "
                    f"{position.units_done} of {len(drawn)}",
                    flush=True,
                )
                # Resume at 60 %: the state read back, posted, the pass planned without what was drawn.
                started = time.perf_counter()
                state, drawn_rows = at_60
                restored = EpochPosition.from_state(state)
                set_order(source.channel.name, 0, state)
                resumed = channel_source(source.channel.name, path, fmt, cpus, True, source.listing)
                rest, resumed_first, resumed_took = read_epoch(resumed, buffer)
                out["resume_s"] = time.perf_counter() - started - resumed_took + resumed_first
                set_order(source.channel.name, 0, None)
                _, out["fresh_first_s"], _ = read_epoch(
                    channel_source(source.channel.name, path, fmt, cpus, True, source.listing), buffer
                )
                print(
                    f"  resumed at {drawn_rows} of {len(drawn)} rows ({restored.units_done} files done): first batch "
                    f"{out['resume_s']:.2f} s after the state was read (a fresh pass planned the same way: "
                    f"{out['fresh_first_s']:.2f} s); the rest: {len(rest)} rows, {drawn_rows + len(rest)} in all",
                    flush=True,
                )
                if drawn_rows + len(rest) != len(drawn):
                    raise RuntimeError(f"resumed epoch: {drawn_rows} + {len(rest)} rows != {len(drawn)}")
        ray.kill(relay)
    finally:
        ray.shutdown()
    return out


SIM_RECORD_BYTES = 110_000
"""A simulated shard's record size (an ImageNet JPEG's mean): what its rows' seeks step by."""


def drawn_rows(unit: np.ndarray, ordinal: np.ndarray, rows_per_unit: int) -> np.ndarray:
    """A rank's `DrawnPositions.take()` for these rows: positions, and the seeks a shard's
    records give (one unit of one row, an image file, has none)."""
    from smlaunch.pipelines.order import LAST, NO_SEEK, SEEK_SHIFT, UNIT_SHIFT

    pos = (unit << UNIT_SHIFT) | ordinal | np.where(ordinal == rows_per_unit - 1, LAST, 0)
    seek = (
        np.full(len(pos), NO_SEEK, np.int64) if rows_per_unit == 1 else ((ordinal + 1) * SIM_RECORD_BYTES) << SEEK_SHIFT
    )  # `order.seek_point`, no sample skipped
    return np.stack([pos, seek])


def simulated_state_kib(
    units: int, rows_per_unit: int, ranks: int, tasks: int, buffer_rows: int, prefetch_rows: int, seed: int = 0
) -> tuple[float, float, tuple[int, int]]:
    """(largest state in KiB, seconds of rank 0's merges, (rows a resume at the last point reads
    again only to drop them, and as many without seeks: the partial units' drawn rows)) over an
    epoch read by `tasks` read tasks (contiguous runs of the order, each `open_units` = 1) handing
    blocks to `ranks` ranks, each rank holding `buffer_rows` + `prefetch_rows` rows read but not
    drawn, a random half of them drawn out of order (the shuffle buffer); states taken at `POINTS`
    points through the epoch."""
    from smlaunch.pipelines.position import EpochPosition, state_bytes

    rng = np.random.default_rng(seed)
    per_task = units // tasks
    in_flight = ranks * (buffer_rows + prefetch_rows) // tasks  # rows of each task read but not yet drawn
    largest, merging = 0, 0.0
    position = EpochPosition(1)
    reached = np.zeros(tasks, np.int64)  # rows each task had drawn in full at the last point
    for point in range(1, POINTS + 1):
        target = per_task * rows_per_unit * point // (POINTS + 1)
        parts = []
        for t in range(tasks):
            rows = np.arange(reached[t], target, dtype=np.int64)
            unit = t * per_task + rows // rows_per_unit
            ordinal = rows % rows_per_unit
            parts.append(drawn_rows(unit, ordinal, rows_per_unit))
        reached[:] = target
        window = []  # in flight beyond each task's drawn prefix: a random half drawn
        for t in range(tasks):
            rows = np.arange(target, target + in_flight, dtype=np.int64)
            rows = rows[rng.random(len(rows)) < 0.5]
            unit = t * per_task + rows // rows_per_unit
            ordinal = rows % rows_per_unit
            window.append(drawn_rows(unit, ordinal, rows_per_unit))
        started = time.perf_counter()
        position.merge(parts)
        snapshot = EpochPosition.from_state(position.state())
        snapshot.merge(window)
        merging += time.perf_counter() - started
        largest = max(largest, state_bytes(snapshot.state()))
    partial = {unit: len(ordinals) for unit, (ordinals, _) in snapshot.partial.items()}
    reread = sum(rows - snapshot.seeks.get(unit, (0, 0))[0] for unit, rows in partial.items())
    return largest / 1024, merging, (reread, sum(partial.values()))


def accuracy(scratch: Path, steps: int) -> dict:
    """Validation accuracy of the digits as class-sorted WebDataset shards vs the same samples pre-shuffled."""
    sys.path.insert(0, str(ROOT / "bench"))
    from format_writers import digits

    rows = digits(1437)
    out = {}
    by_class = sorted(rows, key=lambda r: r[1])
    shuffled = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
    unshuffled = ["channels.train.shuffle.enabled=false", "channels.train.shuffle.buffer_rows=0"]
    for name, order, extra in (
        ("class_sorted", by_class, []),
        ("pre_shuffled", shuffled, []),
        ("class_sorted_read_in_order", by_class, unshuffled),
    ):
        folder = scratch / f"digits-{name.removesuffix('_read_in_order')}"
        if not folder.exists():
            import webdataset as wds

            folder.mkdir(parents=True)
            for shard in range(10):
                part = [r for r in order if r[1] == shard] if order is by_class else order[shard::10]
                with wds.TarWriter(str(folder / f"shard-{shard:02d}.tar")) as sink:
                    for image, label, ident in part:
                        sink.write({"__key__": f"s{ident:06d}", "jpg": image, "cls": label})
        with tempfile.TemporaryDirectory() as tmp:
            sets = [
                f"run.dir={tmp}",
                "run.name=acc",
                f"trainer.steps={steps}",
                f"channels.train.source={folder}",
                "channels.train.record_format=webdataset",
                "model.num_classes=10",
                *extra,
            ]
            started = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "smlaunch.launcher.cli",
                    str(ROOT / "configs" / "tiny.yaml"),
                    *[x for s in sets for x in ("--set", s)],
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            report = json.loads(next(Path(tmp).glob("acc/hosts/algo-1/opt/ml/output/data/report.json")).read_text())
        out[name] = report["summary"]["validation_accuracy"]
        mixes = [e.get("label_mix", {}) or {} for e in report["sample_accounting"]["epochs"]]
        print(
            f"digits as {name} WebDataset shards: validation accuracy {out[name]:.3f} after {steps} steps "
            f"({time.perf_counter() - started:.0f} s); labels per batch / uniform by epoch: "
            f"{[m.get('ratio') for m in mixes]}",
            flush=True,
        )
    return out


DATA_HOST_TYPES = {1: "ml.c5.xlarge", 2: "ml.c5.4xlarge"}
"""The data group's instance type for a data host of 1 or 2 CPUs as the local run plans it on 2
cores (`cluster.plan.build_plan` scales the vCPUs to this machine's)."""


def first_step_s(folder: Path, cpus: int = 2) -> float:
    """Seconds from the command to its `step=1` line: `sm-launch configs/hetero.yaml` (the local
    default: a head that trains and a data host of `cpus` CPUs) on `folder` as a File-mode image folder."""
    with tempfile.TemporaryDirectory() as tmp:
        sets = [
            f"run.dir={tmp}",
            "run.name=first",
            f"channels.train.source={folder}",
            "channels.train.record_format=image_folder",
            "trainer.steps=1",
            "trainer.log_every=1",
            "trainer.checkpoint_interval=1000",
            f"cluster.instance_groups.1.instance_type={DATA_HOST_TYPES[cpus]}",
        ]
        started = time.perf_counter()
        job = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "smlaunch.launcher.cli",
                str(ROOT / "configs" / "hetero.yaml"),
                *[x for s in sets for x in ("--set", s)],
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        took = None
        for line in job.stdout:
            if took is None and line.startswith("step=1 "):
                took = time.perf_counter() - started
        if job.wait() or took is None:
            raise SystemExit(f"bench/scale.py: the job on {folder} failed (exit {job.returncode}) or printed no step=1")
    return took


def first_step(scratch: Path, large: Path, runs: int, cpus: int = 2) -> dict:
    """The delay before the first step on the 1.28M-file folder over the same job on a folder of 2
    files per class, best of `runs` each, the two sizes taking turns (so load drifts hit both), on
    a data host of `cpus` CPUs."""
    from scale_listing import build_folder

    small = build_folder(scratch, 2 * CLASSES, CLASSES)
    times: dict[str, list[float]] = {"small": [], "large": []}
    for _ in range(runs):
        for name, folder in (("small", small), ("large", large)):
            times[name].append(first_step_s(folder, cpus))
            print(f"  first step on the {name} folder after {times[name][-1]:.1f} s ({cpus} CPU data host)", flush=True)
    return {"small_s": min(times["small"]), "large_s": min(times["large"])}


def reads_by_host_size(args, folder: Path, listing: dict) -> dict:
    """`scale_reads.read_measures` on data hosts of 1, 2 and 4 CPUs: the first batch's delay on
    the large folder over the small one, plus the listing (what the job adds before it), over
    ImageFolder's scan; the object store's high-water mark through a whole pass of `--pass-files`
    files; that pass's images/s over Ray Data's `read_binary_files` with the same chain."""
    from scale_listing import build_folder
    from scale_reads import fused, ours, read_measures

    small = build_folder(args.scratch, 2 * CLASSES, CLASSES)
    whole = folder if args.pass_files == args.files else build_folder(args.scratch, args.pass_files, CLASSES)
    out = {}
    readers = (ours, fused) if "fused" in args.parts.split(",") else (ours,)
    for cpus, reader in ((c, r) for c in (1, 2, 4) for r in readers):
        m = read_measures(folder, small, cpus, whole, reader, turns=args.pass_turns, first_turns=args.first_step_runs)
        extra = m["first"]["first_s"] - m["small"]["first_s"] + listing["listing_s"]
        key = f"{cpus}cpu" + ("" if reader is ours else "_fused")
        out[key] = {
            "first_ratio": extra / listing["imagefolder_s"],
            "store_mb": m["ours"]["store_peak_mb"],
            "read_ratio": m["ours"]["per_s"] / m["ray"]["per_s"],
        }
        host = f"{cpus} CPU data host" + ("" if reader is ours else " (fused)")
        print(
            f"{host}: first batch {extra:.1f} s later on {args.files:,} files (listing included), "
            f"{out[key]['first_ratio']:.2f}x ImageFolder's scan; object store peak {out[key]['store_mb']:.0f} MiB; "
            f"a pass of {args.pass_files:,} files at {out[key]['read_ratio']:.2f}x Ray Data's read_binary_files' "
            "images/s",
            flush=True,
        )
    return out


def order_and_state(args, folder: Path) -> dict:
    """The data order and the resume state: the real 1.28M-file pass, and the simulated ones."""
    order = order_and_resume(folder, args.scratch, args.shard_samples, args.cpus)
    kib_1m_128, _, _ = simulated_state_kib(
        1_281_167, 1, ranks=128, tasks=2304, buffer_rows=1024, prefetch_rows=2 * BATCH
    )
    print(
        f"simulated 1.28M-file epoch read by 128 ranks through 2,304 read tasks (1,024-row buffers): largest "
        f"resume state {kib_1m_128:.1f} KiB (the real pass above, one consumer: {order['state_kib_1m']:.1f} KiB)",
        flush=True,
    )
    kib_100m, merge_s, (reread, unseekable) = simulated_state_kib(
        100_000, 1000, ranks=128, tasks=2304, buffer_rows=1024, prefetch_rows=2 * BATCH
    )
    print(
        f"simulated 100M-sample epoch (100,000 shards x 1,000; 128 ranks, 2,304 read tasks, 1,024-row buffers): "
        f"largest resume state {kib_100m:.1f} KiB; rank 0's {POINTS} merges took {merge_s:.1f} s; a resume at the "
        f"last point reads {reread:,} drawn rows again only to drop them ({reread * SIM_RECORD_BYTES / 1e9:.2f} GB "
        f"at {SIM_RECORD_BYTES:,} B a record), {unseekable:,} ({unseekable * SIM_RECORD_BYTES / 1e9:.1f} GB) "
        "if the shards in flight were read from their start",
        flush=True,
    )
    ours = [ratio for (fmt, mode), ratio in order["mix"].items() if mode == "ours"]
    return {
        "checkpoint_data_kib_1m": f"{max(order['state_kib_1m'], kib_1m_128):.1f}",
        "checkpoint_data_kib_100m": f"{kib_100m:.1f}",
        "resume_s_1m": f"{order['resume_s']:.2f}",
        "labels_per_batch_ratio": f"{min(ours):.2f}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "scale-scratch")
    parser.add_argument("--files", type=int, default=1_281_167)
    parser.add_argument("--shard-samples", type=int, default=128, help="samples per class-sorted shard")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300, help="steps of each digits job (0: skip them)")
    parser.add_argument(
        "--first-step-runs",
        type=int,
        default=3,
        help="jobs per folder size timed to their first step (and first batches per folder "
        "size and data host size in the reads part)",
    )
    parser.add_argument(
        "--parts",
        default="first,reads,fused,order,accuracy",
        help="what to measure, of first,reads,fused,order,accuracy (the listing always; "
        "fused: the reads again with the read fused into the chain's task)",
    )
    parser.add_argument(
        "--pass-files",
        type=int,
        default=100_000,
        help="files of the folder each data host size reads whole, ours and Ray Data's",
    )
    parser.add_argument(
        "--pass-turns",
        type=int,
        default=2,
        help="whole passes of each reader per data host size, in turns (the best counts)",
    )
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    args.scratch.mkdir(parents=True, exist_ok=True)
    from scale_listing import build_folder, measure_listing

    listing = measure_listing(args.scratch, files=args.files, classes=CLASSES)
    folder = build_folder(args.scratch, args.files, CLASSES)
    parts = set(args.parts.split(","))
    result = {"listing_ratio": f"{listing['listing_ratio']:.2f}", "listing_rss_mb": f"{listing['listing_rss_mb']:.0f}"}
    if "order" in parts:
        warm_page_cache(folder)
    if "first" in parts:
        for cpus in (2, 1):
            start = first_step(args.scratch, folder, args.first_step_runs, cpus)
            extra = start["large_s"] - start["small_s"]
            ratio = extra / listing["imagefolder_s"]
            result["first_step_extra_ratio" + ("" if cpus == 2 else "_job_1cpu")] = f"{ratio:.2f}"
            print(
                f"first step of configs/hetero.yaml with a {cpus} CPU data host on {args.files:,} files after "
                f"{start['large_s']:.1f} s, on {2 * CLASSES:,} files after {start['small_s']:.1f} s (best of "
                f"{args.first_step_runs}): {extra:.1f} s more, {ratio:.2f}x ImageFolder's scan "
                f"({listing['imagefolder_s']:.2f} s)",
                flush=True,
            )
    if "reads" in parts:
        for key, r in reads_by_host_size(args, folder, listing).items():
            result.update(
                {
                    f"first_step_extra_ratio_{key}": f"{r['first_ratio']:.2f}",
                    f"object_store_peak_mb_{key}": f"{r['store_mb']:.0f}",
                    f"read_ratio_{key}": f"{r['read_ratio']:.2f}",
                }
            )
    if "order" in parts:
        result.update(order_and_state(args, folder))
    if "accuracy" in parts and args.steps:
        acc = accuracy(args.scratch, args.steps)
        print(
            f"class-sorted shards: {acc['class_sorted']:.3f} validation accuracy, pre-shuffled "
            f"{acc['pre_shuffled']:.3f}, "
            f"class-sorted with shuffle.enabled: false and buffer_rows: 0 (one fixed order, a file at a time) "
            f"{acc['class_sorted_read_in_order']:.3f}"
        )
    report_result(
        "RESULT scale "
        + " ".join(f"{k}={v}" for k, v in result.items())
        + " goal=listing_ratio<=1.5,listing_rss_mb<=1500,checkpoint_data_kib<=64,labels_per_batch_ratio>=0.9,"
        "first_step_extra_ratio<=1.5,object_store_peak_mb<=256,read_ratio>=1.0"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
