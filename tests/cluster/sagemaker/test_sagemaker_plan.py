"""Head selection and the per-host plan on SageMaker layouts (pure: no cluster, no processes)."""

import os
import subprocess
import sys

import pytest

from smlaunch.cluster.host_tree import write_host_tree
from smlaunch.cluster.plan import LocalEnvironment
from smlaunch.cluster.process_tree import Pid1
from smlaunch.cluster.sagemaker.plan import build_sagemaker_plan, choose_head, with_joined_resources
from smlaunch.cluster.sagemaker_env import GroupInfo, read_sagemaker_environment
from smlaunch.cluster.topology import GroupShape, choose_train_group
from smlaunch.config import load_config
from smlaunch.errors import ConfigError

HERE = LocalEnvironment(cpus=4, gpus=0, started="t")
# configs/hetero.yaml's groups: train_group (ml.g5.xlarge), data_group (ml.c5.4xlarge).
LAYOUT = [
    {"instance_group_name": "data_group", "instance_type": "ml.c5.4xlarge", "hosts": ["algo-1"]},
    {"instance_group_name": "train_group", "instance_type": "ml.g5.xlarge", "hosts": ["algo-10", "algo-2"]},
]
CHANNELS = {"train": "File", "validation": "File"}


def sm_env(tmp_path, host, layout=LAYOUT, channels=CHANNELS):
    write_host_tree(tmp_path / host, host, layout, channels)
    return read_sagemaker_environment({"SAGEMAKER_BASE_DIR": str(tmp_path / host)})


def group(name, itype, *hosts):
    return GroupInfo(name, itype, hosts)


def test_head_is_the_first_gpu_host_in_natural_order_never_simply_algo_1(configs, tmp_path):
    cfg = load_config(
        configs / "hetero.yaml",
        ["cluster.instance_groups.1.instance_count=1", "cluster.instance_groups.0.instance_count=2"],
    )
    for host in ("algo-1", "algo-2", "algo-10"):  # every host reaches the same decision
        plan = build_sagemaker_plan(cfg, sm_env(tmp_path, host), HERE)
        assert plan.head == "algo-2" and plan.head_address == "algo-2:6379" and plan.current_host == host
        assert [(h.name, h.role, h.subcluster) for h in plan.hosts] == [
            ("algo-1", "worker", "data"),
            ("algo-2", "head", "train"),
            ("algo-10", "worker", "train"),
        ]
        me = plan.host(host)
        assert me.opt_ml == str(tmp_path / host) and me.num_cpus == 4
        assert all(h.opt_ml is None for h in plan.hosts if h.name != host)
        assert {c.name: c.hosts for c in plan.channels} == {"train": ("algo-1",), "validation": ("algo-1",)}
    assert plan.host("algo-1").labels == {"ray-subcluster": "data", "sm-host": "algo-1", "sm-group": "data_group"}
    assert plan.host("algo-1").num_cpus == 16 and plan.host("algo-2").num_gpus == 1  # from the type table
    # algo-10 (this host) found no GPU here; algo-2 counts 1 from the table: one worker until they join.
    assert plan.train_workers == 1 and plan.use_gpu and plan.data_selector == {"ray-subcluster": "data"}


def test_train_group_choice():
    a, b = GroupShape("a", "ml.c5.xlarge", 0), GroupShape("b", "ml.p4d.24xlarge", 8)
    assert choose_train_group([a, b], None)[0] == "b"
    assert choose_train_group([a, b], "a")[0] == "a"  # configured wins, even a CPU group
    # a type newer than the table: the GPUs the config gives it decide
    assert (
        choose_train_group([GroupShape("a", "ml.c7i.large", 0), GroupShape("b", "ml.g7e.2xlarge", 1)], None)[0] == "b"
    )
    assert choose_train_group([GroupShape("homogeneousCluster", "ml.c5.xlarge", 0)], None)[0] == "homogeneousCluster"
    assert choose_head(group("homogeneousCluster", "ml.c5.xlarge", "algo-2", "algo-1")) == "algo-1"
    with pytest.raises(
        ConfigError,
        match=r"no instance group of this job has GPUs \(a=ml.c5.xlarge, "
        r"c=ml.m5.large\); name the training group in cluster.train_group",
    ):
        choose_train_group([a, GroupShape("c", "ml.m5.large", 0)], None)
    with pytest.raises(ConfigError, match="cluster.train_group: 'x' is not a group of this job; groups: a, b"):
        choose_train_group([a, b], "x")


