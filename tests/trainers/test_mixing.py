"""The batches' mix: the uniform expectation matches drawing at random, a class-sorted order is
told apart from a shuffled one, and a poorly mixed epoch gets a warning naming what to change."""

import numpy as np
import torch

from smlaunch.trainers.accounting import mix_lines
from smlaunch.trainers.mixing import LabelMix, mix_summary, uniform_labels_per_batch


def test_the_uniform_expectation_matches_random_batches():
    counts = np.array([500, 300, 100, 50, 25, 25] + [10] * 20)
    labels = np.repeat(np.arange(len(counts)), counts)
    rng = np.random.default_rng(0)
    drawn = np.mean([len(np.unique(rng.permutation(labels)[:32])) for _ in range(2000)])
    assert abs(uniform_labels_per_batch(counts, 32) - drawn) < 0.1
    assert abs(uniform_labels_per_batch(np.full(1000, 1281), 256) - 1000 * (1 - (1 - 1 / 1000) ** 256)) < 0.1


def summary_of(order: np.ndarray, batch: int, ranks: int = 2) -> dict:
    mixes = [LabelMix(10, torch.device("cpu")) for _ in range(ranks)]
    for i, start in enumerate(range(0, len(order) - batch + 1, batch)):
        mixes[i % ranks].add(torch.from_numpy(order[start : start + batch]))
    return mix_summary([m.take() for m in mixes])


def test_a_class_sorted_order_is_flagged_and_a_shuffled_one_is_not():
    labels = np.repeat(np.arange(10), 640)
    sorted_mix = summary_of(labels, 64)
    shuffled_mix = summary_of(np.random.default_rng(1).permutation(labels), 64)
    assert sorted_mix["labels_per_batch"] == 1.0 and sorted_mix["ratio"] < 0.2
    assert 0.95 < shuffled_mix["ratio"] < 1.05 and shuffled_mix["batches"] == 100
    epochs = [{"epoch": 1, "label_mix": shuffled_mix}, {"epoch": 2, "label_mix": sorted_mix}]
    lines = mix_lines("train", epochs)
    assert lines[0].startswith(
        "batch mix: channel 'train': distinct labels per batch / a uniform random order's: epoch 1 "
    )
    assert len(lines) == 2 and "epoch 2: 1 distinct labels per batch" in lines[1]
    assert "channels.train.shuffle.open_units" in lines[1]
