"""The plan of a job on a Ray cluster that is already running (`--address`): pure, like `build_plan`.

The local and SageMaker plans decide the hosts and then start them; here the hosts exist, so the
plan is read off the nodes `cluster.attached.attach` matched to the groups:

* hosts are the matched nodes, named by their Ray node id (`ray.io/node-id`, the one label every
  node has; `host_label()` switches to it for the whole job), each offering what it offers Ray;
* train workers: one per GPU of the train group's nodes (capped as planned), or CPU stand-ins
  spread over its nodes' CPUs, never more than a node can hold (Ray Train would wait for ever);
* selectors: `ray-subcluster: train|data` where exactly the matched nodes carry it (Ray Data sizes
  its budget per value of that key), else the node ids themselves;
* channels are read where they are, by every receiving node: an `s3://` prefix on demand (as
  FastFile), a path as a shared file system (FSx, EFS, NFS: the same path on every node). Nothing
  is copied, so ShardedByS3Key has nothing to shard: each object is read once across the nodes;
* outputs (model, checkpoints, report) go to the run directory, which rank 0's node and the driver
  must both see: a shared path (on one machine, any path), or an `s3://` URI (`trainers.s3_store`;
  the driver then stages its own files locally and uploads them at the end).

`attachable` holds the rules that need only the config, so `plan` and `check` apply them too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from smlaunch.cluster.attached.attach import AttachedCluster, Node
from smlaunch.cluster.labels import NODE_ID_LABEL, SUBCLUSTER
from smlaunch.cluster.plan import HostPlan, LaunchPlan, channel_plan, stop_fields, training_numbers
from smlaunch.cluster.topology import WorkerPlan, place_workers, receiving_groups
from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import ConfigError, UserError
from smlaunch.text import plural


def attachable(cfg: LaunchConfig) -> None:
    """ConfigError, in one line, for what a running cluster cannot do for this config."""
    for name, ch in cfg.channels.items():
        if ch.input_mode == "Pipe":
            raise ConfigError(
                f"channels.{name}.input_mode: Pipe exists only on a SageMaker job (its agent feeds "
                "the FIFOs); on a running Ray cluster use FastFile (an s3:// prefix read on demand) "
                "or File (a path every node mounts)"
            )
    if cfg.run.s3_seed:
        raise ConfigError(
            "run.s3_seed: it fills the local simulation's S3 server; a running Ray cluster reads "
            "s3:// channels from S3 itself (run.s3_endpoint for another endpoint)"
        )
    if cfg.run.dir.startswith("s3://") and not cfg.run.dir.removeprefix("s3://").strip("/"):
        raise ConfigError(f"run.dir: {cfg.run.dir} names no bucket (expected s3://bucket/prefix)")


def attached_plan(cfg: LaunchConfig, attached: AttachedCluster, started: str, staging: str = "runs") -> LaunchPlan:
    """The job's plan on `attached`; UserError when its nodes cannot hold the workers or the chain.
    The hosts' `opt_ml` is None until the channel trees exist on the nodes (`with_node_trees`).
    With an `s3://` run.dir, the driver's own files (logs, report) are staged under `staging`."""
    attachable(cfg)
    specs = {g.name: g for g in cfg.cluster.instance_groups}
    train_nodes = attached.groups[attached.train_group]
    workers = _workers(attached, train_nodes, specs[attached.train_group].spec.gpus)
    hosts = []
    for group, nodes in attached.groups.items():
        subcluster = "train" if group == attached.train_group else "data"
        for node in nodes:
            hosts.append(
                HostPlan(
                    name=node.node_id,
                    group=group,
                    instance_type=specs[group].instance_type,
                    role="head" if node is train_nodes[0] else "worker",
                    subcluster=subcluster,
                    num_cpus=int(node.cpus),
                    num_gpus=int(node.gpus) if attached.on_gpu else 0,
                    opt_ml=None,
                    labels=dict(node.labels),
                    vcpus=specs[group].spec.vcpus,
                )
            )
    data_nodes = [n for g, nodes in attached.groups.items() if g != attached.train_group for n in nodes]
    if data_nodes and sum(n.cpus for n in data_nodes) < 1:
        raise UserError(
            f"cluster at {attached.address}: the data groups' nodes offer Ray no CPU, so nothing "
            "could preprocess; start them with CPUs (ray start --num-cpus, rayStartParams num-cpus)"
        )
    routes = receiving_groups(
        {name: ch.instance_groups for name, ch in cfg.channels.items()}, list(attached.groups), attached.train_group
    )
    channels = tuple(
        dataclasses.replace(
            channel_plan(
                name, ch, tuple(n.node_id for g in routes[name] for n in attached.groups[g]), cfg.pipeline.batch_size
            ),
            distribution="FullyReplicated",
            source=_drivers(ch.source),
        )
        for name, ch in cfg.channels.items()
    )
    notes = list(attached.notes)
    notes += [
        f"channel {c.name}: {c.source} read where it is by {plural(len(c.hosts), 'node')} "
        f"({'on demand from S3' if c.source.startswith('s3://') else 'a path every node must see'}), nothing copied"
        for c in channels
    ]
    name = cfg.run.name or f"{cfg.job}-{started}"
    run_dir = output_dir = str(Path(_drivers(cfg.run.dir)) / name)
    if cfg.run.dir.startswith("s3://"):
        run_dir, output_dir = str(Path(staging) / name), f"{cfg.run.dir.rstrip('/')}/{name}"
    everyone = [n for nodes in attached.groups.values() for n in nodes] + list(attached.unmatched)
    data_selector = _selector(data_nodes, "data", everyone) if data_nodes else None
    elastic = _elastic(cfg, attached, data_selector)
    if elastic:
        notes.append(
            elastic.line() + f"; the {plural(len(attached.groups[elastic.group]), 'host')} here now read "
            "the channels and stay"
            + (" while an epoch reads them (not a sealed cache)" if elastic.min_hosts == 0 else "")
            + ", hosts added while training run the chain and go first"
        )
    return LaunchPlan(
        job=cfg.job,
        run_dir=run_dir,
        hosts=tuple(hosts),
        head=train_nodes[0].node_id,
        train_selector=_selector(train_nodes, "train", everyone),
        data_selector=data_selector,
        elastic=elastic,
        channels=channels,
        notes=tuple(notes),
        mode="attached",
        head_address=attached.address,
        join_timeout_s=cfg.cluster.join_timeout_s,
        host_label=NODE_ID_LABEL,
        output_dir=output_dir,
        **training_numbers(cfg, workers),
        **stop_fields(cfg.trainer),
    )


