"""The node labels smlaunch places work by, and the selectors built from them.

Every node of a job carries `ray-subcluster` (train or data: what Ray Data and Ray Train select
on), `sm-group` (its instance group) and, on the clusters smlaunch starts, `sm-host` (its host's
name); on a running cluster it attached to, a host is its Ray node id. The plans, the readers, the
trainer and the launcher all place work through these names; they sit at the bottom of
`smlaunch.cluster`, under the plans that use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from smlaunch.config.schema import LaunchConfig

SUBCLUSTER = "ray-subcluster"
"""Ray Data sizes its budget per value of this exact label key (see ../shared/notes/ray.md §3)."""
HOST_LABEL = "sm-host"
GROUP_LABEL = "sm-group"
NODE_ID_LABEL = "ray.io/node-id"
"""Ray's own label on every node: how hosts are named and pinned on a cluster smlaunch did not start."""
HOST_LABEL_ENV = "SMLAUNCH_HOST_LABEL"


def host_label() -> str:
    """The node label that names a host and pins work to it: `sm-host`, which smlaunch sets on the
    clusters it starts, or `ray.io/node-id` on a running cluster it attached to (`--address`),
    whose nodes carry no per-host label of ours. The attached driver sets it for the whole Ray
    job (its runtime environment), so every task and actor reads the same key."""
    import os

    return os.environ.get(HOST_LABEL_ENV) or HOST_LABEL


def host_selector(name: str) -> dict[str, str]:
    """A label selector for the host named `name`."""
    return {host_label(): name}


def this_host() -> str | None:
    """The host a task or actor runs on, by `host_label()`."""
    import ray

    if not ray.is_initialized():
        return None
    # Ray annotates the values as List[str]; a node's labels are str -> str.
    labels = cast("dict[str, str]", ray.get_runtime_context().get_node_labels())
    return labels.get(host_label())


def group_selector(cfg: LaunchConfig, group: str) -> dict[str, str]:
    """The labels the nodes of instance group `group` carry: `cluster.node_labels`' mapping for it,
    or `sm-group=<group>` (a running cluster's nodes, and the nodes an autoscaler adds)."""
    return dict(cfg.cluster.node_labels.get(group) or {GROUP_LABEL: group})
