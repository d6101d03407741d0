"""Sealing a cache at the end of an epoch that wrote it: rank 0's step between two epochs.

A sealed cache holds each sample of the epoch exactly once; its units (what a cached epoch permutes
and its positions count) are its shards' chunks. Shards may overlap: a job restarted in
its first epoch batches the rows it had not delivered differently the second time, so a row made
before the restart but delivered after it is in two shards. The manifest keeps each id in the
first shard (by name) that holds it and lists the others' copies as dropped, so a cached epoch
reads each sample once. A cache that misses a sample of the epoch is not sealed: the next epoch
runs the whole chain again and writes what is missing (a shard whose rows are already cached is
only a duplicate the next seal drops).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from smlaunch.pipelines.cache.store import FORMAT_VERSION, CacheSpec, CacheStore

log = logging.getLogger("smlaunch")
READ_THREADS = 16
"""Shards' id files read at once: on S3 each is a GET of a few hundred bytes."""


def seal(spec: CacheSpec, epoch_ids: np.ndarray | None, epoch_rows: int | None) -> tuple[dict | None, str]:
    """Seal the cache after an epoch that drew `epoch_ids` (every rank's; None where they are not
    all known, then the cache must hold `epoch_rows` distinct rows; with neither, never sealed):
    (the manifest, or None where it is not sealed; the line that says so)."""
    store = CacheStore(spec.root)
    sealed = store.manifest()
    if sealed is not None:
        return sealed, f"cache: {sealed['rows']} rows in {len(sealed['shards'])} shards at {spec.root}"
    if store.failed():
        why = (store.get("FAILED") or b"").decode(errors="replace") or "a shard could not be written"
        names = store.shards()
        store.delete(store.shard_files(names))
        return (
            None,
            f"cache: off for the rest of the run ({why}); {len(names)} shards deleted; the job goes on uncached",
        )
    names = store.shards()
    with ThreadPoolExecutor(READ_THREADS) as pool:
        found = list(pool.map(store.shard_index, names))
    kept = [(n, index) for n, index in zip(names, found, strict=True) if index is not None]
    every = np.concatenate([index["ids"] for _, index in kept]) if kept else np.zeros(0, np.int64)
    ends = np.cumsum([len(index["ids"]) for _, index in kept], dtype=np.int64)
    union, first = np.unique(every, return_index=True)
    wanted = union if epoch_ids is None else np.unique(np.asarray(epoch_ids, np.int64))
    missing = len(np.setdiff1d(wanted, union, assume_unique=True)) if epoch_ids is not None else 0
    if missing or (epoch_ids is None and (epoch_rows is None or len(union) < epoch_rows)):
        short = missing or (epoch_rows or len(union) + 1) - len(union)
        return None, f"cache: {short} rows of the epoch are not cached yet; the next epoch runs the whole chain"
    chosen = np.zeros(len(every), bool)
    chosen[first] = True
    chosen &= np.isin(every, wanted)  # a shard's row no longer in the channel is not read
    shards = []
    for (name, index), end in zip(kept, ends, strict=True):  # `every` is the shards' ids one after another
        entry = _shard_entry(name, index, chosen[end - len(index["ids"]) : end])
        if entry is not None:
            shards.append(entry)
    units = sum(len(entry[3]) for entry in shards)
    manifest = {
        "format": FORMAT_VERSION,
        "fingerprint": spec.fingerprint,
        "rows": int(chosen.sum()),
        "units": units,
        "shards": shards,
    }
    store.seal(manifest)
    return manifest, f"cache: sealed, {manifest['rows']} rows in {len(shards)} shards ({units} chunks) at {spec.root}"


def _shard_entry(name: str, index: dict, chosen: np.ndarray) -> list | None:
    """A shard's manifest entry, `[name, rows, dropped ids, chunks]`, each chunk `[start byte, end
    byte, rows]` and only those with a row kept (a chunk of another's duplicates is not a unit: it
    would never end); None where the shard keeps no row."""
    ids, offsets, rows = index["ids"], index["offsets"], index["rows"]
    if not chosen.any():
        return None
    kept = [int(chosen[end - count : end].sum()) for count, end in zip(rows, np.cumsum(rows), strict=True)]
    chunks = [[int(offsets[c]), int(offsets[c + 1]), count] for c, count in enumerate(kept) if count]
    return [name, int(chosen.sum()), ids[~chosen].tolist(), chunks]


def cache_units(manifest: dict) -> list[list]:
    """The units of an epoch read from the sealed cache of `manifest`: its shards' chunks, each
    `[name, start byte, end byte, rows, the shard's dropped ids]`, in the manifest's order."""
    return [[name, *chunk, dropped] for name, _, dropped, chunks in manifest["shards"] for chunk in chunks]
