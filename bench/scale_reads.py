"""The 1.28M-file image folder read on one data host of 1, 2 or 4 CPUs (issue 53): how soon the chain
gets its first batch, what the object store holds meanwhile, and a whole pass's images/s against
Ray Data's own `read_binary_files` with the same chain.

Each measurement is one local Ray node of `cpus` CPUs labelled as data host `algo-2` (a simulated
data host: the CPU count is what Ray is told, so 4 on a 2-core machine is 4 slots over 2 cores),
Ray Data's block size as the main job sets it (1 MiB), and configs/hetero.yaml's chain
(decode, random crop to 32 px, flip, blur) in `map_batches` tasks, one slot per CPU, as the job
runs it; batches drawn by the driver as a train worker draws them.

* first batch: from the pass's start to its first chain batch, the channel already listed (the
  job's listing is measured apart, `scale_listing`); the same on a folder of 2 files per class,
  so `extra` is what the folder's size adds. Both, `--first-step-runs` times (3) in turns, the
  best of each. Before each, a whole pass on the small folder, not counted, starts the node's
  workers: a pass dropped after its first batch ends its running tasks' workers (Ray Data's
  iterator shuts its executor down with `force=True`, which kills them), and the next pass's
  first batch then waited for new workers to import torch (on 4 simulated CPUs the same small
  folder's came after 9.1, 0.3 and 9.2 s). A job does not drop its passes, and its warm-up
  starts the chain's workers;
* object store peak: the node's plasma pages ever written by the end of the pass (a high-water
  mark, `store_mark_bytes`);
* images/s of the whole pass, ours against `ray.data.read_binary_files(folder)` (paths to labels
  in a `map_batches`, then the same chain), on the same node and folder, in turns (ours, Ray
  Data's, Ray Data's, ours for `turns=2`), the best of each: a reader's first pass pays the
  folder's cold reads, a fresh node's the chain workers' imports (on 4 simulated CPUs one reader
  made 2,895 images/s first and 3,888 second), and load drifts both ways over a run. These run
  on a fresh node, after one uncounted pass of the small folder, and the store peak is the mark
  after our first pass, before Ray Data's reader wrote any page (on the node of the first
  batches, its 12 passes, six of them dropped, had raised the mark to 300-363 MiB).

The same three measures are taken again on a fresh node with the read fused into the chain's
task (`fused`), an option issue 53 asks to weigh; the job does not use it yet.

`bench/scale.py` calls `read_measures` (`--parts reads` runs this part alone).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
HOST = "algo-2"
BATCH = 64


def store_mark_bytes() -> int:
    """Bytes of the local raylets' plasma files that were ever written (allocated tmpfs pages).

    The object store hands freed space to the next object before it touches new pages, so this is
    a high-water mark: the most the store held at once, give or take fragmentation. (Ray's own
    reading of the store's use needs grpc, which `ray[data,train]` does not bring.)"""
    import glob
    import os
    import subprocess

    total = 0
    for pid in subprocess.run(["pgrep", "-f", "raylet"], capture_output=True, text=True).stdout.split():
        for fd in glob.glob(f"/proc/{pid}/fd/*"):
            try:
                if "plasma" in os.readlink(fd):
                    total += os.stat(fd).st_blocks * 512
            except OSError:
                continue
    return total


def _chain():
    from smlaunch.config import load_config
    from smlaunch.pipelines.ops.chain import Chain

    return Chain(load_config(ROOT / "configs" / "hetero.yaml").pipeline.ops, [HOST], train=True, channel="train")


def _with_chain(ds, cpus: int):
    import ray.data

    return ds.map_batches(
        _chain(),
        batch_size=BATCH,
        batch_format="numpy",
        compute=ray.data.TaskPoolStrategy(size=cpus),
        num_cpus=1,
        label_selector={"ray-subcluster": "data"},
    )


def ours(folder: Path, cpus: int, listing=None):
    """The job's reader over `folder` as a File-mode image folder on HOST, and its listing."""
    from scale import channel_source

    from smlaunch.pipelines.dataset import read_channel

    source = channel_source(f"reads{cpus}", folder, "image_folder", cpus, True, listing)
    return _with_chain(read_channel(source, source.channel), cpus), source.listing


def fused(folder: Path, cpus: int, listing=None):
    """The same read with the chain run inside its tasks: issue 53's option "the read fused into
    the chain's task", measured here before the job is changed. Ray Data fuses a read into the
    next `map_batches` only when both ask the same CPUs, slots and hosts and the map has no
    `batch_size` (with one it keeps them apart: `operator_fusion._can_fuse_map_ops`), and only
    without a split of the read's output (so one block count per task, no `balanced_blocks`).
    The chain then takes each read block whole, and no read block waits in the object store."""
    import ray.data
    from scale import channel_source

    source = channel_source(f"fused{cpus}", folder, "image_folder", cpus, True, listing)
    tasks = sum(source._task_count(host, units, sys.maxsize) for host, units in source.shares().items() if units)
    here = {
        "compute": ray.data.TaskPoolStrategy(size=cpus),
        "num_cpus": 1,
        "label_selector": {"ray-subcluster": "data"},
    }
    ds = ray.data.read_datasource(source, override_num_blocks=tasks, **here)
    return ds.map_batches(_chain(), batch_size=None, batch_format="numpy", **here), source.listing


def ray_binary(folder: Path, cpus: int):
    """Ray Data's own reader of the same files, labelled by class folder, then the same chain."""
    import numpy as np
    import ray.data

    classes = {name: i for i, name in enumerate(sorted(p.name for p in folder.iterdir() if p.is_dir()))}

    def rows(batch):
        paths = batch["path"]
        return {
            "image": batch["bytes"],
            "label": np.array([classes[p.rsplit("/", 2)[-2]] for p in paths]),
            "id": np.arange(len(paths), dtype=np.int64),
        }

    ds = ray.data.read_binary_files(str(folder), include_paths=True, label_selector={"ray-subcluster": "data"})
    return _with_chain(ds.map_batches(rows, batch_format="numpy", label_selector={"ray-subcluster": "data"}), cpus)


def timed_pass(ds, whole: bool = True) -> dict:
    """Seconds to the first batch, rows and seconds of the pass (`whole`), and the store's peak."""
    started = time.perf_counter()
    first, rows = None, 0
    for batch in ds.iter_batches(batch_size=BATCH, batch_format="numpy", prefetch_batches=2):
        if first is None:
            first = time.perf_counter() - started
            if not whole:
                break
        rows += len(batch["label"])
    took = time.perf_counter() - started
    return {
        "first_s": first,
        "rows": rows,
        "s": took,
        "per_s": rows / took,
        "store_peak_mb": store_mark_bytes() / 2**20,
    }


def read_measures(
    large: Path, small: Path, cpus: int, whole: Path | None = None, reader=ours, turns: int = 2, first_turns: int = 3
) -> dict:
    """One data host of `cpus` CPUs: the first batch on both folders, `first_turns` times each in
    turns, the best of each; then, on a fresh node (the store's high-water mark is the node's),
    `turns` whole passes of each reader over the folder `whole` (None: none), in turns, and the
    best of each's images/s, our first pass's store peak. `reader`: `ours` (the job's) or `fused`."""
    out = first_batches(large, small, cpus, reader, first_turns)
    if whole is None:
        return out
    return {**out, **whole_passes(whole, small, cpus, reader, turns)}


def first_batches(large: Path, small: Path, cpus: int, reader, first_turns: int) -> dict:
    """Seconds to the first batch on each folder, `first_turns` times in turns on one node, the best
    of each (`"first"`: the large folder, `"small"`)."""
    from scale import start_ray

    ray = start_ray(cpus)
    try:
        out, firsts = {}, {"small": [], "first": []}
        for turn in range(first_turns):
            for name in ("small", "first") if turn % 2 == 0 else ("first", "small"):
                timed_pass(reader(small, cpus)[0])  # not counted: brings back the workers a dropped pass ended
                firsts[name].append(timed_pass(reader(small if name == "small" else large, cpus)[0], whole=False))
        for name, runs in firsts.items():
            out[name] = min(runs, key=lambda r: r["first_s"])
        runs = ", ".join(
            f"{a['first_s']:.1f}/{b['first_s']:.1f}" for a, b in zip(firsts["first"], firsts["small"], strict=False)
        )
        label = "" if reader is ours else f" ({reader.__name__})"
        print(
            f"  {cpus} CPU data host{label}: first batch {out['first']['first_s']:.1f} s on the large folder, "
            f"{out['small']['first_s']:.1f} s on the small one (best of {first_turns}; large/small by turn: {runs})",
            flush=True,
        )
        return out
    finally:
        ray.shutdown()


def whole_passes(whole: Path, small: Path, cpus: int, reader, turns: int) -> dict:
    from scale import start_ray

    ray = start_ray(cpus)
    label = "" if reader is ours else f" ({reader.__name__})"
    try:
        out = {}
        timed_pass(reader(small, cpus)[0])  # not counted: starts the node's workers
        passes: dict[str, list[dict]] = {"ours": [], "ray": []}
        for turn in range(turns):
            for name in ("ours", "ray") if turn % 2 == 0 else ("ray", "ours"):
                ds = reader(whole, cpus)[0] if name == "ours" else ray_binary(whole, cpus)
                passes[name].append(timed_pass(ds))
                took, who = passes[name][-1], reader.__name__ if name == "ours" else "read_binary_files"
                print(
                    f"  {cpus} CPU data host, a whole pass over {whole} by {who}: {took['rows']:,} rows "
                    f"in {took['s']:.1f} s ({took['per_s']:.0f} images/s), first batch {took['first_s']:.1f} s, "
                    f"object store peak {took['store_peak_mb']:.0f} MiB",
                    flush=True,
                )
        for name, runs in passes.items():
            out[name] = {**max(runs, key=lambda r: r["per_s"]), "store_peak_mb": runs[0]["store_peak_mb"]}
        print(
            f"  {cpus} CPU data host{label}: best of {turns} passes each, ours/theirs "
            f"{out['ours']['per_s'] / out['ray']['per_s']:.2f}",
            flush=True,
        )
        return out
    finally:
        ray.shutdown()
