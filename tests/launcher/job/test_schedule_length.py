"""The run's length in optimizer steps with `trainer.epochs` (`train_spec.total_steps`), which the
built-in schedule decays over: counted from the train channel's listing where it counts rows (image
folders' files, Parquet footers' row counts), and said to be unknown, by `plan` too, where it does not
(TFRecord, Pipe mode). Without it the rate stayed at its peak after warmup for every epoch of an
image-folder or Parquet run, while `plan` printed a warmup-cosine schedule. No Ray: the real lister
runs in threads (`here=True`)."""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path

import pytest
import yaml

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config.loader import load_config
from smlaunch.launcher.job.plan_text import recipe_line
from smlaunch.launcher.job.train_spec import epoch_steps, listed_rows, total_steps, train_spec
from smlaunch.pipelines.sources.listing import list_channel
from smlaunch.trainers.optim import warmup_cosine, warmup_length

ROOT = Path(__file__).resolve().parents[3]


def job(tmp_path: Path, train: dict, **trainer):
    """(config, plan) of tiny.yaml on one 4-GPU train host (4 workers, CPU stand-ins here) and two data
    hosts, which receive the train channel, with `train` as that channel and `trainer` over its own."""
    raw = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    raw["cluster"]["instance_groups"][0]["instance_type"] = "ml.g5.12xlarge"
    raw["channels"] = {"train": train}
    raw["model"]["num_classes"] = 2
    raw["trainer"] = {k: v for k, v in raw["trainer"].items() if k != "steps"} | trainer
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    return cfg, build_plan(cfg, LocalEnvironment(cpus=8, gpus=0, started="t"))


def sharded_job(tmp_path: Path, record_format: str, epochs: int):
    """`job` with the train channel sharded over the data hosts (ShardedByS3Key), in micro-batches of 8
    accumulated two to a step: the shape where `rows // global batch` miscounts an epoch."""
    train = {"source": str(tmp_path), "record_format": record_format, "s3_distribution": "ShardedByS3Key"}
    return job(tmp_path, train, epochs=epochs, batch_size=8, grad_accum_steps=2)


def listed(tmp_path: Path, plan):
    """The train channel listed by the real lister, on the hosts' trees under `tmp_path/hosts`."""
    channel = next(c for c in plan.channels if c.name == "train")
    roots = {h: str(tmp_path / "hosts" / h / "opt/ml") for h in channel.hosts}
    return channel, list_channel(channel, roots, here=True)


def channel_folder(tmp_path: Path, host: str) -> Path:
    return tmp_path / "hosts" / host / "opt/ml/input/data/train"


def write_images(folder: Path, per_class: int) -> None:
    from PIL import Image

    for label in ("cat", "dog"):
        (folder / label).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.new("RGB", (4, 4), (i, 0, 0)).save(folder / label / f"{i}.png")


