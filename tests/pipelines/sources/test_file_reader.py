"""Ray Data over File and FastFile channels on two simulated data hosts: each sample exactly once
under both distributions (sharded files read where they live), FastFile from the local S3
server, corrupt records skipped within the allowance and counted, and failing beyond it."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.pipelines.formats import tfrecord
from smlaunch.pipelines.formats.example import encode_example
from smlaunch.pipelines.sources.fastfile import write_view
from smlaunch.pipelines.sources.objects import ObjectSource, objects_for_host

HOSTS = ("algo-2", "algo-3")


def example(i: int) -> bytes:
    return encode_example({"image/encoded": b"jpeg-%d" % i, "image/class/label": i % 10, "id": i})


def write_shards(folder: Path, count: int, per_shard: int) -> list[tuple[str, int]]:
    folder.mkdir(parents=True, exist_ok=True)
    for shard in range(count):
        tfrecord.write_records(
            folder / f"part-{shard}.tfrecord", [example(i) for i in range(shard * per_shard, (shard + 1) * per_shard)]
        )
    return ObjectSource(str(folder)).list()


def read_ids(ray, channel: ChannelPlan, roots) -> list[int]:
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel

    source = ChannelDatasource(channel, list_channel(channel, roots), roots).share_listing()  # as the job ships it
    ds = ray.data.read_datasource(
        source, label_selector={"sm-host": f"in({','.join(channel.hosts)})"}, override_num_blocks=4
    )
    return sorted(int(i) for batch in ds.iter_batches(batch_size=None) for i in batch["id"])


def deliver(tmp_path: Path, objects, distribution: str) -> dict[str, str]:
    """Each host's /opt/ml with its objects of `tmp_path/src` in `input/data/train`, as File mode delivers them."""
    roots = {h: str(tmp_path / h / "opt/ml") for h in HOSTS}
    for i, host in enumerate(HOSTS):
        target = Path(roots[host]) / "input/data/train"
        target.mkdir(parents=True)
        for rel, _ in objects_for_host(objects, distribution, i, len(HOSTS)):
            (target / rel).hardlink_to(tmp_path / "src" / rel)
    return roots


def plan(name, mode="File", distribution="FullyReplicated", limit=0) -> ChannelPlan:
    return ChannelPlan(
        name=name,
        input_mode=mode,
        record_format="tfrecord",
        source="",
        hosts=HOSTS,
        distribution=distribution,
        max_corrupted_records=limit,
    )


@pytest.mark.ray
@pytest.mark.parametrize("distribution", ["FullyReplicated", "ShardedByS3Key"])
def test_file_mode_each_sample_exactly_once(data_cluster, tmp_path, distribution):
    objects = write_shards(tmp_path / "src", count=5, per_shard=40)
    roots = deliver(tmp_path, objects, distribution)
    assert read_ids(data_cluster, plan("train", distribution=distribution), roots) == list(range(200))


@pytest.mark.ray
@pytest.mark.parametrize("distribution", ["FullyReplicated", "ShardedByS3Key"])
def test_read_tasks_are_bounded_by_the_hosts_cpus_and_ray_still_makes_its_planned_blocks(
    data_cluster, tmp_path, distribution
):
    """One read task per CPU of the hosts that read the share (not one per planned block), while
    the blocks the ranks share stay as many as Ray planned: each sample once, in >= 16 blocks."""
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel

    objects = write_shards(tmp_path / "src", count=12, per_shard=50)
    roots = deliver(tmp_path, objects, distribution)
    channel = plan("train", distribution=distribution)
    listing = list_channel(channel, roots)
    bounded = ChannelDatasource(channel, listing, roots, cpus={"algo-2": 1, "algo-3": 2})
    tasks = bounded.get_read_tasks(200)
    assert len(tasks) == (3 if distribution == "FullyReplicated" else 1 + 2), len(tasks)
    assert len(ChannelDatasource(channel, listing, roots).get_read_tasks(200)) == 12  # unbounded: one per file
    ds = data_cluster.data.read_datasource(
        bounded, label_selector={"sm-host": "in(algo-2,algo-3)"}, override_num_blocks=16
    )
    batches = list(ds.iter_batches(batch_size=None))
    assert sorted(int(i) for batch in batches for i in batch["id"]) == list(range(600))
    assert len(batches) >= 16, len(batches)


