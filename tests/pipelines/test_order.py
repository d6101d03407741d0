"""The data order's pure parts: a permutation per epoch (the same on a retry, another the next
epoch), contiguous runs per read task, interleaving that keeps every item once, positions that
round-trip, and the labels-per-batch measure."""

import numpy as np

from smlaunch.pipelines.order import epoch_order, interleave, labels_per_batch, position, split_positions, task_runs


def test_each_epoch_has_its_own_order_and_a_retry_the_same_one():
    first, again, second = (epoch_order(1000, "train", 7, e) for e in (1, 1, 2))
    assert (first == again).all() and not (first == second).all()
    assert sorted(first) == list(range(1000)) and sorted(second) == list(range(1000))
    assert not (epoch_order(1000, "train", 8, 1) == first).all()  # the job's seed counts
    fixed = epoch_order(1000, "validation", 7, None)  # unshuffled: one order, by the channel's name
    assert (fixed == epoch_order(1000, "validation", 99, None)).all() and not (fixed == np.arange(1000)).all()


def test_task_runs_are_contiguous_even_and_cover_everything():
    runs = task_runs(10, 4)
    assert [list(r) for r in runs] == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    assert len(task_runs(3, 8)) == 3 and sorted(len(r) for r in task_runs(100, 7)) == [14] * 5 + [15] * 2
    assert sum(len(r) for r in task_runs(12345, 64)) == 12345


def test_interleave_takes_one_item_of_each_open_unit_in_turn_and_loses_none():
    units = [iter([(u, i) for i in range(n)]) for u, n in enumerate([3, 1, 4, 2, 5])]
    out = list(interleave(units, 2))
    assert sorted(out) == sorted((u, i) for u, n in enumerate([3, 1, 4, 2, 5]) for i in range(n))
    assert out[:5] == [(0, 0), (1, 0), (0, 1), (0, 2), (2, 0)]  # unit 1 ended: unit 2 took its place
    for u in range(5):  # each unit's own order is kept
        mine = [i for v, i in out if v == u]
        assert mine == sorted(mine)
    assert list(interleave([iter("ab"), iter("cd")], 1)) == list("abcd")


def test_positions_round_trip():
    pos = np.array([position(0, 0, True), position(5, 3), position(2**30, 2**31 - 1, True)], np.int64)
    unit, ordinal, last = split_positions(pos)
    assert unit.tolist() == [0, 5, 2**30] and ordinal.tolist() == [0, 3, 2**31 - 1]
    assert last.tolist() == [True, False, True]


def test_labels_per_batch_tells_a_sorted_order_from_a_shuffled_one():
    labels = np.repeat(np.arange(100), 64)
    assert labels_per_batch(labels, 64) == 1.0
    shuffled = np.random.default_rng(0).permutation(labels)
    assert 45 < labels_per_batch(shuffled, 64) < 50  # 100 * (1 - (1 - 1/100) ** 64) = 47.4 expected