def test_eight_workers_packed_four_per_gpu_host_never_on_a_data_host(configs, tmp_path):
    """2 x ml.g5.12xlarge: ranks 0-3 on the head (algo-2), 4-7 on algo-10, each pinned by its host's
    label; NCCL uses the job's network interface (and no EFA: g5.12xlarge has none)."""
    cfg = load_config(
        configs / "hetero.yaml",
        ["cluster.instance_groups.0.instance_type=ml.g5.12xlarge", "cluster.instance_groups.0.instance_count=2"],
    )
    layout = [LAYOUT[0], {**LAYOUT[1], "instance_type": "ml.g5.12xlarge"}]
    plan = build_sagemaker_plan(cfg, sm_env(tmp_path, "algo-1", layout), HERE)
    assert [(w.rank, w.host, w.gpu) for w in plan.workers] == [
        (r, "algo-2" if r < 4 else "algo-10", r % 4) for r in range(8)
    ]
    assert plan.global_batch == 8 * 64 and {s["sm-host"] for s in plan.worker_selectors} == {"algo-2", "algo-10"}
    assert plan.worker_env == {"NCCL_SOCKET_IFNAME": "lo", "NCCL_PROTO": "simple"}
    # after joining, the GPUs the hosts report decide: one host came up with 2 GPUs visible
    nodes = [
        {"labels": {"sm-host": "algo-2"}, "resources": {"CPU": 48.0, "GPU": 4.0}},
        {"labels": {"sm-host": "algo-10"}, "resources": {"CPU": 48.0, "GPU": 2.0}},
    ]
    joined = with_joined_resources(plan, nodes, cfg)
    assert [w.host for w in joined.workers] == ["algo-2"] * 4 + ["algo-10"] * 2 and joined.global_batch == 6 * 64


def test_nccl_settings_follow_the_instance_type_as_the_toolkit_sets_them():
    from smlaunch.cluster.sagemaker.nccl import nccl_environment

    assert nccl_environment("ml.p4d.24xlarge", "eth0") == {
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_PROTO": "simple",
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "RDMAV_FORK_SAFE": "1",
    }
    assert nccl_environment("ml.g5.48xlarge", "eth1") == {
        "NCCL_SOCKET_IFNAME": "eth1",
        "NCCL_PROTO": "simple",
        "FI_PROVIDER": "efa",
    }
    assert nccl_environment("ml.g5.xlarge", "eth0", {"NCCL_PROTO": "LL"}) == {"NCCL_SOCKET_IFNAME": "eth0"}


def test_a_type_the_table_lacks_takes_the_configs_vcpus_and_gpus(configs, tmp_path):
    cfg = load_config(
        configs / "hetero.yaml",
        [
            "cluster.instance_groups.0.instance_type=ml.g7e.2xlarge",
            "cluster.instance_groups.0.vcpus=8",
            "cluster.instance_groups.0.gpus=1",
        ],
    )
    layout = [LAYOUT[0], {**LAYOUT[1], "instance_type": "ml.g7e.2xlarge"}]
    plan = build_sagemaker_plan(cfg, sm_env(tmp_path, "algo-1", layout), HERE)
    assert plan.head == "algo-2" and plan.host("algo-2").num_gpus == 1 and plan.host("algo-2").num_cpus == 8


