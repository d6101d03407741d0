"""Listing at ImageNet scale: our channel listing vs torchvision ImageFolder's scan, same folder.

Builds (once, cached in `--scratch`) a 1000-class ImageNet-layout folder of 1,281,167 small
JPEGs (one 32 px JPEG's bytes in every file: the listing never decodes them), then in one run:

- **ImageFolder**: `torchvision.datasets.ImageFolder(root)` constructed (its `make_dataset` scan:
  class folders, extension filter, (path, class) samples), best of `--runs` after one warm-up;
- **ours**: the listing a job runs before building its datasets (`listing.list_channel`) on a
  real local Ray node labelled as data host `algo-2`, whose File channel `train` is delivered as
  a local run delivers it (`deliver_channels`: the folder itself, linked), best of `--runs` after
  one warm-up; the clock covers the Ray task, moving its answer to the driver and the class check;
- **driver RSS**: this process's resident memory growth over the listing it keeps (the driver
  holds it until the job ends), measured after a `gc.collect()`.

    python bench/scale_listing.py --scratch /tmp/scale-scratch [--files 1281167] [--classes 1000] [--runs 3]
                                  [--s3-objects 100000]

`--s3-objects N` also seeds N objects into the local S3 server and times listing their prefix
(pagination, 1,000 keys a page; seeding 100,000 takes minutes, so it is off by default).

Prints `RESULT scale_listing listing_ratio=<ours/ImageFolder> listing_rss_mb=<MB> goal=...`.
`measure_listing(scratch, files, classes)` returns the same figures (bench/scale.py calls it).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
GOAL = "listing_ratio<=1.5,listing_rss_mb<=1500"


def tiny_jpeg() -> bytes:
    """One valid 32x32 JPEG (about 700 bytes, like the builtin digits)."""
    import io

    from PIL import Image

    image = Image.new("RGB", (32, 32))
    for x in range(32):
        for y in range(32):
            image.putpixel((x, y), (x * 8, y * 8, (x * y) % 256))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=75)
    return out.getvalue()


def build_folder(scratch: Path, files: int, classes: int) -> Path:
    """`scratch/imagenet-<files>-<classes>/train/<class>/<image>.JPEG`, made once: a `.complete`
    marker says a previous build finished (a half-built folder is finished, not trusted)."""
    top = scratch / f"imagenet-{files}-{classes}"
    root = top / "train"
    if (top / ".complete").exists():
        return root
    data = tiny_jpeg()
    started = time.monotonic()
    written = 0
    for c in range(classes):
        name = f"n{c:08d}"
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        count = files // classes + (1 if c < files % classes else 0)
        have = len(os.listdir(folder))
        for i in range(have, count):
            fd = os.open(folder / f"{name}_{i}.JPEG", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, data)
            os.close(fd)
        written += count
        if c % 50 == 49 or c == classes - 1:
            print(
                f"building {root}: {written:,}/{files:,} files, {written * len(data) / 1e6:,.0f} MB "
                f"[{time.monotonic() - started:.0f} s]",
                flush=True,
            )
    (top / ".complete").write_text(f"{files} {classes}\n")
    return root


IMAGEFOLDER_SCAN = """
import sys, time
from torchvision.datasets import ImageFolder
root, runs = sys.argv[1], int(sys.argv[2])
ImageFolder(root)  # warm-up: the folder's entries in the page cache, torchvision imported
times = []
for _ in range(runs):
    started = time.perf_counter()
    dataset = ImageFolder(root)
    times.append(time.perf_counter() - started)
    del dataset
print(min(times))
"""


def imagefolder_seconds(root: Path, runs: int) -> float:
    """torchvision's scan, best of `runs` after a warm-up, in a process of its own (torch stays
    out of the Ray driver, and its 1.28 million (path, class) tuples out of the RSS measured)."""
    out = subprocess.run(
        [sys.executable, "-c", IMAGEFOLDER_SCAN, str(root), str(runs)], check=True, capture_output=True, text=True
    ).stdout
    return float(out.split()[0])


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


class PeakRss:
    """This process's largest resident set while the block runs (sampled every 5 ms)."""

    def __enter__(self):
        import threading

        self.peak, self._stop = rss_mb(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_mb())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())


