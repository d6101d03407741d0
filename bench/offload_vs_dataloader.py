"""Ray Data offload vs a torch DataLoader: the same chain, the same images, the same CPUs (benchmark 5a/5b).

Both sides run the seed workload's chain (`configs/seed-vit-blur.yaml`: decode, random resized
crop to 224, flip, ten 11x11 Gaussian blurs, uint8 CHW) over the same TFRecord shards of 224 px
JPEGs (`builtin:synthetic`), and hand batches of 32 to a consumer in this process:

- **ray**: the product's own path. A simulated cluster (a train head and one data host with
  `--cpus` CPUs), the channel delivered to the data host, `build_datasets` (read + chain on the data
  host only), consumed with `iter_torch_batches` as the trainer does.
- **dataloader**: `torch.utils.data.DataLoader(num_workers=--cpus)` over an IterableDataset that
  reads the same shards (worker i takes every i-th shard) and applies the same `Chain`.

The clock starts when the pipeline is built (Ray: cluster already up, as it is when the trainer
asks for data; DataLoader: workers fork at iteration) and stops at the last batch. Throughput is
images over that time; first batch is the time to the first batch. Runs alternate sides and the
median of `--repeats` is kept; the first Ray run, whose data workers start cold (a fresh worker
imports torch: ~4 s here), is also printed on its own. The DataLoader runs in a process of its
own with torch already imported, as a training script has it; its workers fork from it.

    python bench/offload_vs_dataloader.py [--cpus 2] [--shards 4] [--repeats 3]

A cold start is measured first, on a cluster of its own, in the order a job runs
(`launcher.job.run`): the datasets are built (the channel listed), the warm-up a job starts with its
trainer (`smlaunch.pipelines.warmup`) runs on the data host's fresh workers, and the first batch is
asked for `--trainer-start-s` later, as a trainer asks once Ray Train has started it. Its clock
starts at that request.

Ends with `RESULT offload_vs_dataloader throughput_ratio=<ray/dataloader images/s>
first_batch_ratio=<ray/dataloader seconds> cold_first_batch_ratio=<cold ray/dataloader seconds>
goal=1.0/1.5/1.5` (>= 1.0, <= 1.5, <= 1.5).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32


def build(tmp: Path, cpus: int, shards: int):
    from smlaunch.cluster.plan import LocalEnvironment, build_plan
    from smlaunch.config import load_config
    from smlaunch.pipelines.builtin import prepare_builtin

    source = tmp / "source"
    source.mkdir()
    for shard in sorted((prepare_builtin("synthetic") / "train").iterdir())[:shards]:
        (source / shard.name).hardlink_to(shard)
    cfg = load_config(
        ROOT / "configs" / "seed-vit-blur.yaml",
        [
            f"channels.train.source={source}",
            f"channels.validation.source={source}",
            "model.num_classes=10",
            f"pipeline.batch_size={BATCH}",
            f"run.dir={tmp}",
            "run.name=bench",
        ],
    )
    plan = build_plan(cfg, LocalEnvironment(cpus=cpus + 1, gpus=0, started="t"))
    hosts = tuple(dataclasses.replace(h, num_cpus=cpus if h.subcluster == "data" else 1) for h in plan.hosts)
    return cfg, dataclasses.replace(plan, hosts=hosts)


def run_ray(cfg, plan, dataset=None) -> tuple[float, float, int]:
    """(first batch s, total s, images); the clock includes building `dataset` unless it is given."""
    from smlaunch.pipelines.dataset import build_datasets

    started = time.perf_counter()
    first, rows = None, 0
    if dataset is None:
        dataset = build_datasets(cfg, plan)["train"]
        print(f"  ray: datasets built (channel listed on its host) after {time.perf_counter() - started:.2f} s")
    for batch in dataset.iter_torch_batches(batch_size=BATCH, prefetch_batches=4):
        first = first or time.perf_counter() - started
        rows += len(batch["label"])
    return first, time.perf_counter() - started, rows


def cold_as_a_job_starts(args) -> tuple[float, float, int]:
    """A fresh cluster's first pass, as a job gets it: the launcher starts the warm-up of the data
    hosts' workers when training starts (`pipelines.warmup`), and the trainer asks for data once
    Ray Train has started it. The clock starts at the request, as in `run_ray`. In a process of its
    own: a driver keeps its first cluster's token, so a second cluster in this one cannot join."""
    import json
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--cold-only",
            "--cpus",
            str(args.cpus),
            "--shards",
            str(args.shards),
            "--trainer-start-s",
            str(args.trainer_start_s),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    took = tuple(json.loads(out.strip().splitlines()[-1]))
    print(
        f"cold, warmed  ray        first_batch_s={took[0]:.2f} total_s={took[1]:.2f} images={took[2]} "
        f"images_per_s={took[2] / took[1]:.1f}",
        flush=True,
    )
    return took


