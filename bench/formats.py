"""Record formats: rows/s our channel readers deliver vs each format's own reader, side by side.

The builtin digits (32 px JPEGs of about 700 bytes, with labels) repeated to `--rows` samples, each
sample a new key or id, are written once per format by the tool users write it with:

- **image_folder**: PIL PNGs in class folders `digit-<label>/<id>.png` (torchvision's layout);
- **webdataset**: `--shards` tar shards by webdataset's `TarWriter` (`<key>.jpg`, `.cls`, `.json`);
- **parquet**: `--shards` files by pyarrow, the image as the Hugging Face `Image` struct
  (`{bytes, path}`), row groups of `--row-group-rows`;
- **tfrecord**: `--shards` shards by the `tfrecord` package's `TFRecordWriter`
  (`image/encoded`, `image/class/label`, `id`).

Each is then read in one pass, alternately by the two sides, on the same files and the same
number of cores (`--cpus`), each side yielding encoded image bytes and labels (nothing decoded):

- **ours**: the product's read path. A local Ray node of `--cpus` CPUs labelled as data host
  `algo-2`; the channel is delivered to it as SageMaker would (`deliver_channels`: File mode,
  hard links) and listed once (`list_channel`, as a run does before building its datasets; not
  timed); each pass is `read_channel(ChannelDatasource(...))` (the host's CPUs and one rank, this
  process, given as `build_datasets` gives a job's), with the host's label selector
  (and on the `DataContext`, as `build_datasets` sets them, the data hosts' selector and the main
  job's block size, `use_block_size(block_bytes(configs/hetero.yaml))`), consumed by
  `iter_batches(batch_size=None)` in this process, counting rows. The clock starts when the
  Dataset is created and stops at the last batch: Ray Data's per-pass overhead (planning,
  scheduling the read tasks, moving blocks through the object store) is included, the cluster's
  start is not (a job starts it once).
- **reference**, in a process of its own with torch imported (forking DataLoader workers out of
  a Ray driver is unsafe), its dataset object built before the clock starts:
  image_folder: torchvision `ImageFolder(root, loader=<the file's bytes>)` in a
  `DataLoader(num_workers=cpus, batch_size=64)` whose collate keeps lists;
  webdataset: `wds.WebDataset(shards, shardshuffle=False).to_tuple("jpg;png", "cls")`, raw bytes, in
  the same DataLoader (webdataset's default `split_by_worker` gives worker i every i-th shard);
  parquet: pyarrow's `read_row_group(columns=[image, label])`, worker i of the same DataLoader
  reading every i-th (file, row group) and yielding its rows (a Hugging Face `Image` struct's
  bytes and the label). Also printed, not compared: pyarrow reading every row group over a
  thread pool of `cpus` threads in one process, the rows left there as Python bytes (the
  ratio's reference until 2026-11-25: rows that never leave the reading process, which no chain
  in other processes can take; BENCHMARKS.md, formats);
  tfrecord: the `tfrecord` package's `tfrecord_loader` (a protobuf parse of each Example), worker i
  of the same DataLoader reading every i-th shard.
- **Pipe mode, webdataset** (`webdataset_pipe_ratio`): ours is a local Pipe agent feeding the
  host's FIFO (`start_pipe_agents`, the shards back to back) read by `PipeChannelDatasource`; the
  reference is `wds.WebDataset("pipe:cat <one tar of the same samples>")` (webdataset cannot read
  tars concatenated with their end blocks) in a DataLoader with one worker: one stream each.

Runs alternate sides (and which goes first); each side keeps its best of `--runs`. To tell the
readers' own cost from Ray Data's, two more figures are printed:

- **reader alone**: best of `--runs` per File-mode format, each side's reader on one core with no Ray and
  no DataLoader workers: ours is a read task's body (`read_task.read_here`) over every file,
  the reference the same loop with `num_workers=0` (webdataset: the first 2 shards on both sides);
- **Ray Data floor**: the same rows already made into 64-row Arrow blocks in the object store,
  handed on by `cpus` read tasks that do nothing else, through `read_datasource` + `iter_batches`,
  with Ray's default planning and with `override_num_blocks=cpus` (with the product's prompt
  budget, `pipelines.budget`, like every pass here).

    python bench/formats.py [--rows 20000] [--shards 8] [--cpus 2] [--runs 5] [--row-group-rows 1000]
                            [--image-px N] [--block-bytes N]

`--image-px 224` makes the records photo-sized (each digit resized with noise, JPEG, about 16 KB;
image folders then hold `.jpg` files): the same comparison where the bytes, not the rows, cost.

Ends with one line per format, `RESULT formats <format>_ratio=<ours / reference rows/s> goal=1.0`
(image_folder, webdataset, parquet, tfrecord, File mode), then `webdataset_pipe_ratio` (Pipe mode).
`--formats` picks some; `<format>_fastfile` (FastFile mode, the same reference) can be added, but
image_folder in FastFile mode takes minutes at 20,000 files (see BENCHMARKS.md).
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
from functools import partial
from pathlib import Path
from types import SimpleNamespace

from format_writers import FORMATS, digits, write_all  # bench/, this script's folder
from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
KINDS = (*FORMATS, "webdataset_pipe")
"""The default run: each format in File mode, then webdataset in Pipe mode."""
HOST = "algo-2"
BATCH = 64
ALONE_WDS_SHARDS = 2
"""webdataset's reader-alone figure reads this many shards (a whole pass takes ~6 s on one core)."""
REFERENCES = {
    "image_folder": "torchvision ImageFolder + DataLoader",
    "webdataset": "wds.WebDataset + DataLoader",
    "parquet": "pyarrow read_row_group + DataLoader",
    "tfrecord": "tfrecord_loader + DataLoader",
    "webdataset_pipe": "wds.WebDataset(pipe:cat) + DataLoader(1 worker)",
}