def measure_listing(scratch: Path, files: int = 1_281_167, classes: int = 1000, runs: int = 3) -> dict:
    """Build (or reuse) the folder, then time ImageFolder's scan and our listing of it, warm, and
    our driver's memory. Returns `listing_ratio` (ours / ImageFolder), `listing_rss_mb` (the
    driver's peak resident set while listing and holding the listing), `listing_rss_growth_mb`
    (that peak over the driver's before the listing), `imagefolder_s`, `listing_s`, `files`."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from smlaunch.cluster.plan import ChannelPlan
    from smlaunch.pipelines.sources.channels import channel_dir, link_folder
    from smlaunch.pipelines.sources.listing import list_channel

    scratch = Path(scratch)
    root = build_folder(scratch, files, classes)
    theirs = imagefolder_seconds(root, runs)
    print(f"ImageFolder scan of {root}: {theirs:.2f} s (best of {runs}, warm)", flush=True)
    opt_ml = scratch / "algo-2" / "opt" / "ml"
    link_folder(root.resolve(), channel_dir(opt_ml, "train"))  # what a local run's File channel is
    channel = ChannelPlan(
        name="train", input_mode="File", record_format="image_folder", source=str(root), hosts=("algo-2",)
    )
    roots = {"algo-2": str(opt_ml)}
    ray.init(
        address="local",
        num_cpus=2,
        labels={"ray-subcluster": "data", "sm-host": "algo-2"},
        include_dashboard=False,
        object_store_memory=512 * 2**20,
        namespace="smlaunch-bench",
        log_to_driver=False,
    )
    try:
        list_channel(channel, roots)  # warm-up: a worker started, the folder in the page cache
        gc.collect()
        before = rss_mb()
        times, listing = [], None
        with PeakRss() as peak:
            for _ in range(runs):
                listing = None
                gc.collect()
                started = time.perf_counter()
                listing = list_channel(channel, roots)
                times.append(time.perf_counter() - started)
        listed = sum(len(f) for f in listing.files.values())
    finally:
        ray.shutdown()
    ours = min(times)
    print(
        f"our listing (list_channel on a local Ray node): {listed:,} files, {len(listing.classes)} classes in "
        f"{ours:.2f} s (best of {runs}); driver RSS {before:.0f} MB before, peak {peak.peak:.0f} MB",
        flush=True,
    )
    return {
        "listing_ratio": round(ours / theirs, 3),
        "listing_rss_mb": round(peak.peak),
        "listing_rss_growth_mb": round(peak.peak - before),
        "imagefolder_s": round(theirs, 3),
        "listing_s": round(ours, 3),
        "files": listed,
    }


def measure_s3_listing(objects: int = 100_000, threads: int = 16) -> dict:
    """Seed `objects` one-byte objects into the local S3 server (moto, in a process of its own),
    then time `ObjectSource.list()` of their prefix, page after page of 1,000 keys, as a run
    lists an `s3://` channel. Seeding is slow (moto stores each PUT: about 230/s here)."""
    from concurrent.futures import ThreadPoolExecutor

    from smlaunch.pipelines.sources.local_s3 import LocalS3
    from smlaunch.pipelines.sources.objects import ObjectSource

    with LocalS3() as server:
        client = server.client()
        client.create_bucket(Bucket="scale-listing")
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(
                pool.map(
                    lambda i: client.put_object(
                        Bucket="scale-listing", Key=f"train/n{i % 1000:08d}/{i}.JPEG", Body=b"x"
                    ),
                    range(objects),
                )
            )
        seeded = time.perf_counter() - started
        for key, value in LocalS3.environment().items():
            if value:
                os.environ[key] = value
        started = time.perf_counter()
        listed = ObjectSource("s3://scale-listing/train/", server.endpoint_url).list()
        took = time.perf_counter() - started
    print(
        f"local S3 server: seeded {objects:,} objects in {seeded:.0f} s; listed {len(listed):,} "
        f"({-(-objects // 1000)} pages) in {took:.1f} s",
        flush=True,
    )
    return {"s3_objects": len(listed), "s3_listing_s": round(took, 2), "s3_seed_s": round(seeded, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--files", type=int, default=1_281_167)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--s3-objects",
        type=int,
        default=0,
        help="also list an S3 prefix of this many objects on the local S3 server (100000: ~8 min)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.s3_objects:
        report_result(
            f"RESULT scale_s3_listing {' '.join(f'{k}={v}' for k, v in measure_s3_listing(args.s3_objects).items())}"
            " goal=none"
        )
    result = measure_listing(args.scratch, args.files, args.classes, args.runs)
    report_result(
        f"RESULT scale_listing listing_ratio={result['listing_ratio']} listing_rss_mb={result['listing_rss_mb']} "
        f"goal={GOAL}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
