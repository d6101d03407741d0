"""A Ray cluster that is already running (`--address`), matched against the config's groups.

Nothing is started there, so the question is the reverse of the local plan's: which of the
cluster's nodes play each instance group? A group's nodes are those carrying all of its labels
(`cluster.node_labels`, default `sm-group: <group>`, what smlaunch and its KubeRay manifest set).
Every rule fails in one line naming what is missing, before any work is sent:

* a group with no node at all;
* a train group whose nodes hold some GPUs, but fewer than the config plans train workers
  (`instance_count` x the type's GPUs, capped by `trainer.max_workers`). A train group with no GPU
  at all gets CPU stand-ins, one per planned GPU, as the local simulation does, and a note says so;
* a node claimed by two groups.

A group's nodes without the `ray-subcluster` label get a note: Ray Data sizes its budget per value
of that key only, so without it preprocessing is budgeted for the whole cluster.

Pure: it reads the node list `ray.nodes()` returns, and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from smlaunch.cluster.labels import SUBCLUSTER, group_selector
from smlaunch.cluster.topology import config_train_group, place_workers
from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import UserError


@dataclass(frozen=True)
class Node:
    node_id: str
    address: str
    labels: dict[str, str]
    cpus: float
    gpus: float

    @classmethod
    def from_ray(cls, entry: dict) -> Node:
        resources = entry.get("Resources", {})
        return cls(
            entry["NodeID"],
            entry.get("NodeManagerAddress", "?"),
            dict(entry.get("Labels") or {}),
            resources.get("CPU", 0.0),
            resources.get("GPU", 0.0),
        )

    @property
    def short(self) -> str:
        return f"{self.address}/{self.node_id[:8]}"


@dataclass(frozen=True)
class AttachedCluster:
    address: str
    train_group: str
    groups: dict[str, tuple[Node, ...]]
    """Group name -> its nodes, in the cluster's order."""
    train_workers: int
    on_gpu: bool
    notes: tuple[str, ...] = field(default=())
    unmatched: tuple[Node, ...] = field(default=())
    """Live nodes no group claims (a KubeRay head pod, another team's pool): never given work."""

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(n for nodes in self.groups.values() for n in nodes)


def match_groups(cfg: LaunchConfig, entries: list[dict], address: str) -> AttachedCluster:
    """The cluster's live nodes per group, and its train workers; UserError when it cannot run `cfg`."""
    nodes = [Node.from_ray(e) for e in entries if e.get("Alive")]
    groups = cfg.cluster.instance_groups
    train_group, _ = config_train_group(cfg)
    matched: dict[str, tuple[Node, ...]] = {}
    owner: dict[str, str] = {}
    notes: list[str] = []
    for group in groups:
        wanted = group_selector(cfg, group.name)
        mine = tuple(n for n in nodes if all(n.labels.get(k) == v for k, v in wanted.items()))
        if not mine:
            seen = sorted({f"{k}={v}" for n in nodes for k, v in n.labels.items() if k != "ray.io/node-id"})
            raise UserError(
                f"cluster at {address}: no node for instance group {group.name} (labels "
                f"{_labels(wanted)}); the cluster's {len(nodes)} nodes carry {', '.join(seen) or 'no labels'}"
                " (cluster.node_labels maps a group to other labels)"
            )
        for n in mine:
            if n.node_id in owner:
                raise UserError(
                    f"cluster at {address}: node {n.short} matches both {owner[n.node_id]} and "
                    f"{group.name}; give the groups labels that tell them apart (cluster.node_labels)"
                )
            owner[n.node_id] = group.name
        if any(SUBCLUSTER not in n.labels for n in mine):
            notes.append(
                f"{group.name}: nodes without the {SUBCLUSTER} label; Ray Data budgets preprocessing "
                "for the whole cluster"
            )
        matched[group.name] = mine
    train = next(g for g in groups if g.name == train_group)
    # As many as the config's hosts would train with (`topology.place_workers`, the rule of every path).
    planned = len(
        place_workers(
            [(f"{train.name}-{i}", train.spec.gpus) for i in range(train.instance_count)], cfg.trainer.max_workers
        )
    )
    gpus = int(sum(n.gpus for n in matched[train_group]))
    if 0 < gpus < planned:
        raise UserError(
            f"cluster at {address}: instance group {train_group} has {gpus} GPUs on "
            f"{len(matched[train_group])} nodes, fewer than the {planned} train workers planned "
            f"({train.instance_count} x {train.instance_type}); set trainer.max_workers={gpus} or add nodes"
        )
    if gpus == 0 and train.spec.gpus:
        notes.append(f"{train_group}: no GPU on its nodes; {planned} CPU workers (gloo) stand in for the planned GPUs")
    unmatched = tuple(n for n in nodes if n.node_id not in owner)
    return AttachedCluster(
        address, train_group, matched, planned, on_gpu=gpus > 0, notes=tuple(notes), unmatched=unmatched
    )


def _labels(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in labels.items())
