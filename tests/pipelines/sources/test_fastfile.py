"""FastFile views: a read task reads its own files with the sizes it was given, never the view's
list of the channel's objects (for 1.28 million objects, tens of MB of JSON per read task)."""

import json
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.pipelines.sources.fastfile import VIEW_FILE, read_view, view_source, write_view
from smlaunch.pipelines.sources.objects import ObjectSource


@pytest.mark.ray
@pytest.mark.parametrize("record_format", ["image_folder", "parquet"])
def test_fastfile_read_tasks_read_their_own_files_without_parsing_the_view(data_cluster, tmp_path, s3, record_format):
    import cloudpickle
    import pyarrow as pa
    import pyarrow.parquet as pq

    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel

    bucket = f"ff-{record_format.replace('_', '-')}"
    s3.create_bucket(Bucket=bucket)
    if record_format == "image_folder":
        bodies = {f"c{i % 4}/{i:04d}.jpg": b"img-%d" % i for i in range(400)}
    else:
        bodies = {}
        for i in range(3):
            sink = pa.BufferOutputStream()
            pq.write_table(
                pa.table(
                    {"image": [b"img-%d" % (i * 100 + r) for r in range(100)], "label": [r % 4 for r in range(100)]}
                ),
                sink,
                row_group_size=30,
            )
            bodies[f"part-{i}.parquet"] = sink.getvalue().to_pybytes()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: s3.put_object(Bucket=bucket, Key=f"train/{item[0]}", Body=item[1]), bodies.items()))
    source = ObjectSource(f"s3://{bucket}/train/", s3.meta.endpoint_url)
    root = tmp_path / "algo-2/opt/ml"
    channel_path = root / "input/data/ff"
    write_view(channel_path, source, source.list())
    assert view_source(channel_path) == source and list(read_view(channel_path)[1]) == source.list()

    roots = {"algo-2": str(root)}
    channel = ChannelPlan(
        name="ff",
        input_mode="FastFile",
        record_format=record_format,
        source="",
        hosts=("algo-2",),
        fields=("image", "label", None),
    )
    listing = list_channel(channel, roots)
    datasource = ChannelDatasource(channel, listing, roots, num_classes=4, cpus={"algo-2": 4})
    tasks = datasource.get_read_tasks(4, data_context=SimpleNamespace(_execution_idx=0))  # the tasks Ray Data runs
    assert len(tasks) > 1
    if record_format == "image_folder":  # 400 files in 4 tasks: each carries its share, not the channel's
        whole = len(cloudpickle.dumps(listing))
        assert all(len(cloudpickle.dumps(task)) < whole / 2 for task in tasks)

    # Whatever the view's object list holds now, the read tasks never parse it.
    view = channel_path / VIEW_FILE
    head = view.read_text().split("\n", 1)[0]
    view.write_text(head + "\n" + "this is not the object list")
    assert json.loads(head)["source"] == source.uri
    ds = data_cluster.data.read_datasource(datasource, label_selector={"sm-host": "algo-2"})
    images = sorted(bytes(image) for batch in ds.iter_batches(batch_size=None) for image in batch["image"])
    expected = bodies.values() if record_format == "image_folder" else [b"img-%d" % i for i in range(300)]
    assert images == sorted(expected)
