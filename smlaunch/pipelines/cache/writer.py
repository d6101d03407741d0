"""The chain's side of a cache: each call on the channel's rows leaves its prefix output as a shard.

A write that fails (a full disk, a refused PUT) never fails the batch: the shard's partial file is
removed, the cache is marked failed for the run (`store.CacheStore.fail`) in one line on the
console, no call of any host writes again, and the epoch's seal deletes what was written
(`seal`). A cache marked failed by another process is noticed within `RECHECK_S`.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from smlaunch.pipelines.cache.store import CacheSpec, CacheStore, CacheWriteFailed

log = logging.getLogger("smlaunch")
RECHECK_S = 10.0
"""How often a writer looks for another's `FAILED` marker."""


class ShardWriter:
    def __init__(self, spec: CacheSpec):
        self.store = CacheStore(spec.root)
        self.chunk_rows = spec.chunk_rows
        self.off = False
        self.checked = 0.0

    def write(self, ids: np.ndarray, fields: dict) -> None:
        if self.off:
            return
        now = time.monotonic()
        if now - self.checked > RECHECK_S:
            self.checked = now
            if self.store.failed() or self.store.manifest() is not None:  # failed elsewhere, or sealed
                self.off = True
                return
        try:
            self.store.write_shard(ids, fields, self.chunk_rows)
        except CacheWriteFailed as exc:
            self.off = True
            self.store.fail(str(exc))
            log.warning(f"cache: a shard could not be written ({exc}); the run goes on uncached")
        except TypeError as exc:  # a map op's field of Python objects: not cacheable, said once
            self.off = True
            self.store.fail(str(exc))
            log.warning(f"cache: {exc}; the run goes on uncached")
