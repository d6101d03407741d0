"""The launch plan of one host of a real SageMaker job: pure, from the config and the job files.

Every host of a job runs the same command and must reach the same decisions without talking to
the others first, so everything here is a function of `resourceconfig.json` (same on every host
but for `current_*`) and the config. The head is the first host, in natural order, of the
training group: never simply `algo-1`, which is often a CPU host, and never the first of an
unsorted group list (../shared/notes/sagemaker.md §2.3, §11).
"""

from __future__ import annotations

from pathlib import Path

from smlaunch.cluster.autoscale.rules import fixed_groups_note
from smlaunch.cluster.labels import GROUP_LABEL, HOST_LABEL, SUBCLUSTER
from smlaunch.cluster.plan import (
    HostPlan,
    LaunchPlan,
    LocalEnvironment,
    channel_plan,
    natural_key,
    stop_fields,
    training_numbers,
)
from smlaunch.cluster.sagemaker.nccl import nccl_environment
from smlaunch.cluster.sagemaker_env import HOMOGENEOUS_GROUP, GroupInfo, SageMakerEnvironment
from smlaunch.cluster.topology import GroupShape, choose_train_group, place_workers, receiving_groups
from smlaunch.config.formats import CHANNEL_FORMATS
from smlaunch.config.instance_types import InstanceSpec, known_spec
from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import ConfigError
from smlaunch.text import plural


def job_groups(sm: SageMakerEnvironment) -> dict[str, GroupInfo]:
    """The job's groups; a job without `instance_groups` is one group of all hosts."""
    if sm.groups:
        return dict(sm.groups)
    return {HOMOGENEOUS_GROUP: GroupInfo(HOMOGENEOUS_GROUP, sm.current_instance_type, sm.hosts)}


def group_specs(cfg: LaunchConfig, groups: dict[str, GroupInfo]) -> dict[str, InstanceSpec]:
    """Job group -> spec: the config group's (the table plus its own vcpus/gpus), or the table's spec of
    the type the job actually runs when that differs from the config's."""
    names = _config_group_names(cfg, groups)
    by_name = {g.name: g for g in cfg.cluster.instance_groups}
    specs = {}
    for config_name, job_name in names.items():
        group = by_name[config_name]
        actual = groups[job_name].instance_type
        specs[job_name] = group.spec if actual == group.instance_type else (known_spec(actual) or group.spec)
    return specs


def choose_head(group: GroupInfo) -> str:
    return sorted(group.hosts, key=natural_key)[0]


def _config_group_names(cfg: LaunchConfig, groups: dict[str, GroupInfo]) -> dict[str, str]:
    """Config group name -> job group name; the names must match, except a one-group job."""
    configured = [g.name for g in cfg.cluster.instance_groups]
    if len(groups) == 1 and len(configured) == 1:
        return {configured[0]: next(iter(groups))}
    if set(configured) != set(groups):
        raise ConfigError(
            f"cluster.instance_groups: the config names groups {configured} but this job has "
            f"{list(groups)} (resourceconfig.json); use the job's group names"
        )
    return {name: name for name in configured}


