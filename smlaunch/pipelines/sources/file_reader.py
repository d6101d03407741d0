"""A Ray Data source over a File, FastFile or file-system channel, read on the hosts that hold it.

Paths are relative to `/opt/ml/input/data/<channel>`; a read task looks up the host it runs on
(its node's host label, `cluster.plan.host_label`) and opens that host's copy, as a task on a SageMaker host reads its
own `/opt/ml`. Each sample is read once per pass:

* FullyReplicated, or a file system (FSx, EFS) every host mounts: every receiving host sees every
  file, so the files are split among read tasks and a task reads its share wherever it lands.
* ShardedByS3Key: each host holds different files. Ray Data places read tasks by one selector
  for all of them, so a task that lands on another host than the one holding its files streams
  them from a generator task pinned to that host (zero CPUs, so two hosts each waiting for the
  other's CPU cannot deadlock).

Every record format goes through here (`rows` turns a file into samples). Ray Data's own file
readers (`read_parquet`, `read_webdataset`, `read_images`) open paths from whichever node runs the
task, so they cannot read a ShardedByS3Key channel whose files exist only on their host, and they
fail a whole job on one damaged file: one reader keeps the corrupt-record policy, the one-line
errors and the host rules the same for every format. Records stream out in small Arrow blocks,
never a whole file at once. A pass reads its epoch's order (`pipelines.order`: the files
permuted per epoch for a shuffled channel, each read task a contiguous run of them, a few files
interleaved) and every row leaves with its position in it, which a checkpoint resumes from
(`pipelines.position`). Reads are deterministic for an epoch (same files, same order, same block
sizes), which is what makes Ray's retries and lineage reconstruction after a lost host deliver
each sample once (see `host_loss`).
"""

from __future__ import annotations

import sys
from functools import partial

import numpy as np
import ray
import ray.data
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.pipelines.budget import tune_this_execution
from smlaunch.pipelines.formats import CHANNEL_FORMATS
from smlaunch.pipelines.sources.listing import ChannelListing
from smlaunch.pipelines.sources.read_task import read_units, target_block_bytes
from smlaunch.pipelines.sources.units import (
    HEAD_BATCHES,
    LazyUnits,
    Units,
    balanced_blocks,
    read_runs,
    units_per_task,
)

Unit = tuple[str, int, int | None]
"""(relative path, bytes, row group or None): what a read task reads; a Parquet file is split into
its row groups so a few large files still spread over every task."""


