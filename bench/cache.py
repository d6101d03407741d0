"""The cached prefix (issue 80): the same 4-epoch job with `pipeline.cache: false` and `true`.

A folder of `--images` JPEGs (384 px, noisy: about ImageNet's mean size, so a decode costs what a
user's does), one GPU host (a CPU train worker stands in) and one data host of 1 CPU, a chain
whose deterministic prefix is decode + resize + blur and whose random rest is a crop, a flip and a
jitter. Without the cache every epoch decodes, resizes and blurs every image; with it the first
epoch does and writes the result, and epochs 2-4 read it back and run only the rest.

- `cpu_per_row_ratio`: the data host's CPU seconds (its processes, sampled every 0.5 s by the run's
  own sampler: chain, reads, Ray's workers) per row trained on, cached over uncached;
- `speedup`: the trainer's images/s (report.json's steady steps), cached over uncached;
- `epoch_cpu_ratio`: the data host's CPU within the steps of epochs 2-4 (first step to last), a row,
  cached over uncached: what a cached epoch costs, without the job's start and end;
- `cpu_per_row_ratio_zero`: the same job on a Ray cluster whose autoscaler starts real raylets
  (`bench/cache_zero.py`), cached with `autoscale.min_data_hosts: 0` (the data host given back once
  the cache is sealed, the random rest on the train host's spare CPUs) against uncached on a fixed
  data host: the data host's CPU seconds (its processes') per row;
- `write_copies`, `read_copies`: the CPU a row of writing a shard of 1,280 images of 160 px and of
  reading it back as a cached epoch does, each over a plain copy of the same pixels in the same
  run (`io_costs`): what the cache's own code adds to the pixels' one unavoidable copy.

The two jobs alternate for `--rounds` rounds (ABBA), each in a folder of its own, each cached run
with a fresh cache (the first epoch writes it: the cost a job pays once); the ratios are of each
side's medians.

    python bench/cache.py [--images 8000] [--rounds 2] [--no-zero]

Ends with `RESULT cache cpu_per_row_ratio=<...> speedup=<...> epoch_cpu_ratio=<...>
cpu_per_row_ratio_zero=<...> write_copies=<...> read_copies=<...>
goal=cpu_per_row_ratio<=0.35,cpu_per_row_ratio_zero<=0.35,speedup>=2.0`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
PAUSE_S = 10
SIDE = 384
"""The JPEGs' side: about ImageNet's mean (400 x 350), so a decode costs what a user's does."""


def write_images(folder: Path, count: int) -> None:
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(count):
        klass = folder / f"class-{i % 10}"
        klass.mkdir(parents=True, exist_ok=True)
        base = rng.integers(0, 255, (32, 32, 3), np.uint8)
        image = Image.fromarray(base).resize((SIDE, SIDE), Image.BICUBIC)
        noisy = np.clip(np.asarray(image, np.int16) + rng.integers(-40, 40, (SIDE, SIDE, 3)), 0, 255).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(noisy).save(out, "JPEG", quality=90)
        (klass / f"{i:06d}.jpg").write_bytes(out.getvalue())


