"""A checkpoint at any step of an epoch resumes (issue 53), through the real read tasks on the
3-node cluster: for every step of a small epoch, on 1, 2 and 3 ranks with uneven shares, the
positions the ranks had drawn by that step are a checkpoint's; the resumed pass reads exactly the
rest, and the next epoch every sample again. The steps include the epoch's last full batch,
whose resumed pass holds only a remainder smaller than a batch (what failed the job before),
and an epoch whose samples were all drawn, whose resumed pass reads nothing. A Pipe channel
resumes by the ids drawn (`trainers.resume.without_consumed`), checked at every step the same way.
The loop's side (a resumed epoch with no full batch ends, it is not an empty channel) runs as a
whole job in tests/launcher/test_end_to_end.py."""

from types import SimpleNamespace

import numpy as np
import pytest
from test_epoch_order import read_pass
from test_file_reader import HOSTS, deliver

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.pipelines.order import LAST
from smlaunch.pipelines.position import EpochPosition

BATCH = 16


def tfrecord_channel(tmp_path, shards: int, per_shard: int):
    """`shards` TFRecord shards of `per_shard` records; ids 0.. in order."""
    from smlaunch.pipelines.formats import tfrecord
    from smlaunch.pipelines.formats.example import encode_example
    from smlaunch.pipelines.sources.listing import list_channel
    from smlaunch.pipelines.sources.objects import ObjectSource

    src = tmp_path / "src"
    src.mkdir()
    for shard in range(shards):
        tfrecord.write_records(
            src / f"part-{shard}.tfrecord",
            [
                encode_example({"image/encoded": b"jpeg-%d" % i, "image/class/label": shard % 10, "id": i})
                for i in range(shard * per_shard, (shard + 1) * per_shard)
            ],
        )
    roots = deliver(tmp_path, ObjectSource(str(src)).list(), "FullyReplicated")
    channel = ChannelPlan(
        name="train", input_mode="File", record_format="tfrecord", source="", hosts=HOSTS, shuffle=True, open_units=4
    )
    return channel, list_channel(channel, roots), roots


def draw_steps(blocks: list[list[tuple]], ranks: int, rng) -> list[list[tuple]]:
    """The rows each step of the epoch drew over `ranks` ranks: the pass's blocks handed out in
    turn to the rank with the fewest rows so far (Ray Train's split), each rank drawing full
    batches of `BATCH` through a shuffle buffer of three batches; a step is taken while any rank
    holds a full batch (the others drain), and what is left is a remainder, never drawn."""
    streams: list[list[tuple]] = [[] for _ in range(ranks)]
    for block in blocks:
        min(streams, key=len).extend(block)
    for stream in streams:  # the shuffle buffer: rows drawn out of their order within a window
        for start in range(0, len(stream), 3 * BATCH):
            window = stream[start : start + 3 * BATCH]
            stream[start : start + 3 * BATCH] = [window[i] for i in rng.permutation(len(window))]
    steps, cursor = [], [0] * ranks
    while True:
        drawn = []
        for rank, stream in enumerate(streams):
            if len(stream) - cursor[rank] >= BATCH:
                drawn += stream[cursor[rank] : cursor[rank] + BATCH]
                cursor[rank] += BATCH
        if not drawn:
            return steps
        steps.append(drawn)


def blocks_of(ray, source, epoch: int) -> list[list[tuple]]:
    """The pass's rows (id, label, pos) as read tasks yield them, cut into blocks of 20 rows."""
    rows = [row for task in read_pass(ray, source, epoch) for row in task]
    return [rows[i : i + 20] for i in range(0, len(rows), 20)]


