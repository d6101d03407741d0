"""Elastic data hosts on a running Ray cluster (`run --address` with `autoscale:`, issue 42).

Before the job's nodes are matched, the scaled group is brought to `autoscale.min_data_hosts`
(asked of the autoscaler, waited for within `cluster.join_timeout_s`). While training,
`cluster.autoscale.controller.ElasticDataHosts` decides every `PERIOD_S` from the step records the
progress thread hands it, and acts here: a request to the autoscaler by label
(`requests.DataHostRequests`), a drain of the newest host. The hosts present when the plan was made
read the channels (their read tasks are pinned to them), so they stay (with `min_data_hosts: 0`,
only while the epoch reads the channels, not a sealed cache); hosts added later run the chain only
and are the first given back. When the run ends the request is withdrawn and the added
hosts go after the autoscaler's idle timeout: the cluster is left as it was found.
"""

from __future__ import annotations

import logging
import time

from smlaunch.errors import UserError
from smlaunch.text import plural

log = logging.getLogger("smlaunch")

PERIOD_S = 5.0
"""How often the loop decides (a decision needs `autoscale.window_steps` steps since the last change)."""


def joined_nodes(labels: dict[str, str]) -> list[dict]:
    """The alive nodes carrying `labels` that are not draining (`ray.nodes()` entries)."""
    from smlaunch._ray_compat import draining_nodes
    from smlaunch.cluster.autoscale.requests import labelled_nodes

    draining = draining_nodes()
    return [n for n in labelled_nodes(labels) if n["NodeID"] not in draining]


def grow_to_minimum(cfg, address: str):
    """The scaled group held at `autoscale.min_data_hosts` or more; returns the standing request
    (`DataHostRequests`), or None without `autoscale:`. UserError in one line when the autoscaler
    gives too few within `cluster.join_timeout_s`."""
    from smlaunch.cluster.autoscale.requests import DataHostRequests
    from smlaunch.cluster.autoscale.rules import scaled_group
    from smlaunch.cluster.labels import group_selector

    group = scaled_group(cfg)
    if group is None:
        return None
    labels = group_selector(cfg, group.name)
    present = _first_hosts(labels, group.name, address, cfg.cluster.join_timeout_s)
    cpus = max(n["Resources"].get("CPU", 0) for n in present)
    wanted = max(cfg.autoscale.min_data_hosts, len(present))
    requests = DataHostRequests(labels, cpus)
    requests.want(wanted)
    if len(present) >= wanted:
        return requests
    log.info(
        f"autoscale: asking the autoscaler for {plural(wanted - len(present), 'host')} of {group.name} "
        f"({cpus:g} CPUs, labels {labels})"
    )
    deadline = time.monotonic() + cfg.cluster.join_timeout_s
    while len(present := joined_nodes(labels)) < wanted:
        if time.monotonic() > deadline:
            requests.close()
            raise UserError(
                f"cluster at {address}: autoscale.min_data_hosts is {wanted} but {len(present)} "
                f"{group.name} nodes joined within cluster.join_timeout_s ({cfg.cluster.join_timeout_s:g} "
                f"s); the autoscaler must offer a worker group labelled {labels} with {cpus:g} CPUs"
            )
        time.sleep(1.0)
    log.info(f"autoscale: {plural(len(present), 'host')} of {group.name} joined")
    return requests


def _first_hosts(labels: dict, group: str, address: str, timeout_s: float) -> list[dict]:
    """The group's hosts once at least one is up. The autoscaler is asked for hosts like the first
    (its CPUs), since Ray publishes no node types a driver could read (`get_cluster_config` is
    empty on KubeRay and `ray start --autoscaling-config`): the cluster starts one itself (KubeRay's
    minReplicas, which `sm-launch kuberay` sets to autoscale.min_data_hosts; min_workers)."""
    deadline = time.monotonic() + timeout_s
    while not (present := joined_nodes(labels)):
        if time.monotonic() > deadline:
            raise UserError(
                f"cluster at {address}: no {group} node (labels {labels}) within cluster.join_timeout_s "
                f"({timeout_s:g} s); autoscale grows the group from its first host, which the cluster "
                "must start (KubeRay: the worker group's minReplicas of 1 or more)"
            )
        time.sleep(1.0)
    return present


def controller(plan, requests, base: list[str]):
    """The loop for `plan.elastic`, reaching the cluster through `requests` and Ray's state. The
    `base` hosts (present at planning) read the channels: they are given back only with
    `min_data_hosts: 0` while the epoch reads a sealed cache (its shards stand for the channels'
    files: `ElasticDataHosts.without_hosts`), so until then the minimum is at least their count."""
    from smlaunch.cluster.autoscale.controller import DataHostsAccess, ElasticDataHosts
    from smlaunch.cluster.autoscale.placement import publish
    from smlaunch.cluster.autoscale.requests import drain
    from smlaunch.config.autoscale import AutoscaleConfig

    e = plan.elastic
    floor = max(e.min_hosts, len(base))
    cfg = AutoscaleConfig(
        min_data_hosts=0 if e.min_hosts == 0 else floor,
        max_data_hosts=max(e.max_hosts, floor),
        target_data_wait_pct=e.target_data_wait_pct,
        cooldown_s=e.cooldown_s,
        window_steps=e.window_steps,
        group=e.group,
    )
    seen: dict[str, int] = {node: i for i, node in enumerate(base)}

    def joined() -> list[str]:
        ids = [n["NodeID"] for n in joined_nodes(e.labels)]
        for node in ids:
            seen.setdefault(node, len(seen))
        ids = sorted(ids, key=seen.__getitem__)  # oldest first: the newest go first
        publish(ids)
        return ids

    def give_back(node: str, why: str) -> None:
        publish([n for n in joined() if n != node])  # no new chain task there from now on
        drain(node, why)
        if node in base:  # a first host (`min_data_hosts: 0`) may hold actors placed at the start
            from smlaunch._ray_compat import RESTARTED_ANYWHERE, actors_on

            if held := [a for a in actors_on(node) if a not in RESTARTED_ANYWHERE and a != "HostSampler"]:
                log.warning(
                    f"autoscale: the host given back ({node[:12]}) stays up while the job's actors there live: "
                    f"{', '.join(sorted(held))} (Ray places them on any node with room; the train hosts' "
                    "CPUs were busy when they started)"
                )

    def cpu_busy() -> float | None:
        from smlaunch._ray_compat import resources_per_node

        nodes = [n["NodeID"] for n in joined_nodes(e.labels)]  # read every second: no KV write here
        total, free = resources_per_node()
        cpus = sum(total.get(n, {}).get("CPU", 0) for n in nodes)
        return 1 - sum(free.get(n, {}).get("CPU", 0) for n in nodes) / cpus if cpus else None

    access = DataHostsAccess(
        joined=joined, want=requests.want, drain=give_back, cpu_busy=cpu_busy, recount=requests.recount
    )
    loop = ElasticDataHosts(
        cfg,
        access,
        e.price_per_host_h,
        log.info,
        period_s=PERIOD_S,
        slots_per_host=e.cpus_per_host,
        train_price_h=e.train_price_h,
    )
    loop.floor_until_cached = max(1, floor)  # `min_data_hosts: 0`: the `base` hosts go only over a sealed cache
    return loop
