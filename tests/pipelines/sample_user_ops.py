"""A user op for the tests, named in a config as `sample_user_ops:invert`."""

import numpy as np


def invert(images, rng, train, amount=255):
    return [(amount - img.astype(np.int16)).clip(0, 255).astype(np.uint8) for img in images]


def broken(images, rng, train):
    return [img.astype(np.float32) for img in images]


def raising(images, rng, train):
    return [_check(img) for img in images]


def _check(img):
    raise ValueError(f"an image of {img.shape[0]} rows")


def raising_map(batch, rng, train):
    raise KeyError("x1")
