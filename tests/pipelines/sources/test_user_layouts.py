"""Every record format in every input mode SageMaker can deliver it in, read through Ray Data on two
simulated data hosts from files written by the users' own tools (tests/support/user_layouts.py): each
sample exactly once, with the label its writer gave it and its id (given, or derived from its
place: file and record, row or byte offset; a Pipe stream's from its image bytes). Delivery is the
local stand-in for SageMaker's (`deliver_channels`, `start_pipe_agents`), as in a run; whole
jobs on these layouts are in tests/launcher/test_user_data_jobs.py."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from smlaunch.cluster.plan import channel_plan
from smlaunch.config.channel import ChannelConfig
from smlaunch.pipelines.rows import derived_id
from support.user_layouts import (
    CLASSES,
    digits,
    write_image_folder,
    write_manifest_file,
    write_parquet,
    write_slim_tfrecords,
    write_webdataset,
)

HOSTS = ("algo-2", "algo-3")
ROWS = 300


@pytest.fixture(scope="module")
def rows():
    return digits("train")[:ROWS]


def fake_plan(tmp_path: Path, channel):
    hosts = {h: SimpleNamespace(name=h, opt_ml=str(tmp_path / h / "opt/ml")) for h in HOSTS}
    return SimpleNamespace(channels=(channel,), host=lambda name: hosts[name])


def read(ray, tmp_path, channel, s3_endpoint=None, listing_check=None):
    """(label, id) of every row of one pass over `channel`, delivered to both hosts as a run would."""
    from smlaunch.pipelines.sources.channels import deliver_channels, start_pipe_agents
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel
    from smlaunch.pipelines.sources.pipe_reader import PipeChannelDatasource

    plan = fake_plan(tmp_path, channel)
    roots = {h: plan.host(h).opt_ml for h in HOSTS}
    agents = []
    if channel.input_mode == "Pipe":
        agents = start_pipe_agents(plan, seed=0, s3_endpoint=s3_endpoint)
        source = PipeChannelDatasource(channel, roots, timeout_s=30, num_classes=10)
    else:
        deliver_channels(plan, s3_endpoint)
        listing = list_channel(channel, roots)
        if listing_check:
            listing_check(listing)
        source = ChannelDatasource(channel, listing, roots, num_classes=10)
    try:
        ds = ray.data.read_datasource(source, label_selector={"sm-host": "in(algo-2,algo-3)"}, override_num_blocks=4)
        return sorted(
            (int(label), int(i))
            for batch in ds.iter_batches(batch_size=None)
            for label, i in zip(batch["label"], batch["id"], strict=False)
        )
    finally:
        for agent in agents:
            agent.stop()


def channel(name, source, **keys):
    return channel_plan(name, ChannelConfig(source=str(source), **keys), HOSTS, block_rows=64)


def upload(s3, folder: Path, prefix: str) -> str:
    """`folder` uploaded under s3://layouts/<prefix>/ of the local S3 server."""
    if "layouts" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="layouts")
    for path in folder.rglob("*"):
        if path.is_file():
            s3.upload_file(str(path), "layouts", f"{prefix}/{path.relative_to(folder)}")
    return f"s3://layouts/{prefix}/"


def derived(rows):
    """(label, id) of `rows` as a Pipe stream derives ids: from the image bytes."""
    return sorted((label, derived_id(image)) for image, label, _ in rows)


def placed(folder: Path, record_format: str, rels: dict[str, str] | None = None):
    """(label, id) of every sample in `folder`'s files as a File or FastFile read derives ids: from
    the file's path in the channel (`rels`: file name -> that path, when a manifest renames) and
    the sample's record index, row or byte offset there."""
    import pyarrow.parquet as pq

    from smlaunch.pipelines.formats import iter_records
    from smlaunch.pipelines.formats.example import example_values
    from smlaunch.pipelines.formats.webdataset import iter_samples

    out = []
    suffix = {"webdataset": ".tar", "parquet": ".parquet"}.get(record_format)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if (rels is not None and path.name not in rels) or (rels is None and path.suffix != suffix):
            continue
        rel = rels[path.name] if rels is not None else str(path.relative_to(folder))
        if record_format == "webdataset":
            with open(path, "rb") as stream:
                out += [(int(s["cls"]), derived_id(rel, offset)) for offset, s in iter_samples(stream, rel)]
        elif record_format == "parquet":
            out += [
                (int(label), derived_id(rel, n)) for n, label in enumerate(pq.read_table(path)["label"].to_pylist())
            ]
        else:
            out += [
                (int(example_values(r, ("image/encoded", "image/class/label"))[1]), derived_id(rel, n))
                for n, r in enumerate(iter_records(path, "tfrecord"))
            ]
    return sorted(out)


