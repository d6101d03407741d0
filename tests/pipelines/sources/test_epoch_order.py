"""The train channel's order on the 3-node cluster, through the real read tasks: a new order each
epoch, the same one on a retry, samples of many class-sorted shards mixed in every stretch of
rows, and a resumed epoch that reads only what the ranks had not drawn (done files not opened)."""

from types import SimpleNamespace

import numpy as np
import pytest
from test_file_reader import HOSTS, deliver

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.pipelines.order import LAST, labels_per_batch
from smlaunch.pipelines.position import EpochPosition
from smlaunch.pipelines.sources.objects import ObjectSource

SHARDS, PER_SHARD = 10, 30


def class_sorted_channel(tmp_path, open_units: int):
    """Ten TFRecord shards, shard k holding only class k, as a converter walking class folders writes them."""
    from smlaunch.pipelines.formats import tfrecord
    from smlaunch.pipelines.formats.example import encode_example
    from smlaunch.pipelines.sources.listing import list_channel

    src = tmp_path / "src"
    src.mkdir()
    for shard in range(SHARDS):
        tfrecord.write_records(
            src / f"part-{shard}.tfrecord",
            [
                encode_example({"image/encoded": b"jpeg-%d" % i, "image/class/label": shard, "id": i})
                for i in range(shard * PER_SHARD, (shard + 1) * PER_SHARD)
            ],
        )
    roots = deliver(tmp_path, ObjectSource(str(src)).list(), "FullyReplicated")
    channel = ChannelPlan(
        name="train",
        input_mode="File",
        record_format="tfrecord",
        source="",
        hosts=HOSTS,
        shuffle=True,
        open_units=open_units,
    )
    return channel, list_channel(channel, roots), roots


def read_pass(ray, source, epoch: int) -> list[list[tuple[int, int, int]]]:
    """Each read task's rows (id, label, pos) in the order it yields them, for `epoch`."""
    tasks = source.get_read_tasks(4, data_context=SimpleNamespace(_execution_idx=epoch - 1))
    run = ray.remote(lambda task: [b.select(["id", "label", "pos"]).to_pylist() for b in task()])
    done = ray.get([run.options(label_selector={"sm-host": HOSTS[i % 2]}).remote(t) for i, t in enumerate(tasks)])
    return [[(r["id"], r["label"], r["pos"]) for block in blocks for r in block] for blocks in done]


@pytest.mark.ray
def test_each_epoch_reads_a_new_mixed_order_and_a_retry_the_same(data_cluster, tmp_path):
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource

    channel, listing, roots = class_sorted_channel(tmp_path, open_units=16)  # 2 tasks: 5 shards open each
    source = ChannelDatasource(channel, listing, roots, seed=3, cpus={h: 1 for h in HOSTS})
    first, retry, second = (read_pass(data_cluster, source, e) for e in (1, 1, 2))
    assert first == retry  # a retried read task (or a resumed job) reads the same rows in the same order
    flat = [row for task in first for row in task]
    assert sorted(i for i, _, _ in flat) == list(range(SHARDS * PER_SHARD))  # each sample once
    assert len({p for _, _, p in flat}) == len(flat)  # positions tell every row apart
    assert [i for t in second for i, _, _ in t] != [i for i, _, _ in flat]  # the next epoch: another order
    # Each task interleaves its shards: any 8 consecutive rows of a task span several classes,
    # where read shard after shard they would be one class.
    for task in first:
        assert labels_per_batch(np.array([label for _, label, _ in task]), 8) >= 4, task
    sequential = ChannelDatasource(
        ChannelPlan(**{**channel.__dict__, "open_units": 1}), listing, roots, seed=3, cpus={h: 1 for h in HOSTS}
    )
    for task in read_pass(data_cluster, sequential, 1):
        assert labels_per_batch(np.array([label for _, label, _ in task]), 8) < 1.5


@pytest.mark.ray
def test_a_resumed_epoch_reads_exactly_what_was_not_drawn(data_cluster, tmp_path):
    from smlaunch.cluster.run_relay import set_order, start_relay
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource

    channel, listing, roots = class_sorted_channel(tmp_path, open_units=4)
    source = ChannelDatasource(channel, listing, roots, seed=5, cpus={h: 1 for h in HOSTS})
    rows = [row for task in read_pass(data_cluster, source, 2) for row in task]
    # The ranks drew some whole shards and parts of others, in an order of their own.
    rng = np.random.default_rng(0)
    drawn = [row for row in rows if (row[2] >> 32) < 3 or rng.random() < 0.4]
    position = EpochPosition(2)
    position.merge(np.array([p for _, _, p in drawn], np.int64))
    assert position.units_done >= 3 and position.partial
    relay = start_relay()
    try:
        set_order("train", 1, position.state())  # one epoch done before this group; the second resumed
        resumed = ChannelDatasource(channel, listing, roots, seed=5, cpus={h: 1 for h in HOSTS})
        tasks = resumed.get_read_tasks(4, data_context=SimpleNamespace(_execution_idx=0))
        opened = {rel for t in tasks for rel, _, _ in t.read_fn.args[2]}  # each task's PackedUnits
        assert len(opened) == SHARDS - position.units_done  # done shards are not even opened
        again = [row for task in read_pass(data_cluster, resumed, 1) for row in task]
    finally:
        data_cluster.kill(relay)
    assert sorted(i for i, _, _ in drawn + again) == list(range(SHARDS * PER_SHARD))  # each sample once
    assert {p & ~LAST for _, _, p in again}.isdisjoint({p & ~LAST for _, _, p in drawn})
    position.merge(np.array([p for _, _, p in again], np.int64))
    assert (position.units_done, position.partial, position.duplicates) == (SHARDS, {}, 0)


