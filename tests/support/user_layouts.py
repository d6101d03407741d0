"""The builtin digits rewritten in the layouts users bring, each by the tool users write it with:
PIL into class folders, the `webdataset` package's TarWriter, pyarrow (plain binary and the Hugging
Face `Image` struct), the `tfrecord` package with TF-Slim feature names (no id), and a
ManifestFile. Test data only; the readers under test never see how it was written."""

from __future__ import annotations

import io
import json
from pathlib import Path

CLASSES = [f"digit-{n}" for n in range(10)]
"""Class folder names that sort as the labels do."""


def digits(split: str = "train") -> list[tuple[bytes, int, int]]:
    """(JPEG bytes, label, id) of the builtin digits split."""
    from smlaunch.pipelines.builtin.digits import prepare_digits
    from smlaunch.pipelines.formats import iter_records
    from smlaunch.pipelines.rows import example_row

    return [
        example_row(r)
        for shard in sorted((prepare_digits() / split).iterdir())
        for r in iter_records(shard, "tfrecord")
    ]


def write_image_folder(root: Path, rows, image_format: str = "PNG") -> Path:
    """`<root>/digit-<label>/<id>.png` re-encoded with PIL, plus files torchvision ignores."""
    from PIL import Image

    for image, label, ident in rows:
        folder = root / CLASSES[label]
        folder.mkdir(parents=True, exist_ok=True)
        out = io.BytesIO()
        Image.open(io.BytesIO(image)).save(out, image_format)
        (folder / f"{ident}.{image_format.lower()}").write_bytes(out.getvalue())
    (root / "README.txt").write_text("digits, one folder per class\n")
    (root / CLASSES[0] / "notes.csv").write_text("id,source\n")
    return root


def write_webdataset(folder: Path, rows, shards: int = 3) -> list[Path]:
    """`shard-N.tar` written by webdataset's TarWriter: `<key>.jpg`, `<key>.cls`, `<key>.json`."""
    import webdataset as wds

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    per = -(-len(rows) // shards)
    for n in range(shards):
        path = folder / f"shard-{n:04d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for image, label, ident in rows[n * per : (n + 1) * per]:
                sink.write(
                    {"__key__": f"sample{ident:06d}", "jpg": image, "cls": label, "json": {"source": "sklearn digits"}}
                )
        paths.append(path)
    return paths


def write_parquet(
    folder: Path, rows, files: int = 2, row_group_size: int = 100, hf_struct: bool = True, with_id: bool = False
) -> list[Path]:
    """Parquet files written by pyarrow; the image column is the Hugging Face `Image` struct
    (`{bytes, path}`) or plain binary; several row groups per file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    per = -(-len(rows) // files)
    for n in range(files):
        part = rows[n * per : (n + 1) * per]
        images = [r[0] for r in part]
        column = (
            pa.array(
                [{"bytes": b, "path": None} for b in images], pa.struct([("bytes", pa.binary()), ("path", pa.string())])
            )
            if hf_struct
            else pa.array(images, pa.binary())
        )
        table = {"image": column, "label": pa.array([r[1] for r in part], pa.int64())}
        if with_id:
            table["sample_id"] = pa.array([r[2] for r in part], pa.int64())
        path = folder / f"part-{n:05d}.parquet"
        pq.write_table(pa.table(table), path, row_group_size=row_group_size)
        paths.append(path)
    (folder / "_SUCCESS").write_bytes(b"")
    return paths


def write_slim_tfrecords(folder: Path, rows, shards: int = 2) -> list[Path]:
    """TF-Slim style shards written by the `tfrecord` package: `image/encoded`, `image/format`,
    `image/class/label`, and no `id` feature."""
    from tfrecord import TFRecordWriter

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    per = -(-len(rows) // shards)
    for n in range(shards):
        path = folder / f"validation-{n:05d}-of-{shards:05d}"
        writer = TFRecordWriter(str(path))
        for image, label, _ in rows[n * per : (n + 1) * per]:
            writer.write(
                {
                    "image/encoded": (image, "byte"),
                    "image/format": (b"jpeg", "byte"),
                    "image/class/label": (label, "int"),
                }
            )
        writer.close()
        paths.append(path)
    return paths


def write_manifest_file(path: Path, prefix: str, keys: list[str]) -> Path:
    path.write_text(json.dumps([{"prefix": prefix}, *keys]))
    return path
