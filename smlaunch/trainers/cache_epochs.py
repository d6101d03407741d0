"""The built-in loop's side of the cache (`pipeline.cache`): rank 0 seals it after an epoch that
wrote it, and knows which epochs read it (their units are the cache's chunks, not the channel's
files: what the accounting checks a complete epoch's positions against).

Sealing happens while the epoch's accounting closes, before any rank asks for the next epoch's
data, so the next epoch's read is planned against the sealed cache (`cache.reader`).
"""

from __future__ import annotations

LOST = "lost"
"""What rank 0 tells the others where a cache sealed earlier in the run is gone (`agree`)."""


class CacheEpochs:
    def __init__(self, spec, rank: int, two_datasets: bool = False, files_anywhere: bool = False):
        """`spec`: the run's `CacheSpec`, or None (no cache); `two_datasets`: the train channel has a
        second dataset for the epochs that read the sealed cache (`pipelines.dataset.CACHED_TRAIN`);
        `files_anywhere`: a host can still read the channel's files (`TrainSpec.files_outlive_cache`)."""
        self.spec, self.rank, self.two_datasets, self.files_anywhere = spec, rank, two_datasets, files_anywhere
        self.units_sealed: int | None = None
        """The sealed cache's chunks (`seal.cache_units`): the units of every epoch from here on
        (None: not sealed)."""
        if spec is not None and rank == 0:
            from smlaunch.pipelines.cache.store import CacheStore

            manifest = CacheStore(spec.root).manifest()  # a cache sealed by an earlier run: every epoch reads it
            self.units_sealed = manifest["units"] if manifest is not None else None

    def dataset(self) -> str:
        """The dataset the next epoch iterates: the cached epochs' own once the cache is sealed
        (every rank the same: `agree`), else the train channel's."""
        from smlaunch.pipelines.dataset import CACHED_TRAIN

        return CACHED_TRAIN if self.two_datasets and self.units_sealed is not None else "train"

    def agree(self, control, console=None) -> None:
        """With two datasets, before an epoch: rank 0 reads the marker again and every rank takes its
        word, since all ranks must iterate the same dataset (one `streaming_split` feeds them all). A
        cache sealed earlier in the run and gone now is read from the files again where the train
        hosts, or hosts that stay, can read them (`files_anywhere`); else it stops
        the run, in one line: the files may be on no host any more (a `ShardedByS3Key` channel's
        belong to the hosts that received them, given back since)."""
        if not self.two_datasets:
            return
        units: int | str | None = self.units_sealed
        if self.rank == 0:
            from smlaunch.pipelines.cache.store import CacheStore

            manifest = CacheStore(self.spec.root).manifest()
            units = manifest["units"] if manifest is not None else (LOST if self.units_sealed is not None else None)
        units = control.broadcast(units)
        if units == LOST and self.files_anywhere:
            if console is not None:
                console.put(
                    "note",
                    text=f"cache: the sealed cache at {self.spec.root} is gone (its FINAL marker): this epoch reads "
                    "the channel's files again and writes it anew",
                )
            units = None
        if units == LOST:
            from smlaunch.errors import DataError

            raise DataError(
                f"pipeline.cache: the sealed cache at {self.spec.root} is gone (its FINAL marker) since the last "
                "epoch; with autoscale.min_data_hosts: 0 the hosts that received the train channel's files "
                "(ShardedByS3Key: each file on one host) may have been given back, and no other host has them: "
                "the run stops. Run it again: epoch 1 writes the cache anew"
            )
        self.units_sealed = units if isinstance(units, int) else None

    def space(self) -> str | None:
        """What the next epoch's positions count in: the sealed cache's fingerprint, or None (files)."""
        return self.spec.fingerprint if self.units_sealed is not None else None

    def units(self, channel_units: int | None, space: str | None) -> int | None:
        """The units of an epoch whose positions count in `space` (`EpochProgress.space`: the cache's
        fingerprint, or None for the channel's files). By the epoch's own space, not by whether a
        sealed cache exists now: a worker group restarted from a checkpoint taken in the epoch that
        wrote the cache finds it sealed (that epoch had ended before the restart) yet reads the
        rest of the epoch from the files, as the checkpoint's positions count; counted against the
        cache's units, its 4 files read whole came out as 20 units "not drawn in full"
        (tests/reliability/test_train_failures.py, about 1 run in 5)."""
        if space is None:
            return channel_units
        return self.units_sealed if space == self.spec.fingerprint else None

    def close(self, ids, rows: int | None, console) -> None:
        """After a complete epoch (rank 0): seal the cache if that epoch wrote it, saying so. `ids`:
        every id the epoch drew (None where they are not all known: too many to keep, or an epoch
        resumed from a checkpoint, whose earlier draws are known by their positions alone); `rows`:
        the rows the epoch delivered, its positions' count."""
        if self.spec is None or self.rank != 0 or self.units_sealed is not None:
            return
        from smlaunch.pipelines.cache.seal import seal

        manifest, line = seal(self.spec, ids, rows)
        if manifest is not None:
            self.units_sealed = manifest["units"]
        console.put("note", text=line)