# --- ours: Ray Data over the channel, on a local node labelled as the data host ------------------


def ours_pass(source, as_run: bool = False, **read_args) -> tuple[float, int, int]:
    """(seconds, rows, batches) of one pass. With `as_run`: read exactly as `build_datasets` reads a
    channel (`read_channel`, no chain); without: a plain `read_datasource` (the floor)."""
    import ray.data

    from smlaunch.pipelines.dataset import read_channel

    started = time.perf_counter()
    if as_run:
        ds = read_channel(source, source.channel)
    else:
        ds = ray.data.read_datasource(source, label_selector={"sm-host": f"in({HOST})"}, **read_args)
    rows = batches = 0
    for batch in ds.iter_batches(batch_size=None):
        rows += len(batch["label"])
        batches += 1
    return time.perf_counter() - started, rows, batches


def ours_alone(source, files: int | None) -> tuple[float, int, int]:
    """Our reader with no Ray: one read task's body over the channel's first `files` files (all: None)."""
    import ray.data

    from smlaunch.pipelines.sources.read_task import read_here

    units = [(rel, group, size) for rel, size, group in source.shares()[None]]  # Units iterate as (rel, bytes, group)
    if files:
        first = sorted({rel for rel, _, _ in units})[:files]
        units = [unit for unit in units if unit[0] in first]
    started = time.perf_counter()
    block_bytes = ray.data.DataContext.get_current().target_max_block_size  # the job's, as a read task has it
    blocks = list(
        read_here(source.channel, HOST, units, source.roots, source.listing.classes, source.num_classes, block_bytes)
    )
    return time.perf_counter() - started, sum(b.num_rows for b in blocks), len(blocks)


def _hand_on(refs):
    import ray

    yield from ray.get(refs)


