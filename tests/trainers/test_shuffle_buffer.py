"""The train worker's shuffle buffer: every row once, the first batch after two batches' rows, the
buffer growing to its size, a repeatable draw, on torch tensors and NumPy arrays."""

import numpy as np
import pytest
import torch

from smlaunch.trainers.shuffle_buffer import ShuffleBuffer


def incoming(total: int, size: int, kind: str = "torch", pulled: list | None = None):
    """`total` rows in order (`id` 0..total-1) as batches of `size`, counting what was pulled."""
    for start in range(0, total, size):
        ids = np.arange(start, min(start + size, total))
        if pulled is not None:
            pulled.append(len(ids))
        if kind == "torch":
            yield {"id": torch.as_tensor(ids), "image": torch.zeros((len(ids), 3, 4, 4), dtype=torch.uint8) + 1}
        else:
            yield {"id": ids, "image": np.ones((len(ids), 3, 4, 4), np.uint8), "name": [f"r{i}" for i in ids]}


@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize("total,size,rows", [(1437, 64, 1024), (100, 64, 1024), (5000, 64, 256), (3000, 100, 64)])
def test_every_row_leaves_once_in_full_batches_but_the_last(kind, total, size, rows):
    out = list(ShuffleBuffer(rows, 64, seed=1)(incoming(total, size, kind)))
    ids = np.concatenate([np.asarray(b["id"]) for b in out])
    assert sorted(ids.tolist()) == list(range(total))
    assert all(len(b["id"]) == 64 for b in out[:-1]) and 0 < len(out[-1]["id"]) <= 64
    for batch in out:  # the columns of a row stay together
        assert len(batch["image"]) == len(batch["id"])
        if kind == "numpy":
            assert batch["name"] == [f"r{i}" for i in batch["id"].tolist()]
    assert ids.tolist() != list(range(total))


def test_the_first_batch_needs_two_batches_of_rows_and_the_buffer_grows_to_its_size():
    pulled, held = [], []
    rows, batch = 1024, 64
    buffer = ShuffleBuffer(rows, batch, seed=0)
    drawn = 0
    for out in buffer(incoming(20_000, batch, pulled=pulled)):
        received = sum(pulled)
        if drawn == 0:
            assert received == 2 * batch  # Ray's ShufflingBatcher waits for 1.5 x 1024 + 64 = 1600
        held.append(received - drawn - len(out["id"]))
        drawn += len(out["id"])
        if received < 20_000:
            assert held[-1] >= min(rows, received // 2)
    assert max(held) <= rows + batch
    assert held[len(held) // 2] >= rows  # mid-pass the draw is from the whole buffer


def test_the_draw_repeats_with_its_seed_and_differs_with_another():
    def order(seed):
        return torch.cat([b["id"] for b in ShuffleBuffer(256, 32, seed)(incoming(2000, 32))]).tolist()

    assert order(5) == order(5)
    assert order(5) != order(6)


def test_rows_travel_far_once_the_buffer_is_full():
    """A class-sorted stream (ids in order) leaves mixed: a batch past the warm-up spans rows from
    far apart, as a 1024-row window's draw does."""
    out = [b["id"] for b in ShuffleBuffer(1024, 64, seed=3)(incoming(20_000, 64))]
    spans = [int(b.max() - b.min()) for b in out[40:-40]]
    assert np.median(spans) > 900