def config(data: Path, cache: bool) -> dict:
    return {
        "job": "cachebench",
        "cluster": {
            "instance_groups": [
                {"name": "gpu", "instance_type": "ml.g5.xlarge", "instance_count": 1},
                {"name": "cpu", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            ]
        },
        "channels": {"train": {"source": str(data), "record_format": "image_folder"}},
        "pipeline": {
            "batch_size": 64,
            "cache": cache,
            "ops": [
                {"op": "decode_image"},
                {"op": "resize", "size": 160},
                {"op": "gaussian_blur", "kernel_size": 7, "sigma": 1.5, "repeat": 3},
                {"op": "random_resized_crop", "size": 32, "scale": [0.35, 1.0]},
                {"op": "horizontal_flip"},
                {"op": "color_jitter", "brightness": 0.2},
                {"op": "to_uint8_chw"},
            ],
        },
        "model": {"name": "test_resnet"},
        "trainer": {"batch_size": 64, "epochs": 4, "learning_rate": 0.01},
    }


def run_job(workdir: Path, data: Path, cache: bool) -> dict:
    import yaml

    folder = workdir / ("cached" if cache else "uncached")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "job.yaml").write_text(yaml.safe_dump(config(data, cache), sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", "job.yaml"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode:
        raise SystemExit(f"{'cached' if cache else 'uncached'} job failed:\n{(done.stdout + done.stderr)[-3000:]}")
    report = json.loads(next(folder.glob("runs/*/hosts/algo-1/opt/ml/output/data/report.json")).read_text())
    rows = sum(e["rows"] for e in report["sample_accounting"]["epochs"])
    samples = report["samples"]["algo-2"]
    cpu_s = sum(s["cpu_pct"] / 100 * samples["interval_s"] for s in samples["samples"])
    line = next((x for x in done.stdout.splitlines() if x.startswith("cache: ")), "cache: ?")
    epochs = epoch_cpu(report["steps"], samples)
    out = {
        "cache": cache,
        "images_per_s": report["summary"]["images_per_s"],
        "data_wait_pct": report["summary"]["data_wait_pct"],
        "cpu_s": round(cpu_s, 2),
        "rows": rows,
        "cpu_per_row_ms": round(1000 * cpu_s / rows, 3),
        "epoch_cpu_ms": [round(1000 * cpu / (rows / 4), 3) for cpu in epochs],
        "wall_s": round(time.monotonic() - started, 1),
        "line": line,
    }
    print(json.dumps(out), flush=True)
    return out


def epoch_cpu(steps: list[dict], samples: dict) -> list[float]:
    """The data host's CPU seconds within each epoch's steps (its first step to its last): what an
    epoch's rows cost, without the job's start (workers importing torch), its end and the gaps."""
    spans: dict[int, list[float]] = {}
    for step in steps:
        spans.setdefault(step["epoch"], [step["t"], step["t"]])[1] = step["t"]
    return [
        sum(s["cpu_pct"] / 100 * samples["interval_s"] for s in samples["samples"] if a <= s["t"] <= b)
        for _, (a, b) in sorted(spans.items())
    ]


def io_costs(folder: Path, rows: int = 1280, side: int = 160, rounds: int = 5) -> dict:
    """The cache's own CPU a row, beside a copy of the same pixels in the same run: writing a shard
    (`CacheStore.write_shard`, `rows` images of `side` px in chunks of 64: bench/cache.py's shards)
    and reading it back as a cached epoch does (`reader.read_cached`: 8 chunks mixed at a time, blocks
    of 64 rows), each in copies of the pixels (its CPU over `np.copy`'s; the best of `rounds`)."""
    import numpy as np

    from smlaunch.pipelines.cache.reader import read_cached
    from smlaunch.pipelines.cache.store import CacheStore

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (side, side, 3), np.uint8) for _ in range(rows)]
    store = CacheStore(str(folder))

    def best(run) -> float:
        times = []
        for _ in range(rounds):
            started = time.process_time()
            run()
            times.append(time.process_time() - started)
        return min(times) / rows

    stacked = np.stack(images)
    copy = best(lambda: stacked.copy())
    shards: list[str] = []
    write = best(
        lambda: shards.append(store.write_shard(np.arange(rows), {"image": images, "label": np.zeros(rows)}, 64))
    )
    index = store.shard_index(shards[-1])
    units = [
        [shards[-1], int(a), int(b), int(n), []]
        for a, b, n in zip(index["offsets"][:-1], index["offsets"][1:], index["rows"], strict=True)
    ]
    read = best(lambda: list(read_cached(store.root, list(enumerate(units)), {}, 8, 64, [0, 1, 0])))
    return {"copy_us": 1e6 * copy, "write_us": 1e6 * write, "read_us": 1e6 * read}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-zero", action="store_true", help="leave out the attached pair (min_data_hosts: 0)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cachebench-") as tmp:
        work = Path(tmp)
        io = io_costs(work / "io")
        print(
            f"cache I/O a row of 160 px: a copy {io['copy_us']:.1f} us, a shard's write {io['write_us']:.1f} us, a "
            f"cached read {io['read_us']:.1f} us",
            flush=True,
        )
        shutil.rmtree(work / "io")
        write_images(work / "data", args.images)
        results: dict[bool, list[dict]] = {False: [], True: []}
        for r in range(args.rounds):
            for cache in (False, True) if r % 2 == 0 else (True, False):
                results[cache].append(run_job(work, work / "data", cache))
                time.sleep(PAUSE_S)
        zero = None
        if not args.no_zero:
            from cache_zero import run_attached

            zero = {
                cache: run_attached(work, work / "data", config(work / "data", cache), cache) for cache in (False, True)
            }

    def median(cache: bool, key: str) -> float:
        return statistics.median(x[key] for x in results[cache])

    cpu_ratio = median(True, "cpu_per_row_ms") / median(False, "cpu_per_row_ms")
    # Within the epochs' steps: the epochs after the first against the uncached ones.
    later = statistics.median(statistics.mean(x["epoch_cpu_ms"][1:]) for x in results[True])
    uncached_epoch = statistics.median(statistics.mean(x["epoch_cpu_ms"][1:]) for x in results[False])
    first = statistics.median(x["epoch_cpu_ms"][0] for x in results[True])
    speedup = median(True, "images_per_s") / median(False, "images_per_s")
    print(
        f"uncached: {median(False, 'images_per_s'):.0f} images/s, {median(False, 'cpu_per_row_ms'):.2f} ms data-host "
        f"CPU a row; cached: {median(True, 'images_per_s'):.0f} images/s, {median(True, 'cpu_per_row_ms'):.2f} ms"
    )
    print(
        f"within the epochs' steps: uncached {uncached_epoch:.2f} ms a row an epoch; cached, epoch 1 {first:.2f} ms, "
        f"epochs 2-4 {later:.2f} ms"
    )
    zero_ratio = ""
    if zero is not None:
        print(
            f"attached: uncached on a fixed data host {zero[False]['cpu_per_row_ms']:.2f} ms of its CPU a row; cached "
            f"with min_data_hosts 0 {zero[True]['cpu_per_row_ms']:.2f} ms (sizes {zero[True]['sizes']})"
        )
        zero_ratio = f" cpu_per_row_ratio_zero={zero[True]['cpu_per_row_ms'] / zero[False]['cpu_per_row_ms']:.3f}"
    report_result(
        f"RESULT cache cpu_per_row_ratio={cpu_ratio:.3f} speedup={speedup:.2f} "
        f"epoch_cpu_ratio={later / uncached_epoch:.3f}{zero_ratio} "
        f"write_copies={io['write_us'] / io['copy_us']:.1f} read_copies={io['read_us'] / io['copy_us']:.1f} "
        "goal=cpu_per_row_ratio<=0.35,cpu_per_row_ratio_zero<=0.35,speedup>=2.0"
    )


if __name__ == "__main__":
    main()
