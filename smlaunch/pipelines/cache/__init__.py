"""The train channel's deterministic prefix, cached across epochs (`pipeline.cache`, `docs/cache.md`).

The first epoch runs the whole chain and each chain call writes its batch's prefix output as one
shard (`store`, `blobs`); at the epoch's end rank 0 seals the cache (`seal`): a manifest of the
shards that hold every sample of the epoch once, then a final marker. A later epoch (or a later
job with the same fingerprint, `fingerprint`) whose cache is sealed reads the shards instead of
the channel (`reader`) and runs only the chain's random rest. A cache that is not sealed is never
read.
"""