@pytest.mark.ray
@pytest.mark.parametrize("mode, distribution", [("File", "ShardedByS3Key"), ("FastFile", "FullyReplicated")])
def test_image_folder_written_by_pil(data_cluster, tmp_path, rows, s3, mode, distribution):
    root = write_image_folder(tmp_path / "folder", rows)
    source = upload(s3, root, "folder") if mode == "FastFile" else root
    from PIL import Image

    expected = sorted(
        (label, derived_id(f"{name}/{p.name}"))
        for label, name in enumerate(CLASSES)
        for p in (root / name).glob("*.png")
    )
    assert Image.open(next((root / CLASSES[3]).glob("*.png"))).format == "PNG" and len(expected) == ROWS

    def classes(listing):
        assert listing.classes == CLASSES and listing.num_classes == 10

    got = read(
        data_cluster,
        tmp_path,
        channel(f"folder{mode}", source, record_format="image_folder", input_mode=mode, s3_distribution=distribution),
        s3_endpoint=s3.meta.endpoint_url,
        listing_check=classes,
    )
    assert got == expected


@pytest.mark.ray
@pytest.mark.parametrize(
    "mode, distribution",
    [
        ("File", "FullyReplicated"),
        ("FastFile", "ShardedByS3Key"),
        ("Pipe", "FullyReplicated"),
        ("Pipe", "ShardedByS3Key"),
    ],
)
def test_webdataset_written_by_tarwriter(data_cluster, tmp_path, rows, s3, mode, distribution):
    write_webdataset(tmp_path / "wds", rows, shards=3)
    source = upload(s3, tmp_path / "wds", "wds") if mode == "FastFile" else tmp_path / "wds"
    got = read(
        data_cluster,
        tmp_path,
        channel(
            f"wds{mode}{distribution[0]}",
            source,
            record_format="webdataset",
            input_mode=mode,
            s3_distribution=distribution,
        ),
        s3_endpoint=s3.meta.endpoint_url,
    )
    assert got == (derived(rows) if mode == "Pipe" else placed(tmp_path / "wds", "webdataset"))


@pytest.mark.ray
@pytest.mark.parametrize("mode, hf_struct", [("File", True), ("FastFile", False)])
def test_parquet_written_by_pyarrow_split_by_row_group(data_cluster, tmp_path, rows, s3, mode, hf_struct):
    write_parquet(tmp_path / "pq", rows, files=2, row_group_size=50, hf_struct=hf_struct, with_id=not hf_struct)
    source = upload(s3, tmp_path / "pq", "pq") if mode == "FastFile" else tmp_path / "pq"
    keys = {} if hf_struct else {"fields": {"id": "sample_id"}}

    def groups(listing):
        assert sorted(listing.row_groups.values()) == [3, 3] and listing.num_classes == 10
        assert listing.rows == {"algo-2": len(rows)}  # from the footers, the first host standing for all

    got = read(
        data_cluster,
        tmp_path,
        channel(f"pq{mode}", source, record_format="parquet", input_mode=mode, **keys),
        s3_endpoint=s3.meta.endpoint_url,
        listing_check=groups,
    )
    assert got == (
        placed(tmp_path / "pq", "parquet") if hf_struct else sorted((label, ident) for _, label, ident in rows)
    )


