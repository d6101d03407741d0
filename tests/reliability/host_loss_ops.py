"""A user op for the host-loss tests: it sleeps per image, so an epoch of the tiny job lasts long
enough to lose a host in the middle of it, without taking CPU from a 2-core machine."""

import time


def slow(images, rng, train, seconds=0.01):
    time.sleep(seconds * len(images))
    return images