@pytest.mark.ray
def test_elastic_hosts_get_blocks_of_a_few_files_each_so_a_host_given_back_ends_soon(data_cluster, tmp_path):
    """`block_units`: a channel of small files is cut into blocks of at most that many files, where
    by bytes it would be a few large blocks (a chain task each: a drained host ran one on for 25 s)."""
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel

    objects = write_shards(tmp_path / "src", count=60, per_shard=2)
    roots = deliver(tmp_path, objects, "FullyReplicated")
    channel = plan("train")
    cpus = {"algo-2": 1, "algo-3": 2}
    by_bytes = ChannelDatasource(channel, list_channel(channel, roots), roots, cpus=cpus, ranks=1)
    small = ChannelDatasource(channel, list_channel(channel, roots), roots, cpus=cpus, ranks=1, block_units=4)
    assert by_bytes.block_count() < 15 <= small.block_count(), (by_bytes.block_count(), small.block_count())
    ds = data_cluster.data.read_datasource(
        small, label_selector={"sm-host": "in(algo-2,algo-3)"}, override_num_blocks=small.block_count()
    )
    blocks = list(ds.iter_batches(batch_size=None))
    assert max(len(b["id"]) for b in blocks) <= 4 * 2, [len(b["id"]) for b in blocks]
    assert sorted(int(i) for b in blocks for i in b["id"]) == list(range(120))


def test_balanced_blocks_give_small_channels_a_multiple_of_the_ranks_and_large_ones_ray_s_count():
    from smlaunch.pipelines.sources.units import balanced_blocks

    mib = 2**20
    for tasks, ranks in ((2, 3), (2, 5), (2, 7), (3, 2), (4, 8), (1, 1)):
        count = balanced_blocks(tasks, 2 * mib, mib, cpus=2, ranks=ranks)
        assert count % ranks == 0 and count % tasks == 0 and count >= 4 * ranks, (tasks, ranks, count)
    # 140 GB over 32 tasks: one block per MiB each, as Ray plans it; no rounding to the ranks.
    assert balanced_blocks(32, 140 * 10**9, mib, cpus=32, ranks=8) == 32 * round(140 * 10**9 / 32 / mib)
    assert balanced_blocks(8, 16 * mib, mib, cpus=2, ranks=1) == 16  # the bench's 20,000 TFRecord rows: no split
    assert balanced_blocks(2, 5 * mib, mib, cpus=2, ranks=1, at_least=169) == 172  # 4 blocks x 43


@pytest.mark.parametrize("cpus", [{"a": 16, "b": 4, "c": 4, "d": 4}, {"a": 1, "b": 3}, {"a": 2}])
@pytest.mark.parametrize("ranks", [1, 3, 4])
def test_ray_s_split_of_the_read_tasks_ends_in_the_block_count_asked_for(cpus, ranks, monkeypatch):
    """Ray's arithmetic (set_read_parallelism: size splits per task, then a split factor up to the
    count asked for) over the tasks the source makes for that count: the count it asked for."""
    import math

    import ray.data

    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import ChannelListing

    monkeypatch.setattr(ray.data.DataContext.get_current(), "target_max_block_size", 2**20)  # a job's 1 MiB
    files = {host: [(f"{host}/part-{n}", 60_000) for n in range(40)] for host in cpus}
    channel = ChannelPlan(
        name="train",
        input_mode="File",
        record_format="tfrecord",
        source="",
        hosts=tuple(cpus),
        distribution="ShardedByS3Key",
    )
    source = ChannelDatasource(channel, ChannelListing(files=files), {h: None for h in cpus}, cpus=cpus, ranks=ranks)
    asked = source.block_count()
    tasks = len(source.get_read_tasks(asked))
    estimated = tasks * round(max(1, source.estimate_inmemory_data_size() / tasks / 2**20))
    made = estimated * math.ceil(asked / estimated) if estimated < asked else estimated
    assert tasks == sum(cpus.values()) and made == asked and made % ranks == 0, (tasks, asked, made)


