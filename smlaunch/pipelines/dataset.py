"""Build each channel's Ray Dataset: read on the hosts holding it, preprocess on data hosts only.

The data-host selector is set on the operators and on the `DataContext`; the trainer also sets it
on `DataConfig`, because Ray Train replaces a Dataset's execution options when training starts
(../shared/notes/ray.md §6.2).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from smlaunch.cluster.labels import host_label
from smlaunch.cluster.plan import LaunchPlan
from smlaunch.config.schema import LaunchConfig


def list_channels(plan: LaunchPlan, here: bool = False) -> dict:
    """Each File, FastFile and file-system channel's `ChannelListing`, listed on its hosts (`here`:
    by this process, the hosts' directories being on this machine: `listing.list_channel`)."""
    from smlaunch.pipelines.sources.listing import list_channel

    return {
        c.name: list_channel(c, {h: plan.host(h).opt_ml for h in c.hosts}, here=here)
        for c in plan.channels
        if c.input_mode != "Pipe"
    }


def build_datasets(
    cfg: LaunchConfig,
    plan: LaunchPlan,
    listings: dict | None = None,
    num_classes: int | None = None,
    shared: list | None = None,
    cache=None,
) -> dict:
    """Each channel's dataset; `listings` from `list_channels` (listed here when None);
    `num_classes` bounds the labels (a label at or above it is a bad sample); `shared`, if given,
    gets the object refs of the listings' arrays the read tasks gather their paths from
    (`units.LazyUnits`), for the warm-up to bring to the data hosts (`warmup`); `cache`: the run's
    `CacheSpec` for the train channel (`pipelines.cache`), or None."""
    import ray
    import ray.data

    from smlaunch.pipelines.corrupt import start_counter
    from smlaunch.pipelines.places import SamplePlaces
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.node_trees import fallback_readers
    from smlaunch.pipelines.sources.pipe_reader import PipeChannelDatasource

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.label_selector = plan.preprocess_selector
    ctx.enable_progress_bars = False
    use_block_size(ctx, block_bytes(cfg))
    host_names = [h.name for h in plan.hosts]
    listings = list_channels(plan) if listings is None else listings
    start_counter(
        {c.name: c.max_corrupted_records for c in plan.channels},
        {c.name: SamplePlaces.of(c.record_format, listings[c.name]) for c in plan.channels if c.name in listings},
    )
    num_classes = num_classes or (cfg.model.num_classes if cfg.model else None)
    datasets = {}
    source: ChannelDatasource | PipeChannelDatasource
    for channel in plan.channels:
        train_cache = cache if channel.name == "train" else None
        chain = _chain(cfg, channel, host_names, num_classes, train_cache)
        roots = {h: plan.host(h).opt_ml for h in (*channel.hosts, *fallback_readers(plan, channel))}
        if channel.input_mode == "Pipe":
            source = PipeChannelDatasource(channel, roots, num_classes=num_classes)
        else:
            source = ChannelDatasource(
                channel,
                listings[channel.name],
                roots,
                num_classes,
                cpus={h: plan.host(h).num_cpus for h in channel.hosts},
                ranks=plan.train_workers,
                seed=cfg.seed,
                chain_slots=plan.preprocess_slots if plan.elastic else 0,
                block_units=ELASTIC_BLOCK_BATCHES * cfg.pipeline.batch_size if plan.elastic else 0,
                head_rows=first_window_rows(cfg, plan),
                cache=train_cache,
                cached_tail=tail_in_read(plan, channel, chain) if train_cache is not None else None,
            ).share_listing()
            if shared is not None:
                shared.extend(source.shared_arrays())
        datasets[channel.name] = _chained(cfg, plan, source, channel, chain, train_cache)
        if train_cache is not None:
            datasets[CACHED_TRAIN] = _chained(cfg, plan, source, channel, chain, train_cache, cached=True)
    return datasets


CACHED_TRAIN = "train_cached"
"""The train channel's second dataset, with a cache: the same reads and chain, which the loop
iterates in the epochs that read the sealed cache (`cached_train_selector`)."""