@pytest.mark.ray
@pytest.mark.parametrize("mode", ["File", "Pipe"])
def test_slim_tfrecords_listed_by_a_manifest_file(data_cluster, tmp_path, rows, mode):
    """TF-Slim shards (no `id` feature) written by the `tfrecord` package, half of them listed by a
    ManifestFile: only the listed ones are delivered."""
    shards = write_slim_tfrecords(tmp_path / "slim", rows, shards=4)
    manifest = write_manifest_file(
        tmp_path / "train.manifest.json",
        f"{tmp_path}/slim/validation-",
        [p.name.removeprefix("validation-") for p in shards[:2]],
    )
    got = read(
        data_cluster,
        tmp_path,
        channel(f"slim{mode}", manifest, input_mode=mode, s3_data_type="ManifestFile", record_format="tfrecord"),
    )
    listed = {p.name: p.name for p in shards[:2]}  # under the prefix's last `/`, as delivered
    assert got == (derived(rows[: ROWS // 2]) if mode == "Pipe" else placed(tmp_path / "slim", "tfrecord", listed))


@pytest.mark.ray
def test_file_system_channel_is_mounted_and_split_between_two_hosts(data_cluster, tmp_path, rows):
    write_webdataset(tmp_path / "fsx", rows, shards=4)
    ch = channel(
        "fsx",
        tmp_path / "fsx",
        record_format="webdataset",
        file_system={"type": "FSxLustre", "id": "fs-0123456789abcdef0", "directory": "/fsx/digits"},
    )
    got = read(data_cluster, tmp_path, ch)
    assert got == placed(tmp_path / "fsx", "webdataset")
    for host in HOSTS:  # mounted, not copied: the same folder on both hosts
        mounted = tmp_path / host / "opt/ml/input/data/fsx"
        assert mounted.is_symlink() and mounted.resolve() == (tmp_path / "fsx").resolve()


def read_error(ray, tmp_path, ch) -> str:
    from ray.exceptions import RayError

    from smlaunch.errors import DataError

    with pytest.raises((DataError, RayError)) as info:
        read(ray, tmp_path, ch)
    return str(info.value)


@pytest.mark.ray
def test_bad_webdataset_samples_fail_in_one_line_or_are_skipped_and_counted(data_cluster, tmp_path, rows):
    """A shard cut short, a sample without its label and a label that is not a class: each names
    the channel, the shard and the sample; `max_corrupted_records` skips them instead."""
    import webdataset as wds

    from smlaunch.pipelines.corrupt import corrupt_summary, start_counter

    folder = tmp_path / "bad"
    write_webdataset(folder, rows[:40], shards=2)
    with wds.TarWriter(str(folder / "shard-0002.tar")) as sink:
        sink.write({"__key__": "nolabel", "jpg": rows[0][0]})
        sink.write({"__key__": "mislabelled", "jpg": rows[1][0], "cls": 12})
        sink.write({"__key__": "good", "jpg": rows[2][0], "cls": rows[2][1]})
    whole = (folder / "shard-0001.tar").read_bytes()
    with tarfile.open(folder / "shard-0001.tar") as archive:
        cut = next(m for m in archive.getmembers()[len(archive.getmembers()) // 2 :] if m.name.endswith(".jpg"))
    (folder / "shard-0001.tar").write_bytes(whole[: cut.offset_data + 100])  # cut inside a member
    start_counter({"bad": 0})
    message = read_error(data_cluster, tmp_path, channel("bad", folder, record_format="webdataset"))
    assert "channel 'bad': " in message and ("shard-0001.tar" in message or "shard-0002.tar" in message), message

    start_counter({"bad2": 3})
    got = read(data_cluster, tmp_path, channel("bad2", folder, record_format="webdataset", max_corrupted_records=3))
    kept_first = placed(folder, "webdataset", {"shard-0000.tar": "shard-0000.tar"})
    assert len(kept_first) == 20 and set(kept_first) <= set(got)
    with open(folder / "shard-0002.tar", "rb") as stream:
        from smlaunch.pipelines.formats.webdataset import iter_samples

        offset = next(o for o, sample in iter_samples(stream, "") if sample["__key__"] == b"good")
    assert (rows[2][1], derived_id("shard-0002.tar", offset)) in got
    summary = corrupt_summary()["bad2"]
    assert summary["skipped"] == 3, summary
    firsts = " | ".join(summary["first"])
    assert "shard-0002.tar sample nolabel at byte 0: no label (extensions jpg;jpeg;png;webp, cls" in firsts, firsts
    assert "sample mislabelled at byte 2560: label 12 is not a class index 0..9 (model.num_classes: 10)" in firsts
    assert f"shard-0001.tar: member {cut.name} at byte {cut.offset} is cut short (100 of {cut.size} bytes)" in firsts, (
        firsts
    )


@pytest.mark.ray
def test_bad_image_folder_files_fail_in_one_line_or_are_skipped_and_the_good_ones_all_arrive(
    data_cluster, tmp_path, rows
):
    """An empty image file and an eleventh class folder (label 10 with `model.num_classes` 10) each
    name the channel and the file; skipped, every other image still arrives once, in blocks that
    mix good tables and bad files; a file gone after the listing names the file and the host."""
    from smlaunch.pipelines.corrupt import corrupt_summary, start_counter

    root = write_image_folder(tmp_path / "folder", rows[:150])
    (root / CLASSES[0] / "empty.png").write_bytes(b"")
    (root / "extra").mkdir()
    for n in range(2):
        (root / "extra" / f"x{n}.png").write_bytes(next((root / CLASSES[1]).glob("*.png")).read_bytes())
    good = sorted(
        (label, derived_id(f"{name}/{p.name}"))
        for label, name in enumerate(CLASSES)
        for p in (root / name).glob("*.png")
        if p.stat().st_size
    )
    start_counter({"badfolder": 0})
    message = read_error(data_cluster, tmp_path / "a", channel("badfolder", root, record_format="image_folder"))
    assert "channel 'badfolder': " in message and (
        "empty.png: no image (an image file in a class folder)" in message
        or "label 10 is not a class index 0..9" in message
    ), message

    start_counter({"skipfolder": 3})
    got = read(
        data_cluster, tmp_path / "b", channel("skipfolder", root, record_format="image_folder", max_corrupted_records=3)
    )
    assert got == good
    summary = corrupt_summary()["skipfolder"]
    firsts = " | ".join(summary["first"])
    assert summary["skipped"] == 3 and "digit-0/empty.png: no image" in firsts, summary
    assert "extra/x0.png: label 10 is not a class index 0..9 (model.num_classes: 10)" in firsts, firsts

    clean = write_image_folder(tmp_path / "clean", rows[:60])
    gone = sorted((clean / CLASSES[2]).glob("*.png"))[0].name

    def remove_after_listing(listing):
        for host in HOSTS:  # the hosts' channel directories are links to one folder: gone from the first is gone
            (tmp_path / "c" / host / "opt/ml/input/data/gonefolder" / CLASSES[2] / gone).unlink(missing_ok=True)

    start_counter({"gonefolder": 0})
    with pytest.raises(Exception) as info:
        read(
            data_cluster,
            tmp_path / "c",
            channel("gonefolder", clean, record_format="image_folder"),
            listing_check=remove_after_listing,
        )
    assert re.search(
        rf"channel 'gonefolder': cannot open \S+/{CLASSES[2]}/{gone} on algo-[23]: No such file", str(info.value)
    ), str(info.value)


@pytest.mark.ray
def test_a_read_task_listing_over_a_mebibyte_of_file_names_reads(data_cluster, tmp_path, rows):
    """A read task over many long paths makes a large pickle; past 1 MiB Ray Data warns,
    naming the read function, which a bare `functools.partial` does not have (it failed the pass
    with an AttributeError)."""
    import cloudpickle

    from smlaunch.pipelines.sources.channels import deliver_channels
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel

    folder = tmp_path / "long" / ("c" * 200)  # a task reads at most `units.TASK_UNITS` files: long paths each
    folder.mkdir(parents=True)
    for n in range(5000):
        (folder / f"{n:05d}{'x' * 240}.png").write_bytes(rows[0][0])
    ch = channel("long", tmp_path / "long", record_format="image_folder", s3_distribution="FullyReplicated")
    plan = fake_plan(tmp_path, ch)
    roots = {h: plan.host(h).opt_ml for h in HOSTS}
    deliver_channels(plan)
    source = ChannelDatasource(ch, list_channel(ch, roots), roots, num_classes=10)
    running = source.get_read_tasks(1, data_context=SimpleNamespace(_execution_idx=0))  # what Ray Data runs
    assert max(len(cloudpickle.dumps(task)) for task in running) > 1 << 20  # the first is short: `units.headed_runs`
    ds = data_cluster.data.read_datasource(
        source, label_selector={"sm-host": "in(algo-2,algo-3)"}, override_num_blocks=1
    )
    assert ds.count() == 5000


@pytest.mark.ray
def test_parquet_without_the_label_column_names_the_columns(data_cluster, tmp_path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "pq").mkdir()
    pq.write_table(
        pa.table(
            {"img": pa.array([r[0] for r in rows[:10]], pa.binary()), "target": pa.array([r[1] for r in rows[:10]])}
        ),
        tmp_path / "pq/x.parquet",
    )
    from smlaunch.pipelines.corrupt import start_counter

    start_counter({"pqbad": 0})
    message = read_error(data_cluster, tmp_path, channel("pqbad", tmp_path / "pq", record_format="parquet"))
    assert "x.parquet: no column image, label (columns: img, target); set the channel's fields" in message, message
    got = read(
        data_cluster,
        tmp_path,
        channel("pqgood", tmp_path / "pq", record_format="parquet", fields={"image": "img", "label": "target"}),
    )
    assert got == sorted((label, derived_id("x.parquet", n)) for n, (_, label, _) in enumerate(rows[:10]))
