import pytest

from smlaunch.cluster.plan import LocalEnvironment, build_plan, natural_key
from smlaunch.config import load_config
from smlaunch.errors import ConfigError

CPU_ONLY = LocalEnvironment(cpus=2, gpus=0, started="t")


def test_two_group_plan(configs):
    plan = build_plan(load_config(configs / "hetero.yaml"), CPU_ONLY)
    head, data = plan.hosts
    assert plan.head == "algo-1" and head.role == "head" and data.role == "worker"
    assert head.labels == {"ray-subcluster": "train", "sm-host": "algo-1", "sm-group": "train_group"}
    assert data.labels["ray-subcluster"] == "data"
    assert (head.num_cpus, data.num_cpus) == (1, 2)  # 4 and 16 vCPUs scaled onto 2 cores
    assert plan.train_workers == 1 and not plan.use_gpu
    assert plan.data_selector == {"ray-subcluster": "data"}
    assert plan.train_selector == {"ray-subcluster": "train"}
    assert {c.name: c.hosts for c in plan.channels} == {"train": ("algo-2",), "validation": ("algo-2",)}
    assert head.opt_ml.endswith("hosts/algo-1/opt/ml") and data.opt_ml != head.opt_ml
    assert any("one CPU train worker" in n for n in plan.notes)


def test_types_beyond_the_old_table_and_a_type_the_table_lacks(configs):
    """ml.c7i.xlarge is in the spec table now; ml.g7e.2xlarge is not, so the config gives its vcpus and gpus."""
    cfg = load_config(configs / "hetero.yaml", [
        "cluster.instance_groups.1.instance_type=ml.c7i.xlarge", "cluster.instance_groups.0.instance_type=ml.g7e.2xlarge",
        "cluster.instance_groups.0.vcpus=8", "cluster.instance_groups.0.gpus=1"])
    plan = build_plan(cfg, LocalEnvironment(cpus=12, gpus=0, started="t"))
    assert [(h.name, h.vcpus, h.num_cpus) for h in plan.hosts] == [("algo-1", 8, 8), ("algo-2", 4, 4)]
    assert plan.head == "algo-1" and "1 GPU in train_group but 0 on this machine: one CPU train worker" in plan.notes


def test_head_is_the_gpu_group_even_when_listed_last(configs):
    cfg = load_config(configs / "hetero.yaml", [
        "cluster.instance_groups.0.instance_type=ml.c5.xlarge", "cluster.instance_groups.0.instance_count=2",
        "cluster.instance_groups.1.instance_type=ml.g5.12xlarge", "cluster.instance_groups.1.instance_count=2",
        "channels.train.instance_groups=[train_group]", "channels.validation.instance_groups=[train_group]"])
    plan = build_plan(cfg, LocalEnvironment(cpus=8, gpus=8, started="t"))
    assert plan.head == "algo-3"  # first host of the GPU group, not algo-1
    assert plan.host("algo-3").subcluster == "train" and plan.host("algo-1").subcluster == "data"
    assert plan.train_workers == 8 and plan.use_gpu  # 2 hosts x 4 GPUs


def test_gpus_are_capped_by_the_machine(configs):
    plan = build_plan(load_config(configs / "hetero.yaml"), LocalEnvironment(cpus=4, gpus=1, started="t"))
    assert plan.train_workers == 1 and plan.use_gpu and plan.head_host.num_gpus == 1


def test_no_gpu_group_is_an_error_unless_named(configs):
    cpu_only = ["cluster.instance_groups.0.instance_type=ml.c5.xlarge"]
    with pytest.raises(ConfigError, match="no instance group has GPUs"):
        build_plan(load_config(configs / "hetero.yaml", cpu_only), CPU_ONLY)
    plan = build_plan(load_config(configs / "hetero.yaml", cpu_only + ["cluster.train_group=train_group"]), CPU_ONLY)
    assert plan.head == "algo-1" and plan.train_workers == 1


def test_single_group_runs_preprocessing_on_the_train_hosts(configs):
    cfg = load_config(configs / "hetero.yaml", ["channels.train.instance_groups=null",
                                                 "channels.validation.instance_groups=null"])
    raw = cfg.model_dump()
    raw["cluster"]["instance_groups"] = raw["cluster"]["instance_groups"][:1]
    plan = build_plan(type(cfg).model_validate(raw), CPU_ONLY)
    assert plan.data_selector is None
    # never unset: Ray Data sizes the budget from the bucket the selector names
    assert plan.preprocess_selector == {"ray-subcluster": "train"}
    assert plan.channels[0].hosts == ("algo-1",)


def test_object_store_is_a_share_of_this_machine_unless_configured(configs):
    gib = 2**30
    plan = build_plan(load_config(configs / "hetero.yaml"), LocalEnvironment(cpus=2, gpus=0, started="t",
                                                                           memory_bytes=24 * gib))
    assert [h.object_store_bytes for h in plan.hosts] == [int(0.3 * 24 * gib / 2)] * 2
    small = build_plan(load_config(configs / "hetero.yaml"), CPU_ONLY)  # memory unknown: the floor
    assert {h.object_store_bytes for h in small.hosts} == {256 * 2**20}
    big = build_plan(load_config(configs / "hetero.yaml"), LocalEnvironment(cpus=16, gpus=1, started="t",
                                                                          memory_bytes=128 * gib))
    assert {h.object_store_bytes for h in big.hosts} == {4 * gib}
    set_ = build_plan(load_config(configs / "hetero.yaml", ["cluster.object_store_mb=512"]), CPU_ONLY)
    assert {h.object_store_bytes for h in set_.hosts} == {512 * 2**20}


def test_natural_host_order():
    assert sorted(["algo-10", "algo-2", "algo-1"], key=natural_key) == ["algo-1", "algo-2", "algo-10"]


def test_run_dir_comes_from_config_or_timestamp(configs):
    assert build_plan(load_config(configs / "hetero.yaml"), CPU_ONLY).run_dir == "runs/hetero-digits-t"
    named = build_plan(load_config(configs / "hetero.yaml", ["run.name=exp1", "run.dir=elsewhere/x"]), CPU_ONLY)
    assert named.run_dir == "elsewhere/x/exp1"