def loop_steps(rows: int, workers: int, batch: int, accum: int) -> int:
    """The built-in loop's steps over an epoch whose rows are dealt evenly to the ranks, simulated:
    each rank keeps its full micro-batches (a partial one is not trained on), and while any rank
    has one, every rank takes a step of up to `accum` of them (a drain step when some have none)."""
    queues = [deque(range((rows // workers + (r < rows % workers)) // batch)) for r in range(workers)]
    steps = 0
    while any(queues):
        for q in queues:
            for _ in range(min(accum, len(q))):
                q.popleft()
        steps += 1
    return steps


def test_an_image_folder_epoch_is_counted_from_its_listing_and_the_cosine_ends_with_the_run(tmp_path):
    """Sharded over two data hosts, 80 images each: 160 rows, 40 a rank, 5 full micro-batches of 8 a
    rank, 3 steps of 2 (the last of one). `rows // global batch` would say 2, and the last third of
    the run would train at a rate of zero."""
    cfg, plan = sharded_job(tmp_path, "image_folder", epochs=3)
    for host in ("algo-2", "algo-3"):
        write_images(channel_folder(tmp_path, host), per_class=40)
    channel, listing = listed(tmp_path, plan)
    assert (channel.hosts, channel.distribution, len(plan.workers), plan.global_batch) == (
        ("algo-2", "algo-3"),
        "ShardedByS3Key",
        4,
        64,
    )
    rows = listed_rows(listing, channel)
    assert rows == 160 and 160 // plan.global_batch == 2
    spec = train_spec(cfg, plan, data_classes=listing.classes, train_rows=rows)
    assert spec.total_steps == 3 * loop_steps(160, 4, 8, 2) == 9
    assert spec.epoch_rows is None  # the accounting's expected count stays a builtin manifest's
    rate = warmup_cosine(spec.total_steps, cfg.trainer.warmup_steps)
    assert rate(4) < 0.6 and 0 < rate(spec.total_steps - 1) < 0.05  # decaying, and ~0 at the last step
    assert "schedule warmup-cosine (warmup a tenth of the run up to 100 steps, then cosine to zero over the " in (
        recipe_line(cfg, plan)
    )
    assert "steps of 3 epochs, counted when the train channel is listed);" in recipe_line(cfg, plan)


def test_a_replicated_image_folder_is_counted_once(tmp_path):
    """FullyReplicated: every host holds every image and each is read once, so the first host's count."""
    cfg, plan = job(tmp_path, {"source": str(tmp_path), "record_format": "image_folder"}, epochs=2, batch_size=4)
    for host in ("algo-2", "algo-3"):
        write_images(channel_folder(tmp_path, host), per_class=9)
    channel, listing = listed(tmp_path, plan)
    rows = listed_rows(listing, channel)
    assert rows == 18
    assert total_steps(cfg, plan, rows) == 2 * loop_steps(18, 4, 4, 1) == 2 * 1


def test_an_epochs_steps_are_the_loops_over_even_shares_and_never_fewer_than_rows_over_global_batch():
    class Trainer:
        batch_size, grad_accum_steps = 1, 1

    class Config:  # epoch_steps reads the micro-batch, the accumulation and the worker count only
        trainer = Trainer

    class Plan:
        workers: list = []

    for rows in (0, 7, 64, 100, 1000, 1281):
        for workers in (1, 3, 4, 16):
            for batch in (1, 8, 32):
                for accum in (1, 2, 3):
                    Trainer.batch_size, Trainer.grad_accum_steps, Plan.workers = batch, accum, [None] * workers
                    steps = epoch_steps(Config, Plan, rows)  # type: ignore[arg-type]
                    assert steps == loop_steps(rows, workers, batch, accum), (rows, workers, batch, accum)
                    assert rows // (batch * workers * accum) <= steps <= rows // (batch * workers * accum) + 1


def write_parquet(folder: Path, name: str, rows: int, group_rows: int = 10) -> None:
    """One Parquet file of `rows` rows in row groups of `group_rows` (the last one shorter)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"image": [b"x"] * rows, "label": [r % 2 for r in range(rows)]})
    pq.write_table(table, folder / name, row_group_size=group_rows)


def test_a_sharded_parquet_epoch_is_counted_from_its_footers_and_the_cosine_ends_with_the_run(tmp_path):
    """Two data hosts hold their own files (ShardedByS3Key), several a host, of several row groups
    each, some short: the rows are the footers' counts, every host's (95 + 33 + 7 on one, 60 + 41 on
    the other: 236), not the row groups (26) the reader cuts them into. 236 rows over 4 ranks are 59
    a rank, 7 full micro-batches of 8, 4 steps of 2 (the last of one) an epoch, while
    `rows // global batch` says 3. `plan` says the cosine runs over the epochs, as for image folders."""
    cfg, plan = sharded_job(tmp_path, "parquet", epochs=5)
    shards = {"algo-2": {"a/part-0.parquet": 95, "a/part-1.parquet": 33, "a/part-2.parquet": 7}}
    shards["algo-3"] = {"b/part-0.parquet": 60, "b/part-1.parquet": 41}
    for host, files in shards.items():
        for name, rows in files.items():
            write_parquet(channel_folder(tmp_path, host), name, rows)
    channel, listing = listed(tmp_path, plan)
    assert (channel.hosts, channel.distribution, len(plan.workers), plan.global_batch) == (
        ("algo-2", "algo-3"),
        "ShardedByS3Key",
        4,
        64,
    )
    assert listing.row_groups == {name: -(-rows // 10) for files in shards.values() for name, rows in files.items()}
    assert listing.rows == {"algo-2": 135, "algo-3": 101}  # one int a host, however many files and groups
    rows = listed_rows(listing, channel)
    assert rows == 236 and sum(listing.row_groups.values()) == 26 and rows // plan.global_batch == 3
    spec = train_spec(cfg, plan, data_classes=listing.num_classes, train_rows=rows)
    assert spec.total_steps == 5 * loop_steps(236, 4, 8, 2) == 20
    rate = warmup_cosine(spec.total_steps, cfg.trainer.warmup_steps)
    assert 0 < rate(spec.total_steps - 1) < 0.05  # ~0 at the last step, where it stayed at its peak before
    assert (
        "schedule warmup-cosine (warmup a tenth of the run up to 100 steps, then cosine to zero over the steps of "
        "5 epochs, counted when the train channel is listed);"
    ) in recipe_line(cfg, plan)


def test_a_replicated_parquet_channel_is_counted_once(tmp_path):
    """FullyReplicated: every host holds every file and each row is read once, so the first host's
    rows (the lister reads only its footers), not the hosts' sum."""
    cfg, plan = job(tmp_path, {"source": str(tmp_path), "record_format": "parquet"}, epochs=2, batch_size=4)
    for host in ("algo-2", "algo-3"):
        for i, rows in enumerate((25, 12)):
            write_parquet(channel_folder(tmp_path, host), f"part-{i}.parquet", rows, group_rows=4)
    channel, listing = listed(tmp_path, plan)
    assert listing.rows == {"algo-2": 37} and listing.row_groups == {"part-0.parquet": 7, "part-1.parquet": 3}
    rows = listed_rows(listing, channel)
    assert rows == 37
    assert total_steps(cfg, plan, rows) == 2 * loop_steps(37, 4, 4, 1) == 2 * 2


def test_a_tfrecord_channel_has_no_length_before_it_is_read_and_plan_says_the_rate_stays_constant(tmp_path):
    cfg, plan = job(tmp_path, {"source": str(tmp_path), "record_format": "tfrecord"}, epochs=5, warmup_steps=30)
    for host in ("algo-2", "algo-3"):
        channel_folder(tmp_path, host).mkdir(parents=True)
        (channel_folder(tmp_path, host) / "part-0.tfrecord").write_bytes(b"\0" * 64)  # the lister reads no record
    channel, listing = listed(tmp_path, plan)
    assert len(next(iter(listing.files.values()))) == 1
    assert listed_rows(listing, channel) is None
    spec = train_spec(cfg, plan, train_rows=listed_rows(listing, channel))
    assert spec.total_steps is None
    assert warmup_cosine(spec.total_steps, 30)(10**6) == 1.0  # constant after warmup: what the line says
    assert (
        "schedule warmup-cosine (warmup 30 steps, then constant: trainer.epochs over a tfrecord channel has no "
        "known length before it is read; set trainer.steps for a cosine decay);"
    ) in recipe_line(cfg, plan)


def test_pipe_mode_says_its_channel_has_no_length_before_it_is_read(tmp_path):
    cfg, plan = job(tmp_path, {"source": str(tmp_path), "record_format": "tfrecord", "input_mode": "Pipe"}, epochs=5)
    assert listed_rows(None, next(c for c in plan.channels if c.name == "train")) is None  # Pipe: not listed
    assert (
        "schedule warmup-cosine (warmup 100 steps, then constant: trainer.epochs over a Pipe channel (tfrecord) has "
        "no known length before it is read; set trainer.steps for a cosine decay);"
    ) in recipe_line(cfg, plan)


def test_steps_and_a_builtin_datasets_epochs_are_known_before_training(configs):
    cfg = load_config(configs / "tiny.yaml")
    plan = build_plan(cfg, LocalEnvironment(cpus=4, gpus=0, started="t"))
    assert "; schedule warmup-cosine (warmup 4 steps, then cosine to zero at step 40);" in recipe_line(cfg, plan)
    assert train_spec(cfg, plan).total_steps == 40
    cfg = load_config(configs / "tiny.yaml", ["trainer.steps=null", "trainer.epochs=3", "trainer.warmup_steps=5"])
    plan = build_plan(cfg, LocalEnvironment(cpus=4, gpus=0, started="t"))
    spec = train_spec(cfg, plan)
    assert spec.total_steps == 3 * (spec.epoch_rows // plan.global_batch)  # one worker, no accumulation
    assert (
        "schedule warmup-cosine (warmup 5 steps, then cosine to zero over the steps of 3 epochs, counted from the "
        "builtin dataset's manifest);"
    ) in recipe_line(cfg, plan)


@pytest.mark.parametrize("total", [None, 0, 5, 40, 999, 1000, 5000])
@pytest.mark.parametrize("warmup", [None, 0, 1, 30])
def test_the_warmup_plan_prints_is_the_one_the_schedule_takes(total, warmup):
    """`warmup_length` is the rule `warmup_cosine` had inline; the factors are unchanged."""
    expected = max(1, warmup if warmup is not None else max(1, min(100, (total or 1000) // 10)))
    assert warmup_length(total, warmup) == expected
    factor = warmup_cosine(total, warmup)
    for s in (0, 1, expected - 1, expected, 39, 4999, 10**6):
        ramp = min(1.0, (s + 1) / expected)
        assert factor(s) == (ramp if not total else ramp * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))


@pytest.mark.parametrize(
    "ops, size",
    [
        ([], 16),  # tiny.yaml: random_resized_crop 16
        ([{"op": "resize", "size": 24}], 24),  # a resize after the crop: the model sees 24 px
    ],
)
def test_the_model_s_input_size_is_the_image_s_last_crop_or_a_resize_after_it(ops, size):
    """A ViT is built for `image_size` (timm's `img_size`): the last crop's size alone would build it for
    16 px and fail at the first forward on the 24 px the chain gives."""
    import yaml

    chain = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())["pipeline"]["ops"]
    chain = chain[:-1] + ops + chain[-1:]
    flow = yaml.safe_dump(chain, default_flow_style=True, width=10_000).strip()
    cfg = load_config(str(ROOT / "configs" / "tiny.yaml"), [f"pipeline.ops={flow}"])
    plan = build_plan(cfg, LocalEnvironment(cpus=4, gpus=0, started="t"))
    assert train_spec(cfg, plan).image_size == size