class ChannelDatasource(Datasource):
    """`listing` says what each receiving host holds; `roots` maps each host to its /opt/ml (None:
    the host's own, on SageMaker); labels at or above `num_classes` are bad samples; `cpus`: each
    receiving host's CPUs, which bound the read tasks (None: no bound); `ranks`: the train workers
    that share the channel's rows (with `cpus`, the source sets the block count: `block_count`).

    Ray Data plans one read task per planned block: at its 1 MiB blocks, a channel of 140 GB of
    image files would be 140,000 tasks per epoch, and each task costs the driver and a worker
    about as much as reading thousands of small records (bench/formats.py, 2-core VM: 20,000
    TFRecord rows in 0.42-0.49 s as 8 tasks, 0.29-0.33 s as 2). So a small pass has one read
    task per CPU of the hosts that read it, and Ray cuts their output into the block count this
    source asks for (`block_count`), so the ranks still share blocks evenly. A large pass has
    more, each bounded (`units.TASK_UNITS`, `TASK_BYTES`): one task per CPU over 1.28M files was a read of 125 s that
    a lost host's retry would redo whole. The tasks take no CPU of Ray's (`dataset.read_channel`)
    and run one per CPU at a time (`read_slots`)."""

    def __init__(
        self,
        channel: ChannelPlan,
        listing: ChannelListing,
        roots: dict[str, str | None],
        num_classes: int | None = None,
        cpus: dict[str, int] | None = None,
        ranks: int | None = None,
        seed: int = 0,
        chain_slots: int = 0,
        block_units: int = 0,
        head_rows: int = 0,
        cache=None,
        cached_tail=None,
    ):
        self.channel = channel
        self.cache = cache
        """The run's `CacheSpec` (train channel; None: no cache): an epoch planned once the cache is
        sealed reads its shards instead of the channel (`cache.reader`)."""
        self.cached_tail = cached_tail
        """The chain that an epoch read from the cache runs in its read tasks, and when
        (`pipelines.dataset.CachedTail`, asked as each epoch's reads are planned); None: the
        chain's own tasks run it."""
        self._manifest: dict | None = None
        self.head_rows = head_rows
        """Rows the ranks' iterators hold before their first batch (all ranks; see `units.headed_runs`)."""
        self.chain_slots = chain_slots
        """Chain tasks that may run at once, where more than the reading CPUs (elastic data hosts):
        the pass is cut into enough blocks to keep them all at work."""
        self.block_units = block_units
        """Units (files, row groups) per block at most, where set (elastic data hosts): a chain task
        takes one block, and a host given back ends only once its tasks have, and their blocks
        are taken (see `pipelines.dataset.ELASTIC_BLOCK_BATCHES`). 0: blocks sized by bytes only."""
        self.seed = seed
        self._listing: ChannelListing | ray.ObjectRef = listing
        self._listing_ref: ray.ObjectRef | None = None
        self._share_refs: dict[str | None, ray.ObjectRef] = {}
        """Each share's `Units.arrays()` in the object store, where shared (`share_listing`): read tasks
        then carry their units as indices (`units.LazyUnits`)."""
        self.roots = roots
        self.num_classes = num_classes
        self.cpus = cpus
        self.ranks = ranks
        self._shares: dict | None = None
        self._size: int | None = None
        self._tasks: dict[tuple, list[ReadTask]] = {}
        self._last_epoch: tuple[int, dict | None] = (1, None)
        """Ray's planning asks for the read tasks five times per execution (size estimate,
        parallelism, split factor, metadata, input), and every epoch executes again: for 100,000
        image files, building them each time was most of the driver's CPU (py-spy). Only the
        input's call (with a `data_context`) runs them; the others get estimates (`_estimates`)."""
        self._estimated: dict[tuple, list[ReadTask]] = {}

    @property
    def listing(self) -> ChannelListing:
        if isinstance(self._listing, ray.ObjectRef):  # shipped by reference (`share_listing`)
            listing: ChannelListing = ray.get(self._listing)
            self._listing = listing
            return listing
        return self._listing

    def share_listing(self) -> ChannelDatasource:
        """Ship the listing by reference from now on: Ray Data pickles the datasource with the
        Dataset, which travels from the driver to Ray Train's controller and on to its split
        coordinator; 1.28M files' listing (53 MiB) took each hop about half a second, where the
        object store hands it over once. Each share's arrays go too, for the read tasks to gather
        their own paths from (`units.LazyUnits`)."""
        if self._listing_ref is None:
            self._listing_ref = ray.put(self.listing)
            arrays = {host: units.arrays() for host, units in self.shares().items()}
            self._share_refs = {host: ray.put(a) for host, a in arrays.items() if a is not None}
        return self

    def shared_arrays(self) -> list:
        """The object refs of the shares' arrays (`share_listing`)."""
        return list(self._share_refs.values())

    def get_name(self) -> str:
        return f"Channel[{self.channel.name}]"

    def estimate_inmemory_data_size(self) -> int:
        if self._size is None:  # asked at every pass's planning, like the read tasks
            self._size = sum(units.total_size() for units in self.shares().values())
        return self._size

    def shares(self) -> dict[str | None, Units]:
        """Units to read once, by the host that must read them (None: any receiving host), in the
        listing's order; each pass reads them in its epoch's order (`pipelines.order`)."""
        if self._shares is None:
            files = self.listing.files
            groups = self.listing.row_groups or None
            if self.channel.distribution == "ShardedByS3Key" and self.channel.file_system is None:
                self._shares = {host: Units(listed, groups) for host, listed in files.items()}
            else:
                self._shares = {None: Units(next(iter(files.values())), groups)}
        return self._shares

    def __getstate__(self) -> dict:
        """Without the planning caches: Ray Data ships the datasource with the Dataset (to Ray
        Train's split coordinator), where 1.28M files' units and tasks were 167 MB of pickle."""
        state = {**self.__dict__, "_shares": None, "_tasks": {}, "_estimated": {}}
        if self._listing_ref is not None:
            state["_listing"] = self._listing_ref
        return state

    def block_count(self) -> int | None:
        """The pass's block count, given the hosts' CPUs and the `ranks` that share the channel
        (None without them: Ray Data plans it). See `balanced_blocks`."""
        if self.cpus is None or not self.ranks:
            return None
        tasks = sum(self._task_count(host, units, sys.maxsize) for host, units in self.shares().items() if units)
        target = target_block_bytes()
        units = sum(len(u) for u in self.shares().values())
        return balanced_blocks(
            tasks,
            self.estimate_inmemory_data_size(),
            target,
            max(sum(self.cpus.values()), self.chain_slots),
            self.ranks,
            at_least=-(-units // self.block_units) if self.block_units else 0,
        )

    def read_slots(self) -> int:
        """Read tasks of a pass that run at once: one per CPU of the reading hosts (`_readers`;
        without `cpus`, of the cluster). The reads take no CPU of Ray's (`dataset.read_channel`),
        so this caps them instead."""
        parallelism = sys.maxsize if self.cpus is not None else int(ray.cluster_resources().get("CPU", 1))
        return max(1, sum(self._readers(host, units, parallelism) for host, units in self.shares().items() if units))

    def _readers(self, holder: str | None, units: Units, parallelism: int) -> int:
        """Read tasks of the share of `holder` (None: any receiving host) that run at once: one per
        CPU of the host (of all of them for a shared share) when the CPUs are known, else Ray's
        parallelism spread over the shares; never more than its units. The pass's `open_units`
        are shared among these (`units_per_task`), whatever the count of tasks."""
        if self.cpus is None:
            bound = max(1, parallelism // len(self.shares()))
        else:
            bound = max(1, self.cpus.get(holder, 1) if holder is not None else sum(self.cpus.values()))
        return max(1, min(bound, len(units)))

    def _task_count(self, holder: str | None, units: Units, parallelism: int) -> int:
        return len(self._runs(holder, units, parallelism))

    def _runs(self, holder: str | None, units: Units, parallelism: int) -> list[range]:
        """The share's read tasks as runs of its epoch's order (`units.read_runs`; short first ones
        for an image folder). `block_count` counts with these too."""
        head = (
            HEAD_BATCHES * self.channel.block_rows
            if CHANNEL_FORMATS[self.channel.record_format].layout == "images"
            else 0
        )
        return read_runs(units, self._readers(holder, units, parallelism), head, self.head_rows)

    def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> list[ReadTask]:
        tune_this_execution()  # planning runs in the process that executes (see `pipelines.budget`)
        if data_context is None and self._last_epoch[1] is None:
            key: tuple = (parallelism, per_task_row_limit, self._sealed() is not None)
            if key not in self._estimated:
                self._estimated[key] = self._estimates(parallelism, per_task_row_limit)
            return self._estimated[key]
        epoch, resume = self._epoch(data_context)
        manifest, resume = self._cache_for(resume)
        if manifest is not None:
            from smlaunch.pipelines.cache.reader import cache_read_tasks

            readers = max(1, self.read_slots())
            return cache_read_tasks(
                self.cache.root,
                manifest,
                self.channel,
                self.seed,
                epoch,
                readers,
                resume,
                per_task_row_limit,
                self.cached_tail.chain if self.cached_tail is not None and self.cached_tail.here() else None,
            )
        # A worker group restarted within the run may plan the same epoch again, resumed this time.
        key = (parallelism, per_task_row_limit, epoch, None if resume is None else resume["delivered"])
        if key not in self._tasks:
            self._tasks = {k: v for k, v in self._tasks.items() if k[2] == epoch}  # one epoch's tasks held
            self._tasks[key] = self._read_tasks(parallelism, per_task_row_limit, epoch, resume)
        return self._tasks[key]

    def _estimates(self, parallelism: int, per_task_row_limit) -> list[ReadTask]:
        """What Ray's planning calls without a `data_context` get: the pass's read tasks as counted
        and sized, not runnable. Ray Data runs only the tasks it asks for with one (`plan_read_op`);
        the other calls (`read_datasource` on the driver, the parallelism rule, the metadata guess)
        read their count and sizes. Building the runnable tasks cut each task's paths out of the
        listing: 0.7 s per call at 1.28M files, twice before the split coordinator's real one."""
        from smlaunch.pipelines.order import epoch_order

        tasks, epoch = [], self._last_epoch[0]
        manifest = self._sealed()
        if manifest is not None:  # an epoch of the cache: its tasks, counted and sized as they will run
            from smlaunch.pipelines.cache.reader import cache_read_tasks

            real = cache_read_tasks(
                self.cache.root, manifest, self.channel, self.seed, epoch, self.read_slots(), None, per_task_row_limit
            )
            return [
                ReadTask(partial(_estimate_only, self.channel.name), t.metadata, per_task_row_limit=per_task_row_limit)
                for t in real
            ]
        for host, units in self.shares().items():
            order = epoch_order(len(units), self.channel.name, self.seed, epoch if self.channel.shuffle else None)
            sizes = np.concatenate([[0], np.cumsum(units.sizes[order])])
            for run in self._runs(host, units, parallelism):
                meta = BlockMetadata(
                    num_rows=None, size_bytes=int(sizes[run.stop] - sizes[run.start]), exec_stats=None, input_files=None
                )
                tasks.append(
                    ReadTask(partial(_estimate_only, self.channel.name), meta, per_task_row_limit=per_task_row_limit)
                )
        return tasks

    def _cache_for(self, resume: dict | None) -> tuple[dict | None, dict | None]:
        """(the sealed cache's manifest, or None: read the channel; the position to resume from),
        by `cache.reader.epoch_source`, saying it where an epoch starts over."""
        from smlaunch.pipelines.cache.reader import epoch_source

        manifest, resume, lost = epoch_source(self._sealed(), self.cache and self.cache.fingerprint, resume)
        if lost:
            import logging

            logging.getLogger("smlaunch").warning(f"channel '{self.channel.name}': {lost}")
        return manifest, resume

    def _sealed(self) -> dict | None:
        """The cache's manifest once it is sealed (then kept: a sealed cache does not change)."""
        if self.cache is not None and self._manifest is None:
            from smlaunch.pipelines.cache.store import CacheStore

            self._manifest = CacheStore(self.cache.root).manifest()
        return self._manifest

    def _epoch(self, data_context) -> tuple[int, dict | None]:
        """The epoch this pass reads (1-based), and the position to resume it from, if any.

        Ray Data counts a Dataset's executions in its context (`_execution_idx`, what its own
        `FileShuffleConfig(reseed_after_execution=True)` reseeds by); the trainer posts on the
        relay the epochs done before this group started, and the resumed epoch's position
        (`pipelines.position`). Planning without a context (Ray's size estimates) reads the last
        epoch planned."""
        if data_context is None:
            return self._last_epoch
        from smlaunch.cluster.run_relay import order_state

        base, resume = (
            order_state(self.channel.name) if self.channel.shuffle or self.channel.name == "train" else (0, None)
        )
        epoch = base + data_context._execution_idx + 1
        resume = resume if resume is not None and resume.get("epoch") == epoch else None
        self._last_epoch = (epoch, resume)
        return self._last_epoch

    def _read_tasks(self, parallelism: int, per_task_row_limit, epoch: int, resume: dict | None) -> list[ReadTask]:
        from smlaunch.pipelines.order import epoch_order

        done = drawn = seeks = None
        if resume is not None:
            from smlaunch.pipelines.position import EpochPosition

            position = EpochPosition.from_state(resume)
            done, drawn, seeks = position.is_done, position.drawn_ordinals(), position.seeks
        tasks, offset = [], 0
        for host, units in self.shares().items():
            order = epoch_order(len(units), self.channel.name, self.seed, epoch if self.channel.shuffle else None)
            runs = self._runs(host, units, parallelism)
            open_units = units_per_task(self.channel, self._readers(host, units, parallelism))
            for run in runs:
                places = np.arange(run.start, run.stop, dtype=np.int64)
                if done is not None:  # a resumed epoch: units drawn whole are not read again
                    places = places[~done(places + offset)]
                if not len(places):
                    continue
                unit_ids = places + offset
                own = {u: drawn[u] for u in unit_ids.tolist() if u in drawn} if drawn else {}
                picked, own_seeks = order[places], {u: seeks[u] for u in own if u in seeks} if seeks else None
                # A short task (`units.headed_runs`) is packed here: cheap, and it starts without the arrays.
                packed = (
                    LazyUnits(self._share_refs[host], picked, unit_ids, own, open_units, own_seeks)
                    if host in self._share_refs and len(picked) > SHORT_TASK_UNITS
                    else units.packed(picked, unit_ids, own, open_units, own_seeks)
                )
                # No `input_files`: every file of a task there was 48 MB of pickle per task at 1.28M files.
                meta = BlockMetadata(
                    num_rows=None, size_bytes=int(units.sizes[picked].sum()), exec_stats=None, input_files=None
                )
                read = partial(
                    read_units, self.channel, host, packed, self.roots, self.listing.classes, self.num_classes
                )
                # Ray's warning for a read task over 1 MiB needs a name; a partial takes attributes (it has a __dict__).
                read.__name__ = f"read_{self.channel.name}"  # type: ignore[attr-defined]  # typeshed's partial has none
                tasks.append(ReadTask(read, meta, per_task_row_limit=per_task_row_limit))
            offset += len(units)
        if not tasks:  # a resumed epoch drawn to its end: Ray Data's planning divides by the task count
            meta = BlockMetadata(num_rows=0, size_bytes=0, exec_stats=None, input_files=None)
            tasks.append(ReadTask(_read_nothing, meta, per_task_row_limit=per_task_row_limit))
        return tasks


SHORT_TASK_UNITS = 1024
"""A read task of at most this many units carries them packed even where the listing is shared."""


def _read_nothing():
    return iter(())


def _estimate_only(channel: str):
    raise RuntimeError(
        f"channel '{channel}': a planning estimate's read task was run; Ray Data's planning "
        "changed (ChannelDatasource._estimates)"
    )
