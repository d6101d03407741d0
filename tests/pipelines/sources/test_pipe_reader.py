"""Ray Data over Pipe-mode channels: two simulated data hosts, each reading its own FIFOs through the
local agent, every sample exactly once per epoch under both S3 distribution types."""

import pytest

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.pipelines.formats import recordio
from smlaunch.pipelines.formats.example import encode_example
from smlaunch.pipelines.sources.objects import local_objects, objects_for_host
from smlaunch.pipelines.sources.pipe_agent import PipeAgent

HOSTS = ("algo-2", "algo-3")


def write_shards(folder, count, per_shard):
    folder.mkdir(parents=True)
    for shard in range(count):
        ids = range(shard * per_shard, (shard + 1) * per_shard)
        recordio.write_records(
            folder / f"part-{shard}.rec",
            [encode_example({"image/encoded": b"jpeg-%d" % i, "image/class/label": i % 10, "id": i}) for i in ids],
        )


@pytest.mark.ray
@pytest.mark.parametrize("distribution", ["FullyReplicated", "ShardedByS3Key"])
def test_each_sample_exactly_once_per_epoch_across_two_hosts(data_cluster, tmp_path, distribution):
    ray = data_cluster
    from smlaunch.pipelines.sources.pipe_reader import PipeChannelDatasource

    write_shards(tmp_path / "src", count=6, per_shard=50)
    objects = local_objects(tmp_path / "src")
    channel = f"train{distribution[0]}"
    roots = {h: str(tmp_path / h / "opt/ml") for h in HOSTS}
    agents = [
        PipeAgent(
            tmp_path / h / "opt/ml/input/data",
            channel,
            objects_for_host(objects, distribution, i, len(HOSTS)),
            epochs=2,
            seed=i,
        ).start()
        for i, h in enumerate(HOSTS)
    ]
    plan = ChannelPlan(
        name=channel, input_mode="Pipe", record_format="recordio", source="", hosts=HOSTS, distribution=distribution
    )
    ds = ray.data.read_datasource(
        PipeChannelDatasource(plan, roots, timeout_s=30), label_selector={"sm-host": "in(algo-2,algo-3)"}
    )
    for epoch in range(2):
        ids = [int(i) for batch in ds.iter_batches(batch_size=None) for i in batch["id"]]
        assert sorted(ids) == list(range(300)), f"epoch {epoch}: {len(ids)} rows, {len(set(ids))} distinct"
    for agent in agents:
        agent.stop()


@pytest.mark.ray
def test_augmented_manifest_rows_regrouped_from_attribute_records_exactly_once(data_cluster, tmp_path, s3):
    """A Ground Truth style manifest: images in S3 (`source-ref`), labels inline; SageMaker's stream of
    one RecordIO record per attribute, replicated to both hosts, comes back as whole rows, once each."""
    import json

    from smlaunch.pipelines.sources.manifest import manifest_objects
    from smlaunch.pipelines.sources.objects import ObjectSource
    from smlaunch.pipelines.sources.pipe_reader import PipeChannelDatasource

    ray = data_cluster
    s3.create_bucket(Bucket="labelled")
    lines = []
    for i in range(60):
        s3.put_object(Bucket="labelled", Key=f"img/{i}.jpg", Body=b"jpeg-%d" % i)
        lines.append(
            json.dumps(
                {"source-ref": f"s3://labelled/img/{i}.jpg", "class": i % 10, "sample": str(i), "other": "dropped"}
            )
        )
    s3.put_object(Bucket="labelled", Key="train.manifest", Body="\n".join(lines).encode())
    names = ("source-ref", "class", "sample")
    objects = manifest_objects(ObjectSource("s3://labelled/train.manifest", s3.meta.endpoint_url), names)
    roots = {h: str(tmp_path / h / "opt/ml") for h in HOSTS}
    agents = [
        PipeAgent(tmp_path / h / "opt/ml/input/data", "labelled", objects, epochs=1, seed=i).start()
        for i, h in enumerate(HOSTS)
    ]
    plan = ChannelPlan(
        name="labelled", input_mode="Pipe", record_format="recordio", source="", hosts=HOSTS, attribute_names=names
    )
    ds = ray.data.read_datasource(
        PipeChannelDatasource(plan, roots, timeout_s=30), label_selector={"sm-host": "in(algo-2,algo-3)"}
    )
    rows = sorted((int(r["id"]), bytes(r["image"]), int(r["label"])) for r in ds.iter_rows())
    assert rows == [(i, b"jpeg-%d" % i, i % 10) for i in range(60)]
    for agent in agents:
        agent.stop()


def test_a_manifest_line_without_an_attribute_names_the_line(tmp_path):
    from smlaunch.errors import DataError
    from smlaunch.pipelines.rows import group_attributes
    from smlaunch.pipelines.sources.manifest import manifest_objects
    from smlaunch.pipelines.sources.objects import ObjectSource

    (tmp_path / "m.jsonl").write_text('{"source-ref": "a.jpg", "class": 1}\n{"source-ref": "b.jpg"}\n')
    with pytest.raises(DataError, match=r"m.jsonl line 2: no attribute class \(AttributeNames: source-ref, class\)"):
        manifest_objects(ObjectSource(str(tmp_path / "m.jsonl")), ["source-ref", "class"])
    with pytest.raises(DataError, match="stream ended inside row 1 after 1 of 2 attributes"):
        list(group_attributes([b"img", b"1", b"img"], 2, "train_0"))