@pytest.mark.ray
def test_three_ranks_get_equal_shares_of_a_small_channel_read_by_two_tasks(data_cluster, tmp_path):
    """The S3 job's shape: 2 read tasks (1 CPU per host), 3 ranks splitting the rows as Ray
    Train does (`streaming_split(3, equal=False)`): each sample once, the shares within a block."""
    import threading

    from smlaunch.pipelines.dataset import read_channel
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel

    objects = write_shards(tmp_path / "src", count=4, per_shard=359)
    roots = deliver(tmp_path, objects, "ShardedByS3Key")
    channel = plan("train", distribution="ShardedByS3Key")
    source = ChannelDatasource(channel, list_channel(channel, roots), roots, cpus={h: 1 for h in HOSTS}, ranks=3)
    assert len(source.get_read_tasks(source.block_count())) == 2 and source.block_count() % 3 == 0
    shares: list[list[int]] = [[], [], []]

    def consume(rank, split):
        shares[rank] = [int(i) for batch in split.iter_batches(batch_size=None) for i in batch["id"]]

    threads = [
        threading.Thread(target=consume, args=(rank, split))
        for rank, split in enumerate(read_channel(source, channel).streaming_split(3, equal=False))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(i for share in shares for i in share) == list(range(4 * 359))
    sizes = sorted(len(share) for share in shares)
    assert sizes[-1] - sizes[0] <= 4 * 359 // source.block_count() + 1, sizes


@pytest.mark.ray
def test_fastfile_views_over_s3_sharded_each_sample_exactly_once(data_cluster, tmp_path, s3):
    objects = write_shards(tmp_path / "src", count=4, per_shard=25)
    s3.create_bucket(Bucket="fastfile")
    for rel, _ in objects:
        s3.upload_file(str(tmp_path / "src" / rel), "fastfile", f"train/{rel}")
    source = ObjectSource("s3://fastfile/train/", s3.meta.endpoint_url)
    roots = {h: str(tmp_path / h / "opt/ml") for h in HOSTS}
    for i, host in enumerate(HOSTS):
        write_view(Path(roots[host]) / "input/data/ff", source, objects_for_host(source.list(), "ShardedByS3Key", i, 2))
    assert read_ids(data_cluster, plan("ff", "FastFile", "ShardedByS3Key"), roots) == list(range(100))


@pytest.mark.ray
def test_corrupt_records_are_skipped_within_the_allowance_and_counted(data_cluster, tmp_path):
    from smlaunch.errors import DataError
    from smlaunch.pipelines.corrupt import corrupt_summary, start_counter

    root = tmp_path / "algo-2/opt/ml"
    folder = root / "input/data/bad"
    write_shards(folder, count=2, per_shard=20)
    damaged = bytearray((folder / "part-1.tfrecord").read_bytes())
    record = len(tfrecord.encode_record(example(20)))
    for n in (3, 7):  # damage the data of records 23 and 27
        damaged[n * record + 20] ^= 0xFF
    (folder / "part-1.tfrecord").write_bytes(bytes(damaged))
    roots = {h: str(root) for h in HOSTS}

    start_counter({"bad": 2})
    ids = read_ids(data_cluster, plan("bad", limit=2), roots)
    assert ids == [i for i in range(40) if i not in (23, 27)]
    summary = corrupt_summary()["bad"]
    assert summary["skipped"] == 2 and summary["limit"] == 2
    assert f"part-1.tfrecord: bad data CRC in record at byte {3 * record}" in summary["first"][0]
    # A second epoch meets the same two records: they were counted, and are not again.
    assert read_ids(data_cluster, plan("bad", limit=2), roots) == ids
    assert corrupt_summary()["bad"]["skipped"] == 2 and len(corrupt_summary()["bad"]["first"]) == 2

    start_counter({"bad": 1})
    with pytest.raises(Exception) as failure:
        read_ids(data_cluster, plan("bad", limit=1), roots)
    assert "more than max_corrupted_records=1" in str(failure.value)
    assert (
        isinstance(failure.value, DataError)
        or "DataError" in str(type(failure.value))
        or "bad data CRC in record at byte" in str(failure.value)
    )


def test_folder_files_reads_whole_files_whatever_size_they_were_listed_with(tmp_path):
    """One `read` of the listed size is the whole file; a file listed smaller or larger than it
    now is (it changed since the listing) still comes back whole, and so does an empty file."""
    import os

    from smlaunch.pipelines.sources.read_task import folder_files

    (tmp_path / "cls").mkdir()
    wrong = []
    with folder_files(tmp_path) as read:
        for size in (0, 1, 700, 65536, 5 << 20):
            path = tmp_path / "cls" / f"{size}.png"
            path.write_bytes(os.urandom(size))
            for listed in {size, 0, max(size - 1, 0), size + 1, 3}:
                if read(f"cls/{size}.png", listed) != path.read_bytes():
                    wrong.append((size, listed))
    assert wrong == []


def test_packed_units_come_back_as_they_went_in_whatever_the_paths_hold():
    """A read task's units survive pickling unchanged: paths with NUL, newlines and non-ASCII
    characters (an S3 key may hold any), an empty path, row groups or none, listed sizes."""
    import pickle

    from smlaunch.pipelines.sources.units import PackedUnits

    for units in (
        [],
        [("cls/a.png", None, 700), ("cls/b\0c\n\u00e9.png", None, 0), ("", None, 3)],
        [("part-0.parquet", 0, 10), ("part-0.parquet", 3, 10)],
    ):
        packed = pickle.loads(pickle.dumps(PackedUnits(units)))
        assert (list(packed), list(packed), len(packed)) == (units, units, len(units))


def test_ray_s_planning_calls_get_the_real_tasks_count_and_sizes_and_only_the_input_s_call_runs_them():
    """Ray's planning asks for the read tasks without a data context four times (the driver's
    `read_datasource`, the parallelism rule, the metadata guess): those get estimates, as many as
    the tasks that run and of the same total size, and an estimate that were run says so."""
    from smlaunch.pipelines.sources.file_list import FileList
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import ChannelListing

    files = FileList.of([f"n{c:03d}/{n}.JPEG" for c in range(30) for n in range(100)], range(3000))
    channel = ChannelPlan(
        name="validation", input_mode="File", record_format="image_folder", source="", hosts=("a", "b")
    )
    for cpus in ({"a": 2, "b": 3}, None):
        source = ChannelDatasource(channel, ChannelListing(files={"a": files}), {"a": None, "b": None}, cpus=cpus)
        estimated = source.get_read_tasks(8)
        real = source.get_read_tasks(8, data_context=SimpleNamespace(_execution_idx=0))
        assert len(estimated) == len(real) == (5 if cpus else 8)
        assert [t.metadata.size_bytes for t in estimated] == [t.metadata.size_bytes for t in real]  # the same units
        assert source.get_read_tasks(8) is estimated  # asked again: not built again
        with pytest.raises(RuntimeError, match="planning estimate"):
            list(estimated[0]())


def test_sample_places_take_every_host_s_packed_listing_as_it_is():
    from smlaunch.pipelines.places import SamplePlaces
    from smlaunch.pipelines.rows import derived_id
    from smlaunch.pipelines.sources.file_list import FileList
    from smlaunch.pipelines.sources.listing import ChannelListing

    hosts = {h: FileList.of([f"{h}/shard-{n}.tar" for n in range(50)], 10**6) for h in ("algo-2", "algo-3")}
    places = SamplePlaces.of("webdataset", ChannelListing(files=hosts))
    assert places.files.paths == hosts["algo-2"].paths + hosts["algo-3"].paths  # one string, not rejoined
    assert places.find(derived_id("algo-3/shard-7.tar", 4096)) == "algo-3/shard-7.tar sample at byte 4096"
    assert places.find(derived_id("algo-2/shard-0.tar", 0)) == "algo-2/shard-0.tar sample at byte 0"


@pytest.mark.parametrize("cpus", [{"a": 1}, {"a": 2}, {"a": 2, "b": 4}])
def test_a_large_pass_is_cut_into_short_read_tasks_that_share_the_pass_s_open_units_by_readers(cpus):
    """1.28M-file image folders and 64 MiB shards alike: no read task reads more than `TASK_UNITS`
    files or `TASK_BYTES` listed bytes, a small channel keeps one task per CPU,
    and each task interleaves its share of `open_units` as one per reader (CPU), not one per task,
    so a batch still mixes as many files as before."""
    from smlaunch.pipelines.sources.file_list import FileList
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import ChannelListing
    from smlaunch.pipelines.sources.units import TASK_BYTES, TASK_UNITS

    hosts, readers = tuple(cpus), sum(cpus.values())
    for count, size, record_format in (
        (20_000, 700, "image_folder"),
        (100, 64 << 20, "tfrecord"),
        (6, 700, "tfrecord"),
    ):
        rels = [f"n{i % 10:03d}/{i}.JPEG" if record_format == "image_folder" else f"part-{i}" for i in range(count)]
        channel = ChannelPlan(
            name="train",
            input_mode="File",
            record_format=record_format,
            source="",
            hosts=hosts,
            shuffle=True,
            open_units=16,
        )
        source = ChannelDatasource(
            channel,
            ChannelListing(files={hosts[0]: FileList.of(rels, size)}),
            {h: None for h in hosts},
            cpus=cpus,
            ranks=2,
        )
        tasks = source.get_read_tasks(8, data_context=SimpleNamespace(_execution_idx=0))
        units = [t.read_fn.args[2] for t in tasks]
        assert sorted(rel for u in units for rel, _, _ in u) == sorted(rels)  # every file once
        assert max(len(u) for u in units) <= TASK_UNITS and max(int(u.sizes.sum()) for u in units) <= TASK_BYTES, [
            len(u) for u in units
        ]
        even = max(min(readers, count), -(-count // TASK_UNITS), -(-count * size // TASK_BYTES))
        headed = record_format == "image_folder" and even > readers  # short first tasks, one per reader
        assert len(tasks) == even + (readers if headed else 0)
        if headed:  # listed first, two chain batches of the epoch's first files each
            assert [len(u) for u in units[:readers]] == [2 * channel.block_rows] * readers
            assert min(len(u) for u in units[readers:]) > 2 * channel.block_rows
        assert {u.open_units for u in units} == {-(-16 // min(readers, count))}
        assert source.read_slots() == min(readers, count)
        assert len(source.get_read_tasks(8)) == len(tasks)  # Ray's planning estimates count the same tasks


@pytest.mark.ray
def test_a_shared_listing_s_read_tasks_carry_indices_and_read_the_same_units(data_cluster):
    """Shipped by reference (`share_listing`, as the job does), a task's units are indices into its
    share's arrays in the object store, which the task gathers its paths from: the same units, in
    the same order, as the split coordinator packed before, for a fraction of the bytes to put."""
    import ray.cloudpickle

    from smlaunch.pipelines.sources.file_list import FileList
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import ChannelListing
    from smlaunch.pipelines.sources.units import LazyUnits, PackedUnits

    rels = [f"n{i % 100:08d}/n{i % 100:08d}_{i}.JPEG" for i in range(20_000)]
    channel = ChannelPlan(
        name="train",
        input_mode="File",
        record_format="image_folder",
        source="",
        hosts=("a",),
        shuffle=True,
        open_units=16,
    )
    context = SimpleNamespace(_execution_idx=0)
    sources = [
        ChannelDatasource(
            channel, ChannelListing(files={"a": FileList.of(rels, 700)}), {"a": None}, cpus={"a": 2}, ranks=2
        )
        for _ in range(2)
    ]
    eager, lazy = (
        sources[0].get_read_tasks(8, data_context=context),
        sources[1].share_listing().get_read_tasks(8, data_context=context),
    )
    assert {type(t.read_fn.args[2]) for t in eager} == {PackedUnits}
    assert [type(t.read_fn.args[2]) for t in lazy] == [PackedUnits] * 2 + [LazyUnits] * (len(lazy) - 2)  # short: packed
    assert [list(t.read_fn.args[2]) for t in lazy] == [list(t.read_fn.args[2]) for t in eager]
    assert [t.metadata.size_bytes for t in lazy] == [t.metadata.size_bytes for t in eager]
    shipped = ray.cloudpickle.loads(ray.cloudpickle.dumps(lazy[-1].read_fn.args[2]))  # as a read task gets it
    assert (
        list(shipped) == list(eager[-1].read_fn.args[2]) and shipped.open_units == eager[-1].read_fn.args[2].open_units
    )
    size = [sum(len(ray.cloudpickle.dumps(t.read_fn.args[2])) for t in tasks[2:]) for tasks in (eager, lazy)]
    assert size[1] < size[0] / 3, size  # a path of 30 characters against a 4-byte index and an 8-byte place


@pytest.mark.ray
def test_read_tasks_take_no_cpu_and_run_one_per_reading_cpu_at_a_time(data_cluster, tmp_path):
    """The read gives the chain every CPU of Ray's (with one a task, Ray Data reserved a 1-CPU
    host's only CPU for the read, and the chain waited for the reads to fill the object store),
    and runs one task per CPU of the reading hosts at a time instead."""
    from smlaunch.pipelines.dataset import read_channel
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel

    objects = write_shards(tmp_path / "src", count=6, per_shard=10)
    roots = deliver(tmp_path, objects, "FullyReplicated")
    channel = plan("train")
    source = ChannelDatasource(channel, list_channel(channel, roots), roots, cpus={"algo-2": 1, "algo-3": 2}, ranks=1)
    ds = read_channel(source, channel)
    read = ds._logical_plan.dag
    assert read.ray_remote_args.get("num_cpus") == 0 and read.compute.size == source.read_slots() == 3
    assert sorted(int(i) for b in ds.iter_batches(batch_size=None) for i in b["id"]) == list(range(60))
