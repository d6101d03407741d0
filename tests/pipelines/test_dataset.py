"""The product's datasets on a real 3-node cluster: every row is read and preprocessed on the two
data hosts, none on the train host (which has a free CPU a wrong selector would use)."""

import numpy as np
import pytest

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config import load_config


@pytest.mark.ray
def test_every_row_is_produced_on_a_data_node(data_cluster, configs, tmp_path):
    from smlaunch.cluster.host_tree import create_host_trees
    from smlaunch.pipelines.sources.channels import deliver_channels
    from smlaunch.pipelines.dataset import build_datasets

    cfg = load_config(configs / "hetero.yaml", ["cluster.instance_groups.1.instance_count=2",
                                                f"run.dir={tmp_path}", "run.name=placement"])
    plan = build_plan(cfg, LocalEnvironment(cpus=3, gpus=0, started="t"))
    assert [(h.name, h.subcluster) for h in plan.hosts] == [("algo-1", "train"), ("algo-2", "data"),
                                                           ("algo-3", "data")]
    create_host_trees(plan)
    deliver_channels(plan)
    ctx = data_cluster.data.DataContext.get_current()
    saved = ctx.execution_options.label_selector
    try:
        datasets = build_datasets(cfg, plan)
        hosts = np.concatenate([b["host"] for b in datasets["train"].iter_batches(batch_size=None)])
    finally:
        ctx.execution_options.label_selector = saved
    names = [h.name for h in plan.hosts]
    produced = {name: int((hosts == i).sum()) for i, name in enumerate(names)}
    assert len(hosts) == 1437  # every training digit
    assert produced["algo-1"] == 0 and (hosts >= 0).all()  # all on data nodes: 100 %
    assert produced["algo-2"] + produced["algo-3"] == 1437
