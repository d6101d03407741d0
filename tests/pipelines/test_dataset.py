"""The product's datasets on a real 3-node cluster: every row is read and preprocessed on the two
data hosts, none on the train host (which has a free CPU a wrong selector would use), in an epoch
that writes the cache and in one that reads it back."""

import numpy as np
import pytest

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config import load_config
from smlaunch.pipelines.cache.seal import seal
from smlaunch.pipelines.cache.store import CacheSpec
from smlaunch.pipelines.dataset import CACHED_TRAIN, block_bytes, tail_in_read


@pytest.mark.ray
def test_every_row_is_produced_on_a_data_node(data_cluster, configs, tmp_path):
    from smlaunch.cluster.host_tree import create_host_trees
    from smlaunch.pipelines.dataset import build_datasets
    from smlaunch.pipelines.sources.channels import deliver_channels

    cfg = load_config(
        configs / "hetero.yaml",
        ["cluster.instance_groups.1.instance_count=2", f"run.dir={tmp_path}", "run.name=placement"],
    )
    plan = build_plan(cfg, LocalEnvironment(cpus=3, gpus=0, started="t"))
    assert [(h.name, h.subcluster) for h in plan.hosts] == [("algo-1", "train"), ("algo-2", "data"), ("algo-3", "data")]
    create_host_trees(plan)
    deliver_channels(plan)
    ctx = data_cluster.data.DataContext.get_current()
    saved = ctx.execution_options.label_selector, ctx.target_max_block_size

    def _worker_pool(batch: dict) -> dict:  # nested: pickled by value for the worker
        import os

        from smlaunch.pipelines.dataset import READ_WORKER_ENV

        ((name, _),) = READ_WORKER_ENV.items()
        return {"pool": np.array([os.environ.get(name, "")] * len(batch["label"]))}

    spec = CacheSpec(str(tmp_path / "cache" / "fp"), 1, "fp", shard_rows=256, chunk_rows=64)  # the decode
    try:
        datasets = build_datasets(cfg, plan, cache=spec)
        blocks = list(datasets["train"].iter_batches(batch_size=None))
        hosts = np.concatenate([b["host"] for b in blocks])
        # The chain's tasks run outside the read tasks' worker pool (`dataset.READ_WORKER_ENV`).
        pools = datasets["validation"].map_batches(_worker_pool, batch_size=None).take_all()
        manifest, line = seal(spec, np.concatenate([b["id"] for b in blocks]), None)
        assert manifest is not None, line
        cached = datasets[CACHED_TRAIN]
        cached_blocks = list(cached.iter_batches(batch_size=None))
        stats = cached.stats()
    finally:
        ctx.execution_options.label_selector, ctx.target_max_block_size = saved
    # 32 px crops: one batch's output is far below the 1 MiB floor, so blocks gather several
    # batches, but none passes 1.5x the target (where Ray would slice it).
    assert block_bytes(cfg) == 1 << 20
    assert max(sum(column.nbytes for column in b.values()) for b in blocks) < 1.5 * (1 << 20)
    names = [h.name for h in plan.hosts]
    produced = {name: int((hosts == i).sum()) for i, name in enumerate(names)}
    assert len(hosts) == 1437  # every training digit
    assert produced["algo-1"] == 0 and (hosts >= 0).all()  # all on data nodes: 100 %
    assert produced["algo-2"] + produced["algo-3"] == 1437
    assert pools and {p["pool"] for p in pools} == {""}, pools
    # The cached epoch: each row once, on the data hosts, and its read's blocks as the cache's
    # reader made them. Ray splits a read's blocks to reach its Dataset's block count: read through
    # the files' Dataset, each would have been cut into rows of their own (`cached_train_selector`).
    ids = np.concatenate([b["id"] for b in cached_blocks])
    assert len(ids) == len(set(ids.tolist())) == 1437
    assert set(np.concatenate([b["host"] for b in cached_blocks]).tolist()) <= {1, 2}
    assert "ReadChannel[train]" in stats and "SplitBlocks" not in stats, stats


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["pipeline.batch_size=32"], 3 * 224 * 224 * 32 * 3 // 4),  # one batch: 4.8 MB; a block below it
        (
            [
                "pipeline.batch_size=128",
                "pipeline.ops=[{op: decode_image}, {op: resize, size: 400}, {op: center_crop, size: 384}, {op: "
                "to_uint8_chw}]",
            ],
            3 * 384 * 384 * 128 * 3 // 4,
        ),
        (["pipeline.batch_size=8"], 1 << 20),  # one batch of 1.2 MB: the 1 MiB floor
    ],
)
def test_block_bytes_keep_one_chain_batch_per_block(configs, overrides, expected):
    cfg = load_config(configs / "seed-vit-blur.yaml", overrides)
    assert block_bytes(cfg) == expected


def test_a_cached_epoch_runs_the_chain_in_its_reads_only_where_the_chain_would_run_on_the_same_host(configs):
    """`tail_in_read`: fixed hosts whose reads are all on the chain's hosts (the default: the
    channel to the data group) run it in the read; a channel also read on the train hosts keeps it in
    the chain's tasks; with `min_data_hosts: 0` only while no data host is joined; other elastic
    groups never (hosts joined later run no reads)."""
    import dataclasses
    from types import SimpleNamespace

    env = LocalEnvironment(cpus=3, gpus=0, started="t")
    plan = build_plan(load_config(configs / "hetero.yaml"), env)
    train = next(c for c in plan.channels if c.name == "train")
    tail = tail_in_read(plan, train, "chain")
    assert tail is not None and tail.chain == "chain" and tail.here()
    both = build_plan(
        load_config(configs / "hetero.yaml", ["channels.train.instance_groups=[train_group, data_group]"]), env
    )
    assert tail_in_read(both, next(c for c in both.channels if c.name == "train"), "chain") is None
    zero = tail_in_read(dataclasses.replace(plan, elastic=SimpleNamespace(min_hosts=0)), train, "chain")
    assert zero is not None and zero.without_data_hosts
    assert not zero.here()  # no cluster, no list published: the chain's tasks keep it
    assert tail_in_read(dataclasses.replace(plan, elastic=SimpleNamespace(min_hosts=1)), train, "chain") is None
    cpus = sum(h.num_cpus for h in plan.hosts if h.subcluster == "train")
    assert plan.train_spare_cpus == max(1, cpus - plan.train_workers)
