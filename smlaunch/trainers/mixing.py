"""How mixed the train batches were: distinct labels per batch, against a uniform random order.

A well-shuffled order gives each batch about as many classes as a uniform random permutation of
the epoch would; an order that reads class-sorted shards one after another gives one or two
(`pipelines.order`). The report says, per epoch, the mean distinct labels per trained batch, the
mean a uniform random permutation of the same labels would give, and their ratio.

Counted on the device, with no synchronisation per step: a batch adds its label histogram to a
running one and its distinct count to a sum; the epoch's close moves both to the CPU once.
"""

from __future__ import annotations

import numpy as np


class LabelMix:
    """One rank's label histogram and distinct-label sum of the epoch's trained batches."""

    def __init__(self, num_classes: int, device):
        import torch

        self.num_classes = num_classes
        self.counts = torch.zeros(num_classes, dtype=torch.long, device=device)
        self.distinct = torch.zeros((), dtype=torch.long, device=device)
        self.batches = 0
        self.batch_size = 0

    def add(self, labels) -> None:
        import torch

        here = torch.bincount(
            labels.to(self.counts.device).long().clamp(0, self.num_classes - 1), minlength=self.num_classes
        )
        self.counts += here
        self.distinct += (here > 0).sum()
        self.batches += 1
        self.batch_size = max(self.batch_size, len(labels))

    def take(self) -> tuple[np.ndarray, int, int, int]:
        """(histogram, distinct sum, batches, batch size) of the epoch so far; resets."""
        out = (self.counts.cpu().numpy().copy(), int(self.distinct.item()), self.batches, self.batch_size)
        self.counts.zero_()
        self.distinct.zero_()
        self.batches = 0
        return out


def mix_summary(parts: list[tuple[np.ndarray, int, int, int]]) -> dict | None:
    """Every rank's `LabelMix.take()` as the report's record; None without a trained batch."""
    counts = np.sum([p[0] for p in parts], axis=0)
    distinct, batches = sum(p[1] for p in parts), sum(p[2] for p in parts)
    batch = max(p[3] for p in parts)
    if not batches:
        return None
    mean = distinct / batches
    uniform = uniform_labels_per_batch(counts, batch)
    return {
        "labels_per_batch": round(mean, 3),
        "uniform_labels_per_batch": round(uniform, 3),
        "ratio": round(mean / uniform, 3) if uniform else None,
        "batches": batches,
    }


def uniform_labels_per_batch(counts: np.ndarray, batch: int) -> float:
    """Expected distinct labels in a batch of `batch` rows drawn without replacement from rows with
    these label counts (a uniform random permutation): the sum over classes of the chance that a
    class appears, 1 - C(N - n_c, b) / C(N, b), computed in logs."""
    from math import lgamma

    counts = np.asarray(counts, np.float64)
    total = float(counts.sum())
    if total < batch or batch <= 0:
        return 0.0
    base = lgamma(total - batch + 1) - lgamma(total + 1)
    absent = [
        np.exp(lgamma(rest + 1) - lgamma(rest - batch + 1) + base) if rest >= batch else 0.0
        for rest in (total - counts[counts > 0]).tolist()
    ]
    return float(len(absent) - sum(absent))
