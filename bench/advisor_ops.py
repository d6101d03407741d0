"""User ops for `bench/advisor.py`: work that holds a CPU slot for a fixed time per image.

`hold` sleeps instead of computing. On a real data host the chain burns that host's own cores;
in a local simulation every "host" shares this machine's few cores, so burning them would make
the hosts slow each other down, which real hosts never do. Holding the slot keeps each simulated
host's rate its own, as it is on SageMaker, while everything else (Ray Data, transfers, the
trainer) runs for real.
"""

import time


def hold(images, rng, train, ms=10.0):
    time.sleep(ms * len(images) / 1000)
    return images
