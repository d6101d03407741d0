"""`NextEpoch`: the first batch is drawn in the background before the loop asks, every batch comes
back once and in order, and an error in the first draw is raised where the loop draws."""

import threading
import time

import pytest

from smlaunch.trainers.next_epoch import NextEpoch


def test_the_first_batch_is_fetched_before_the_loop_asks_and_every_batch_comes_once():
    drawn = threading.Event()

    def batches():
        drawn.set()
        yield from range(5)

    primed = NextEpoch(batches())
    assert drawn.wait(5)  # started without anyone iterating
    assert list(primed) == [0, 1, 2, 3, 4]


def test_a_slow_first_batch_is_waited_for_and_an_empty_epoch_is_empty():
    def slow():
        time.sleep(0.3)
        yield "a"

    started = time.perf_counter()
    assert list(NextEpoch(slow())) == ["a"]
    assert time.perf_counter() - started >= 0.25
    assert list(NextEpoch(iter(()))) == []


def test_an_error_of_the_first_draw_is_raised_where_the_loop_draws():
    def broken():
        raise ValueError("channel 'train': bad record")
        yield  # pragma: no cover

    primed = NextEpoch(broken())
    with pytest.raises(ValueError, match="bad record"):
        next(iter(primed))
