"""Listing a channel on its hosts (real Ray cluster): progress instead of a fixed timeout, Parquet
footers read in parallel, image folders' classes, and the packed `FileList` the hosts answer with."""

import os
import threading
from pathlib import Path

import pytest

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.errors import DataError
from smlaunch.pipelines.sources.file_list import FileList

HOSTS = ("algo-2", "algo-3")


def channel(name, record_format, hosts=HOSTS[:1], **kw) -> ChannelPlan:
    return ChannelPlan(name=name, input_mode="File", record_format=record_format, source="", hosts=hosts, **kw)


def test_file_list_iterates_indexes_and_slices_as_the_pairs_it_packs():
    pairs = [(f"c{i % 3}/é{i}\n.jpg", i * 10) for i in range(10)]
    files = FileList.from_pairs(pairs)
    assert len(files) == 10 and list(files) == pairs and files == pairs and pairs == files
    assert files[3] == pairs[3] and files[-1] == pairs[-1]
    for cut in (slice(2, 7), slice(None, None, 3), slice(1, None, 2), slice(8, 2), slice(None, None, -1)):
        assert list(files[cut]) == pairs[cut], cut
        assert isinstance(files[cut], FileList)
    assert files.total_size() == sum(s for _, s in pairs)
    assert FileList.of([]) == [] and len(FileList.of([])) == 0


def remote_stream(ray, body):
    return (
        ray.remote(body)
        .options(num_returns="streaming", num_cpus=0, max_retries=0, label_selector={"sm-host": "algo-2"})
        .remote()
    )


@pytest.mark.ray
def test_a_listing_that_advances_is_never_cut_short_and_one_that_stalls_fails_in_one_line(data_cluster):
    from smlaunch.pipelines.sources.listing import _collect, _RayStreams

    def steady():  # lists for 4 s in all, advancing every 0.2 s: past a 2 s deadline, never stuck for it
        import time

        for n in range(20):
            yield "progress", n
            time.sleep(0.2)
        yield "done", {"files": FileList.of(["a"], 1)}

    def stuck():  # reports, but without a file more: a hung mount
        import time

        yield "progress", 0
        yield "progress", 5
        while True:
            time.sleep(0.1)
            yield "progress", 5

    # A worker already up on the host: the deadline also covers a lister's start, which is not under test.
    data_cluster.get(data_cluster.remote(lambda: 1).options(num_cpus=0, label_selector={"sm-host": "algo-2"}).remote())
    answers = _collect("train", _RayStreams({"algo-2": remote_stream(data_cluster, steady)}), stall_s=2.0)
    assert list(answers["algo-2"]["files"]) == [("a", 1)]
    with pytest.raises(DataError) as failure:
        _collect("train", _RayStreams({"algo-2": remote_stream(data_cluster, stuck)}), stall_s=2.0)
    message = str(failure.value)
    assert "\n" not in message and "channel 'train'" in message and "host algo-2" in message, message
    assert "no progress for 2 s (5 files seen)" in message, message


HERE = pytest.mark.parametrize("here", [False, True], ids=["on-the-host", "here"])
"""Listed by a task on the host, or by this process (a local run, while its cluster starts)."""


@pytest.mark.ray
@HERE
def test_a_host_whose_folder_hangs_fails_the_listing_naming_channel_and_host(data_cluster, tmp_path, here):
    """A Parquet 'file' that blocks on open (a FIFO without a writer) stands in for a hung mount."""
    from smlaunch.pipelines.sources.listing import list_channel

    folder = tmp_path / "algo-2/opt/ml/input/data/hung"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "part-0.parquet")
    try:
        with pytest.raises(DataError) as failure:
            list_channel(
                channel("hung", "parquet"), {"algo-2": str(tmp_path / "algo-2/opt/ml")}, stall_s=2.0, here=here
            )
    finally:
        unblock = threading.Thread(target=lambda: open(folder / "part-0.parquet", "wb").close(), daemon=True)
        unblock.start()  # in case the cancelled lister still waits on the FIFO
    message = str(failure.value)
    assert "\n" not in message and message.startswith("channel 'hung': listing on host algo-2 made no progress"), (
        message
    )


def write_parquets(folder: Path, groups_per_file) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    for i, groups in enumerate(groups_per_file):
        rows = 10 * groups
        table = pa.table({"image": [b"x"] * rows, "label": [(i * 7 + r) % 50 for r in range(rows)]})
        pq.write_table(table, folder / f"part-{i:02d}.parquet", row_group_size=10)
    (folder / "_SUCCESS").write_bytes(b"")