def _drivers(path: str) -> str:
    """A local path as the driver means it: relative to the folder sm-launch runs in, as on the local
    path. The nodes' tasks run in folders of their own (the job's shipped working_dir), where
    `data/train` or `runs` would name nothing the user meant. URIs (`s3://`, `builtin:`) are as given."""
    if path.startswith(("s3://", "builtin:")):
        return path
    return str(Path(path).expanduser().absolute())


def _elastic(cfg: LaunchConfig, attached: AttachedCluster, data_selector: dict | None):
    """The scaled group's plan (`autoscale:`), or None. Hosts that join later are found by the
    data selector, so it must be the `ray-subcluster: data` label, not the node ids of now."""
    from smlaunch.cluster.autoscale.rules import elastic_plan, scaled_group

    group = scaled_group(cfg)
    if group is None:
        return None
    if data_selector != {SUBCLUSTER: "data"}:
        raise UserError(
            f"cluster at {attached.address}: autoscale needs every data node, and only those, to carry "
            f"the label {SUBCLUSTER}=data (the label that puts hosts added later to work, and that Ray "
            "Data budgets by); give the data worker groups that label"
        )
    nodes = attached.groups[group.name]
    return elastic_plan(cfg, max(n.cpus for n in nodes))


def with_node_trees(plan: LaunchPlan, trees: dict[str, str]) -> LaunchPlan:
    """The plan with each node's channel tree (`opt_ml`), made on the node by `launcher.attached.run`."""
    return dataclasses.replace(plan, hosts=tuple(dataclasses.replace(h, opt_ml=trees.get(h.name)) for h in plan.hosts))


def _selector(members: Sequence[Node], value: str, everyone: Sequence[Node]) -> dict[str, str]:
    """`ray-subcluster: value` when exactly `members` carry it, else their node ids."""
    ids = {n.node_id for n in members}
    if {n.node_id for n in everyone if n.labels.get(SUBCLUSTER) == value} == ids:
        return {SUBCLUSTER: value}
    return {NODE_ID_LABEL: f"in({','.join(n.node_id for n in members)})"}


def _workers(attached: AttachedCluster, nodes: tuple[Node, ...], planned_gpus: int) -> tuple[WorkerPlan, ...]:
    """`attached.train_workers` ranks over the train nodes by `topology.place_workers`: one per
    GPU, or CPU workers each taking one of a node's CPUs (stand-ins when the group's type has GPUs)."""
    wanted = attached.train_workers
    if attached.on_gpu:
        return place_workers([(n.node_id, int(n.gpus)) for n in nodes], wanted)
    room = sum(int(n.cpus) for n in nodes)
    if room < wanted:
        raise UserError(
            f"cluster at {attached.address}: instance group {attached.train_group} has "
            f"{plural(room, 'CPU')} on {plural(len(nodes), 'node')} for {wanted} CPU train "
            f"workers; set trainer.max_workers={max(room, 1)} or give its nodes CPUs"
        )
    workers = place_workers([(n.node_id, 0, int(n.cpus)) for n in nodes], wanted)
    if not planned_gpus:
        return workers
    # Each stands in for a GPU of its node's planned type: the node's first, second, ... GPU.
    return tuple(
        WorkerPlan(w.rank, w.host, sum(v.host == w.host for v in workers[: w.rank]), stand_in=True) for w in workers
    )
