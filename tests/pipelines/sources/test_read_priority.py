"""A read task's blocks made in a thread of lower CPU priority: the same blocks in order, the same
error, the thread's priority lowered and the consumer's not, at most `ahead` made ahead, and the
reading generator closed (its files) when the consumer stops."""

import os
import sys
import threading
import time

import pytest

from smlaunch.pipelines.sources.read_priority import READ_NICE, behind_the_chain


def test_blocks_come_in_order_and_an_error_comes_after_the_blocks_before_it():
    def blocks():
        yield from range(5)
        raise ValueError("channel 'train': bad file at byte 7")

    got = []
    with pytest.raises(ValueError, match="bad file at byte 7"):
        for block in behind_the_chain(blocks()):
            got.append(block)
    assert got == [0, 1, 2, 3, 4]
    assert list(behind_the_chain(iter(range(100)))) == list(range(100))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own priority is Linux's")
def test_the_reading_thread_runs_at_a_lower_priority_and_the_consumer_keeps_its_own():
    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = nice()
    seen = list(behind_the_chain(nice() for _ in range(3)))
    assert seen == [min(before + READ_NICE, 19)] * 3
    assert nice() == before and os.getpriority(os.PRIO_PROCESS, 0) == before


def test_the_reader_stays_at_most_ahead_blocks_ahead_and_is_closed_when_the_consumer_stops():
    made, closed = [], threading.Event()

    def blocks():
        try:
            for i in range(1000):
                made.append(i)
                yield i
        finally:
            closed.set()

    consumer = behind_the_chain(blocks(), ahead=2)
    assert next(consumer) == 0
    time.sleep(0.5)
    assert len(made) <= 1 + 2 + 1  # taken, queued, and one waiting to be queued
    consumer.close()
    assert closed.wait(5)
    assert len(made) < 1000
