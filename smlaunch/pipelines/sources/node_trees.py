"""Channel trees on the nodes of a running Ray cluster (`--address`), made and removed by the job.

The readers find a channel at `<opt_ml>/input/data/<channel>` on the host they run on, on
SageMaker and in the local simulation alike. A cluster smlaunch attached to has no `/opt/ml`, so
each receiving node gets a small tree of its own under its temporary directory, made by a task
pinned to it, holding per channel either

* a FastFile view (`fastfile.write_view`) of an `s3://` prefix (or a ManifestFile's objects),
  listed once by the driver: bytes
  are fetched on demand, nothing is copied; or
* a link to the channel's path as the node sees it (a shared file system: FSx, EFS, NFS), or to a
  builtin dataset prepared on the node.

The trees are removed when the job ends, failed or not; the cluster keeps nothing of the job.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from smlaunch.cluster.labels import host_selector
from smlaunch.cluster.plan import LaunchPlan
from smlaunch.errors import DataError

TREE_TIMEOUT_S = 300
"""Making a tree may prepare a builtin dataset on the node (seconds); removing one is instant."""


@contextlib.contextmanager
def node_trees(plan: LaunchPlan, s3_endpoint: str | None, log=None):
    """Yield the plan with each receiving node's tree (`with_node_trees`); remove them after."""
    import ray

    from smlaunch.cluster.attached.plan import with_node_trees
    from smlaunch.pipelines.sources.channels import channel_objects

    listed = {}
    for channel in plan.channels:
        if channel.source.startswith("s3://") or channel.s3_data_type == "ManifestFile":
            listed[channel.name] = channel_objects(channel, s3_endpoint)
            if not listed[channel.name][1]:
                raise DataError(f"channel '{channel.name}': no objects under {channel.source}")
    readers = {c.name: (*c.hosts, *fallback_readers(plan, c)) for c in plan.channels}
    nodes = list(dict.fromkeys(h for hosts in readers.values() for h in hosts))
    task = ray.remote(_make_tree)
    run = Path(plan.run_dir).name
    refs = {
        node: task.options(num_cpus=0, max_retries=0, label_selector=host_selector(node)).remote(
            run, node, [(c, *listed.get(c.name, (None, None))) for c in plan.channels if node in readers[c.name]]
        )
        for node in nodes
    }
    trees = {}
    try:
        for node, ref in refs.items():
            try:
                trees[node] = ray.get(ref, timeout=TREE_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError:
                raise DataError(f"node {node[:8]}: its channel tree was not made within {TREE_TIMEOUT_S} s") from None
            except ray.exceptions.RayTaskError as exc:
                raise _cause(exc) from None
        if log:
            log(f"channels exposed on {len(trees)} nodes (views and links under each node's temporary directory)")
        yield with_node_trees(plan, trees)
    finally:
        _remove(run, list(refs), log)  # every node asked, made or not: one that failed half-way too


def fallback_readers(plan: LaunchPlan, channel) -> tuple[str, ...]:
    """The train hosts, where the train channel's reads go once no data host is left
    (`autoscale.min_data_hosts: 0`: `pipelines.dataset.fallback_to_train_hosts`) and the files are
    read again (a lost cache), for a channel any host may read (not `ShardedByS3Key`, whose files
    each belong to one receiving host); () otherwise. They get a tree of the channel too."""
    elastic = plan.elastic
    if elastic is None or elastic.min_hosts or channel.name != "train":
        return ()
    if channel.distribution == "ShardedByS3Key" and channel.file_system is None:
        return ()
    return tuple(h.name for h in plan.hosts if h.subcluster == "train")


def _cause(exc) -> Exception:
    """The user error inside a task's failure, else Ray's as one line naming what failed."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, DataError):
        return cause
    text = str(cause if cause is not None else exc).strip().splitlines()
    return DataError(
        f"channel trees: making a node's tree failed: {type(cause or exc).__name__}: {text[-1] if text else ''}"
    )


def _remove(run: str, nodes: list[str], log) -> None:
    import ray

    from smlaunch.cluster.drain import node_ids

    alive = node_ids(nodes)  # by the host label: node ids on a running cluster, host names where simulated
    nodes = [node for node in nodes if node in alive]  # a node given back took its temporary directory along
    if not nodes:
        return
    task = ray.remote(_remove_tree)
    refs = [
        task.options(num_cpus=0, max_retries=0, label_selector=host_selector(node)).remote(run, node) for node in nodes
    ]
    try:
        ray.get(refs, timeout=60)
    except Exception as exc:  # a node lost mid-run: its tree went with it, or stays in its temp dir
        if log:
            log(
                f"warning: channel trees not all removed ({type(exc).__name__}); they are under the nodes' "
                f"temporary directories, named smlaunch-*"
            )


def _make_tree(run: str, node: str, channels: list) -> str:
    """On the node: `<tmp>/smlaunch-<run>-<node>/opt/ml` with each channel's view or link."""
    opt_ml = _tree(run, node)
    try:
        for channel, source, objects in channels:
            _expose(opt_ml, node, channel, source, objects)
    except BaseException:
        _remove_tree(run, node)  # no half-made tree left behind
        raise
    return str(opt_ml)


def _tree(run: str, node: str) -> Path:
    """The node's tree, under its own temporary directory (computed there). The whole node id: nodes
    that share a machine (Ray's fake multi-node provider numbers them fff...00001, fff...00002) must
    not share a tree, or one's removal takes the other's."""
    return Path(tempfile.gettempdir()) / f"smlaunch-{run}-{node}" / "opt" / "ml"


def _expose(opt_ml: Path, node: str, channel, source, objects) -> None:
    from smlaunch.pipelines.sources.channels import channel_dir, channel_source
    from smlaunch.pipelines.sources.fastfile import write_view

    target = channel_dir(opt_ml, channel.name)
    if objects is not None:
        write_view(target, source, objects)
        return
    try:
        folder = Path(channel_source(channel).uri).resolve()
    except DataError as exc:
        raise DataError(
            f"{exc} on node {node[:8]} ({_address()}); a path channel must be on every "
            "receiving node (a shared file system)"
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink():
        target.unlink()
    target.symlink_to(folder, target_is_directory=True)


def _remove_tree(run: str, node: str) -> None:
    """On the node: the tree's top folder (links inside are removed, never followed)."""
    top = _tree(run, node).parents[1]
    if top.name.startswith("smlaunch-") and top.is_dir():
        shutil.rmtree(top, ignore_errors=True)


def _address() -> str:
    import ray

    return ray.util.get_node_ip_address() if ray.is_initialized() else os.uname().nodename
