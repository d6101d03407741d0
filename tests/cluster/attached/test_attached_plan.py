"""The plan of a job on a running cluster (`cluster.attached.plan`), from node lists as
`ray.nodes()` returns them: hosts, worker placement, selectors and channels, without Ray."""

from pathlib import Path

import pytest
from test_attach import HETERO, cfg, node

from smlaunch.cluster.attached.attach import match_groups
from smlaunch.cluster.attached.plan import attachable, attached_plan
from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config import load_config
from smlaunch.errors import ConfigError, UserError


def plan_of(nodes, *overrides):
    config = cfg(*overrides)
    return attached_plan(config, match_groups(config, nodes, "head:6379"), "20261123-120000")


def test_hosts_are_the_matched_nodes_by_id_and_outputs_go_to_the_run_directory():
    nodes = [
        node(1, gpus=4, ray_subcluster="train", sm__group="train_group"),
        node(2, ray_subcluster="data", sm__group="data_group"),
        node(3, ray_subcluster="data", sm__group="data_group"),
        node(4),  # not the job's: no work, and it carries no ray-subcluster, so the selectors stay by label
    ]
    plan = plan_of(nodes, "cluster.instance_groups.0.instance_type=ml.g5.12xlarge")
    ids = [n["NodeID"] for n in nodes]
    assert [(h.name, h.role, h.subcluster, h.num_gpus) for h in plan.hosts] == [
        (ids[0], "head", "train", 4),
        (ids[1], "worker", "data", 0),
        (ids[2], "worker", "data", 0),
    ]
    assert plan.head == ids[0] and plan.mode == "attached" and plan.head_address == "head:6379"
    assert [(w.rank, w.host, w.gpu, w.on_gpu) for w in plan.workers] == [(r, ids[0], r, True) for r in range(4)]
    assert (plan.train_selector, plan.data_selector) == ({"ray-subcluster": "train"}, {"ray-subcluster": "data"})
    assert plan.worker_selectors[3] == {"ray-subcluster": "train", "ray.io/node-id": ids[0]}
    # a relative run.dir is the driver's working folder's, as on the local path (the nodes' are elsewhere)
    assert plan.output_dir == plan.run_dir == str(Path.cwd() / "runs" / "hetero-digits-20261123-120000")
    # nothing is copied, so nothing is sharded: each object is read once across the receiving nodes
    train = next(c for c in plan.channels if c.name == "train")
    assert train.hosts == (ids[1], ids[2]) and train.distribution == "FullyReplicated"
    assert all(h.opt_ml is None for h in plan.hosts)  # until the nodes' trees exist
    assert train.source == "builtin:digits/train"
    relative = plan_of(
        nodes,
        "cluster.instance_groups.0.instance_type=ml.g5.12xlarge",
        "channels.train={source: data/train, record_format: parquet}",
    )
    assert next(c for c in relative.channels if c.name == "train").source == str(Path.cwd() / "data" / "train")


def test_an_s3_run_dir_is_the_output_and_the_driver_stages_its_files_locally():
    nodes = [
        node(1, ray_subcluster="train", sm__group="train_group"),
        node(2, ray_subcluster="data", sm__group="data_group"),
    ]
    config = load_config(HETERO, ["run.dir=s3://team-runs/jobs/", "run.name=r1"])
    plan = attached_plan(config, match_groups(config, nodes, "head:6379"), "20261123-120000", staging="/tmp/stage")
    assert (plan.output_dir, plan.run_dir) == ("s3://team-runs/jobs/r1", str(Path("/tmp/stage/r1")))
    with pytest.raises(
        ConfigError,
        match=r"^run\.dir: s3://team-runs/jobs/: the local simulation keeps its hosts' "
        r"trees in the run directory; give a path",
    ):
        build_plan(config, LocalEnvironment(cpus=8, gpus=0, started="20261123-120000"))


def test_cpu_stand_ins_spread_over_the_train_nodes_cpus_and_too_few_cpus_fail_in_one_line():
    two = [node(1, sm__group="train_group"), node(2, sm__group="train_group"), node(3, sm__group="data_group")]
    plan = plan_of(two, "cluster.instance_groups.0.instance_type=ml.g5.12xlarge")  # 4 GPUs planned, none there
    assert [(w.rank, w.host[:2], w.gpu, w.stand_in) for w in plan.workers] == [
        (0, "01", 0, True),
        (1, "01", 1, True),
        (2, "02", 0, True),
        (3, "02", 1, True),
    ]
    # no ray-subcluster labels: the selectors name the nodes
    assert plan.train_selector == {"ray.io/node-id": f"in({two[0]['NodeID']},{two[1]['NodeID']})"}
    assert plan.data_selector == {"ray.io/node-id": f"in({two[2]['NodeID']})"}
    with pytest.raises(
        UserError,
        match=r"^cluster at head:6379: instance group train_group has 8 CPUs on 2 nodes "
        r"for 16 CPU train workers; set trainer.max_workers=8 or give its nodes CPUs$",
    ):
        plan_of(
            two, "cluster.instance_groups.0.instance_type=ml.g5.48xlarge", "cluster.instance_groups.0.instance_count=2"
        )


def test_a_node_labelled_like_the_data_group_but_not_matched_turns_the_selector_to_node_ids():
    nodes = [
        node(1, ray_subcluster="train", sm__group="train_group"),
        node(2, ray_subcluster="data", sm__group="data_group"),
        node(3, ray_subcluster="data", team="other"),  # another team's data node: no work of ours
    ]
    plan = plan_of(nodes)
    assert plan.data_selector == {"ray.io/node-id": f"in({nodes[1]['NodeID']})"}
    assert plan.train_selector == {"ray-subcluster": "train"}


@pytest.mark.parametrize(
    "override, field",
    [
        ("channels.train.input_mode=Pipe", "channels.train.input_mode: Pipe exists only on a SageMaker job"),
        ("run.dir=s3://", "run.dir: s3:// names no bucket"),
        ("run.s3_seed={'s3://b/p/': builtin:digits}", "run.s3_seed: it fills the local simulation's S3 server"),
    ],
)
def test_what_a_running_cluster_cannot_do_is_refused_from_the_config_alone(override, field):
    with pytest.raises(ConfigError, match="^" + field.replace(".", r"\.").replace("(", r"\(")):
        attachable(load_config(HETERO, [override]))
