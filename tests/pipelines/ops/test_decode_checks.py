"""Masks and images checked as the chain decodes them (`ops.masks`, `transforms.checked_pixels`):
each attack a file a user could hand in, written with PIL into a WebDataset shard by webdataset's
TarWriter, read by the real reader, through the real chain of a segmentation config. Each ends in
one line naming the sample, by the id that leads to its file (and, in a Ray job, naming the file:
the last test); no batch comes out. Valid masks, ignore-index pixels allowed, and 16-bit colour
images pass."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from smlaunch.cluster.plan import channel_plan
from smlaunch.config.channel import ChannelConfig
from smlaunch.config.schema import PipelineConfig
from smlaunch.errors import DataError
from smlaunch.pipelines.ops.chain import Chain
from smlaunch.pipelines.places import SamplePlaces
from smlaunch.pipelines.rows import row_blocks, webdataset_samples

H, W = 24, 32
FIELDS = {"image": "jpg", "mask": "mask.png"}
OPS = PipelineConfig.model_validate(
    {
        "ops": [  # docs/byo.md's segmentation chain
            {"op": "decode_image"},
            {"op": "decode_image", "field": "mask", "mode": "L"},
            {"op": "random_resized_crop", "size": 16, "scale": [0.5, 1.0], "masks": ["mask"]},
            {"op": "horizontal_flip", "masks": ["mask"]},
            {"op": "to_uint8_chw"},
            {"op": "to_uint8_chw", "field": "mask"},
        ]
    }
).ops


def _png(pixels: np.ndarray, palette: list[int] | None = None) -> bytes:
    image = Image.fromarray(pixels)
    if palette is not None:
        image = Image.fromarray(pixels, mode="P")
        image.putpalette(palette + [0] * (768 - len(palette)))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _jpeg(seed: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (H, W, 3), dtype=np.uint8)).save(out, format="JPEG")
    return out.getvalue()


def _mask(seed: int, classes: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, classes, (H, W), dtype=np.uint8)


def _shard(tmp_path, masks: dict[int, bytes], images: dict[int, bytes] | None = None, count: int = 6):
    """A shard of `count` samples `scene<i>`: a JPEG and a mask of classes 0..4, or `masks[i]`
    (`images[i]`) where given. Returns the channel's folder."""
    import webdataset as wds

    folder = tmp_path / "train"
    folder.mkdir()
    with wds.TarWriter(str(folder / "shard-0000.tar")) as sink:
        for i in range(count):
            image = (images or {}).get(i, _jpeg(i))
            sink.write({"__key__": f"scene{i}", "jpg": image, "mask.png": masks.get(i, _png(_mask(i)))})
    return folder


def _read(folder) -> dict:
    """The shard's rows as the chain gets a batch of them (Ray Data's numpy format), by the real reader."""
    channel = channel_plan(
        "train", ChannelConfig(source=str(folder), record_format="webdataset", fields=FIELDS), ("algo-2",)
    )
    path = folder / "shard-0000.tar"
    with open(path, "rb") as stream:
        table = pa.concat_tables(list(row_blocks(channel, webdataset_samples(channel, stream, "shard-0000.tar"))))
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def _place(folder, batch: dict, row: int) -> tuple[int, str | None]:
    """Row `row`'s sample id and the place it leads to (what the run's counter names in a job)."""
    sample = int(batch["id"][row])
    path = folder / "shard-0000.tar"
    return sample, SamplePlaces("webdataset", [("shard-0000.tar", path.stat().st_size)]).find(sample)


def _refused(folder, chain: Chain) -> str:
    """The one line the chain raises for the shard's batch; no batch comes out."""
    out = None
    with pytest.raises(DataError) as raised:
        out = chain(_read(folder))
    assert out is None and "\n" not in str(raised.value)
    return str(raised.value)


