"""Channels delivered to simulated hosts as SageMaker would (File copies, FastFile views, sharding),
from a local folder and from the local S3 server, and read back through the channel's files."""

from pathlib import Path

import pytest

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config.loader import load_config
from smlaunch.pipelines.sources.channels import deliver_channels, list_host_channel
from smlaunch.pipelines.sources.fastfile import BLOCK, FIRST_FETCH, VIEW_FILE, LazyObject, open_channel_file
from smlaunch.pipelines.sources.objects import ObjectSource

ROOT = Path(__file__).resolve().parents[3]


def plan_for(tmp_path, **channel):
    overrides = [f"run.dir={tmp_path}", "run.name=r", "model.num_classes=10"] + [
        f"channels.train.{k}={v}" for k, v in channel.items()
    ]
    cfg = load_config(ROOT / "configs" / "tiny.yaml", overrides)
    return build_plan(cfg, LocalEnvironment(cpus=2, gpus=0, started="t"))


def write_objects(folder: Path, count: int, size: int) -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    data = {}
    for i in range(count):
        data[f"part-{i:02d}.bin"] = bytes([i]) * size
        (folder / f"part-{i:02d}.bin").write_bytes(data[f"part-{i:02d}.bin"])
    return data


def host_files(plan, host) -> dict[str, bytes]:
    opt_ml = plan.host(host).opt_ml
    directory = Path(opt_ml) / "input" / "data" / "train"
    out = {}
    for rel, size in list_host_channel(opt_ml, "train"):
        with open_channel_file(directory, rel) as f:
            out[rel] = f.read()
            assert len(out[rel]) == size
    return out


@pytest.mark.parametrize("mode", ["File", "FastFile"])
def test_sharded_by_s3_key_gives_each_host_every_other_object(tmp_path, mode):
    data = write_objects(tmp_path / "src", 5, 1000)
    plan = plan_for(tmp_path, source=tmp_path / "src", input_mode=mode, s3_distribution="ShardedByS3Key")
    deliver_channels(plan)
    first, second = host_files(plan, "algo-2"), host_files(plan, "algo-3")
    assert sorted(first) == ["part-00.bin", "part-02.bin", "part-04.bin"]
    assert sorted(second) == ["part-01.bin", "part-03.bin"]
    assert {**first, **second} == data


def test_fully_replicated_file_mode_from_s3_copies_everything_to_every_host(tmp_path, s3):
    s3.create_bucket(Bucket="chan")
    data = {f"part-{i}.bin": bytes([i]) * 3000 for i in range(3)}
    for key, body in data.items():
        s3.put_object(Bucket="chan", Key=f"train/{key}", Body=body)
    s3.put_object(Bucket="chan", Key="train-other/x.bin", Body=b"not mine")
    plan = plan_for(tmp_path, source="s3://chan/train/")
    deliver_channels(plan, s3.meta.endpoint_url)
    for host in ("algo-2", "algo-3"):
        assert host_files(plan, host) == data
        assert not list((Path(plan.host(host).opt_ml) / "input/data/train").glob(".*.part"))


def test_fastfile_lists_without_fetching_and_reads_lazily_from_s3(tmp_path, s3):
    s3.create_bucket(Bucket="lazy")
    big = bytes(range(256)) * (3 * BLOCK // 256 + 7)
    s3.put_object(Bucket="lazy", Key="data/big.bin", Body=big)
    s3.put_object(Bucket="lazy", Key="data/small.bin", Body=b"tiny")
    plan = plan_for(tmp_path, source="s3://lazy/data/", input_mode="FastFile")
    deliver_channels(plan, s3.meta.endpoint_url)
    directory = Path(plan.host("algo-2").opt_ml) / "input/data/train"
    assert [p.name for p in directory.iterdir()] == [VIEW_FILE]  # nothing downloaded
    assert list_host_channel(plan.host("algo-2").opt_ml, "train") == [("big.bin", len(big)), ("small.bin", 4)]

    raw = LazyObject(ObjectSource("s3://lazy/data/", s3.meta.endpoint_url), "big.bin", len(big))
    assert raw.fetches == 0
    with open_channel_file(directory, "big.bin") as f:
        assert f.read(100) == big[:100]
        assert f.raw.fetches == 1 and f.raw.bytes_fetched == FIRST_FETCH  # one short ranged GET so far
        f.read(3 * FIRST_FETCH)
        assert f.raw.fetches == 3 and f.raw.bytes_fetched == 7 * FIRST_FETCH  # the window doubles
        f.seek(len(big) - 10)
        assert f.read() == big[-10:]
    with open_channel_file(directory, "big.bin") as f:
        assert f.read() == big
        # Growing windows up to BLOCK, not one GET per 8 KiB (io.RawIOBase.readall's chunk).
        assert f.raw.fetches <= 6 + len(big) // BLOCK + 1, f.raw.fetches
    with pytest.raises(FileNotFoundError, match="not in the channel's FastFile view"):
        open_channel_file(directory, "missing.bin")


def test_an_empty_source_is_refused_naming_the_channel(tmp_path):
    (tmp_path / "empty").mkdir()
    plan = plan_for(tmp_path, source=tmp_path / "empty")
    with pytest.raises(Exception, match="channel 'train': no objects under .*empty"):
        deliver_channels(plan)


def test_a_file_channel_from_a_local_folder_is_the_folder_itself_not_a_copy(tmp_path):
    """Every host receives the whole channel: its directory links to the folder, so nothing is
    copied or linked file by file (a file added later is there too, which a copy would miss)."""
    data = write_objects(tmp_path / "src", 3, 100)
    plan = plan_for(tmp_path, source=tmp_path / "src")
    deliver_channels(plan)
    for host in ("algo-2", "algo-3"):
        directory = Path(plan.host(host).opt_ml) / "input/data/train"
        assert directory.is_symlink() and directory.resolve() == (tmp_path / "src").resolve()
        assert (directory / "part-00.bin").stat().st_ino == (tmp_path / "src/part-00.bin").stat().st_ino
        assert host_files(plan, host) == data
    (tmp_path / "src/late.bin").write_bytes(b"late")
    assert host_files(plan, "algo-2")["late.bin"] == b"late"


def test_a_copy_shows_its_progress_in_files_and_megabytes(tmp_path):
    from smlaunch.console import Progress

    bar = Progress("copying", total=1_281_167, unit="file", plain=True)
    bar.update(640_000)
    bar.describe("585.8/879.4 MB")
    assert bar.plain_line().startswith("copying: 640,000/1,281,167 files (50 %), 585.8/879.4 MB")
    byte_bar = Progress("agent", total=879_396_000, unit="B", plain=True)
    byte_bar.update(585_849_000)
    assert byte_bar.plain_line().startswith("agent: 585.8 MB/879.4 MB (67 %)")
    bar.close()
    byte_bar.close()
