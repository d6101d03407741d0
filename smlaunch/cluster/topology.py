"""Who trains where: the job's topology rules, in one place.

The local simulation's plan, each SageMaker host's plan and `submit`'s CreateTrainingJob request
all ask the same three questions, and used to answer them three times (and differently when the
only group had no GPU):

* which group trains (`train_group`): the configured one; else the job's only group, whatever it
  holds; else the first group, in config order, whose instance type has GPUs;
* which groups receive each channel (`receiving_groups`): the channel's `instance_groups`, else
  every group but the train group (the train group itself when it is the only one);
* how many train workers there are and where (`place_workers`): one per GPU of each train host,
  ranks in host order (natural: algo-2 before algo-10) and GPU order, so rank 0 is on the head
  (the first train host) and a host's workers have consecutive ranks, as Ray Train numbers them
  (grouped by node, then by GPU id). A train group without GPUs gets one CPU worker per host; a
  running cluster's train nodes without GPUs get the planned count of CPU workers, spread over
  their CPUs. The local plan, each SageMaker host's plan (and the head's again once the hosts
  joined and reported their GPUs) and the attached plan all place workers here.

Pure functions of plain values: no config objects, no Ray, no files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import ConfigError


@dataclass(frozen=True)
class GroupShape:
    name: str
    instance_type: str
    gpus: int
    """GPUs of one host of the group (planned from the instance type, or reported after joining)."""


@dataclass(frozen=True)
class WorkerPlan:
    rank: int
    host: str
    gpu: int | None
    """The host's GPU the worker uses, or stands in for (0-based on that host); None for the CPU
    worker of a train group without GPUs."""
    stand_in: bool = False
    """A local CPU worker (gloo) in place of the planned GPU `gpu`, which this machine lacks."""

    @property
    def on_gpu(self) -> bool:
        return self.gpu is not None and not self.stand_in


def choose_train_group(groups: list[GroupShape], configured: str | None) -> tuple[str, str]:
    """(group, why it trains)."""
    names = [g.name for g in groups]
    if configured is not None:
        if configured not in names:
            raise ConfigError(
                f"cluster.train_group: {configured!r} is not a group of this job; groups: {', '.join(names)}"
            )
        return configured, f"cluster.train_group names {configured}"
    if len(groups) == 1:
        return groups[0].name, f"the job's only group ({groups[0].name})"
    with_gpus = [g for g in groups if g.gpus > 0]
    if not with_gpus:
        described = ", ".join(f"{g.name}={g.instance_type}" for g in groups)
        raise ConfigError(
            f"cluster: no instance group of this job has GPUs ({described}); "
            "name the training group in cluster.train_group"
        )
    why = f"{with_gpus[0].name} has GPUs ({with_gpus[0].instance_type})"
    if len(with_gpus) > 1:
        why += f"; also GPU groups {', '.join(g.name for g in with_gpus[1:])}: set cluster.train_group to choose"
    return with_gpus[0].name, why


def receiving_groups(
    channels: dict[str, list[str] | None], group_names: list[str], train_group: str
) -> dict[str, tuple[str, ...]]:
    """Channel -> the groups that receive it (SageMaker's InstanceGroupNames)."""
    data = tuple(g for g in group_names if g != train_group) or (train_group,)
    return {name: tuple(routed) if routed else data for name, routed in channels.items()}


def place_workers(
    train_hosts: Sequence[tuple[str, int] | tuple[str, int, int]], cap: int | None = None
) -> tuple[WorkerPlan, ...]:
    """The train workers, the one rule every path places them by: one per GPU of each
    `(host, gpus)` in host order; when none has GPUs, one per host; the first `cap` of them when
    capped (`trainer.max_workers`).

    Hosts given as `(host, gpus, cpus)` without GPUs (a running cluster's train nodes that have
    none) take `cap` CPU workers instead, one CPU each, dealt round robin over the hosts with room
    and ranked host by host: as many workers as were planned, spread. Fewer CPUs than `cap` is the
    caller's error to name."""
    cpu_only = all(host[1] == 0 for host in train_hosts)
    if cpu_only and cap and train_hosts and len(train_hosts[0]) > 2:
        room = {host[0]: int(host[2]) for host in train_hosts if len(host) > 2}
        counts = dict.fromkeys(room, 0)
        while sum(counts.values()) < min(cap, sum(room.values())):
            for name in counts:
                if counts[name] < room[name] and sum(counts.values()) < cap:
                    counts[name] += 1
        slots: list[tuple[str, int | None]] = [(name, None) for name, count in counts.items() for _ in range(count)]
        return tuple(WorkerPlan(rank, name, gpu) for rank, (name, gpu) in enumerate(slots))
    slots = [
        (host[0], None if cpu_only else gpu)
        for host in train_hosts
        for gpu in (range(1) if cpu_only else range(host[1]))
    ]
    if cap is not None:
        slots = slots[: max(cap, 1)]
    return tuple(WorkerPlan(rank, host, gpu) for rank, (host, gpu) in enumerate(slots))


def as_cpu_stand_ins(workers: tuple[WorkerPlan, ...]) -> tuple[WorkerPlan, ...]:
    """The same ranks on the same hosts, each on a CPU (gloo) instead of its planned GPU."""
    return tuple(WorkerPlan(w.rank, w.host, w.gpu, stand_in=w.gpu is not None) for w in workers)


def config_train_group(cfg: LaunchConfig) -> tuple[str, str]:
    """The group that trains, and why: `choose_train_group` over the config's groups and
    their instance types' GPUs. The local plan, a running cluster's match, KubeRay's manifest and
    `submit`'s request all ask here; a SageMaker host asks the same function with the job's group
    names and what its instance types hold (`cluster.sagemaker.plan`)."""
    return choose_train_group(
        [GroupShape(g.name, g.instance_type, g.spec.gpus) for g in cfg.cluster.instance_groups], cfg.cluster.train_group
    )