def write_unlabelled_ids_channel(tmp_path, fmt: str):
    """SHARDS shards of PER_SHARD samples without ids (ids derived from each sample's place), in `fmt`."""
    import io
    import tarfile

    from smlaunch.pipelines.formats import tfrecord
    from smlaunch.pipelines.formats.example import encode_example
    from smlaunch.pipelines.sources.listing import list_channel

    src = tmp_path / "src"
    src.mkdir()
    for shard in range(SHARDS):
        images = [b"jpeg-%d-%d" % (shard, i) * (1 + i % 3) for i in range(PER_SHARD)]
        if fmt == "tfrecord":
            tfrecord.write_records(
                src / f"part-{shard}.tfrecord",
                [encode_example({"image/encoded": image, "image/class/label": shard}) for image in images],
            )
            continue
        with tarfile.open(src / f"part-{shard}.tar", "w") as tar:
            for i, image in enumerate(images):
                for ext, data in (("jpg", image), ("cls", str(shard).encode())):
                    info = tarfile.TarInfo(f"s{shard}_{i:03d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    roots = deliver(tmp_path, ObjectSource(str(src)).list(), "FullyReplicated")
    fields = {} if fmt == "tfrecord" else {"fields": ["jpg", "cls", ""]}
    channel = ChannelPlan(
        name="train", input_mode="File", record_format=fmt, source="", hosts=HOSTS, shuffle=True, open_units=4, **fields
    )
    return channel, list_channel(channel, roots), roots


@pytest.mark.ray
@pytest.mark.parametrize("fmt", ["tfrecord", "webdataset"])
def test_a_resumed_epoch_enters_a_partly_drawn_shard_past_its_drawn_head(data_cluster, tmp_path, fmt):
    """The drawn head of a shard in flight is not read again: its bytes are overwritten with zeros
    before the resume (the channel allows no corrupt record, so reading them would fail the read),
    and the resumed read still delivers exactly the rest, with the ids the first read gave them."""
    from smlaunch.cluster.run_relay import set_order, start_relay
    from smlaunch.pipelines.order import split_seek
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource

    channel, listing, roots = write_unlabelled_ids_channel(tmp_path, fmt)
    source = ChannelDatasource(channel, listing, roots, seed=5, cpus={h: 1 for h in HOSTS})
    tasks = source.get_read_tasks(4, data_context=SimpleNamespace(_execution_idx=1))
    run = data_cluster.remote(lambda task: [b.select(["id", "pos", "seek"]).to_pylist() for b in task()])
    done = data_cluster.get(
        [run.options(label_selector={"sm-host": HOSTS[i % 2]}).remote(t) for i, t in enumerate(tasks)]
    )
    per_task = [[(r["id"], r["pos"], r["seek"]) for block in blocks for r in block] for blocks in done]
    # The ranks drew each task's first 60 % of rows, and a scattered 40 % of the next 20 % (a shuffle buffer's).
    rng = np.random.default_rng(0)
    drawn = [
        row
        for rows in per_task
        for k, row in enumerate(rows)
        if k < 0.6 * len(rows) or (k < 0.8 * len(rows) and rng.random() < 0.4)
    ]
    position = EpochPosition(2)
    position.merge(np.array([[p for _, p, _ in drawn], [s for _, _, s in drawn]], np.int64))
    assert position.partial and position.seeks
    # Zero the drawn head of every shard the resume enters past its start, and every done shard.
    rels = {
        int(u): rel
        for task in tasks
        for rel, u in zip((r for r, _, _ in task.read_fn.args[2]), task.read_fn.args[2].places.tolist(), strict=False)
    }
    for unit, (head, seek) in position.seeks.items():
        offset, _ = split_seek(seek)
        assert head > 0 and offset > 0
        with open(tmp_path / "src" / rels[unit], "r+b") as f:
            f.write(bytes(offset))
    for unit, rel in rels.items():
        if position.is_done(np.array([unit]))[0]:
            (tmp_path / "src" / rel).write_bytes(b"")
    relay = start_relay()
    try:
        set_order("train", 1, position.state())
        resumed = ChannelDatasource(channel, listing, roots, seed=5, cpus={h: 1 for h in HOSTS})
        again = [row for task in read_pass(data_cluster, resumed, 1) for row in task]
    finally:
        data_cluster.kill(relay)
    first = {p & ~LAST: i for rows in per_task for i, p, _ in rows}
    assert sorted(first) == sorted([p & ~LAST for _, p, _ in drawn] + [p & ~LAST for _, _, p in again])
    assert all(first[p & ~LAST] == i for i, _, p in again)  # the same place, so the same derived id
    position.merge(np.array([p for _, _, p in again], np.int64))
    assert (position.units_done, position.partial, position.duplicates) == (SHARDS, {}, 0)