def cached_train_selector(plan: LaunchPlan, cache) -> dict | None:
    """The bucket Ray Data budgets the cached epochs' dataset (`CACHED_TRAIN`) by; None without a
    cache. A cached epoch reads through a Dataset of its own, for two reasons:

    - Ray Data splits each read task's output to reach the block count a Dataset was created
      with, and that count is fixed for the run. The train channel's is its files' balanced
      count (`read_channel`); a cached epoch has a few read tasks, whose blocks are a batch's rows
      already. Read through the files' Dataset, bench/cache_zero.py's cached epochs asked for 692
      blocks of 3 tasks: each block was cut into 231, one row each, a chain task took 64 of them
      at 0.15-0.18 s of scheduling, and the trainer waited 75-88 % of its steps at about 120
      images/s while both hosts were mostly idle. The cached Dataset asks for one block, so Ray
      splits nothing.
    - With `autoscale.min_data_hosts: 0` it is budgeted by the train hosts' bucket. Ray Data 2.60
      budgets a Dataset by one `ray-subcluster` bucket, fixed for the run: by the data hosts', with
      no data host left it runs no task at all ("Cluster resources are not enough to run any
      task", a one-node run). Its tasks still go to the data hosts while any is joined."""
    if cache is None:
        return None
    zero = plan.elastic is not None and plan.elastic.min_hosts == 0
    return dict(plan.train_selector if zero else plan.preprocess_selector)


@dataclass(frozen=True)
class CachedTail:
    """The chain that an epoch read from the cache runs in its read tasks (`cache.reader`), not in
    the chain's own tasks: a cached row left the read as the prefix's pixels (77 KB in
    bench/cache.py) and the crop kept 3 KB of it, and moving the 77 KB through Ray's object store
    to the chain's task cost the data host more CPU than the rest of the cached epoch (0.74 ms a
    row against 0.29 ms with the rest run in the read: BENCHMARKS.md, cache). `without_data_hosts`:
    only in an epoch planned while no data host is joined (`tail_in_read`).

    Decided once an epoch, as its reads are planned, not as each read task starts: a call of the
    chain then holds rows of one kind. Rows the read ran the chain on and rows it did not, in one
    call, had two schemas, which the trainer's collate could not stack (bench/cache_zero.py)."""

    chain: Any
    without_data_hosts: bool = False

    def here(self) -> bool:
        if not self.without_data_hosts:
            return True
        from smlaunch.cluster.autoscale.placement import none_joined

        return none_joined()


def tail_in_read(plan: LaunchPlan, channel, chain) -> CachedTail | None:
    """Where an epoch read from the cache runs `chain` in its read tasks (`CachedTail`): only where
    the reads run on the host the chain would run the rows on, so no work moves between hosts.

    - Fixed hosts: where every host reading the channel is one the chain runs on (by default the
      channel goes to the data hosts only).
    - `autoscale.min_data_hosts: 0`: in an epoch that starts with no data host joined, whose reads
      and chain both run on the train hosts (`fallback_to_train_hosts`). A host that joins within
      it runs the chain's tasks, which pass the rows on: it feeds from the next epoch on.
    - Other elastic data hosts: never. A host that joins later runs chain tasks but no reads (a
      read goes to the channel's hosts of the plan), so a cached epoch keeps the chain in the
      chain's tasks, which the hosts the loop adds share.
    """
    if plan.elastic is None:
        on = "data" if plan.data_selector else "train"
        return CachedTail(chain) if all(plan.host(h).subcluster == on for h in channel.hosts) else None
    return CachedTail(chain, without_data_hosts=True) if plan.elastic.min_hosts == 0 else None


def _chain(cfg: LaunchConfig, channel, host_names, num_classes, cache):
    """The channel's chain (`ops.chain.Chain`), which its dataset maps its rows through."""
    from smlaunch.pipelines.ops.chain import Chain

    return Chain(
        cfg.pipeline.ops,
        host_names,
        train=channel.name == "train",
        channel=channel.name,
        max_corrupted_records=channel.max_corrupted_records,
        # A user's task's classes (`model.num_classes`) bound its masks' values; the
        # built-in classification's bound the labels, and its chain moves no masks.
        num_classes=num_classes if cfg.task is not None else None,
        ignore_index=cfg.task.ignore_index if cfg.task is not None else None,
        cache=cache,
    )


def _chained(cfg: LaunchConfig, plan: LaunchPlan, source, channel, chain, cache, cached: bool = False):
    """The channel's read, then its `chain` on the preprocessing hosts: with a `cache`, on a
    shard's rows a call (`CacheSpec.shard_rows`: each call writes one shard), unless the dataset
    is the one the cached epochs read (`cached`: `CACHED_TRAIN`, whose calls run the random rest
    alone, on the pipeline's batch, over blocks Ray does not split: `cached_train_selector`)."""
    import ray.data

    call_rows = cache.shard_rows if cache is not None and cache.shard_rows and not cached else 0
    call_rows = call_rows or cfg.pipeline.batch_size
    fallback = fallback_to_train_hosts(plan)
    # Once no data host is left, the cached epochs' reads run the chain on the train hosts
    # (`tail_in_read`): as many at once as the chain could have had there. Bounded by the data
    # hosts' CPUs as well (a 1-CPU host's one read), the trainer waited 10-30 % with none.
    slots = plan.train_spare_cpus if cached and fallback else None
    ds = read_channel(source, channel, fallback, slots, blocks=1 if cached else None)
    placement = {"ray_remote_args_fn": _placement(plan), **fallback} if plan.elastic else {}
    with warnings.catch_warnings():  # see `_placement`
        warnings.filterwarnings("ignore", message=".*ray_remote_args_fn.*deprecated")
        return ds.map_batches(
            chain,
            batch_size=call_rows,
            batch_format="numpy",
            compute=ray.data.TaskPoolStrategy(size=plan.preprocess_slots),
            num_cpus=1,
            label_selector=plan.preprocess_selector,
            **placement,
        )


