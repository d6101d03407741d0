"""Matching a running cluster's nodes to the config's groups (`cluster.attached.attach`): the node lists
are what `ray.nodes()` returns, so each rule is checked without starting Ray."""

from pathlib import Path

import pytest

from smlaunch.cluster.attached.attach import match_groups
from smlaunch.config import load_config
from smlaunch.errors import UserError

HETERO = str(Path(__file__).resolve().parents[3] / "configs" / "hetero.yaml")


def node(i: int, gpus: float = 0, alive: bool = True, **labels: str) -> dict:
    labels = {k.replace("__", "-").replace("_", "-"): v for k, v in labels.items()}  # sm__group -> sm-group
    return {
        "NodeID": f"{i:02d}" + "ab" * 27,
        "Alive": alive,
        "NodeManagerAddress": f"10.0.0.{i}",
        "Resources": {"CPU": 4.0, **({"GPU": gpus} if gpus else {})},
        "Labels": {**labels, "ray.io/node-id": f"{i:02d}" + "ab" * 27},
    }


def cfg(*overrides: str):
    return load_config(HETERO, list(overrides))


def test_groups_are_found_by_their_labels_and_a_cluster_without_gpus_gets_cpu_stand_ins():
    nodes = [
        node(1, ray_subcluster="train", sm__group="train_group"),
        node(2, ray_subcluster="data", sm__group="data_group"),
        node(3, ray_subcluster="data", sm__group="data_group"),
        node(4, alive=False, ray_subcluster="data", sm__group="data_group"),  # a dead node is not a host
        node(5),  # an unlabelled node of the cluster: not the job's
    ]
    attached = match_groups(cfg(), nodes, "head:6379")
    assert {g: [n.address for n in ns] for g, ns in attached.groups.items()} == {
        "train_group": ["10.0.0.1"],
        "data_group": ["10.0.0.2", "10.0.0.3"],
    }
    assert (attached.train_group, attached.train_workers, attached.on_gpu) == ("train_group", 1, False)
    assert attached.notes == ("train_group: no GPU on its nodes; 1 CPU workers (gloo) stand in for the planned GPUs",)


def test_a_group_without_nodes_is_named_with_the_labels_the_cluster_has():
    nodes = [node(1, gpus=1, ray_subcluster="train", sm__group="train_group"), node(2, pool="cpu")]
    with pytest.raises(UserError) as err:
        match_groups(cfg(), nodes, "head:6379")
    assert str(err.value) == (
        "cluster at head:6379: no node for instance group data_group (labels sm-group=data_group); "
        "the cluster's 2 nodes carry pool=cpu, ray-subcluster=train, sm-group=train_group "
        "(cluster.node_labels maps a group to other labels)"
    )


def test_other_labels_can_be_mapped_and_a_group_without_ray_subcluster_gets_a_note():
    nodes = [node(1, gpus=1, ray_subcluster="train", sm__group="train_group"), node(2, pool="cpu")]
    attached = match_groups(cfg("cluster.node_labels={data_group: {pool: cpu}}"), nodes, "h:1")
    assert [n.address for n in attached.groups["data_group"]] == ["10.0.0.2"]
    assert attached.on_gpu and attached.train_workers == 1
    assert attached.notes == (
        "data_group: nodes without the ray-subcluster label; Ray Data budgets preprocessing for the whole cluster",
    )


def test_too_few_gpus_for_the_planned_workers_and_a_node_claimed_twice_are_refused():
    two_hosts = "cluster.instance_groups.0.instance_count=2"
    nodes = [
        node(1, gpus=1, ray_subcluster="train", sm__group="train_group"),
        node(2, ray_subcluster="data", sm__group="data_group"),
    ]
    with pytest.raises(
        UserError,
        match=r"instance group train_group has 1 GPUs on 1 nodes, fewer than the 2 train "
        r"workers planned \(2 x ml.g5.xlarge\); set trainer.max_workers=1",
    ):
        match_groups(cfg(two_hosts), nodes, "h:1")
    assert match_groups(cfg(two_hosts, "trainer.max_workers=1"), nodes, "h:1").train_workers == 1
    with pytest.raises(UserError, match="node 10.0.0.1/01ababab matches both train_group and data_group"):
        match_groups(cfg("cluster.node_labels={data_group: {ray.io/node-id: " + "01" + "ab" * 27 + "}}"), nodes, "h:1")


def test_node_labels_must_name_groups():
    from smlaunch.errors import ConfigError

    with pytest.raises(ConfigError, match="node_labels: no instance group 'gpu'"):
        cfg("cluster.node_labels={gpu: {pool: a}}")