def build_sagemaker_plan(cfg: LaunchConfig, sm: SageMakerEnvironment, local: LocalEnvironment) -> LaunchPlan:
    groups = job_groups(sm)
    names = _config_group_names(cfg, groups)
    specs = group_specs(cfg, groups)
    in_config_order = [groups[names[g.name]] for g in cfg.cluster.instance_groups]
    train_group, why = choose_train_group(
        [GroupShape(g.name, g.instance_type, specs[g.name].gpus) for g in in_config_order],
        names.get(cfg.cluster.train_group) if cfg.cluster.train_group else None,
    )
    head = choose_head(groups[train_group])
    notes = [
        f"head {head}: first host in natural order of {train_group} {list(groups[train_group].hosts)}; "
        f"training group because {why}"
    ]

    hosts: list[HostPlan] = []
    for group in groups.values():
        subcluster = "train" if group.name == train_group else "data"
        for name in sorted(group.hosts, key=natural_key):
            here = name == sm.current_host
            hosts.append(
                HostPlan(
                    name=name,
                    group=group.name,
                    instance_type=group.instance_type,
                    role="head" if name == head else "worker",
                    subcluster=subcluster,
                    num_cpus=local.cpus if here else specs[group.name].vcpus,
                    num_gpus=(local.gpus if here else specs[group.name].gpus) if subcluster == "train" else 0,
                    opt_ml=sm.base_dir if here else None,
                    labels={SUBCLUSTER: subcluster, HOST_LABEL: name, GROUP_LABEL: group.name},
                    object_store_bytes=cfg.cluster.object_store_mb and cfg.cluster.object_store_mb * 2**20,
                    vcpus=specs[group.name].vcpus,
                )
            )
    hosts.sort(key=lambda h: natural_key(h.name))
    if sm.current_host not in {h.name for h in hosts}:
        raise ConfigError(f"resourceconfig.json: current_host {sm.current_host!r} is in no instance group")
    me = next(h for h in hosts if h.name == sm.current_host)
    if me.subcluster == "train" and local.gpus < specs[me.group].gpus:
        notes.append(
            f"{me.instance_type} should have {plural(specs[me.group].gpus, 'GPU')} but this host has {local.gpus}"
        )

    routes = receiving_groups(
        {
            name: [names[g] for g in ch.instance_groups] if ch.instance_groups else None
            for name, ch in cfg.channels.items()
        },
        [g.name for g in in_config_order],
        train_group,
    )
    channels = []
    for name, ch in cfg.channels.items():
        if me.group in routes[name]:
            _check_received(name, ch, me, sm)
        channels.append(
            channel_plan(name, ch, tuple(h.name for h in hosts if h.group in routes[name]), cfg.pipeline.batch_size)
        )
    data_groups = [g for g in groups if g != train_group]
    if not data_groups:
        notes.append("no CPU-only group: preprocessing shares the train hosts' CPUs")
    notes += filter(None, [fixed_groups_note(cfg, "a SageMaker job")])
    workers = place_workers([(h.name, h.num_gpus) for h in hosts if h.subcluster == "train"], cfg.trainer.max_workers)
    return LaunchPlan(
        job=cfg.job,
        run_dir=str(Path(sm.base_dir) / "checkpoints" / "smlaunch" / cfg.job),
        hosts=tuple(hosts),
        head=head,
        train_selector={SUBCLUSTER: "train"},
        data_selector={SUBCLUSTER: "data"} if data_groups else None,
        channels=tuple(channels),
        notes=tuple(notes),
        mode="sagemaker",
        current_host=sm.current_host,
        head_address=f"{head}:{cfg.cluster.port}",
        join_timeout_s=cfg.cluster.join_timeout_s,
        worker_env=nccl_environment(
            groups[train_group].instance_type,
            sm.network_interface_name,
            cfg.sagemaker.environment if cfg.sagemaker else None,
        ),
        **training_numbers(cfg, workers),
        **stop_fields(cfg.trainer, local.pid1),
    )


def _check_received(channel: str, ch, me: HostPlan, sm: SageMakerEnvironment) -> None:
    """The job must deliver a channel as the config declares it: every host plans from the same config
    (the head may not receive the channel at all), so a difference is an error, not a guess."""
    if channel not in sm.channels:
        raise ConfigError(
            f"channels.{channel}: routed to group {me.group}, but this host ({me.name}) did not "
            f"receive it; inputdataconfig.json lists {sorted(sm.channels) or 'no channels'}"
        )
    if sm.channels[channel] != ch.input_mode:
        raise ConfigError(
            f"channels.{channel}.input_mode: the config says {ch.input_mode} but the job delivers "
            f"it in {sm.channels[channel]} mode"
        )
    spec = sm.channel_specs.get(channel, {})
    distribution = spec.get("S3DistributionType", "FullyReplicated")
    if distribution != ch.s3_distribution:
        raise ConfigError(
            f"channels.{channel}.s3_distribution: the config says {ch.s3_distribution} but the job "
            f"delivers it {distribution}"
        )
    wrapper = spec.get("RecordWrapperType", "None")
    if wrapper != "None" and CHANNEL_FORMATS[ch.record_format].sagemaker_wrapper != wrapper:
        wrapped = [name for name, f in CHANNEL_FORMATS.items() if f.sagemaker_wrapper == wrapper]
        raise ConfigError(
            f"channels.{channel}.record_format: the job wraps each object in {wrapper} "
            f"(RecordWrapperType), so the config must say {' or '.join(wrapped)}, not {ch.record_format}"
        )


def with_joined_resources(plan: LaunchPlan, nodes: list[dict], cfg: LaunchConfig) -> LaunchPlan:
    """The plan with each host's CPUs and GPUs as its Ray node reported them after joining.

    Only the head knows every host's real size, and only once they joined; the train workers are
    then placed on the GPUs the train hosts actually have (one CPU worker per host when they have
    none). This is the final plan: the train loop's spec is built from it, never from the first.
    """
    from dataclasses import replace

    by_host = {n["labels"].get(HOST_LABEL): n["resources"] for n in nodes}
    hosts = []
    for h in plan.hosts:
        res = by_host.get(h.name)
        hosts.append(h if res is None else replace(h, num_cpus=int(res.get("CPU", 0)), num_gpus=int(res.get("GPU", 0))))
    workers = place_workers([(h.name, h.num_gpus) for h in hosts if h.subcluster == "train"], cfg.trainer.max_workers)
    return replace(plan, hosts=tuple(hosts), **training_numbers(cfg, workers))
