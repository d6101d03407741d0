"""Ray Data over Pipe-mode channels: two simulated data hosts, each reading its own FIFOs through the
local agent, every sample exactly once per epoch under both S3 distribution types."""

import os

import pytest

from smlaunch.pipelines.agent import PipeAgent, local_objects, objects_for_host
from smlaunch.pipelines.formats import recordio
from smlaunch.pipelines.formats.example import encode_example

HOSTS = ("algo-2", "algo-3")


@pytest.fixture(scope="module")
def data_cluster():
    saved = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE")}
    os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=False, head_node_args=dict(
        num_cpus=1, labels={"ray-subcluster": "train", "sm-host": "algo-1"}, include_dashboard=False,
        object_store_memory=100 * 2**20))
    for host in HOSTS:
        cluster.add_node(num_cpus=1, labels={"ray-subcluster": "data", "sm-host": host},
                         object_store_memory=100 * 2**20, include_log_monitor=False)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="smlaunch-test")
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()
    cluster.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def write_shards(folder, count, per_shard):
    folder.mkdir(parents=True)
    for shard in range(count):
        ids = range(shard * per_shard, (shard + 1) * per_shard)
        recordio.write_records(folder / f"part-{shard}.rec",
                               [encode_example({"image/encoded": b"jpeg-%d" % i, "image/class/label": i % 10,
                                                "id": i}) for i in ids])


@pytest.mark.ray
@pytest.mark.parametrize("distribution", ["FullyReplicated", "ShardedByS3Key"])
def test_each_sample_exactly_once_per_epoch_across_two_hosts(data_cluster, tmp_path, distribution):
    ray = data_cluster
    from smlaunch.pipelines.pipe_source import PipeChannelDatasource

    write_shards(tmp_path / "src", count=6, per_shard=50)
    objects = local_objects(tmp_path / "src")
    channel = f"train{distribution[0]}"
    roots = {h: str(tmp_path / h / "opt/ml") for h in HOSTS}
    agents = [PipeAgent(tmp_path / h / "opt/ml/input/data", channel,
                        objects_for_host(objects, distribution, i, len(HOSTS)), epochs=2, seed=i).start()
              for i, h in enumerate(HOSTS)]
    ds = ray.data.read_datasource(PipeChannelDatasource(channel, roots, "recordio", distribution, timeout_s=30),
                                  label_selector={"sm-host": "in(algo-2,algo-3)"})
    for epoch in range(2):
        ids = [int(i) for batch in ds.iter_batches(batch_size=None) for i in batch["id"]]
        assert sorted(ids) == list(range(300)), f"epoch {epoch}: {len(ids)} rows, {len(set(ids))} distinct"
    for agent in agents:
        agent.stop()
