"""Build each channel's Ray Dataset: read on the hosts holding it, preprocess on data hosts only.

The data-host selector is set on the operators and on the `DataContext`; the trainer also sets it
on `DataConfig`, because Ray Train replaces a Dataset's execution options when training starts
(../shared/notes/ray.md §6.2).
"""

from __future__ import annotations

from smlaunch.cluster.plan import LaunchPlan
from smlaunch.config.schema import LaunchConfig
from smlaunch.pipelines.channels import list_host_channel

LIST_TIMEOUT_S = 60


def build_datasets(cfg: LaunchConfig, plan: LaunchPlan) -> dict:
    import ray
    import ray.data

    from smlaunch.pipelines.corrupt import start_counter
    from smlaunch.pipelines.datasource import ChannelDatasource
    from smlaunch.pipelines.pipe_source import PipeChannelDatasource
    from smlaunch.pipelines.chain import Chain

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.label_selector = plan.data_selector
    ctx.enable_progress_bars = False
    host_names = [h.name for h in plan.hosts]
    preprocess_on = "data" if plan.data_selector else "train"
    preprocess_cpus = sum(h.num_cpus for h in plan.hosts if h.subcluster == preprocess_on)
    start_counter({c.name: c.max_corrupted_records for c in plan.channels})
    datasets = {}
    for channel in plan.channels:
        roots = {h: plan.host(h).opt_ml for h in channel.hosts}
        if channel.input_mode == "Pipe":
            source = PipeChannelDatasource(channel, roots)
        else:
            source = ChannelDatasource(channel, list_channel_files(channel, roots), roots)
        on_hosts = {"sm-host": f"in({','.join(channel.hosts)})"}
        if _fuse_read_and_chain(plan, channel, source, preprocess_on, preprocess_cpus):
            # One task reads a block and runs the chain on it: no read task holds a CPU slot while
            # the chain waits for one, and no block crosses the object store between the two.
            # Ray fuses a read only into whole-block batches; the reader's blocks already hold
            # `pipeline.batch_size` rows (`ChannelPlan.block_rows`).
            # One read task per file, so Ray does not split the reads' output (which forbids fusing).
            pool = ray.data.TaskPoolStrategy(size=preprocess_cpus)
            files = sum(len(f) for f in source.shares().values())
            ds = ray.data.read_datasource(source, compute=pool, label_selector=on_hosts, override_num_blocks=files)
            chain_args = {"compute": pool, "batch_size": None}
        else:
            ds = ray.data.read_datasource(source, label_selector=on_hosts)
            chain_args = {"compute": ray.data.TaskPoolStrategy(size=preprocess_cpus),
                          "label_selector": plan.data_selector, "batch_size": cfg.pipeline.batch_size}
        datasets[channel.name] = ds.map_batches(
            Chain(cfg.pipeline.ops, host_names, train=channel.name == "train", channel=channel.name),
            batch_format="numpy", num_cpus=1, **chain_args)
    return datasets


def _fuse_read_and_chain(plan, channel, source, preprocess_on: str, preprocess_cpus: int) -> bool:
    """Read and chain run as one task when every receiving host preprocesses (reads then land
    only where the chain may run) and there are enough read tasks to keep every preprocessing CPU
    busy: a File or FastFile channel with at least as many files as those CPUs. Otherwise the read
    stays a task of its own and the chain spreads its blocks over all the preprocessing CPUs."""
    if any(plan.host(h).subcluster != preprocess_on for h in channel.hosts):
        return False
    files = getattr(source, "files", None)
    return files is not None and sum(len(f) for f in source.shares().values()) >= preprocess_cpus


def list_channel_files(channel, roots: dict[str, str | None]) -> dict[str, list[tuple[str, int]]]:
    """What each receiving host holds, listed on that host (under FullyReplicated one listing
    stands for all). A host that got nothing under ShardedByS3Key (more hosts than objects) is
    left out, as SageMaker warns it would be idle."""
    import ray

    hosts = list(channel.hosts) if channel.distribution == "ShardedByS3Key" else [channel.hosts[0]]
    lister = ray.remote(_list_or_empty)
    refs = {h: lister.options(num_cpus=0, max_retries=0, label_selector={"sm-host": h}).remote(roots[h], channel.name)
            for h in hosts}
    answers = ray.get(list(refs.values()), timeout=LIST_TIMEOUT_S)
    listed = {h: files for h, files in zip(refs, answers) if files}
    if not listed:
        from smlaunch.errors import DataError

        raise DataError(f"channel '{channel.name}': no files on {', '.join(hosts)}")
    return listed


def _list_or_empty(opt_ml, channel: str) -> list[tuple[str, int]]:
    from smlaunch.errors import DataError

    try:
        return list_host_channel(opt_ml, channel)
    except DataError as exc:
        if "no files in" in str(exc):
            return []
        raise
