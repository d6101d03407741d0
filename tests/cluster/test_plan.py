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
    assert (
        "1 GPU planned in train_group but 0 on this machine: a CPU train worker (gloo) stands in for it" in plan.notes
    )
    assert [(w.rank, w.host, w.gpu, w.stand_in) for w in plan.workers] == [(0, "algo-1", 0, True)]
    assert (plan.global_batch, plan.learning_rate) == (64, 0.003)


def test_types_beyond_the_old_table_and_a_type_the_table_lacks(configs):
    """ml.c7i.xlarge is in the spec table now; ml.g7e.2xlarge is not, so the config gives its vcpus and gpus."""
    cfg = load_config(
        configs / "hetero.yaml",
        [
            "cluster.instance_groups.1.instance_type=ml.c7i.xlarge",
            "cluster.instance_groups.0.instance_type=ml.g7e.2xlarge",
            "cluster.instance_groups.0.vcpus=8",
            "cluster.instance_groups.0.gpus=1",
        ],
    )
    plan = build_plan(cfg, LocalEnvironment(cpus=12, gpus=0, started="t"))
    assert [(h.name, h.vcpus, h.num_cpus) for h in plan.hosts] == [("algo-1", 8, 8), ("algo-2", 4, 4)]
    assert plan.head == "algo-1" and plan.train_workers == 1 and plan.workers[0].host == "algo-1"


def test_head_is_the_gpu_group_even_when_listed_last(configs):
    cfg = load_config(
        configs / "hetero.yaml",
        [
            "cluster.instance_groups.0.instance_type=ml.c5.xlarge",
            "cluster.instance_groups.0.instance_count=2",
            "cluster.instance_groups.1.instance_type=ml.g5.12xlarge",
            "cluster.instance_groups.1.instance_count=2",
            "channels.train.instance_groups=[train_group]",
            "channels.validation.instance_groups=[train_group]",
        ],
    )
    plan = build_plan(cfg, LocalEnvironment(cpus=8, gpus=8, started="t"))
    assert plan.head == "algo-3"  # first host of the GPU group, not algo-1
    assert plan.host("algo-3").subcluster == "train" and plan.host("algo-1").subcluster == "data"
    assert plan.train_workers == 8 and plan.use_gpu  # 2 hosts x 4 GPUs
    assert [(w.rank, w.host, w.gpu) for w in plan.workers] == [
        (r, "algo-3" if r < 4 else "algo-4", r % 4) for r in range(8)
    ]
    assert plan.worker_selectors[5] == {"ray-subcluster": "train", "sm-host": "algo-4"}
    assert (plan.host("algo-3").num_gpus, plan.host("algo-4").num_gpus) == (4, 4)


def test_gpus_are_capped_by_the_machine(configs):
    plan = build_plan(load_config(configs / "hetero.yaml"), LocalEnvironment(cpus=4, gpus=1, started="t"))
    assert plan.train_workers == 1 and plan.use_gpu and plan.head_host.num_gpus == 1


def test_planned_gpus_become_stand_in_workers_on_the_hosts_that_own_them(configs):
    """2 x ml.g5.xlarge: two workers, one per GPU host, CPU (gloo) stand-ins on a machine without GPUs."""
    cfg = load_config(
        configs / "hetero.yaml",
        ["cluster.instance_groups.0.instance_count=2", "trainer.lr_scaling=linear", "trainer.grad_accum_steps=2"],
    )
    plan = build_plan(cfg, CPU_ONLY)
    assert [(w.rank, w.host, w.gpu, w.stand_in) for w in plan.workers] == [
        (0, "algo-1", 0, True),
        (1, "algo-2", 0, True),
    ]
    assert plan.train_workers == 2 and not plan.use_gpu and plan.head == "algo-1"
    assert (plan.global_batch, plan.learning_rate) == (64 * 2 * 2, 0.006)
    assert all(plan.host(h).num_cpus >= 1 for h in ("algo-1", "algo-2"))
    # 4 GPUs on one host: 4 stand-ins need 4 CPU slots there, more than this machine's cores: a note says so
    big = build_plan(
        load_config(configs / "hetero.yaml", ["cluster.instance_groups.0.instance_type=ml.g5.12xlarge"]), CPU_ONLY
    )
    assert big.train_workers == 4 and big.host("algo-1").num_cpus == 4
    assert any("4 CPU stand-ins share this machine's 2 cores" in n for n in big.notes)
    capped = build_plan(
        load_config(
            configs / "hetero.yaml", ["cluster.instance_groups.0.instance_type=ml.g5.12xlarge", "trainer.max_workers=2"]
        ),
        CPU_ONLY,
    )
    assert [(w.rank, w.host) for w in capped.workers] == [(0, "algo-1"), (1, "algo-1")]
    # a machine with enough GPUs gives each planned GPU a real one
    real = build_plan(cfg, LocalEnvironment(cpus=16, gpus=2, started="t"))
    assert [(w.host, w.gpu, w.stand_in) for w in real.workers] == [("algo-1", 0, False), ("algo-2", 0, False)]
    assert real.use_gpu