def test_a_mask_value_outside_the_task_s_classes_is_one_line_naming_the_sample(tmp_path):
    bad = _mask(3)
    bad[:2, :8] = 7  # 16 pixels of class 7, with num_classes 5
    folder = _shard(tmp_path, {3: _png(bad)})
    sample, place = _place(folder, _read(folder), 3)
    line = _refused(folder, Chain(OPS, [], seed=0, num_classes=5))
    assert line == (
        f"sample id {sample}: field mask: mask value 7 outside classes 0..4 (model.num_classes: 5) in 16 of 768 "
        "pixels; a mask's pixels are class ids (a palette or colour mask read with mode L gives grey levels): fix "
        "the file, set model.num_classes to at least 8 if they are classes, or task.ignore_index if one marks "
        "pixels of no class"
    )
    assert place is not None and place.startswith("shard-0000.tar sample at byte ")  # the id leads to the file


def test_a_palette_mask_read_as_grey_levels_is_refused_not_trained_on(tmp_path):
    """Pascal VOC's masks: palette PNGs whose indexes are the classes; mode L reads each colour's
    luminance (class 1, dark red (128, 0, 0): 38), which no longer names a class."""
    voc = [0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0, 128, 128, 128]  # classes 0-4's colours
    folder = _shard(tmp_path, {0: _png(_mask(0), palette=voc)})
    sample, _ = _place(folder, _read(folder), 0)
    line = _refused(folder, Chain(OPS, [], seed=0, num_classes=5))
    assert line.startswith(f"sample id {sample}: field mask: mask values 38, 75, 113, 128 outside classes 0..4 ")


def test_ignore_index_pixels_pass_and_without_one_255_is_outside_the_classes(tmp_path):
    void = _mask(2)
    void[0] = 255  # Pascal VOC's border pixels
    folder = _shard(tmp_path, {2: _png(void)})
    out = Chain(OPS, [], seed=0, num_classes=5, ignore_index=255)(_read(folder))
    assert out["mask"].shape == (6, 1, 16, 16) and set(np.unique(out["mask"]).tolist()) <= {0, 1, 2, 3, 4, 255}
    line = _refused(folder, Chain(OPS, [], seed=0, num_classes=5))
    assert "field mask: mask value 255 outside classes 0..4 (model.num_classes: 5) in 32 of 768 pixels" in line


def test_valid_masks_pass_unchanged_and_unchecked_without_declared_classes(tmp_path):
    """Every class 0..4 in range passes; with no `num_classes` nothing bounds the values (a 0/255
    binary mask goes through as it is); and a `map` op after the decode may remap them, so the
    decoded values are not checked either."""
    binary = (_mask(1, 2) * 255).astype(np.uint8)
    folder = _shard(tmp_path, {1: _png(binary)})
    batch = _read(folder)
    out = Chain(OPS, [], seed=0, train=False)(dict(batch))  # no classes declared
    assert out["mask"].shape == (6, 1, 16, 16) and 255 in out["mask"][1]
    mapped = [*OPS[:-1], *PipelineConfig.model_validate({"ops": [{"op": "map", "function": "x.y:z"}]}).ops, OPS[-1]]
    assert Chain(mapped, [], num_classes=5).mask_checks.classes == {}
    (tmp_path / "good").mkdir()
    good = _shard(tmp_path / "good", {})
    out = Chain(OPS, [], seed=0, num_classes=5)(_read(good))
    assert out["mask"].max() <= 4 and len(out["id"]) == 6


def test_a_16_bit_mask_is_refused_not_wrapped_or_clipped(tmp_path):
    """torchvision decodes a 16-bit PNG to uint16, which `to_uint8_chw` would cast modulo 256 (class
    300 as 44), PIL's convert clips it at 255: refused, classes declared or not."""
    deep = _mask(4).astype(np.uint16)
    deep[0, 0] = 300
    folder = _shard(tmp_path, {4: _png(deep)})
    sample, _ = _place(folder, _read(folder), 4)
    line = _refused(folder, Chain(OPS, [], seed=0))
    assert line == (
        f"sample id {sample}: field mask: a 32x24 image of more than 8 bits a channel (PIL mode I;16); "
        "decode_image makes 8-bit pixels and would wrap or clip them: save the file with 8 bits a channel"
    )


