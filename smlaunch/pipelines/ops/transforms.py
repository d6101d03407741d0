"""NumPy implementations of the chain ops, one function per op name.

Each takes the batch's images (a list of HWC uint8 arrays; encoded bytes for `decode_image`), its
spec, the batch's random generator and whether this is training: in eval mode random crops become
a resize and flips and jitter are skipped, blurs still apply. `chain.Chain` strings them together.
The geometric ops (`GEOMETRIC`) also take `masks`: other fields (segmentation masks) cut, resized
(nearest-neighbour) and flipped with the images' own draws, so an image and its mask stay aligned.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable

import numpy as np

from smlaunch.config import op_specs as specs
from smlaunch.errors import DataError

Images = list[np.ndarray]  # HWC uint8, sizes may differ until a resize


def decode_image(images, spec: specs.DecodeImage, rng, train: bool) -> Images:
    """torchvision.io's decoder, with PIL for the formats it lacks (BMP, TIFF, ...).

    Measured on one core (bench/offload_vs_dataloader.py's decode line): torchvision.io 1.6x PIL on 224 px JPEGs and
    2x on 32 px ones, and ahead of TorchCodec 0.17 (which torchvision 0.29 points to, deprecating
    its own decoders), so it is kept while it exists; without it every image goes through PIL.
    Grayscale from a colour JPEG is libjpeg's luma plane, within a few levels of PIL's convert("L").
    What torchvision decodes to more than 8 bits a channel (a 16-bit PNG: uint16) goes to PIL too, which
    reads 16-bit colour to 8 bits by the high byte and refuses 16-bit grayscale (`_decode_pil`).
    Every image leaves checked (`checked_pixels`).
    """
    import warnings

    try:
        import torch
        from torchvision.io import ImageReadMode
        from torchvision.io import decode_image as tv_decode
    except ImportError:
        return [_decode_pil(data, spec.mode, i, spec.field) for i, data in enumerate(images)]
    read_mode = ImageReadMode.RGB if spec.mode == "RGB" else ImageReadMode.GRAY
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for i, data in enumerate(images):
            try:
                chw = tv_decode(torch.from_numpy(np.frombuffer(data, np.uint8).copy()), mode=read_mode)
            except RuntimeError:
                chw = None
            if chw is None or chw.dtype != torch.uint8:
                out.append(_decode_pil(data, spec.mode, i, spec.field))
                continue
            try:
                hwc = chw.permute(1, 2, 0).contiguous().numpy()
            except RuntimeError:  # not 3 dims (an animated GIF's frames): PIL takes the first
                hwc = _decode_pil(data, spec.mode, i, spec.field)
            out.append(checked_pixels(hwc, spec.mode, spec.field, i))
    return out


HIGH_DEPTH_MODES = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
"""PIL's grayscale modes of more than 8 bits: `convert` to RGB or L clips them at 255 (a 16-bit mask's
ids 255 and up would all read 255), so they are refused, not converted."""


def _decode_pil(data: bytes, mode: str, row: int, field: str = "image") -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.mode in HIGH_DEPTH_MODES:
                raise UndecodableImage(row, _high_depth(field, f"PIL mode {img.mode}", img.width, img.height))
            return checked_pixels(np.asarray(img.convert(mode)).reshape(img.height, img.width, -1), mode, field, row)
    except UndecodableImage:
        raise
    except Exception as exc:  # PIL raises several types for bad bytes
        reason = re.sub(r" <_io\.BytesIO object at 0x[0-9a-f]+>", "", str(exc))
        raise UndecodableImage(
            row, f"undecodable image ({reason}; {len(data)} bytes starting {bytes(data[:8])!r})"
        ) from None


def checked_pixels(pixels: np.ndarray, mode: str, field: str, row: int) -> np.ndarray:
    """`pixels` if they are what the ops and the model take: HWC uint8 of `mode`'s channels, not empty.

    Else an `UndecodableImage` (the chain names the file). Why: the ops after do not look, and wrong
    pixels train wrong rather than fail: `to_uint8_chw` casts uint16 modulo 256 (a mask's class 300
    would train as 44), and a crop cuts any array. The decoders make such pixels today only where
    `decode_image` hands them to PIL instead (16-bit, several frames); this keeps a change of theirs
    from reaching the crops unseen, for a dtype and shape compare a row."""
    channels = 3 if mode == "RGB" else 1
    if pixels.dtype != np.uint8:
        height, width = pixels.shape[:2] if pixels.ndim >= 2 else (0, 0)
        raise UndecodableImage(row, _high_depth(field, f"{pixels.dtype} pixels", width, height))
    if pixels.ndim != 3 or pixels.shape[2] != channels or not pixels.shape[0] or not pixels.shape[1]:
        raise UndecodableImage(
            row,
            f"field {field}: decodes to shape {'x'.join(map(str, pixels.shape))}, not height x width x "
            f"{channels} (decode_image mode {mode})",
        )
    return pixels


def _high_depth(field: str, what: str, width: int, height: int) -> str:
    return (
        f"field {field}: a {width}x{height} image of more than 8 bits a channel ({what}); decode_image makes "
        "8-bit pixels and would wrap or clip them: save the file with 8 bits a channel"
    )


class UndecodableImage(DataError):
    """An image of a batch that no decoder reads, or that decodes to what would train wrong (a 16-bit
    image, a mask value outside its classes or a mask not its image's size: `ops.masks`); `row` is its
    index in the batch, which the chain turns into the sample id (and the run's counter into its file)."""

    def __init__(self, row: int, message: str):
        super().__init__(f"row {row} of the batch: {message}")
        self.row, self.reason = row, message


def random_resized_crop(images: Images, spec: specs.RandomResizedCrop, rng, train: bool, masks=()):
    """torchvision's RandomResizedCrop (bilinear); in eval mode a resize, or Resize + CenterCrop
    with `validation_resize`. With `masks` (lists of HW1 arrays, one list per mask field), the same
    boxes (drawn once per row) cut every mask, resized nearest-neighbour so class ids stay class ids;
    then `(images, masks)` is returned."""
    if not train and spec.validation_resize:
        size = specs.Resize(op="resize", size=spec.validation_resize)
        crop = specs.CenterCrop(op="center_crop", size=spec.size)
        if not masks:
            return center_crop(resize(images, size, rng, train), crop, rng, train)
        resized, resized_masks = resize(images, size, rng, train, masks)
        return center_crop(resized, crop, rng, train, resized_masks)
    boxes = [_crop_box(img.shape[0], img.shape[1], spec, rng) if train else (0, 0, *img.shape[:2]) for img in images]
    out = [_crop_resized(img, box, spec.size, "bilinear") for img, box in zip(images, boxes, strict=False)]
    if not masks:
        return out
    return out, [
        [_crop_resized(m, box, spec.size, "nearest") for m, box in zip(field, boxes, strict=False)] for field in masks
    ]


def _crop_resized(img: np.ndarray, box: tuple[int, int, int, int], size: int, how: str) -> np.ndarray:
    from PIL import Image

    top, left, ch, cw = box
    crop = np.ascontiguousarray(img[top : top + ch, left : left + cw])
    pil = Image.fromarray(crop.squeeze(-1) if crop.shape[-1] == 1 else crop)
    resized = np.asarray(
        pil.resize((size, size), Image.Resampling.BILINEAR if how == "bilinear" else Image.Resampling.NEAREST)
    )
    return resized.reshape(size, size, -1)


def _crop_box(h: int, w: int, spec: specs.RandomResizedCrop, rng) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop sampling: 10 tries, then a centre crop."""
    area = h * w
    log_ratio = (math.log(spec.ratio[0]), math.log(spec.ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*spec.scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
    ratio = w / h
    if ratio < spec.ratio[0]:
        cw, ch = w, round(w / spec.ratio[0])
    elif ratio > spec.ratio[1]:
        cw, ch = round(h * spec.ratio[1]), h
    else:
        cw, ch = w, h
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def resize(images: Images, spec: specs.Resize, rng, train: bool, masks=()):
    """The shorter side to `spec.size` (bilinear; `masks` nearest, returned beside: `(images, masks)`)."""
    out = [_resized(img, spec.size, "bilinear") for img in images]
    if not masks:
        return out
    return out, [[_resized(m, spec.size, "nearest") for m in field] for field in masks]


def _resized(img: np.ndarray, side: int, how: str) -> np.ndarray:
    from PIL import Image

    h, w = img.shape[:2]
    scale = side / min(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    pil = Image.fromarray(img.squeeze(-1) if img.shape[-1] == 1 else img)
    return np.asarray(
        pil.resize(size, Image.Resampling.BILINEAR if how == "bilinear" else Image.Resampling.NEAREST)
    ).reshape(size[1], size[0], -1)


def center_crop(images: Images, spec: specs.CenterCrop, rng, train: bool, masks=()):
    """The central square (zero-padded when smaller); `masks` cut the same (`(images, masks)`)."""
    out = [_centre(img, spec.size) for img in images]
    if not masks:
        return out
    return out, [[_centre(m, spec.size) for m in field] for field in masks]


def _centre(img: np.ndarray, size: int) -> np.ndarray:
    h, w = img.shape[:2]
    if h < size or w < size:
        pad_h, pad_w = max(0, size - h), max(0, size - w)
        img = np.pad(img, ((pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2), (0, 0)))
        h, w = img.shape[:2]
    top, left = (h - size) // 2, (w - size) // 2
    return np.ascontiguousarray(img[top : top + size, left : left + size])


def color_jitter(images: Images, spec: specs.ColorJitter, rng, train: bool) -> Images:
    """torchvision's order (brightness, contrast, saturation) with one factor per image and kind."""
    if not train:
        return images
    out = []
    for img in images:
        work = img.astype(np.float32)
        if spec.brightness:
            work *= rng.uniform(max(0.0, 1 - spec.brightness), 1 + spec.brightness)
        gray = work @ np.array([0.299, 0.587, 0.114], np.float32) if work.shape[-1] == 3 else work[..., 0]
        if spec.contrast:
            factor = rng.uniform(max(0.0, 1 - spec.contrast), 1 + spec.contrast)
            work = work * factor + (1 - factor) * float(np.clip(gray, 0, 255).mean())
        if spec.saturation and work.shape[-1] == 3:
            factor = rng.uniform(max(0.0, 1 - spec.saturation), 1 + spec.saturation)
            gray = work @ np.array([0.299, 0.587, 0.114], np.float32)
            work = work * factor + (1 - factor) * gray[..., None]
        out.append(np.clip(np.rint(work), 0, 255).astype(np.uint8))
    return out


def user(images: Images, spec: specs.UserOp, rng, train: bool) -> Images:
    function = resolve_user_op(spec.function)
    try:
        out = function(images, rng, train, **spec.params)
    except Exception as exc:  # the same on every try: the job ends in one line
        from smlaunch.cluster.labels import this_host
        from smlaunch.user_code import failed_on_data_host

        raise failed_on_data_host(exc, f"pipeline user op {spec.function}", spec.function, this_host()) from None
    if not isinstance(out, list) or any(
        not isinstance(i, np.ndarray) or i.dtype != np.uint8 or i.ndim != 3 for i in out
    ):
        raise DataError(f"user op {spec.function} must return a list of HWC uint8 arrays")
    return out


def resolve_user_op(path: str) -> Callable:
    """`package.module:function` by import (never eval); a ConfigError names what is missing."""
    from smlaunch.user_code import resolve

    return resolve(path, f"pipeline user op {path}")


def horizontal_flip(images: Images, spec: specs.HorizontalFlip, rng, train: bool, masks=()):
    """Mirror left-right with probability p (training only); each row's draw flips its masks too."""
    if not train:
        return images if not masks else (images, [list(field) for field in masks])
    flips = rng.random(len(images)) < spec.p
    out = [img[:, ::-1] if flip else img for img, flip in zip(images, flips, strict=False)]
    if not masks:
        return out
    return out, [[m[:, ::-1] if flip else m for m, flip in zip(field, flips, strict=False)] for field in masks]


def gaussian_blur(images: Images, spec: specs.GaussianBlur, rng, train: bool) -> Images:
    return [blur_image(img, spec) for img in images]


def blur_image(img: np.ndarray, spec: specs.GaussianBlur) -> np.ndarray:
    """`repeat` separable passes in float32 with reflected borders, rounded back to uint8 once."""
    if spec.repeat == 0:
        return img
    kernel = _gaussian_kernel(spec.kernel_size, spec.sigma)
    work = img.astype(np.float32)
    for _ in range(spec.repeat):
        work = _convolve_axis(_convolve_axis(work, kernel, 0), kernel, 1)
    return np.clip(np.rint(work), 0, 255).astype(np.uint8)


def _gaussian_kernel(size: int, sigma: float) -> np.ndarray:
    radius = size // 2
    x = np.arange(-radius, radius + 1, dtype=np.float32)
    kernel = np.exp(-(x * x) / (2 * sigma * sigma))
    return kernel / kernel.sum()


def _convolve_axis(img: np.ndarray, kernel: np.ndarray, axis: int) -> np.ndarray:
    radius = len(kernel) // 2
    pad = [(0, 0)] * img.ndim
    pad[axis] = (radius, radius)
    padded = np.pad(img, pad, mode="reflect" if img.shape[axis] > radius else "edge")
    n = img.shape[axis]
    window = [slice(None)] * img.ndim
    out = np.zeros_like(img)
    for k, weight in enumerate(kernel):
        window[axis] = slice(k, k + n)
        out += weight * padded[tuple(window)]
    return out


def to_uint8_chw(images: Images, spec: specs.ToUint8CHW, rng, train: bool) -> np.ndarray:
    shapes = {img.shape for img in images}
    if len(shapes) > 1:
        raise DataError(
            f"images of different sizes {sorted(shapes)} reach to_uint8_chw; add a random_resized_crop before it"
        )
    return np.stack([np.ascontiguousarray(img.transpose(2, 0, 1)) for img in images]).astype(np.uint8)


GEOMETRIC = frozenset({"resize", "center_crop", "random_resized_crop", "horizontal_flip"})
"""Ops that move pixels, and so take `masks`; colour ops never touch a mask."""

OPS: dict[str, Callable] = {
    "decode_image": decode_image,
    "resize": resize,
    "center_crop": center_crop,
    "color_jitter": color_jitter,
    "user": user,
    "random_resized_crop": random_resized_crop,
    "horizontal_flip": horizontal_flip,
    "gaussian_blur": gaussian_blur,
    "to_uint8_chw": to_uint8_chw,
}