def first_window_rows(cfg: LaunchConfig, plan: LaunchPlan) -> int:
    """Rows every rank's iterator holds before its first batch: Ray Data's `iter_torch_batches`
    fetches `prefetch_batches` batches and a block more first; the shuffle buffer draws from two
    batches (`trainers.shuffle_buffer`)."""
    return plan.train_workers * (cfg.trainer.prefetch_batches + 2) * cfg.trainer.batch_size


def fallback_to_train_hosts(plan: LaunchPlan) -> dict:
    """With `autoscale.min_data_hosts: 0`, where the read's and the chain's tasks go once no data
    host is left (the epoch reads a sealed cache, `launcher.job.cache_setup.without_data_hosts`):
    the train hosts, as Ray's `fallback_strategy` (a label selector tried where the task's own
    matches no node); {} otherwise. Those epochs read the train hosts' budgeted dataset
    (`CACHED_TRAIN`)."""
    if plan.elastic is None or plan.elastic.min_hosts:
        return {}
    return {"fallback_strategy": [{"label_selector": dict(plan.train_selector)}]}


def _placement(plan: LaunchPlan):
    """With elastic data hosts, each chain task goes to the hosts the loop counts as joined
    (`cluster.autoscale.placement`). Ray 2.60 deprecates `ray_remote_args_fn` (removal planned for
    2.64, ray-project/ray#64963) with no per-task replacement in its public API yet: the warning is
    silenced here, for this call only, and tests/launcher/attached/test_elastic.py fails the day the
    argument goes (the hosts would then grow past what the loop asked for)."""
    from smlaunch.cluster.autoscale.placement import JoinedHosts
    from smlaunch.cluster.labels import NODE_ID_LABEL

    return JoinedHosts(plan.preprocess_selector, NODE_ID_LABEL)


ELASTIC_BLOCK_BATCHES = 4
"""With elastic data hosts, a pass's blocks hold at most this many batches' worth of files (row
groups): a chain task takes one block, and a host given back ends only once the tasks it runs
have. By bytes alone, a channel of small files (bench/elastic.py: 21,564 PNGs of 8x8 digits,
5 MB) was 16 blocks of 1,350 images, and a drained host ran its task on for 25 s after the
drain, backpressured by a trainer that took the rows slowly. Image files of ImageNet's size
already make blocks of a batch or so by bytes (`block_bytes`); records packed many to a file
get no bound here (their rows per file are not known before reading), only the bytes'. (A host
given back also stays until the trainer has taken the blocks it made: `elastic_buffer_bytes`.)"""
ELASTIC_BUFFER_BLOCKS_PER_SLOT = 6
ELASTIC_BUFFER_FLOOR = 64 << 20


def elastic_buffer_bytes(cfg: LaunchConfig, plan: LaunchPlan) -> int | None:
    """With elastic data hosts, the object store budget of the train channel's executions: six
    blocks per chain slot at the most hosts, 64 MiB at least; None (Ray Data's own, half the
    store) otherwise. A host given back stays up until the trainer has taken the blocks it made:
    under Ray's budget the chain ran 20-70 s of batches ahead of a trainer that took them slowly,
    and a drained host was paid for that long (bench/elastic.py: 72 s; 5-7 s under this budget,
    issue 57). Two blocks per slot (16 MiB) starved the chain: 4 hosts made 77 images/s where 2
    made 120. A budget the chain reaches made Ray Data's scheduling loop spin until
    `pipelines.budget.calm_when_held`."""
    if plan.elastic is None:
        return None
    per_block = block_bytes(cfg) or (1 << 20)
    return max(ELASTIC_BUFFER_FLOOR, ELASTIC_BUFFER_BLOCKS_PER_SLOT * plan.preprocess_slots * per_block)


