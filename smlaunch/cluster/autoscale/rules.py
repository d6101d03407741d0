"""Which group an `autoscale:` section scales, and what it means on each path (issue 42).

One place every path asks: `sm-launch plan`, the local simulation, a SageMaker host, a running Ray
cluster (`--address`) and `submit`. Only a running Ray cluster with an autoscaler can add and
remove nodes while a job trains: a SageMaker training job's instance groups are fixed for its
life, and the local simulation starts a fixed set of hosts. There the section is kept (the same
config runs everywhere) and the plan says what it does instead: nothing during the run, and
`submit --data-hosts auto` sizes the data group from the last report's advisor.
"""

from __future__ import annotations

from dataclasses import dataclass

from smlaunch.errors import ConfigError


@dataclass(frozen=True)
class ElasticPlan:
    """What the launcher holds to on an attached cluster: the scaled group and its bounds."""

    group: str
    labels: dict[str, str]
    """The labels its nodes carry (what new nodes are asked for and matched by)."""
    cpus_per_host: float
    min_hosts: int
    max_hosts: int
    target_data_wait_pct: float
    cooldown_s: float
    window_steps: int
    price_per_host_h: float | None
    train_price_h: float | None = None
    """The train group's hosts together, $/h: the policy judges a host by the job's cost per image."""

    def line(self) -> str:
        cost = f", ${self.price_per_host_h:.2f}/h each" if self.price_per_host_h else ""
        return (
            f"autoscale: {self.group} between {self.min_hosts} and {self.max_hosts} hosts "
            f"({self.cpus_per_host:g} CPUs{cost}), aiming at a data wait under {self.target_data_wait_pct:g} %, "
            f"{self.cooldown_s:g} s between changes"
        )


def scaled_group(cfg):
    """The instance group `autoscale:` scales, or None without the section; ConfigError (one line,
    naming the field) when it names no group, the train group, or a group with GPUs."""
    if cfg.autoscale is None:
        return None
    from smlaunch.cluster.topology import config_train_group

    train_group, _ = config_train_group(cfg)
    groups = {g.name: g for g in cfg.cluster.instance_groups}
    name = cfg.autoscale.group
    if name is None:
        cpu_groups = [g for g in groups if g != train_group and not groups[g].spec.gpus]
        if len(cpu_groups) != 1:
            raise ConfigError(
                f"autoscale.group: {'no' if not cpu_groups else 'more than one'} CPU-only group "
                f"besides the train group {train_group} ({', '.join(cpu_groups) or 'none'}); name the "
                "one to scale"
            )
        name = cpu_groups[0]
    if name not in groups:
        raise ConfigError(f"autoscale.group: no instance group {name!r}; groups: {sorted(groups)}")
    if name == train_group:
        raise ConfigError(f"autoscale.group: {name} is the train group; only data (CPU-only) groups scale")
    if groups[name].spec.gpus:
        raise ConfigError(
            f"autoscale.group: {name} ({groups[name].instance_type}) has GPUs; only CPU-only groups "
            "scale (a GPU host added mid-run would train nothing)"
        )
    return groups[name]


def fixed_groups_note(cfg, where: str) -> str | None:
    """The plan's note where groups are fixed (`where`: "a SageMaker job", "the local simulation")."""
    group = scaled_group(cfg)
    if group is None:
        return None
    return (
        f"autoscale: off in {where}, whose hosts are fixed for the run: {group.name} keeps its "
        f"{group.instance_count} (sm-launch submit --data-hosts auto sizes it from the last report; only a "
        "running Ray cluster with an autoscaler, run --address, scales while training)"
    )


def elastic_plan(cfg, cpus_per_host: float) -> ElasticPlan | None:
    """The attached plan's part: the scaled group's labels, its hosts' CPUs and price."""
    group = scaled_group(cfg)
    if group is None:
        return None
    from smlaunch.cluster.labels import group_selector
    from smlaunch.cluster.prices import price_table
    from smlaunch.cluster.topology import config_train_group

    a = cfg.autoscale
    prices = price_table(cfg.monitor.prices)
    train = next(g for g in cfg.cluster.instance_groups if g.name == config_train_group(cfg)[0])
    train_price = prices.get(train.instance_type)
    return ElasticPlan(
        group=group.name,
        labels=group_selector(cfg, group.name),
        cpus_per_host=cpus_per_host,
        min_hosts=a.min_data_hosts,
        max_hosts=a.max_data_hosts,
        target_data_wait_pct=a.target_data_wait_pct,
        cooldown_s=a.cooldown_s,
        window_steps=a.window_steps,
        price_per_host_h=prices.get(group.instance_type),
        train_price_h=train_price * train.instance_count if train_price is not None else None,
    )
