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
    ctx.execution_options.label_selector = plan.preprocess_selector
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
        ds = ray.data.read_datasource(source, label_selector={"sm-host": f"in({','.join(channel.hosts)})"})
        datasets[channel.name] = ds.map_batches(
            Chain(cfg.pipeline.ops, host_names, train=channel.name == "train", channel=channel.name),
            batch_size=cfg.pipeline.batch_size, batch_format="numpy",
            compute=ray.data.TaskPoolStrategy(size=preprocess_cpus), num_cpus=1,
            label_selector=plan.preprocess_selector)
    return datasets


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