def block_bytes(cfg: LaunchConfig) -> int | None:
    """Ray Data's target block size for the job: 3/4 of the chain's output for one batch (uint8
    CHW at the last crop or resize size), at least 1 MiB; None (Ray's 128 MiB) when no op sets a
    size (the config requires a crop, so only for a chain built outside it).

    A map task merges what it yields until the merged block passes the target, and only then
    hands it on. At 128 MiB a chain task over 224 px images gave nothing to the trainer until it
    had made 28 batches or finished its input, which is what a cold job's first batch waited
    for. Below one batch's output, each batch leaves as soon as it is made; Ray slices only a
    block of 1.5x the target or more, so a batch is never cut. bench/offload_vs_dataloader.py,
    2-core VM: a cold first batch of 3.0 s instead of 3.5 s, for about 5 % of the pass's
    images/s (a block per batch, not per chain task; BENCHMARKS.md)."""
    from smlaunch.config.op_specs import CenterCrop, RandomResizedCrop, Resize

    side = None
    for op in cfg.pipeline.ops:
        side = op.size if isinstance(op, (RandomResizedCrop, CenterCrop, Resize)) else side
    if side is None:
        return None
    return max(1 << 20, 3 * side * side * cfg.pipeline.batch_size * 3 // 4)


def use_block_size(ctx, size: int | None) -> None:
    """The job's block size (`block_bytes`) on a `DataContext`; Ray's 128 MiB when None. It bounds
    the read's blocks as well as the chain's: a Dataset carries one context for all its operators."""
    if size:
        ctx.target_max_block_size = size


def read_channel(source, channel, fallback: dict | None = None, slots: int | None = None, blocks: int | None = None):
    """The channel's read, on its hosts, in the number of blocks its source asks for
    (`block_count`; None: Ray Data plans it). Ray splits each read task's output evenly when a
    pass has fewer tasks than blocks.

    - Files (`ChannelDatasource`): at most one read task per CPU of the reading hosts, each
      task's output cut into enough blocks that the ranks get equal shares
      (`units.balanced_blocks`). One block per read task would read faster (no split),
      but the ranks then share a few large blocks unevenly: in tests/launcher/test_end_to_end.py's
      S3 job, 4 blocks over 3 ranks, 16 steps covered 1231 of the epoch's 1436 rows, the ranks
      with less waiting through drain steps while one worked through its extra block. Balance
      across the GPUs is worth more than the read's speed.
    - Pipe: one block count per stream, so Ray does not split a stream's blocks, which already
      leave as they fill (`PipeChannelDatasource.block_count`).

    Read tasks take no CPU of Ray's; `read_slots` caps how many run at once instead (one per CPU
    of the reading hosts, one per stream). They run in worker processes of their own
    (`READ_WORKER_ENV`). Ray Data reserves CPUs for the upstream operator
    first, so a read of 1 CPU a task took a 1-CPU data host's only CPU for itself, and the
    chain ran only once the reads had filled the read's share of the object store (bench/
    scale_reads.py: first batch after 32 s, 575 MiB queued; at 0 CPU, 9.5 s, as on 2,000 files).
    A read is mostly waiting on the disk or the network, and the OS shares the cores. `fallback`:
    where the read goes once the channel's hosts are gone (`fallback_to_train_hosts`); `slots`: read
    tasks at once, where not `read_slots`; `blocks`: the block count asked for, where not the
    source's (`cached_train_selector`)."""
    import ray.data

    return ray.data.read_datasource(
        source,
        label_selector={host_label(): f"in({','.join(channel.hosts)})"},
        **(fallback or {}),
        override_num_blocks=blocks or source.block_count(),
        num_cpus=0,
        compute=ray.data.TaskPoolStrategy(size=slots or source.read_slots()),
        runtime_env={"env_vars": dict(READ_WORKER_ENV)},
    )


READ_WORKER_ENV = {"SMLAUNCH_WORKER_POOL": "read"}
"""Set on every read task, so that Ray runs reads in worker processes of their own. Ray reuses an
idle worker for any task of the same job and runtime environment, and a read task, at no CPU,
is given one as soon as its slot frees: on the 1.28M-file folder the pass's long read tasks took
the data host's warmed chain workers (`pipelines.warmup`) a moment after the first short ones
ended, and the chain's next tasks waited for new workers to import torch again (2-CPU data host,
2-core VM: the first batch 3-10 s after the data was asked for, against about 4 s on 2,000
files). A different environment keeps the pools apart: chain tasks keep the warmed workers, and
read tasks, which import no torch, start in their own (warmed too: `warm_read_workers`).
Ray merges a task's `env_vars` with its parent's (Ray Train's, under Ray Train). Ray Data's own
`DataContext.isolate_read_workers` keeps reads apart the same way, with a variable per operator
and execution, which no warm-up could know in advance."""
