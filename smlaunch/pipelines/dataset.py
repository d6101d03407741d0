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

    from smlaunch.pipelines.datasource import ChannelDatasource
    from smlaunch.pipelines.pipe_source import PipeChannelDatasource
    from smlaunch.pipelines.ops import Chain

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.label_selector = plan.data_selector
    ctx.enable_progress_bars = False
    host_names = [h.name for h in plan.hosts]
    preprocess_on = "data" if plan.data_selector else "train"
    preprocess_cpus = sum(h.num_cpus for h in plan.hosts if h.subcluster == preprocess_on)
    datasets = {}
    for channel in plan.channels:
        roots = {h: plan.host(h).opt_ml for h in channel.hosts}
        if channel.input_mode == "Pipe":
            source = PipeChannelDatasource(channel.name, roots, channel.record_format, channel.distribution)
        else:
            lister = ray.remote(list_host_channel).options(
                num_cpus=0, label_selector={"sm-host": channel.hosts[0]}, max_retries=0)
            files = ray.get(lister.remote(roots[channel.hosts[0]], channel.name), timeout=LIST_TIMEOUT_S)
            source = ChannelDatasource(channel.name, files, roots, channel.record_format)
        ds = ray.data.read_datasource(source, label_selector={"sm-host": f"in({','.join(channel.hosts)})"})
        datasets[channel.name] = ds.map_batches(
            Chain(cfg.pipeline.ops, host_names, train=channel.name == "train"),
            batch_size=cfg.pipeline.batch_size, batch_format="numpy",
            compute=ray.data.TaskPoolStrategy(size=preprocess_cpus), num_cpus=1,
            label_selector=plan.data_selector)
    return datasets