def test_a_mask_of_another_size_than_its_image_is_refused(tmp_path):
    folder = _shard(tmp_path, {5: _png(_mask(5)[: H // 2, : W // 2])})
    sample, _ = _place(folder, _read(folder), 5)
    line = _refused(folder, Chain(OPS, [], seed=0))
    assert line == (
        f"sample id {sample}: field mask: a 16x12 mask for a 32x24 image (field image); a mask must have its "
        "image's height and width (the image's crop and flip move it): fix the file"
    )


def _png16_rgb(pixels: np.ndarray) -> bytes:
    """A 16-bit RGB PNG (PIL writes none): signature, IHDR, one IDAT of unfiltered rows, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    h, w, _ = pixels.shape
    rows = b"".join(b"\0" + pixels[y].astype(">u2").tobytes() for y in range(h))
    header = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def test_a_16_bit_colour_image_decodes_to_its_high_bytes_and_a_bad_shape_is_named():
    """Valid data is not refused: 16-bit colour (uint16 from torchvision) goes to PIL, which keeps
    the high byte. The shape check names the field and what was expected."""
    from smlaunch.pipelines.ops.transforms import UndecodableImage, checked_pixels, decode_image

    deep = np.random.default_rng(0).integers(0, 65536, (H, W, 3)).astype(np.uint16)
    out = decode_image([_png16_rgb(deep)], OPS[0], None, True)
    assert out[0].dtype == np.uint8 and np.array_equal(out[0], (deep >> 8).astype(np.uint8))
    with pytest.raises(UndecodableImage) as raised:
        checked_pixels(np.zeros((3, H, W, 3), np.uint8), "RGB", "image", 2)
    assert str(raised.value) == (
        "row 2 of the batch: field image: decodes to shape 3x24x32x3, not height x width x 3 (decode_image mode RGB)"
    )


@pytest.mark.ray  # the run's corrupt-record counter is a Ray actor: it names the file
def test_in_a_ray_pipeline_the_line_names_the_channel_and_the_file_and_no_batch_reaches_the_trainer(
    tmp_path, data_cluster
):
    from smlaunch.errors import describe_error
    from smlaunch.pipelines.corrupt import start_counter
    from smlaunch.pipelines.dataset import read_channel
    from smlaunch.pipelines.sources.file_reader import ChannelDatasource
    from smlaunch.pipelines.sources.listing import list_channel

    bad = _mask(3)
    bad[5, 5] = 9
    root = tmp_path / "algo-2" / "opt" / "ml"
    (root / "input" / "data").mkdir(parents=True)
    folder = _shard(root / "input" / "data", {3: _png(bad)})
    sample, place = _place(folder, _read(folder), 3)
    channel = channel_plan(
        "train", ChannelConfig(source=str(folder), record_format="webdataset", fields=FIELDS), ("algo-2",)
    )
    roots = {"algo-2": str(root)}
    listing = list_channel(channel, roots)
    start_counter({"train": 0}, {"train": SamplePlaces.of("webdataset", listing)})
    ds = read_channel(ChannelDatasource(channel, listing, roots).share_listing(), channel).map_batches(
        Chain(OPS, [], seed=0, channel="train", num_classes=5), batch_size=64, batch_format="numpy"
    )
    delivered = []
    with pytest.raises(Exception) as raised:
        for batch in ds.iter_batches(batch_size=None):
            delivered.append(batch)
    assert delivered == []
    assert describe_error(raised.value) == (
        f"channel 'train': {place} (sample id {sample}): field mask: mask value 9 outside classes 0..4 "
        "(model.num_classes: 5) in 1 of 768 pixels; a mask's pixels are class ids (a palette or colour mask read "
        "with mode L gives grey levels): fix the file, set model.num_classes to at least 10 if they are classes, "
        "or task.ignore_index if one marks pixels of no class"
    )
