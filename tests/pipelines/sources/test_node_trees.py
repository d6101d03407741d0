"""Channel trees on the nodes of an attached cluster (`node_trees`), on the shared 3-node test
cluster: made by tasks pinned to the receiving nodes, read like any host's /opt/ml, removed after,
and a path a node cannot see fails in one line naming the channel and the node."""

import tempfile
from pathlib import Path

import pytest

from smlaunch.cluster.plan import HostPlan, LaunchPlan, channel_plan
from smlaunch.config.channel import ChannelConfig
from smlaunch.errors import DataError
from smlaunch.pipelines.sources.channels import channel_dir, list_host_channel
from smlaunch.pipelines.sources.node_trees import node_trees


def plan_with(tmp_path: Path, source: str) -> LaunchPlan:
    channel = channel_plan("train", ChannelConfig(source=source, record_format="recordio"), ("algo-2", "algo-3"))
    hosts = tuple(HostPlan(name, "g", "ml.c5.xlarge", "worker", "data", 1, 0, None) for name in ("algo-2", "algo-3"))
    return LaunchPlan(
        job="t",
        run_dir=str(tmp_path / "run-trees"),
        hosts=hosts,
        head="algo-2",
        train_workers=1,
        use_gpu=False,
        train_selector={},
        data_selector=None,
        channels=(channel,),
        notes=(),
    )


@pytest.mark.ray
def test_each_receiving_node_gets_a_tree_that_links_the_path_and_it_is_gone_after(data_cluster, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.rec").write_bytes(b"x" * 10)
    plan = plan_with(tmp_path, str(tmp_path / "data"))
    import ray

    with node_trees(plan, None) as ready:
        trees = {h.name: h.opt_ml for h in ready.hosts}
        assert trees["algo-2"] != trees["algo-3"] and all(tree.endswith("/opt/ml") for tree in trees.values())
        for host, tree in trees.items():  # each node sees the file through its own tree
            lister = ray.remote(list_host_channel).options(num_cpus=0, label_selector={"sm-host": host})
            assert ray.get(lister.remote(tree, "train"), timeout=60) == [("a.rec", 10)]
            assert channel_dir(tree, "train").is_symlink()
    assert not any(Path(tree).exists() for tree in trees.values())  # removed on exit


@pytest.mark.ray
def test_a_path_a_node_cannot_see_fails_in_one_line_naming_the_channel_and_the_node(data_cluster, tmp_path):
    plan = plan_with(tmp_path, str(tmp_path / "missing"))
    with pytest.raises(DataError, match=r"^channel 'train': source .*/missing is not a directory on node algo-2 "):
        with node_trees(plan, None):
            pass
    assert not list(Path(tempfile.gettempdir()).glob("smlaunch-run-trees-*"))
