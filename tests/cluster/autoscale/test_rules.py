"""Which group `autoscale:` scales and what each path says about it: one rule for all (issue 42)."""

import pytest

from smlaunch.cluster.attached.attach import match_groups
from smlaunch.cluster.attached.plan import attached_plan
from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config import load_config
from smlaunch.errors import ConfigError, UserError
from smlaunch.launcher.job.train_spec import train_spec
from smlaunch.pipelines.dataset import block_bytes
from smlaunch.trainers.fit import _execution_options

AUTOSCALE = "autoscale={min_data_hosts: 1, max_data_hosts: 4, cooldown_s: 30}"


def node(i: int, labels: dict, cpus: float = 2) -> dict:
    return {
        "NodeID": f"{i:02d}" * 28,
        "Alive": True,
        "NodeManagerAddress": "127.0.0.1",
        "Labels": labels,
        "Resources": {"CPU": cpus},
    }


def test_the_local_plan_notes_that_its_groups_are_fixed(configs):
    plan = build_plan(load_config(configs / "hetero.yaml", [AUTOSCALE]), LocalEnvironment(cpus=2, gpus=0, started="t"))
    assert any(
        n.startswith(
            "autoscale: off in the local simulation, whose hosts are fixed for the run: data_group "
            "keeps its 1 (sm-launch submit --data-hosts auto sizes it"
        )
        for n in plan.notes
    ), plan.notes
    assert plan.elastic is None


@pytest.mark.parametrize(
    "group, error",
    [
        ("train_group", "autoscale.group: train_group is the train group; only data (CPU-only) groups scale"),
        ("nope", "autoscale.group: no instance group 'nope'; groups: ['data_group', 'train_group']"),
    ],
)
def test_a_group_that_cannot_scale_is_refused_at_plan_time(configs, group, error):
    cfg = load_config(configs / "hetero.yaml", [AUTOSCALE, f"autoscale.group={group}"])
    with pytest.raises(ConfigError) as exc:
        build_plan(cfg, LocalEnvironment(cpus=2, gpus=0, started="t"))
    assert str(exc.value) == error


def test_min_above_max_is_refused_at_load(configs):
    with pytest.raises(Exception, match=r"autoscale.min_data_hosts \(5\) is above autoscale.max_data_hosts \(4\)"):
        load_config(configs / "hetero.yaml", [AUTOSCALE, "autoscale.min_data_hosts=5"])


def test_on_a_running_cluster_the_data_selector_is_the_label_new_hosts_carry(configs, tmp_path):
    cfg = load_config(configs / "hetero.yaml", [AUTOSCALE, f"run.dir={tmp_path}"])
    nodes = [
        node(1, {"ray-subcluster": "train", "sm-group": "train_group"}, 4),
        node(2, {"ray-subcluster": "data", "sm-group": "data_group"}),
    ]
    plan = attached_plan(cfg, match_groups(cfg, nodes, "127.0.0.1:6379"), "t")
    assert plan.data_selector == {"ray-subcluster": "data"}
    e = plan.elastic
    assert (e.group, e.labels, e.cpus_per_host, e.min_hosts, e.max_hosts) == (
        "data_group",
        {"sm-group": "data_group"},
        2,
        1,
        4,
    )
    # the chain's pool sized for the largest group; Ray Data's budget follows the nodes
    assert plan.preprocess_slots == 8
    # the train channel's chain runs at most six blocks per slot ahead of the trainer (a host given
    # back ends once its blocks are taken); other channels under Ray Data's own budget
    spec = train_spec(cfg, plan)
    assert spec.ingest_buffer_bytes == max(64 << 20, 6 * 8 * block_bytes(cfg))
    from ray.data import ExecutionOptions

    options = _execution_options(spec, ExecutionOptions, budgeted=True)
    assert options.resource_limits.object_store_memory == spec.ingest_buffer_bytes
    assert options.label_selector == spec.preprocess_selector
    unbudgeted = _execution_options(spec, ExecutionOptions)
    assert unbudgeted.resource_limits.object_store_memory == ExecutionOptions().resource_limits.object_store_memory
    assert any("hosts added while training run the chain and go first" in n for n in plan.notes)
    # a data node without the subcluster label: new hosts could not be put to work by label
    nodes[1]["Labels"] = {"sm-group": "data_group"}
    with pytest.raises(
        UserError, match="autoscale needs every data node, and only those, to carry the label ray-subcluster=data"
    ):
        attached_plan(cfg, match_groups(cfg, nodes, "127.0.0.1:6379"), "t")
