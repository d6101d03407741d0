"""The embedded default dataset: scikit-learn's handwritten digits as JPEGs in TFRecord shards.

scikit-learn ships the 1,797 8x8 UCI digits inside its wheel, so the default job needs no
download. They are upscaled to 32x32, JPEG-encoded (so the data hosts really decode images) and
written as `tf.train.Example` records (`image/encoded`, `image/class/label`, `id`), split 80/20
stratified by a fixed seed. Prepared once into the builtin cache (`builtin.prepare_cached`) and reused.
"""

from __future__ import annotations

import io
from pathlib import Path

VERSION = "digits-v1"
SIZE = 32
SHARDS = {"train": 4, "validation": 2}
CLASSES = 10
ROWS = {"train": 1437, "validation": 360}
"""scikit-learn's 1,797 digits split 80/20: known without building the dataset (`plan`'s checks)."""


def prepare_digits(root: Path | None = None) -> Path:
    """Return the dataset directory (with `train/` and `validation/`), building it on first use."""
    from smlaunch.pipelines.builtin.cache import prepare_cached

    return prepare_cached(VERSION, write_splits, root)


def write_splits(out: Path) -> dict:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from smlaunch.pipelines.formats.example import encode_example
    from smlaunch.pipelines.formats.tfrecord import write_records

    digits = load_digits()
    ids = np.arange(len(digits.target))
    train_ids, val_ids = train_test_split(ids, test_size=0.2, random_state=0, stratify=digits.target)
    splits: dict[str, dict] = {}
    manifest = {"version": VERSION, "classes": CLASSES, "image_size": SIZE, "splits": splits}
    for split, split_ids in (("train", train_ids), ("validation", val_ids)):
        (out / split).mkdir(parents=True)
        shards = np.array_split(np.sort(split_ids), SHARDS[split])
        for n, shard in enumerate(shards):
            records = []
            for i in shard:
                pixels = (digits.images[i] * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
                image = Image.fromarray(pixels, mode="L").resize((SIZE, SIZE), Image.Resampling.BICUBIC)
                buf = io.BytesIO()
                image.save(buf, format="JPEG", quality=90)
                records.append(
                    encode_example(
                        {"image/encoded": buf.getvalue(), "image/class/label": int(digits.target[i]), "id": int(i)}
                    )
                )
            write_records(out / split / f"part-{n:05d}.tfrecord", records)
        splits[split] = {"records": int(len(split_ids)), "shards": len(shards)}
        assert splits[split]["records"] == ROWS[split], (split, splits[split])  # what `builtin_facts` says
    return manifest
