"""`builtin:synthetic`: 224x224 RGB JPEGs in 10 learnable classes, for the seed workload.

The classic heterogeneous-cluster demonstration trains a ViT on synthetic images while a heavy
augmentation chain runs; the images only need to be the right size, real JPEGs (so decoding costs
what it costs) and learnable enough that a falling loss shows the pipeline delivers them intact.
Each class is a sine grating at its own orientation (18 degrees apart) with a random phase,
frequency, tint and noise; smooth content keeps a JPEG near 10-20 KB, like a photo at 224 px.
Generated from a fixed seed, so every machine builds the same bytes.
"""

from __future__ import annotations

import io
from pathlib import Path

VERSION = "synthetic-v1"
SIZE = 224
CLASSES = 10
ROWS = {"train": 2560, "validation": 320}
SHARDS = {"train": 8, "validation": 2}


def write_splits(out: Path) -> dict:
    import numpy as np
    from PIL import Image

    from smlaunch.pipelines.builtin.cache import write_shards
    from smlaunch.pipelines.formats.example import encode_example

    rng = np.random.default_rng(2026)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE
    splits: dict[str, dict] = {}
    manifest = {"version": VERSION, "classes": CLASSES, "image_size": SIZE, "splits": splits}
    next_id = 0
    for split, rows in ROWS.items():
        records = []
        for _ in range(rows):
            label = int(rng.integers(CLASSES))
            angle = np.pi * label / CLASSES
            freq = rng.uniform(4, 9)
            wave = np.sin(2 * np.pi * freq * (xx * np.cos(angle) + yy * np.sin(angle)) + rng.uniform(0, 2 * np.pi))
            tint = rng.uniform(0.5, 1.0, 3).astype(np.float32)
            pixels = 128 + 90 * wave[..., None] * tint + rng.normal(0, 6, (SIZE, SIZE, 3))
            buf = io.BytesIO()
            Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
            records.append(encode_example({"image/encoded": buf.getvalue(), "image/class/label": label, "id": next_id}))
            next_id += 1
        write_shards(out, split, records, SHARDS[split])
        splits[split] = {"records": rows, "shards": SHARDS[split]}
    return manifest