def resume_at_every_step(ray, channel, listing, roots, ranks: int, total: int) -> list[int]:
    """Checkpoint at each step of epoch 1, resume, read to the end of epoch 2; the steps tried."""
    from smlaunch.cluster.run_relay import set_order
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource

    def source():
        return ChannelDatasource(channel, listing, roots, seed=7, cpus={h: 1 for h in HOSTS}, ranks=ranks)

    set_order("train", 0, None)
    rng = np.random.default_rng(ranks)
    steps = draw_steps(blocks_of(ray, source(), 1), ranks, rng)
    assert steps and sum(map(len, steps)) > total - ranks * BATCH  # every rank's remainder is below a batch
    for step in range(1, len(steps) + 1):
        drawn = [row for rows in steps[:step] for row in rows]
        position = EpochPosition(1)
        position.merge(np.array([pos for _, _, pos in drawn], np.int64))
        set_order("train", 0, position.state())
        resumed = source()
        rest = [row for block in blocks_of(ray, resumed, 1) for row in block]
        ids = sorted(i for i, _, _ in drawn + rest)
        assert ids == list(range(total)), (ranks, step, len(drawn), len(rest))  # each sample once
        assert {p & ~LAST for _, _, p in rest}.isdisjoint({p & ~LAST for _, _, p in drawn})
        if step == len(steps):  # the epoch's last full batch: a remainder of less than a batch per rank
            assert len(rest) < ranks * BATCH, (ranks, len(rest))
        nxt = sorted(i for block in blocks_of(ray, resumed, 2) for i, _, _ in block)
        assert nxt == list(range(total)), (ranks, step)  # the next epoch: every sample again
    return list(range(1, len(steps) + 1))


@pytest.mark.ray
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_a_checkpoint_at_any_step_of_a_file_channel_s_epoch_resumes_it_exactly(data_cluster, tmp_path, ranks):
    from smlaunch.cluster.run_relay import start_relay

    total = 7 * 23  # shards of 23: units drawn in part at most steps
    channel, listing, roots = tfrecord_channel(tmp_path, 7, 23)
    relay = start_relay()
    try:
        tried = resume_at_every_step(data_cluster, channel, listing, roots, ranks, total)
    finally:
        data_cluster.kill(relay)
    assert len(tried) >= total // (ranks * BATCH) - 1


@pytest.mark.ray
def test_an_epoch_drawn_to_its_last_sample_resumes_as_an_empty_pass_and_the_next_epoch_is_whole(data_cluster, tmp_path):
    """Every sample drawn (the epoch divides into full batches, or a stop came at its end): the
    resumed pass plans one read task that reads nothing (none failed Ray Data's planning, which
    divides the estimated size by the task count), and the next epoch reads every sample."""
    from smlaunch.cluster.run_relay import set_order, start_relay
    from smlaunch.pipelines.dataset import read_channel
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource

    channel, listing, roots = tfrecord_channel(tmp_path, 4, 16)
    relay = start_relay()
    try:
        set_order("train", 0, None)
        source = ChannelDatasource(channel, listing, roots, seed=7, cpus={h: 1 for h in HOSTS}, ranks=1)
        position = EpochPosition(1)
        position.merge(np.array([pos for task in read_pass(data_cluster, source, 1) for _, _, pos in task], np.int64))
        assert position.units_done == 4
        set_order("train", 0, position.state())
        resumed = ChannelDatasource(channel, listing, roots, seed=7, cpus={h: 1 for h in HOSTS}, ranks=1)
        tasks = resumed.get_read_tasks(4, data_context=SimpleNamespace(_execution_idx=0))
        assert len(tasks) == 1 and list(tasks[0]()) == [] and resumed.estimate_inmemory_data_size() > 0
        assert len(resumed.get_read_tasks(4)) == 1  # what Ray's planning counts, without a context
        ds = read_channel(resumed, channel)
        assert [len(b["id"]) for b in ds.iter_batches(batch_size=BATCH)] == []  # the resumed epoch: nothing left
        assert sorted(int(i) for b in ds.iter_batches(batch_size=None) for i in b["id"]) == list(range(64))
    finally:
        data_cluster.kill(relay)


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_a_pipe_channel_resumed_at_any_step_by_the_ids_drawn_gives_exactly_the_rest(ranks):
    """A Pipe stream cannot be entered midway: the resumed epoch reads the FIFO again and drops the
    ids drawn before (`without_consumed`), whatever order the new stream comes in."""
    import torch

    from smlaunch.trainers.resume import without_consumed

    total = 157
    rng = np.random.default_rng(ranks)
    steps = draw_steps([[(i, 0, 0) for i in range(b, min(b + 20, total))] for b in range(0, total, 20)], ranks, rng)
    for step in range(1, len(steps) + 1):
        consumed = torch.tensor(sorted(i for rows in steps[:step] for i, _, _ in rows))
        stream = [{"id": torch.tensor(chunk)} for chunk in np.array_split(rng.permutation(total), 9)]
        rest = [b["id"] for b in without_consumed(iter(stream), consumed, BATCH)]
        ids = sorted(consumed.tolist() + (torch.cat(rest).tolist() if rest else []))
        assert ids == list(range(total)), (ranks, step)
        assert all(len(b) == BATCH for b in rest[:-1])
