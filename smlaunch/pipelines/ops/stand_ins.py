"""User ops that stand in for an expensive preprocessing step without using the cores.

`fixed_cost` waits a fixed time per image: a chain task then takes as long as a heavy decode or
augmentation would on a real host, but leaves this machine's CPUs free. On a laptop or a 2-core CI
machine every simulated host shares the same cores, so a real op gives an added host no more
capacity; with this one each Ray CPU slot makes `1000 / ms_per_image` images/s, so capacity grows
with the hosts as it does on a cluster (tests/cluster/autoscale, bench/elastic.py). Its cost can
change while the job runs: `ms_per_image_file` names a file holding the number (read at most once
a second per worker), which a test or a bench rewrites to make the chain lighter or heavier.

    pipeline:
      ops:
        - {op: user, function: "smlaunch.pipelines.ops.stand_ins:fixed_cost", params: {ms_per_image: 20}}
"""

from __future__ import annotations

import time

_read: dict[str, tuple[float, float]] = {}
"""File -> (when read, ms per image it held)."""


def fixed_cost(
    images: list,
    rng,
    train: bool,
    ms_per_image: float = 10.0,
    ms_per_image_file: str | None = None,
    validation: bool = False,
) -> list:
    """The images unchanged, after `ms_per_image` per image (training batches only unless `validation`)."""
    if train or validation:
        time.sleep(len(images) * _cost_ms(ms_per_image, ms_per_image_file) / 1000)
    return images


def _cost_ms(default: float, path: str | None) -> float:
    if not path:
        return default
    now = time.monotonic()
    read_at, value = _read.get(path, (-1e9, default))
    if now - read_at >= 1.0:
        try:
            with open(path) as f:
                value = float(f.read().strip() or default)
        except (OSError, ValueError):
            value = default
        _read[path] = (now, value)
    return value