@pytest.mark.ray
def test_parallel_parquet_footers_give_the_row_groups_rows_and_labels_a_sequential_read_gives(data_cluster, tmp_path):
    from smlaunch.pipelines.formats.parquet import describe
    from smlaunch.pipelines.sources.listing import list_channel

    folder = tmp_path / "algo-2/opt/ml/input/data/pq"
    write_parquets(folder, [1 + (i * 5) % 7 for i in range(40)])
    listing = list_channel(
        channel("pq", "parquet", fields=("image", "label", None)), {"algo-2": str(tmp_path / "algo-2/opt/ml")}
    )
    sequential = {}
    for path in sorted(folder.glob("part-*.parquet")):
        with open(path, "rb") as f:
            sequential[path.name] = describe(f, str(path), "label")
    assert listing.row_groups == {rel: groups for rel, (groups, _, _) in sequential.items()}
    assert listing.rows == {"algo-2": sum(rows for _, rows, _ in sequential.values())}
    assert listing.rows["algo-2"] == 10 * sum(listing.row_groups.values())  # 10 rows a group (write_parquets)
    assert listing.max_label == max(top for _, _, top in sequential.values())
    assert [rel for rel, _ in listing.files["algo-2"]] == sorted(sequential)  # _SUCCESS is no data file


@pytest.mark.ray
@HERE
def test_image_folder_listing_gives_classes_files_in_walk_order_and_refuses_an_empty_class(
    data_cluster, tmp_path, here
):
    from smlaunch.pipelines.sources.listing import list_channel

    opt_ml = tmp_path / "algo-2/opt/ml"
    folder = opt_ml / "input/data/img"
    for c in range(5):
        for i in range(300):
            path = folder / f"class-{c}" / ("deep/" if i % 50 == 0 else "") / f"{i}.JPG"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"j" * (c + 1))
    (folder / "readme.txt").write_text("not an image")
    (folder / "class-1/notes.txt").write_text("not an image either")
    (folder / ".hidden").mkdir()
    listing = list_channel(channel("img", "image_folder"), {"algo-2": str(opt_ml)}, here=here)
    files = listing.files["algo-2"]
    assert listing.classes == [f"class-{c}" for c in range(5)] and len(files) == 1500
    expected = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        rel = Path(root).relative_to(folder)
        if rel.parts:
            expected += [str(rel / n) for n in sorted(names) if n.endswith(".JPG")]
    assert [rel for rel, _ in files] == expected
    assert {size for _, size in files} <= {1, 2, 3, 4, 5}  # each file stat'ed, or the mean of a sample

    (folder / "class-9").mkdir()
    with pytest.raises(DataError, match="class folder class-9 holds no image"):
        list_channel(channel("img", "image_folder"), {"algo-2": str(opt_ml)}, here=here)


@pytest.mark.ray
def test_an_image_folder_listed_with_estimated_sizes_still_reads_every_file_whole(data_cluster, tmp_path):
    """Past `SIZE_SAMPLE` files a walked folder's sizes are one mean: files longer and shorter than
    it arrive whole (the reader reads on whenever a file's length differs from the listed one)."""
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.host_listing import SIZE_SAMPLE
    from smlaunch.pipelines.sources.listing import list_channel

    opt_ml = tmp_path / "algo-2/opt/ml"
    folder = opt_ml / "input/data/sizes"
    bodies = set()
    for i in range(SIZE_SAMPLE + 300):
        body = b"%d:" % i + b"x" * ((i * 37) % 3000)
        (folder / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        (folder / f"c{i % 3}/{i}.png").write_bytes(body)
        bodies.add(body)
    roots = {"algo-2": str(opt_ml)}
    ch = channel("sizes", "image_folder")
    listing = list_channel(ch, roots)
    assert len({size for _, size in listing.files["algo-2"]}) == 1  # estimated: one mean for all
    ds = data_cluster.data.read_datasource(
        ChannelDatasource(ch, listing, roots, num_classes=3), label_selector={"sm-host": "algo-2"}
    )
    got = [bytes(image) for batch in ds.iter_batches(batch_size=None) for image in batch["image"]]
    assert len(got) == len(bodies) and set(got) == bodies


@pytest.mark.ray
@HERE
def test_a_lister_s_error_is_one_line_naming_channel_and_host(data_cluster, tmp_path, here):
    from smlaunch.pipelines.sources.listing import list_channel

    with pytest.raises(DataError) as failure:
        list_channel(channel("absent", "tfrecord"), {"algo-2": str(tmp_path / "nowhere/opt/ml")}, stall_s=60, here=here)
    message = str(failure.value)
    assert "\n" not in message and message.startswith("channel 'absent': ") and "host algo-2" in message, message