def test_config_and_job_must_agree(configs, tmp_path):
    cfg = load_config(configs / "hetero.yaml")
    renamed = [dict(g, instance_group_name=g["instance_group_name"].upper()) for g in LAYOUT]
    with pytest.raises(
        ConfigError,
        match=r"cluster.instance_groups: the config names groups \['train_group', "
        r"'data_group'\] but this job has \['DATA_GROUP', 'TRAIN_GROUP'\]",
    ):
        build_sagemaker_plan(cfg, sm_env(tmp_path, "algo-1", renamed), HERE)
    with pytest.raises(
        ConfigError,
        match=r"channels.validation: routed to group data_group, but this host "
        r"\(algo-1\) did not receive it; inputdataconfig.json lists \['train'\]",
    ):
        build_sagemaker_plan(cfg, sm_env(tmp_path, "algo-1", channels={"train": "File"}), HERE)
    with pytest.raises(
        ConfigError, match="channels.train.input_mode: the config says File but the job delivers it in Pipe mode"
    ):
        build_sagemaker_plan(cfg, sm_env(tmp_path, "algo-1", channels={"train": "Pipe", "validation": "File"}), HERE)
    both = {"train": "File", "validation": "File"}
    tree = write_host_tree(tmp_path / "sharded", "algo-1", LAYOUT, both, distributions={"train": "ShardedByS3Key"})
    with pytest.raises(
        ConfigError,
        match="channels.train.s3_distribution: the config says FullyReplicated but the job delivers it ShardedByS3Key",
    ):
        build_sagemaker_plan(cfg, read_sagemaker_environment({"SAGEMAKER_BASE_DIR": str(tree)}), HERE)
    tree = write_host_tree(tmp_path / "wrapped", "algo-1", LAYOUT, both, wrappers={"validation": "RecordIO"})
    with pytest.raises(
        ConfigError,
        match="channels.validation.record_format: the job wraps each object in "
        "RecordIO .RecordWrapperType., so the config must say recordio, not tfrecord",
    ):
        build_sagemaker_plan(cfg, read_sagemaker_environment({"SAGEMAKER_BASE_DIR": str(tree)}), HERE)
    # A GPU host does not receive the data channels, so its plan does not need them.
    assert build_sagemaker_plan(cfg, sm_env(tmp_path, "algo-2", channels={}), HERE).head == "algo-2"


def test_actual_resources_replace_the_table_once_hosts_joined(configs, tmp_path):
    plan = build_sagemaker_plan(load_config(configs / "hetero.yaml"), sm_env(tmp_path, "algo-2"), HERE)
    nodes = [
        {"labels": {"sm-host": "algo-1"}, "resources": {"CPU": 15.0}},
        {"labels": {"sm-host": "algo-2"}, "resources": {"CPU": 4.0, "GPU": 0.0}},
        {"labels": {"sm-host": "algo-10"}, "resources": {"CPU": 4.0, "GPU": 1.0}},
    ]
    joined = with_joined_resources(plan, nodes, load_config(configs / "hetero.yaml"))
    assert joined.host("algo-1").num_cpus == 15 and joined.train_workers == 1 and joined.use_gpu
    cpu_only = with_joined_resources(
        plan, [dict(n, resources={"CPU": 2.0}) for n in nodes], load_config(configs / "hetero.yaml")
    )
    assert cpu_only.train_workers == 2 and not cpu_only.use_gpu  # no GPU anywhere: one CPU worker per train host


