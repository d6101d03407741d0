"""The run's cache (`pipeline.cache`): where it lives, whether this run uses it, and its key.

`cache_line` is what `sm-launch plan` prints, from the config alone (the epochs of a `steps` run
are known only once the channel is listed); `run_cache` decides again with the listing, computes
the fingerprint, says whether a sealed cache is already there, and estimates its size against the
free space of a local folder before epoch 1 writes anything.
"""

from __future__ import annotations

import os
import shutil

from smlaunch.config.cache_rules import CacheChoice, cache_choice
from smlaunch.text import plural

MARGIN = 1.1
"""The size estimate's margin over rows x bytes per row (the shards' headers, ids and offsets)."""


def cache_dir(cfg, plan) -> str | None:
    """`pipeline.cache_dir` (a relative folder: from where sm-launch runs), or `<run.dir>/cache` on a
    local run, whose simulated hosts share this machine's disk; None elsewhere: no folder there is
    every host's."""
    chosen = cfg.pipeline.cache_dir
    if chosen:
        return chosen.rstrip("/") if chosen.startswith("s3://") else os.path.abspath(chosen)
    return os.path.abspath(os.path.join(cfg.run.dir, "cache")) if plan.mode == "local" else None


def planned_epochs(cfg, plan, rows: int | None) -> int | None:
    """Passes over the train channel: `trainer.epochs`, or the epochs `trainer.steps` spans where an
    epoch's rows are known; None otherwise."""
    from smlaunch.launcher.job.train_spec import epoch_steps

    t = cfg.trainer
    if t.epochs:
        return t.epochs
    if t.steps and rows:
        return -(-t.steps // max(1, epoch_steps(cfg, plan, rows)))
    return None


def choice(cfg, plan, rows: int | None = None) -> CacheChoice:
    """The run's cache choice; ConfigError (one line) where `autoscale.min_data_hosts: 0` would act
    (a running cluster's elastic group) and the cache is off: with no cached prefix, the chain's
    whole cost would land on the train hosts' few CPUs every epoch."""
    picked = cache_choice(cfg, planned_epochs(cfg, plan, rows), cache_dir(cfg, plan), user_loop=bool(cfg.trainer.loop))
    if plan.elastic is not None and plan.elastic.min_hosts == 0 and not picked.on:
        from smlaunch.errors import ConfigError

        raise ConfigError(
            f"autoscale.min_data_hosts: 0 needs the chain's prefix cached, and the cache is off ({picked.why}); "
            "set pipeline.cache: true with a pipeline.cache_dir every host reads, or min_data_hosts: 1"
        )
    return picked


def without_data_hosts(plan, spec):
    """What the elastic loop asks each decision (`ElasticDataHosts.without_hosts`) where
    `autoscale.min_data_hosts` is 0: while the cache at `spec` is sealed (epochs 2 on read it, and
    only the random rest of the chain runs), the chain tasks the train hosts' spare CPUs would run
    (their CPUs less one per train worker); None while it is not, or without a cache."""
    if plan.elastic is None or plan.elastic.min_hosts or spec is None:
        return lambda: None
    from smlaunch.pipelines.cache.store import CacheStore

    store = CacheStore(spec.root)
    spare = plan.train_spare_cpus
    return lambda: spare if store.exists("FINAL") else None


def cache_line(cfg, plan) -> str:
    """The plan's line: on or off, and why; with the size a row takes in the cache, where known."""
    picked = choice(cfg, plan)
    row = row_bytes(cfg.pipeline.ops[: picked.prefix])
    return picked.line() + (f"; about {_size(row)} a row" if picked.on and row else "")


def run_cache(cfg, plan, listing, epoch_rows: int | None = None):
    """(the run's `CacheSpec` or None, the line that says which): decided with the train channel's
    listing (or a builtin dataset's `epoch_rows`), keyed by its fingerprint."""
    from smlaunch.launcher.job.train_spec import listed_rows
    from smlaunch.pipelines.cache.fingerprint import fingerprint
    from smlaunch.pipelines.cache.store import CacheSpec, CacheStore, shard_rows

    train = next(c for c in plan.channels if c.name == "train")
    rows = (listed_rows(listing, train) if listing is not None else None) or epoch_rows
    picked = choice(cfg, plan, rows)
    if not picked.on or listing is None:
        return None, picked.line()
    roots = {h: plan.host(h).opt_ml for h in train.hosts}
    channel = cfg.channels["train"]
    described = {"record_format": channel.record_format, "fields": channel.model_dump(mode="json").get("fields")}
    prefix = cfg.pipeline.ops[: picked.prefix]
    key = fingerprint(described, prefix, source_digest(train, listing, roots, here=plan.mode == "local"))
    where = cache_dir(cfg, plan)
    root = f"{where}/{key}"
    store = CacheStore(root)
    manifest = store.manifest()
    per_row = row_bytes(prefix)
    batch = cfg.pipeline.batch_size
    shards = shard_rows(batch, rows, per_row, plan.preprocess_slots)
    if manifest is not None:
        return CacheSpec(root, picked.prefix, key, shards, batch), (
            f"{picked.line()}; fingerprint {key}: sealed ({manifest['rows']} rows), every epoch reads it"
        )
    if store.failed():
        store.delete(["FAILED"])  # an earlier run's full disk: this run tries again
    need = int(rows * per_row * MARGIN) if rows and per_row else None
    free = _free_bytes(where) if where else None
    sized = f"about {_size(need)} for {plural(rows or 0, 'row')}" if need else "its size is known once written"
    if need and free is not None and need > free:
        return None, (
            f"cache: off ({sized}, {_size(free)} free in {where}): the run goes uncached; free space or set "
            "pipeline.cache_dir"
        )
    spaced = f", {_size(free)} free" if free is not None else ""
    shape = f"shards of {plural(shards, 'row')}" + (f", about {_size(shards * per_row)}" if per_row else "")
    return CacheSpec(
        root, picked.prefix, key, shards, batch
    ), f"{picked.line()}; fingerprint {key}: epoch 1 writes it ({sized}{spaced}; {shape})"


def source_digest(channel, listing, roots: dict, here: bool) -> str:
    """The channel's files as listed, stat'ed on each listed host (`here`: this process sees the
    hosts' folders, as on the local simulated cluster; else a task on each host), with the
    listing's sizes and a Parquet listing's row groups."""
    import hashlib
    import json

    parts = []
    for host, files in sorted(listing.files.items()):
        rels = [rel for rel, _ in files]
        sizes = hashlib.sha256(json.dumps([[rel, int(size)] for rel, size in files]).encode()).hexdigest()
        if here:
            stats = host_files_digest(roots[host], channel.name, rels)
        else:
            import ray

            from smlaunch.cluster.labels import host_selector

            task = ray.remote(host_files_digest).options(num_cpus=0, label_selector=host_selector(host))
            stats = ray.get(task.remote(roots[host], channel.name, rels), timeout=STAT_TIMEOUT_S)
        parts.append([host, sizes, stats, sorted(listing.row_groups.items())])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


STAT_TIMEOUT_S = 600.0
"""A host's stat of its listed files (1.28M files: seconds): past this, the job fails in one line."""


def host_files_digest(opt_ml, channel: str, rels) -> str:
    """`fingerprint.files_digest` of the channel's folder on the host this runs on."""
    from smlaunch.pipelines.cache.fingerprint import files_digest
    from smlaunch.pipelines.sources.channels import channel_dir

    return files_digest(channel_dir(opt_ml, channel), rels)


def row_bytes(prefix: list) -> int | None:
    """Bytes a row's image takes in the cache after `prefix`: uint8, 3 channels (1 for `L`), at the
    prefix's last size (a `resize` keeps the aspect ratio: counted 4:3); None where the prefix sets
    no size (the decoded image's own, known only once read)."""
    side, wide, channels = None, 1.0, 3
    for op in prefix:
        if op.op == "decode_image" and getattr(op, "field", "image") == "image":
            channels = 1 if op.mode == "L" else 3
        if op.op in ("resize", "center_crop") and getattr(op, "field", "image") == "image":
            side, wide = op.size, (4 / 3 if op.op == "resize" else 1.0)
    return int(side * side * wide * channels) if side else None


def _free_bytes(where: str) -> int | None:
    if where.startswith("s3://"):
        return None
    probe = where
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    return shutil.disk_usage(probe).free


def _size(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
