"""Pipe mode with real FIFOs: the reader protocol against the local agent, from a folder and from S3."""

import os
import time

import pytest

from smlaunch.errors import DataError
from smlaunch.pipelines.formats import iter_records, recordio, tfrecord
from smlaunch.pipelines.sources.fifo import PipeEpochs, fifo_path, open_epoch
from smlaunch.pipelines.sources.objects import local_objects, objects_for_host, s3_objects
from smlaunch.pipelines.sources.pipe_agent import PipeAgent


def make_shards(folder, name, count, per_shard):
    folder.mkdir(parents=True, exist_ok=True)
    for shard in range(count):
        tfrecord.write_records(
            folder / f"{name}-{shard}.tfrecord", [f"{name}:{shard}:{i}".encode() for i in range(per_shard)]
        )


def test_three_epochs_of_two_channels_each_sample_once_per_epoch_in_order(tmp_path):
    make_shards(tmp_path / "src/train", "train", 3, 20)
    make_shards(tmp_path / "src/validation", "validation", 1, 7)
    data = tmp_path / "input/data"
    agents = [
        PipeAgent(data, ch, local_objects(tmp_path / "src" / ch), epochs=3, seed=5).start()
        for ch in ("train", "validation")
    ]
    readers = {ch: PipeEpochs(data, ch, timeout_s=20) for ch in ("train", "validation")}
    orders = []
    for epoch in range(3):
        for channel, reader in readers.items():
            with reader.next() as stream:
                records = [r.decode() for r in iter_records(stream, "tfrecord")]
            expected = 60 if channel == "train" else 7
            assert len(records) == len(set(records)) == expected, (channel, epoch)
            if channel == "train":
                orders.append([r.rsplit(":", 1)[0] for r in records[::20]])
        assert readers["train"].next_epoch == epoch + 1
    assert len({tuple(o) for o in orders}) > 1  # shuffled by seed: the shard order changes across epochs
    for agent in agents:
        agent.stop()
    assert not list(data.glob("*_*"))  # consumed FIFOs are removed


def test_a_reader_may_close_early_and_the_next_epoch_still_comes(tmp_path):
    make_shards(tmp_path / "src", "big", 4, 2000)
    agent = PipeAgent(tmp_path / "data", "train", local_objects(tmp_path / "src"), epochs=2).start()
    reader = PipeEpochs(tmp_path / "data", "train", timeout_s=20)
    with reader.next() as stream:
        first = next(iter_records(stream, "tfrecord"))
    assert first == b"big:0:0"
    with reader.next() as stream:
        assert sum(1 for _ in iter_records(stream, "tfrecord")) == 8000
    agent.stop()


def test_missing_fifo_file_mode_channel_and_absent_writer_fail_naming_the_fifo(tmp_path):
    started = time.monotonic()
    with pytest.raises(
        DataError,
        match=r"channel 'train': Pipe-mode FIFO .*train_0 for epoch 0 did not appear "
        r"within 1 s",
    ):
        with open_epoch(tmp_path, "train", 0, timeout_s=1):
            pass
    (tmp_path / "train_0").write_bytes(b"")
    with pytest.raises(DataError, match="is not a FIFO; is the channel in File mode rather than Pipe"):
        with open_epoch(tmp_path, "train", 0, timeout_s=1):
            pass
    os.mkfifo(fifo_path(tmp_path, "train", 1))
    with pytest.raises(DataError, match=r"no writer connected to .*train_1 \(epoch 1\) within 1 s"):
        with open_epoch(tmp_path, "train", 1, timeout_s=1):
            pass
    assert time.monotonic() - started < 10


def test_agent_fails_naming_the_fifo_when_no_reader_comes(tmp_path):
    make_shards(tmp_path / "src", "x", 1, 1)
    agent = PipeAgent(tmp_path / "data", "train", local_objects(tmp_path / "src"), epochs=1, reader_wait_s=0.5)
    with pytest.raises(DataError, match=r"agent: no reader opened .*train_0 \(channel 'train', epoch 0\) within 0 s"):
        agent.run()


def test_s3_objects_stream_into_the_fifo_sharded_and_wrapped_in_recordio(tmp_path, s3):
    s3.create_bucket(Bucket="data")
    for i in range(5):
        s3.put_object(Bucket="data", Key=f"train/part-{i}.bin", Body=f"object-{i}".encode() * (i + 1))
    s3.put_object(Bucket="data", Key="other/ignored.bin", Body=b"no")
    objects = s3_objects("s3://data/train/")
    assert [o.key for o in objects] == [f"part-{i}.bin" for i in range(5)]
    received = []
    for host in range(2):
        mine = objects_for_host(objects, "ShardedByS3Key", host, 2)
        data = tmp_path / f"host{host}"
        agent = PipeAgent(data, "train", mine, epochs=1, record_wrapper="RecordIO").start()
        with PipeEpochs(data, "train", timeout_s=20).next() as stream:
            received.append([r.decode() for r in iter_records(stream, "recordio")])
        agent.stop()
    assert [len(r) for r in received] == [3, 2]
    assert sorted(sum(received, [])) == sorted(f"object-{i}" * (i + 1) for i in range(5))
    assert len(objects_for_host(objects, "FullyReplicated", 1, 2)) == 5
    assert recordio.MAGIC == 0xCED7230A
