"""The cache's parts that grow with the data (issue 80), at ImageNet's size: 1,281,167 files.

- `stat_s`: the fingerprint's stat of every listed file (`fingerprint.files_digest`), on a folder of
  1.28M empty files in 1,000 class folders, against `listing_s`, the listing's own walk of it
  (`host_listing.list_on_host`, no stat): what turning the cache on adds to a job's start.
- `seal_s`: rank 0's seal over the shards' index files (1.28M ids in shards of `store.shard_rows`
  rows, 1,280 for the 100 KB rows of bench/cache.py's 160 px images: about 128 MiB each, in chunks
  of 64 rows), in a local folder; `manifest_mb`: the manifest it writes. `seal_s_batch`: the same
  seal over shards of one 64-row batch each (20,019 files: the layout before shards of 128 MiB),
  side by side.
- `plan_s`: a cached epoch's read tasks planned from that manifest (`cache_read_tasks`, over its
  20,019 chunks), which the split coordinator does at every epoch's start.

Estimates at 100M samples: 78k shards of 1,280 rows (the seal's files grow with them: `seal_s`
times 78), 1.56M chunks (the manifest grows with them: `manifest_mb` times 78), and 800 MB of ids
on rank 0 while it seals.

    python bench/cache_scale.py [--files 1281167] [--scratch DIR]

Ends with `RESULT cache_scale stat_s=<...> listing_s=<...> seal_s=<...> seal_s_batch=<...> manifest_mb=<...>
plan_s=<...> goal=stat_s<=30,seal_s<=60,plan_s<=5`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLASSES = 1000
ROWS = 64
ROW_BYTES = 160 * 213 * 3
"""bench/cache.py's prefix output a row: 160 px, 4:3, uint8 RGB."""


def make_files(channel: Path, files: int) -> list[str]:
    rels = []
    for c in range(CLASSES):
        folder = channel / f"n{c:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(c, files, CLASSES):
            name = f"n{c:08d}/img_{i:08d}.JPEG"
            (channel / name).touch()
            rels.append(name)
    return rels


def timed_seal(folder: Path, ids, rows: int) -> tuple[float, float, str]:
    """The seal over `ids` in shards of `rows` rows (chunks of `ROWS`), their index files written as
    a chain's calls write them and the shards empty stand-ins: (seconds, the manifest's MiB, the
    cache's root)."""
    import io

    import numpy as np

    from smlaunch.pipelines.cache.seal import seal
    from smlaunch.pipelines.cache.store import CacheSpec, shard_name

    root = str(folder)
    (folder / "ids").mkdir(parents=True, exist_ok=True)
    (folder / "shards").mkdir(parents=True, exist_ok=True)
    for start in range(0, len(ids), rows):
        part = ids[start : start + rows]
        name = shard_name(part)
        chunks = np.diff(np.r_[np.arange(0, len(part), ROWS), len(part)])
        offsets = np.r_[0, np.cumsum(chunks * ROW_BYTES)]
        out = io.BytesIO()
        np.savez(out, ids=part, offsets=offsets.astype(np.int64), rows=chunks.astype(np.int64))
        (folder / "ids" / f"{name}.npz").write_bytes(out.getvalue())
        (folder / "shards" / f"{name}.arrow").touch()
    t = time.monotonic()
    _, line = seal(CacheSpec(root, 3, "fp"), ids, None)
    took = time.monotonic() - t
    manifest_mb = os.path.getsize(folder / "manifest.json") / 2**20
    print(f"{line}: {took:.1f} s, manifest {manifest_mb:.1f} MiB", flush=True)
    return took, manifest_mb, root


def main() -> None:
    import numpy as np

    from smlaunch.cluster.plan import ChannelPlan
    from smlaunch.pipelines.cache.fingerprint import files_digest
    from smlaunch.pipelines.cache.reader import cache_read_tasks
    from smlaunch.pipelines.cache.store import CacheStore, shard_rows
    from smlaunch.pipelines.sources.host_listing import list_on_host

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_281_167)
    parser.add_argument("--scratch", default=None, help="a folder for the files (default: a temporary one)")
    args = parser.parse_args()
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="cache-scale-"))
    opt_ml = scratch / "opt_ml"
    channel = opt_ml / "input" / "data" / "train"
    started = time.monotonic()
    rels = sorted(make_files(channel, args.files)) if not channel.exists() else None
    if rels is None:
        rels = sorted(str(p.relative_to(channel)) for p in channel.rglob("*.JPEG"))
    print(f"{len(rels)} files ready in {time.monotonic() - started:.0f} s", flush=True)

    t = time.monotonic()
    for _ in list_on_host(str(opt_ml), "train", "image_folder", None):
        pass
    listing_s = time.monotonic() - t
    t = time.monotonic()
    files_digest(channel, rels)
    stat_s = time.monotonic() - t
    print(f"listing {listing_s:.1f} s, the fingerprint's stat {stat_s:.1f} s", flush=True)

    ids = np.random.default_rng(0).permutation(np.arange(len(rels), dtype=np.int64) * 7919 + 13)
    rows = shard_rows(ROWS, len(ids), ROW_BYTES, 64)
    seal_s_batch, _, _ = timed_seal(scratch / "cache" / "batch", ids, ROWS)
    seal_s, manifest_mb, root = timed_seal(scratch / "cache" / "fp", ids, rows)
    store = CacheStore(root)
    plan = ChannelPlan(
        name="train",
        source="s3://bench/train",
        input_mode="File",
        record_format="image_folder",
        hosts=("algo-2",),
        shuffle=True,
        open_units=4,
    )
    import ray.data.datasource  # noqa: F401  # its import is not the planning's cost

    t = time.monotonic()
    tasks = cache_read_tasks(root, store.manifest(), plan, 0, 2, 8, None, None)
    plan_s = time.monotonic() - t
    print(f"{len(tasks)} read tasks planned in {plan_s:.2f} s", flush=True)
    if args.scratch is None:
        shutil.rmtree(scratch, ignore_errors=True)
    report_result(
        f"RESULT cache_scale stat_s={stat_s:.1f} listing_s={listing_s:.1f} seal_s={seal_s:.1f} "
        f"seal_s_batch={seal_s_batch:.1f} manifest_mb={manifest_mb:.1f} plan_s={plan_s:.2f} "
        "goal=stat_s<=30,seal_s<=60,plan_s<=5"
    )


if __name__ == "__main__":
    main()