def premade_blocks(rows, tasks: int):
    """A Datasource whose `tasks` read tasks only hand on 64-row blocks already in the object store."""
    import pyarrow as pa
    import ray
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    refs = [
        ray.put(
            pa.table(
                {
                    "image": pa.array([r[0] for r in part], pa.binary()),
                    "label": pa.array([r[1] for r in part], pa.int64()),
                    "id": pa.array([r[2] for r in part], pa.int64()),
                }
            )
        )
        for part in (rows[i : i + BATCH] for i in range(0, len(rows), BATCH))
    ]

    class PremadeBlocks(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
            return [
                ReadTask(partial(_hand_on, refs[i::tasks]), meta, per_task_row_limit=per_task_row_limit)
                for i in range(tasks)
            ]

    return PremadeBlocks(), len(refs)


# --- the references, in a process of their own ---------------------------------------------------


def file_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def keep_lists(batch):
    """A collate that keeps the batch as (images, labels) lists: nothing stacked or decoded."""
    images, labels = zip(*batch, strict=False)
    return list(images), list(labels)


def _tfrecord_shards():
    import torch

    class TFRecordShards(torch.utils.data.IterableDataset):
        """Worker i of n reads every i-th shard with the `tfrecord` package's loader."""

        def __init__(self, files: list[str]):
            self.files = files

        def __iter__(self):
            from tfrecord.reader import tfrecord_loader

            info = torch.utils.data.get_worker_info()
            index, count = (info.id, info.num_workers) if info else (0, 1)
            description = {"image/encoded": "byte", "image/class/label": "int"}
            for path in self.files[index::count]:
                for features in tfrecord_loader(path, None, description):
                    yield features["image/encoded"], features["image/class/label"]

    return TFRecordShards


def _parquet_row_groups():
    import torch

    class ParquetRowGroups(torch.utils.data.IterableDataset):
        """Worker i of n reads every i-th (file, row group) with pyarrow and yields its rows."""

        def __init__(self, units: list[tuple[str, int]]):
            self.units = units

        def __iter__(self):
            import pyarrow.parquet as pq

            info = torch.utils.data.get_worker_info()
            index, count = (info.id, info.num_workers) if info else (0, 1)
            for path, group in self.units[index::count]:
                table = pq.ParquetFile(path).read_row_group(group, columns=["image", "label"], use_threads=False)
                images = table.column("image").combine_chunks().field("bytes").to_pylist()
                yield from zip(images, table.column("label").to_pylist(), strict=False)

    return ParquetRowGroups


class References:
    """Each reference reader. Its dataset object is built on the first request, outside the clock,
    as a training script builds it once."""

    def __init__(self, cpus: int):
        import torch  # noqa: F401  (imported before any clock starts, as a training script has it)
        import webdataset  # noqa: F401
        from tfrecord.reader import tfrecord_loader  # noqa: F401

        self.cpus = cpus
        self.datasets: dict[tuple, object] = {}

    def dataset(self, kind: str, path: str, files: int | None):
        key = (kind, path, files)
        if key in self.datasets:
            return self.datasets[key]
        import webdataset as wds

        if kind == "image_folder":
            from torchvision.datasets import ImageFolder

            made = ImageFolder(path, loader=file_bytes)
        elif kind == "webdataset":
            shards = sorted(str(p) for p in Path(path).glob("*.tar"))[:files]
            made = wds.WebDataset(shards, shardshuffle=False, empty_check=False).to_tuple("jpg;png", "cls")
        elif kind == "webdataset_pipe":
            made = wds.WebDataset(f"pipe:cat {path}", shardshuffle=False).to_tuple("jpg;png", "cls")
        elif kind == "tfrecord":
            made = _tfrecord_shards()(sorted(str(p) for p in Path(path).iterdir()))
        else:  # parquet: (file, row group) units, in a DataLoader like the others or by pyarrow alone
            import pyarrow.parquet as pq

            units = [
                (str(p), g)
                for p in sorted(Path(path).glob("*.parquet"))
                for g in range(pq.ParquetFile(p).metadata.num_row_groups)
            ]
            made = units if kind == "parquet_in_process" else _parquet_row_groups()(units)
        self.datasets[key] = made
        return made

    def run(self, kind: str, path: str, alone: bool = False, files: int | None = None) -> tuple[float, int, int]:
        """(seconds, rows, batches); `alone`: in this process, no workers or threads."""
        dataset = self.dataset(kind, path, files)
        workers = 0 if alone else 1 if kind == "webdataset_pipe" else self.cpus  # a Pipe stream is one stream
        started = time.perf_counter()
        if kind == "parquet_in_process":
            rows, batches = self.parquet(dataset, 0 if alone else self.cpus)
        else:
            rows, batches = self.loader(dataset, workers)
        return time.perf_counter() - started, rows, batches

    @staticmethod
    def loader(dataset, workers: int) -> tuple[int, int]:
        import torch

        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=workers, collate_fn=keep_lists)
        rows = batches = 0
        for _, labels in loader:
            rows += len(labels)
            batches += 1
        return rows, batches

    @staticmethod
    def parquet(units, threads: int) -> tuple[int, int]:
        from concurrent.futures import ThreadPoolExecutor

        import pyarrow as pa
        import pyarrow.parquet as pq

        pa.set_cpu_count(max(threads, 1))
        pa.set_io_thread_count(max(threads, 1))

        def read(unit):
            path, group = unit
            return pq.ParquetFile(path).read_row_group(group, columns=["image", "label"], use_threads=False)

        rows = batches = 0
        with ThreadPoolExecutor(max(threads, 1)) as pool:
            for table in pool.map(read, units) if threads else map(read, units):
                for batch in table.to_batches(BATCH):
                    images = batch.column(0).field("bytes").to_pylist()
                    labels = batch.column(1).to_numpy()
                    rows += min(len(images), len(labels))
                    batches += 1
        return rows, batches


