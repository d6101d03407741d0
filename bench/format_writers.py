"""The files bench/formats.py reads, written by the tools users write them with: PIL PNGs in class
folders, webdataset's `TarWriter`, pyarrow with the Hugging Face `Image` struct, and the
`tfrecord` package's writer. A helper of the bench (no `__main__`): `formats.py` imports it from
its own folder."""

from __future__ import annotations

import io
import time
from pathlib import Path

FORMATS = ("image_folder", "webdataset", "parquet", "tfrecord")
CLASSES = [f"digit-{n}" for n in range(10)]


def digits(count: int, px: int | None = None) -> list[tuple[bytes, int, int]]:
    """(JPEG bytes, label, id) of the builtin digits' train split, repeated to `count` rows, ids 0..count-1.

    `px`: each digit resized to `px` x `px` RGB with seeded noise and saved as a JPEG (quality 90),
    so records are photo-sized (about 16 KB at 224 px) instead of 700 bytes."""
    from smlaunch.pipelines.builtin.digits import prepare_digits
    from smlaunch.pipelines.formats import iter_records
    from smlaunch.pipelines.rows import example_row

    base = [
        example_row(r)
        for shard in sorted((prepare_digits() / "train").iterdir())
        for r in iter_records(shard, "tfrecord")
    ]
    if px is not None:
        base = [(_photo_sized(image, px, seed), label, ident) for seed, (image, label, ident) in enumerate(base)]
    return [(base[i % len(base)][0], base[i % len(base)][1], i) for i in range(count)]


def _photo_sized(image: bytes, px: int, seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    big = np.asarray(Image.open(io.BytesIO(image)).convert("RGB").resize((px, px), Image.BICUBIC), dtype=np.int16)
    noisy = big + np.random.default_rng(seed).normal(0, 12, big.shape).astype(np.int16)
    out = io.BytesIO()
    Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


def write_image_folder(root: Path, rows, as_jpeg: bool = False) -> None:
    """PNGs re-encoded by PIL, or with `as_jpeg` the rows' own PIL-written JPEGs as `.jpg` files (an
    ImageNet-style folder; photo-sized PNGs would be several times larger than users' files)."""
    from PIL import Image

    png: dict[bytes, bytes] = {}  # the repeated images are re-encoded once each
    for folder in CLASSES:
        (root / folder).mkdir(parents=True, exist_ok=True)
    for image, label, ident in rows:
        if as_jpeg:
            (root / CLASSES[label] / f"{ident:06d}.jpg").write_bytes(image)
            continue
        if image not in png:
            out = io.BytesIO()
            Image.open(io.BytesIO(image)).save(out, "PNG")
            png[image] = out.getvalue()
        (root / CLASSES[label] / f"{ident:06d}.png").write_bytes(png[image])


def _parts(rows, count: int):
    per = -(-len(rows) // count)
    return [rows[n * per : (n + 1) * per] for n in range(count)]


def write_webdataset(folder: Path, rows, shards: int, combined: Path) -> None:
    import webdataset as wds

    def write(path: Path, part) -> None:
        with wds.TarWriter(str(path)) as sink:
            for image, label, ident in part:
                sink.write(
                    {"__key__": f"sample{ident:06d}", "jpg": image, "cls": label, "json": {"source": "sklearn digits"}}
                )

    folder.mkdir(parents=True, exist_ok=True)
    for n, part in enumerate(_parts(rows, shards)):
        write(folder / f"shard-{n:04d}.tar", part)
    write(combined, rows)  # the Pipe reference's one stream


def write_parquet(folder: Path, rows, files: int, row_group_rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    for n, part in enumerate(_parts(rows, files)):
        table = pa.table(
            {
                "image": pa.array([{"bytes": r[0], "path": None} for r in part], struct),
                "label": pa.array([r[1] for r in part], pa.int64()),
            }
        )
        pq.write_table(table, folder / f"part-{n:05d}.parquet", row_group_size=row_group_rows)


def write_tfrecords(folder: Path, rows, shards: int) -> None:
    from tfrecord import TFRecordWriter

    folder.mkdir(parents=True, exist_ok=True)
    for n, part in enumerate(_parts(rows, shards)):
        writer = TFRecordWriter(str(folder / f"train-{n:05d}-of-{shards:05d}"))
        for image, label, ident in part:
            writer.write({"image/encoded": (image, "byte"), "image/class/label": (label, "int"), "id": (ident, "int")})
        writer.close()


def write_all(source: Path, rows, args) -> dict[str, Path]:
    paths = {fmt: source / fmt for fmt in FORMATS}
    paths["combined"] = source / "webdataset-one-stream.tar"
    started = time.perf_counter()
    write_image_folder(paths["image_folder"], rows, as_jpeg=args.image_px is not None)
    write_webdataset(paths["webdataset"], rows, args.shards, paths["combined"])
    write_parquet(paths["parquet"], rows, args.shards, args.row_group_rows)
    write_tfrecords(paths["tfrecord"], rows, args.shards)
    sizes = {fmt: sum(p.stat().st_size for p in paths[fmt].rglob("*") if p.is_file()) for fmt in FORMATS}
    print(
        f"wrote {len(rows)} rows per format in {time.perf_counter() - started:.1f} s: "
        + ", ".join(f"{fmt} {size / 2**20:.1f} MiB" for fmt, size in sizes.items()),
        flush=True,
    )
    return paths
