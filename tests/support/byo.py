"""The user's project of tests/support/byo_project, laid out as its users would: copied to a folder
of its own (where sm-launch runs, with nothing of it on PYTHONPATH), its data written by their tools."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

PROJECT = Path(__file__).resolve().parent / "byo_project"


def copy_project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    shutil.copytree(PROJECT, folder)
    return folder


def project_module(folder: Path, name: str):
    """The project's module `name`, loaded from `folder` as the test's own copy (not by import name)."""
    spec = importlib.util.spec_from_file_location(f"byo_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_frames(folder: Path, module, splits: dict[str, tuple[int, int]]) -> None:
    """The regression module's data, written by pandas: `splits` is split -> (rows, files), each file
    in row groups of 200 (the units a pass shuffles), under `folder/data/<split>`."""
    for split, (rows, files) in splits.items():
        (folder / "data" / split).mkdir(parents=True)
        frame = module.make_frame(rows, seed=len(split))
        for i in range(files):
            part = frame.iloc[i * rows // files : (i + 1) * rows // files]
            part.to_parquet(folder / "data" / split / f"part-{i}.parquet", row_group_size=200, index=False)


def smallest_config(folder: Path, groups: tuple[str, str] = ("gpu", "cpu"), **trainer) -> dict:
    """The smallest job a user writes: the cluster, one `train` channel (Parquet columns by name),
    the model's factory, the loss, and the trainer's length; no validation channel, no ops, no
    checkpoint settings, no run section (the run goes to `runs/` where sm-launch runs), no task
    beyond the loss, every other section absent. `groups`: the train and data groups' names (a
    running cluster's nodes carry theirs)."""
    return {
        "cluster": {
            "instance_groups": [
                {"name": groups[0], "instance_type": "ml.g5.xlarge", "instance_count": 1},
                {"name": groups[1], "instance_type": "ml.c5.xlarge", "instance_count": 1},
            ]
        },
        "channels": {
            "train": {
                "source": str(folder / "data" / "train"),
                "record_format": "parquet",
                "fields": {name: name for name in ("x1", "x2", "x3", "x4", "y")},
            }
        },
        "model": {"factory": "regression:mlp", "params": {"inputs": 4}},
        "task": {"loss": "regression:column_mse"},
        "trainer": trainer,
    }


def write_shards(folder: Path, samples, shards: int) -> None:
    """WebDataset shards as webdataset's own TarWriter writes them: `<key>.jpg` + `<key>.mask.png`."""
    import webdataset as wds

    folder.mkdir(parents=True)
    per = -(-len(samples) // shards)
    for n in range(shards):
        with wds.TarWriter(str(folder / f"shard-{n:04d}.tar")) as sink:
            for i, (jpeg, png) in enumerate(samples[n * per : (n + 1) * per], n * per):
                sink.write({"__key__": f"scene{i:05d}", "jpg": jpeg, "mask.png": png})


def segmentation_config(folder: Path, run_dir: Path, name: str, groups: list[dict]) -> dict:
    """The segmentation job: image and mask decoded, jointly cropped and flipped, the image
    jittered and normalised; the project's FCN, per-pixel loss and IoU."""
    fields = {"image": "jpg", "mask": "mask.png"}
    return {
        "job": "byo-segmentation",
        "cluster": {"instance_groups": groups},
        "channels": {
            split: {"source": str(folder / "data" / split), "record_format": "webdataset", "fields": fields}
            for split in ("train", "validation")
        },
        "pipeline": {
            "batch_size": 64,
            "ops": [
                {"op": "decode_image"},
                {"op": "decode_image", "field": "mask", "mode": "L"},
                {"op": "random_resized_crop", "size": 32, "scale": [0.3, 1.0], "masks": ["mask"]},
                {"op": "horizontal_flip", "masks": ["mask"]},
                {"op": "color_jitter", "brightness": 0.2},
                {"op": "to_uint8_chw"},
                {"op": "to_uint8_chw", "field": "mask"},
                {"op": "normalize", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
            ],
        },
        "model": {"factory": "segmentation:fcn", "params": {"width": 8}},
        "task": {"loss": "segmentation:pixel_loss", "evaluate": "segmentation:iou"},
        "trainer": {"batch_size": 32, "epochs": 4, "learning_rate": 0.02, "weight_decay": 0.0, "log_every": 5},
        "run": {"dir": str(run_dir), "name": name},
    }
