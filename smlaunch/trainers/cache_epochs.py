"""The built-in loop's side of the cache (`pipeline.cache`): rank 0 seals it after an epoch that
wrote it, and knows which epochs read it (their units are the cache's shards, not the channel's
files: what the accounting checks a complete epoch's positions against).

Sealing happens while the epoch's accounting closes, before any rank asks for the next epoch's
data, so the next epoch's read is planned against the sealed cache (`cache.reader`).
"""

from __future__ import annotations


class CacheEpochs:
    def __init__(self, spec, rank: int):
        """`spec`: the run's `CacheSpec`, or None (no cache)."""
        self.spec, self.rank = spec, rank
        self.shards: int | None = None
        """The sealed cache's shards: the units of every epoch from here on (None: not sealed)."""
        if spec is not None and rank == 0:
            from smlaunch.pipelines.cache.store import CacheStore

            manifest = CacheStore(spec.root).manifest()  # a cache sealed by an earlier run: every epoch reads it
            self.shards = len(manifest["shards"]) if manifest is not None else None

    def space(self) -> str | None:
        """What the next epoch's positions count in: the sealed cache's fingerprint, or None (files)."""
        return self.spec.fingerprint if self.shards is not None else None

    def units(self, channel_units: int | None) -> int | None:
        """The units the next epoch's positions are counted in."""
        return self.shards if self.shards is not None else channel_units

    def close(self, ids, rows: int | None, console) -> None:
        """After a complete epoch (rank 0): seal the cache if that epoch wrote it, saying so. `ids`:
        every id the epoch drew (None where they are not all known: too many to keep, or an epoch
        resumed from a checkpoint, whose earlier draws are known by their positions alone); `rows`:
        the rows the epoch delivered, its positions' count."""
        if self.spec is None or self.rank != 0 or self.shards is not None:
            return
        from smlaunch.pipelines.cache.seal import seal

        manifest, line = seal(self.spec, ids, rows)
        if manifest is not None:
            self.shards = len(manifest["shards"])
        console.put("note", text=line)