def cold_only(args) -> None:
    import json

    from smlaunch.cluster.host_tree import create_host_trees
    from smlaunch.cluster.local import LocalCluster
    from smlaunch.pipelines.dataset import build_datasets
    from smlaunch.pipelines.sources.channels import deliver_channels
    from smlaunch.pipelines.warmup import warm_preprocess_workers

    with tempfile.TemporaryDirectory() as tmp:
        cfg, plan = build(Path(tmp), args.cpus, args.shards)
        create_host_trees(plan)
        deliver_channels(plan)
        with LocalCluster(plan):
            # The order of `launcher.job.run`: list and build the datasets, start the warm-up, then
            # start Ray Train, whose workers ask for data once it has started them.
            dataset = build_datasets(cfg, plan)["train"]
            # This process reads the dataset itself, not Ray Train's controller: its tasks run in
            # the job's own runtime environment, so the workers are warmed in that one.
            warm_preprocess_workers(plan, cfg.pipeline.ops, runtime_env={})
            time.sleep(args.trainer_start_s)
            took = run_ray(cfg, plan, dataset)
    print(json.dumps(took))


from torch.utils.data import IterableDataset as _IterableDataset  # noqa: E402  (the bench needs torch anyway)


class ShardStream(_IterableDataset):
    """IterableDataset over the channel's shards: worker i reads every i-th shard and yields the
    chain's batches (the classic way to parallelise preprocessing in one process tree)."""

    def __init__(self, files: list[Path], ops, host_names):
        self.files, self.ops, self.host_names = files, ops, host_names

    def __iter__(self):
        import numpy as np
        import torch

        from smlaunch.pipelines.formats import iter_records
        from smlaunch.pipelines.ops.chain import Chain
        from smlaunch.pipelines.rows import example_row

        info = torch.utils.data.get_worker_info()
        index, count = (info.id, info.num_workers) if info else (0, 1)
        chain = Chain(self.ops, self.host_names)
        for path in self.files[index::count]:
            with open(path, "rb") as f:
                rows = [example_row(r) for r in iter_records(f, "tfrecord")]
            for start in range(0, len(rows), BATCH):
                image, label, ids = zip(*rows[start : start + BATCH], strict=False)
                out = chain({"image": np.array(image, dtype=object), "label": np.array(label), "id": np.array(ids)})
                yield {"image": torch.from_numpy(np.asarray(out["image"])), "label": torch.from_numpy(out["label"])}


def run_dataloader(cfg, plan, cpus: int) -> tuple[float, float, int]:
    """In a process of its own: forking DataLoader workers out of a Ray driver is unsafe (they
    inherit its gRPC connections), and users' DataLoaders run without Ray anyway."""
    import json
    import subprocess

    from smlaunch.pipelines.sources.channels import channel_dir

    data_host = next(h for h in plan.hosts if h.subcluster == "data")
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--dataloader-only",
            str(channel_dir(data_host.opt_ml, "train")),
            "--cpus",
            str(cpus),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return tuple(json.loads(out.strip().splitlines()[-1]))


def dataloader_only(directory: str, cpus: int) -> None:
    import json

    import torch

    from smlaunch.config import load_config

    ops = load_config(ROOT / "configs" / "seed-vit-blur.yaml").pipeline.ops
    files = sorted(p for p in Path(directory).iterdir() if not p.name.startswith("."))
    started = time.perf_counter()
    loader = torch.utils.data.DataLoader(
        ShardStream(files, ops, []), batch_size=None, num_workers=cpus, prefetch_factor=4
    )
    first, rows = None, 0
    for batch in loader:
        first = first or time.perf_counter() - started
        rows += len(batch["label"])
    print(json.dumps([first, time.perf_counter() - started, rows]))