def serve_references(cpus: int) -> None:
    """Answer `{"kind", "path", "alone", "files"}` lines on stdin with `[seconds, rows, batches]` lines."""
    references = References(cpus)
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        print(json.dumps(references.run(**json.loads(line))), flush=True)


class ReferenceProcess:
    def __init__(self, cpus: int):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--reference-server", "--cpus", str(cpus)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if json.loads(self.proc.stdout.readline() or "null") != "ready":
            raise RuntimeError("the reference process did not start")

    def run(self, kind: str, path: Path, alone: bool = False, files: int | None = None) -> tuple[float, int, int]:
        self.proc.stdin.write(json.dumps({"kind": kind, "path": str(path), "alone": alone, "files": files}) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the reference process died reading {kind}")
        return tuple(json.loads(answer))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


# --- the run ----------------------------------------------------------------------------------------


def side_by_side(name: str, runs: int, ours, reference) -> dict[str, tuple[float, int, int]]:
    """Best (seconds, rows, batches) of each side over `runs` alternating runs, each printed."""
    results: dict[str, list[tuple[float, int, int]]] = {"ours": [], "reference": []}
    for n in range(runs):
        for side in ("ours", "reference") if n % 2 == 0 else ("reference", "ours"):
            took, rows, batches = ours() if side == "ours" else reference()
            results[side].append((took, rows, batches))
            print(
                f"  {name:21s} run {n + 1} {side:9s} {took:6.2f} s  {rows} rows in {batches:4d} batches  "
                f"{rows / took:9.0f} rows/s",
                flush=True,
            )
    counts = {rows for side in results.values() for _, rows, _ in side}
    if len(counts) != 1:
        raise RuntimeError(f"{name}: the two sides delivered different row counts: {sorted(counts)}")
    return {side: min(times) for side, times in results.items()}


def channel_kind(kind: str) -> tuple[str, str]:
    """(record format, input mode) of a `--formats` entry."""
    for suffix, mode in (("_pipe", "Pipe"), ("_fastfile", "FastFile")):
        if kind.endswith(suffix):
            return kind.removesuffix(suffix), mode
    return kind, "File"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="samples per format")
    parser.add_argument("--shards", type=int, default=8, help="files of the webdataset, parquet and tfrecord layouts")
    parser.add_argument("--row-group-rows", type=int, default=1000, help="rows per Parquet row group")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the data node (ours) and workers (reference)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--image-px",
        type=int,
        default=None,
        help="photo-sized records: digits resized to this many px with noise, JPEG (image "
        "folders get .jpg files); default: the 32 px digits (about 700 bytes)",
    )
    parser.add_argument(
        "--block-bytes",
        type=int,
        default=None,
        help="Ray Data's target block size for ours; default: the main job's (block_bytes of "
        "configs/hetero.yaml, as a run sets it); 0: Ray's own default (128 MiB)",
    )
    parser.add_argument(
        "--formats", nargs="+", default=list(KINDS), choices=[*KINDS, *(f"{fmt}_fastfile" for fmt in FORMATS)]
    )
    parser.add_argument("--reference-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_server:
        serve_references(args.cpus)
        return 0

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from smlaunch.cluster.plan import channel_plan
    from smlaunch.config import load_config
    from smlaunch.config.channel import ChannelConfig
    from smlaunch.pipelines.budget import budget_from_first_step
    from smlaunch.pipelines.dataset import block_bytes, use_block_size
    from smlaunch.pipelines.sources.channels import deliver_channels, start_pipe_agents
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel
    from smlaunch.pipelines.sources.pipe_reader import PipeChannelDatasource

    best: dict[str, dict[str, tuple[float, int, int]]] = {}
    alone: dict[str, dict[str, float]] = {}
    floors: dict[str, float] = {}
    in_process: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        rows = digits(args.rows, args.image_px)
        paths = write_all(tmp / "source", rows, args)
        opt_ml = str(tmp / HOST / "opt" / "ml")
        roots = {HOST: opt_ml}
        channels = {}
        for kind in args.formats:
            fmt, mode = channel_kind(kind)
            channels[kind] = channel_plan(
                kind.replace("_", ""),
                ChannelConfig(source=str(paths[fmt]), record_format=fmt, input_mode=mode),
                (HOST,),
                block_rows=BATCH,
            )
        plan = SimpleNamespace(
            channels=tuple(channels.values()), host=lambda name: SimpleNamespace(name=name, opt_ml=opt_ml)
        )
        deliver_channels(plan)
        reference = ReferenceProcess(args.cpus)
        started = time.perf_counter()
        ray.init(
            address="local",
            num_cpus=args.cpus,
            labels={"ray-subcluster": "data", "sm-host": HOST},
            include_dashboard=False,
            object_store_memory=512 * 2**20,
            namespace="smlaunch-bench",
            log_to_driver=False,
        )
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        # As `build_datasets` sets them: without a selector, Ray Data gives the read a budget of one
        # task; the block size is the main job's (configs/hetero.yaml).
        context.execution_options.label_selector = {"ray-subcluster": "data"}
        job_blocks = block_bytes(load_config(ROOT / "configs" / "hetero.yaml"))
        use_block_size(context, job_blocks if args.block_bytes is None else args.block_bytes)
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # no "Starting execution" lines per pass
        budget_from_first_step()  # what the product's datasources install before their first pass
        print(
            f"Ray node up ({args.cpus} CPUs, labelled sm-host={HOST}) in {time.perf_counter() - started:.1f} s; "
            f"machine: {os.cpu_count()} CPUs; Ray Data's target block size "
            f"{context.target_max_block_size / 2**20:g} MiB",
            flush=True,
        )
        agents = start_pipe_agents(plan, seed=0) if any(c.input_mode == "Pipe" for c in channels.values()) else []
        try:
            floor_source, blocks = premade_blocks(rows, args.cpus)
            ours_pass(floor_source)  # starts the workers
            for label, read_args in (
                ("default planning", {}),
                (f"override_num_blocks={args.cpus}", {"override_num_blocks": args.cpus}),
            ):
                took, count, batches = min(ours_pass(floor_source, **read_args) for _ in range(args.runs))
                floors[label] = count / took
                print(
                    f"Ray Data floor, {label}: {blocks} premade blocks of {BATCH} rows handed on by {args.cpus} "
                    f"read tasks: {took:.2f} s, {count / took:.0f} rows/s in {batches} batches",
                    flush=True,
                )
            for kind, channel in channels.items():
                fmt = channel.record_format
                if channel.input_mode == "Pipe":
                    source = PipeChannelDatasource(channel, roots, timeout_s=60, num_classes=10)
                    ref_kind, ref_path = kind, paths["combined"]
                else:
                    started = time.perf_counter()
                    listing = list_channel(channel, roots)
                    print(
                        f"{kind}: listed {sum(len(f) for f in listing.files.values())} files on {HOST} in "
                        f"{time.perf_counter() - started:.2f} s (once per run, not timed)",
                        flush=True,
                    )
                    source = ChannelDatasource(channel, listing, roots, num_classes=10, cpus={HOST: args.cpus}, ranks=1)
                    ref_kind, ref_path = fmt, paths[fmt]
                best[kind] = side_by_side(
                    kind, args.runs, partial(ours_pass, source, True), partial(reference.run, ref_kind, ref_path)
                )
                if channel.input_mode == "File":
                    files = ALONE_WDS_SHARDS if fmt == "webdataset" else None
                    mine = min(ours_alone(source, files) for _ in range(args.runs))
                    theirs = min(reference.run(fmt, ref_path, alone=True, files=files) for _ in range(args.runs))
                    if mine[1] != theirs[1]:
                        raise RuntimeError(f"{kind} alone: {mine[1]} rows (ours) vs {theirs[1]} (reference)")
                    alone[kind] = {"ours": mine[1] / mine[0], "reference": theirs[1] / theirs[0]}
                    print(
                        f"  {kind:21s} reader alone, one core, no Ray or workers ({mine[1]} rows): "
                        f"ours {alone[kind]['ours']:.0f} rows/s, reference {alone[kind]['reference']:.0f} rows/s",
                        flush=True,
                    )
                if fmt == "parquet" and channel.input_mode == "File":
                    took, count, _ = min(reference.run("parquet_in_process", ref_path) for _ in range(args.runs))
                    in_process[kind] = count / took
                    print(
                        f"  {kind:21s} pyarrow in one process ({args.cpus} threads, rows left in that process): "
                        f"{in_process[kind]:.0f} rows/s",
                        flush=True,
                    )
        finally:
            for agent in agents:
                agent.stop()
            reference.close()
            ray.shutdown()

    print(
        f"\nbest of {args.runs}, {args.rows} rows, {args.cpus} CPUs per side, machine: {os.cpu_count()} CPUs; "
        "Ray Data floor " + ", ".join(f"{rate:.0f} rows/s ({label})" for label, rate in floors.items())
    )
    print(
        f"{'format':17s} {'mode':8s} {'ours rows/s':>11s} {'reference':>10s} {'ratio':>5s}   "
        f"{'alone: ours':>11s} {'reference':>10s}  reference reader"
    )
    ratios = {}
    for kind, sides in best.items():
        rate = {side: rows / took for side, (took, rows, _) in sides.items()}
        ratios[kind] = rate["ours"] / rate["reference"]
        mine, theirs = (f"{alone[kind][side]:.0f}" if kind in alone else "-" for side in ("ours", "reference"))
        print(
            f"{kind:17s} {channels[kind].input_mode:8s} {rate['ours']:11.0f} {rate['reference']:10.0f} "
            f"{ratios[kind]:5.2f}   {mine:>11s} {theirs:>10s}  {REFERENCES[kind.removesuffix('_fastfile')]}"
        )
    for kind, rate in in_process.items():
        print(
            f"{kind}: pyarrow reading into its own process ({args.cpus} threads) {rate:.0f} rows/s, "
            f"{best[kind]['ours'][1] / best[kind]['ours'][0] / rate:.2f} of it (rows that never leave the "
            "reading process, so no chain in other processes can take them)"
        )
    for kind, ratio in ratios.items():
        report_result(f"RESULT formats {kind}_ratio={ratio:.2f} goal=1.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