def test_no_gpu_group_is_an_error_unless_named_or_alone(configs):
    cpu_only = ["cluster.instance_groups.0.instance_type=ml.c5.xlarge"]
    with pytest.raises(ConfigError, match=r"no instance group of this job has GPUs \(train_group=ml.c5.xlarge, "):
        build_plan(load_config(configs / "hetero.yaml", cpu_only), CPU_ONLY)
    plan = build_plan(load_config(configs / "hetero.yaml", cpu_only + ["cluster.train_group=train_group"]), CPU_ONLY)
    assert plan.head == "algo-1" and plan.train_workers == 1


def test_single_group_runs_preprocessing_on_the_train_hosts(configs):
    cfg = load_config(
        configs / "hetero.yaml", ["channels.train.instance_groups=null", "channels.validation.instance_groups=null"]
    )
    raw = cfg.model_dump()
    raw["cluster"]["instance_groups"] = raw["cluster"]["instance_groups"][:1]
    plan = build_plan(type(cfg).model_validate(raw), CPU_ONLY)
    assert plan.data_selector is None
    # never unset: Ray Data sizes the budget from the bucket the selector names
    assert plan.preprocess_selector == {"ray-subcluster": "train"}
    assert plan.channels[0].hosts == ("algo-1",)


def test_object_store_is_a_share_of_this_machine_unless_configured(configs):
    gib = 2**30
    plan = build_plan(
        load_config(configs / "hetero.yaml"), LocalEnvironment(cpus=2, gpus=0, started="t", memory_bytes=24 * gib)
    )
    assert [h.object_store_bytes for h in plan.hosts] == [int(0.3 * 24 * gib / 2)] * 2
    small = build_plan(load_config(configs / "hetero.yaml"), CPU_ONLY)  # memory unknown: the floor
    assert {h.object_store_bytes for h in small.hosts} == {256 * 2**20}
    big = build_plan(
        load_config(configs / "hetero.yaml"), LocalEnvironment(cpus=16, gpus=1, started="t", memory_bytes=128 * gib)
    )
    assert {h.object_store_bytes for h in big.hosts} == {4 * gib}
    set_ = build_plan(load_config(configs / "hetero.yaml", ["cluster.object_store_mb=512"]), CPU_ONLY)
    assert {h.object_store_bytes for h in set_.hosts} == {512 * 2**20}


def test_natural_host_order():
    assert sorted(["algo-10", "algo-2", "algo-1"], key=natural_key) == ["algo-1", "algo-2", "algo-10"]


def test_run_dir_comes_from_config_or_timestamp(configs):
    assert build_plan(load_config(configs / "hetero.yaml"), CPU_ONLY).run_dir == "runs/hetero-digits-t"
    named = build_plan(load_config(configs / "hetero.yaml", ["run.name=exp1", "run.dir=elsewhere/x"]), CPU_ONLY)
    assert named.run_dir == "elsewhere/x/exp1"


def test_one_topology_rule_for_the_local_plan_the_sagemaker_plan_and_submit(configs):
    """A lone group without GPUs trains (one CPU worker) in all three, and they route channels alike."""
    import yaml

    from smlaunch.config.loader import validate_config
    from smlaunch.launcher.sagemaker.training_job import receiving_groups, train_group

    raw = yaml.safe_load((configs / "hetero.yaml").read_text())
    raw["cluster"]["instance_groups"] = [{"name": "cpu", "instance_type": "ml.c5.2xlarge", "instance_count": 2}]
    for channel in raw["channels"].values():
        channel.pop("instance_groups")
    cfg = validate_config(raw)
    plan = build_plan(cfg, CPU_ONLY)
    assert train_group(cfg) == "cpu" and plan.host(plan.head).group == "cpu"
    assert [(w.host, w.gpu) for w in plan.workers] == [("algo-1", None), ("algo-2", None)]  # one per host
    assert receiving_groups(cfg) == {"train": ["cpu"], "validation": ["cpu"]}
    assert {c.name: c.hosts for c in plan.channels} == {
        "train": ("algo-1", "algo-2"),
        "validation": ("algo-1", "algo-2"),
    }