def decoder_rates() -> None:
    """The decoder choice behind `decode_image`: images/s on one thread, torchvision.io vs PIL."""
    import io
    import warnings

    import numpy as np
    import torch
    from PIL import Image
    from torchvision.io import ImageReadMode, decode_image

    torch.set_num_threads(1)
    warnings.simplefilter("ignore", DeprecationWarning)
    for size in (32, 224):
        yy, xx = np.mgrid[0:size, 0:size] / size
        pixels = 128 + 90 * np.sin(12 * xx + 5 * yy)[..., None] + np.random.default_rng(0).normal(0, 6, (size, size, 3))
        buf = io.BytesIO()
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
        data, n, rates = buf.getvalue(), 20000 // size * 10, {}
        for name, decode in (
            ("pil", lambda data=data: np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))),
            (
                "torchvision",
                lambda data=data: (
                    decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
                    .permute(1, 2, 0)
                    .numpy()
                ),
            ),
        ):
            decode()
            started = time.perf_counter()
            for _ in range(n):
                decode()
            rates[name] = n / (time.perf_counter() - started)
        print(
            f"decode {size}px JPEG, 1 thread: torchvision.io {rates['torchvision']:.0f}/s, PIL {rates['pil']:.0f}/s "
            f"({rates['torchvision'] / rates['pil']:.2f}x)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2, help="worker CPUs on each side")
    parser.add_argument("--shards", type=int, default=4, help="synthetic shards of 320 images to read")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--trainer-start-s",
        type=float,
        default=10.0,
        help="cold run: seconds between the warm-up and the first request for data, as Ray "
        "Train's start gives a job (about 20 s on the 2-core VM; less is harder)",
    )
    parser.add_argument("--dataloader-only", help=argparse.SUPPRESS)
    parser.add_argument("--cold-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dataloader_only:
        dataloader_only(args.dataloader_only, args.cpus)
        return 0
    if args.cold_only:
        cold_only(args)
        return 0
    decoder_rates()
    warmed = cold_as_a_job_starts(args)
    from smlaunch.cluster.host_tree import create_host_trees
    from smlaunch.cluster.local import LocalCluster
    from smlaunch.pipelines.sources.channels import deliver_channels

    results: dict[str, list[tuple[float, float, int]]] = {"ray": [], "dataloader": []}
    with tempfile.TemporaryDirectory() as tmp:
        cfg, plan = build(Path(tmp), args.cpus, args.shards)
        create_host_trees(plan)
        deliver_channels(plan)
        with LocalCluster(plan):
            for n in range(args.repeats):
                for side in ("ray", "dataloader") if n % 2 == 0 else ("dataloader", "ray"):
                    took = run_ray(cfg, plan) if side == "ray" else run_dataloader(cfg, plan, args.cpus)
                    results[side].append(took)
                    print(
                        f"run {n + 1} {side:10s} first_batch_s={took[0]:.2f} total_s={took[1]:.2f} "
                        f"images={took[2]} images_per_s={took[2] / took[1]:.1f}",
                        flush=True,
                    )
    rows = {side: {r[2] for r in runs} for side, runs in results.items()}
    if rows["ray"] != rows["dataloader"] or len(rows["ray"]) != 1:
        print(f"the two sides delivered different row counts: {rows}", file=sys.stderr)
        return 1
    median = {
        side: (statistics.median(r[0] for r in runs), statistics.median(r[2] / r[1] for r in runs))
        for side, runs in results.items()
    }
    for side, (first, rate) in median.items():
        print(f"median {side:10s} first_batch_s={first:.2f} images_per_s={rate:.1f}")
    cold = results["ray"][0]
    print(
        f"ray cold, not warmed (first run: data workers start and import torch) first_batch_s={cold[0]:.2f} "
        f"images_per_s={cold[2] / cold[1]:.1f}"
    )
    print(
        f"ray cold, warmed as a job does (fresh cluster, warm-up, {args.trainer_start_s:g} s of trainer start) "
        f"first_batch_s={warmed[0]:.2f} images_per_s={warmed[2] / warmed[1]:.1f}"
    )
    print(f"machine: {os.cpu_count()} CPUs; {args.cpus} worker CPUs per side; {rows['ray'].pop()} images")
    throughput = median["ray"][1] / median["dataloader"][1]
    first_batch = median["ray"][0] / median["dataloader"][0]
    cold_ratio = warmed[0] / median["dataloader"][0]
    report_result(
        f"RESULT offload_vs_dataloader throughput_ratio={throughput:.2f} first_batch_ratio={first_batch:.2f} "
        f"cold_first_batch_ratio={cold_ratio:.2f} goal=1.0/1.5/1.5"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
