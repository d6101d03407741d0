"""Ray Data over File and FastFile channels on two simulated data hosts: each sample exactly once
under both distributions (sharded files read where they live), FastFile from the local S3
server, corrupt records skipped within the allowance and counted, and failing beyond it."""

from pathlib import Path

import pytest

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.pipelines.sources.fastfile import write_view
from smlaunch.pipelines.formats import tfrecord
from smlaunch.pipelines.formats.example import encode_example
from smlaunch.pipelines.sources.objects import ObjectSource, objects_for_host

HOSTS = ("algo-2", "algo-3")


def example(i: int) -> bytes:
    return encode_example({"image/encoded": b"jpeg-%d" % i, "image/class/label": i % 10, "id": i})


def write_shards(folder: Path, count: int, per_shard: int) -> list[tuple[str, int]]:
    folder.mkdir(parents=True, exist_ok=True)
    for shard in range(count):
        tfrecord.write_records(folder / f"part-{shard}.tfrecord",
                               [example(i) for i in range(shard * per_shard, (shard + 1) * per_shard)])
    return ObjectSource(str(folder)).list()


def read_ids(ray, channel: ChannelPlan, roots) -> list[int]:
    from smlaunch.pipelines.sources.listing import list_channel
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource

    source = ChannelDatasource(channel, list_channel(channel, roots), roots)
    ds = ray.data.read_datasource(source, label_selector={"sm-host": f"in({','.join(channel.hosts)})"},
                                  override_num_blocks=4)
    return sorted(int(i) for batch in ds.iter_batches(batch_size=None) for i in batch["id"])


def plan(name, mode="File", distribution="FullyReplicated", limit=0) -> ChannelPlan:
    return ChannelPlan(name=name, input_mode=mode, record_format="tfrecord", source="", hosts=HOSTS,
                       distribution=distribution, max_corrupted_records=limit)


@pytest.mark.ray
@pytest.mark.parametrize("distribution", ["FullyReplicated", "ShardedByS3Key"])
def test_file_mode_each_sample_exactly_once(data_cluster, tmp_path, distribution):
    objects = write_shards(tmp_path / "src", count=5, per_shard=40)
    roots = {h: str(tmp_path / h / "opt/ml") for h in HOSTS}
    for i, host in enumerate(HOSTS):
        target = Path(roots[host]) / "input/data/train"
        target.mkdir(parents=True)
        for rel, _ in objects_for_host(objects, distribution, i, len(HOSTS)):
            (target / rel).hardlink_to(tmp_path / "src" / rel)
    assert read_ids(data_cluster, plan("train", distribution=distribution), roots) == list(range(200))


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
    assert isinstance(failure.value, DataError) or "DataError" in str(type(failure.value)) or \
        "bad data CRC in record at byte" in str(failure.value)