@pytest.mark.parametrize(
    "pid1, configured, every, says",
    [
        (
            Pid1("tini", "/usr/bin/tini -- train", "exits_with_child"),
            None,
            300,
            "PID 1 is tini (/usr/bin/tini -- train), which exits as soon as the toolkit does: a stop kills sm-launch "
            "with it, before any checkpoint; checkpointing every 300 s instead (trainer.checkpoint_every_s default "
            "under this PID 1)",
        ),
        (
            Pid1("bash", "bash -m start_with_right_hostname.sh train", "no_handler"),
            60,
            60,
            "which has no SIGTERM handler: the kernel drops a stop's signal, nothing here learns of it, and SageMaker "
            "kills the job 120 s later without a checkpoint; checkpointing every 60 s instead "
            "(trainer.checkpoint_every_s)",
        ),
        (
            Pid1("bash", "bash entry.sh", "no_handler"),
            0,
            0,
            "trainer.checkpoint_every_s is 0, so a stop loses everything",
        ),
        (Pid1("python3", "python3 my_init.py", "unknown"), None, 300, "a stop checkpoints only if it forwards"),
        (Pid1("?", "?", "unreadable"), None, 300, "PID 1 cannot be read here (/proc/1)"),
        (
            Pid1("smlaunch-init", "python3 /usr/local/bin/smlaunch-init train", "reaping"),
            None,
            0,
            "which forwards SIGTERM to the toolkit and waits for every process: a stop checkpoints at the next step",
        ),
        (
            Pid1("sm-launch", "python -m smlaunch.launcher.cli run", "launcher"),
            600,
            600,
            "stop: PID 1 is sm-launch itself (sagemaker.entry: container): a stop checkpoints at the next step "
            "boundary",
        ),
    ],
)
def test_each_pid1_sets_what_a_stop_does_and_the_timed_checkpoints(configs, tmp_path, pid1, configured, every, says):
    """Under a PID 1 that lets no stop reach sm-launch, the last timed checkpoint is all a stop leaves:
    one every 300 s unless the config says otherwise; where a stop checkpoints, only the config's."""
    overrides = [] if configured is None else [f"trainer.checkpoint_every_s={configured}"]
    cfg = load_config(configs / "hetero.yaml", overrides)
    plan = build_sagemaker_plan(cfg, sm_env(tmp_path, "algo-2"), LocalEnvironment(4, 0, "t", pid1=pid1))
    assert plan.checkpoint_every_s == every and says in plan.stop
    assert plan.stop_is_clean == pid1.stop_is_clean == (pid1.kind in ("reaping", "launcher"))
    if not pid1.stop_is_clean:
        assert "use sagemaker.entry: container, or smlaunch-init as the image's PID 1" in plan.stop
    joined = with_joined_resources(plan, [{"labels": {"sm-host": "algo-2"}, "resources": {"CPU": 4.0}}], cfg)
    assert (joined.checkpoint_every_s, joined.stop) == (plan.checkpoint_every_s, plan.stop)
    assert build_sagemaker_plan(cfg, sm_env(tmp_path, "algo-2"), HERE).stop is None  # PID 1 not known


def test_plan_command_on_a_sagemaker_host_prints_roles_labels_and_head_address(configs, tmp_path):
    write_host_tree(tmp_path / "opt/ml", "algo-1", LAYOUT, CHANNELS)
    env = {**os.environ, "SAGEMAKER_BASE_DIR": str(tmp_path / "opt/ml")}
    out = subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", "plan", str(configs / "hetero.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "SageMaker job: this host is algo-1 (worker, data_group)" in text
    assert "head: algo-2 (train_group, ml.g5.xlarge) at algo-2:6379" in text
    assert "algo-10  worker group=train_group" in text
    assert "labels=ray-subcluster=data,sm-host=algo-1,sm-group=data_group" in text
    assert "note: head algo-2: first host in natural order of train_group ['algo-10', 'algo-2']" in text
    assert "stop: PID 1 is " in text  # this machine's, whatever it is


def test_a_sagemaker_host_s_ray_node_keeps_the_workers_of_its_chain_and_read_tasks(configs, tmp_path):
    """The raylet a SageMaker host starts gets the same worker pool as a local host's
    (`cluster.node.worker_pool_env`; tests/cluster/test_node.py shows what it keeps)."""
    from smlaunch.launcher.sagemaker.run import _node

    cfg = load_config(configs / "hetero.yaml")
    sm = sm_env(tmp_path, "algo-1")
    plan = build_sagemaker_plan(cfg, sm, HERE)
    node = _node(plan, sm, cfg, "algo-2:6379", "127.0.0.1")
    try:
        assert node.process is None and "--num-cpus=4" in node.args
        assert node.env["RAY_num_workers_soft_limit"] == "10"
    finally:
        import shutil

        shutil.rmtree(node.temp_dir, ignore_errors=True)
