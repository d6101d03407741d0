"""The preprocessing ops a YAML chain may name, as typed config.

Each op is one pydantic model tagged by `op`; the chain is a list of them. Keeping the specs apart
from their NumPy implementations (`ops.py`) lets the config load and `sm-launch plan` run without
importing NumPy, PIL or torch.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from smlaunch.config.base import StrictModel
from smlaunch.user_code import standard_library_problem

FUNCTION_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
"""`package.module:function`: user code is imported by name, never evaluated."""


def _not_standard_library(path: str) -> str:
    refused = standard_library_problem(path)
    if refused:
        raise ValueError(refused)
    return path


FunctionPath = Annotated[str, StringConstraints(pattern=FUNCTION_PATTERN), AfterValidator(_not_standard_library)]
"""A config field naming your function: `package.module:function`, never one of Python's standard
library (`user_code.standard_library_problem`), refused at load with the field's name."""


class _Op(StrictModel):
    """An op of the chain: `op` names its kind (`OpSpec`'s discriminator)."""


FIELD_PATTERN = r"^[A-Za-z_]\w{0,63}$"


class _ImageOp(_Op):
    field: str = Field(default="image", pattern=FIELD_PATTERN)
    """The batch field the op works on (a channel's `fields` name it): `image` unless set."""


class _GeometricOp(_ImageOp):
    masks: tuple[str, ...] = ()
    """Fields moved with `field` (segmentation masks): the same crop, resize and flip, drawn once
    per row for all, resized nearest-neighbour (class ids stay class ids); colour ops never touch them.
    A mask must be decoded (`decode_image` with its `field`, `mode: L`) before it is moved."""

    @model_validator(mode="after")
    def _masks(self):
        for mask in self.masks:
            if not re.match(FIELD_PATTERN, mask) or mask == self.field:
                raise ValueError(f"masks: {mask!r} is not another field of the batch")
        return self


class DecodeImage(_ImageOp):
    """JPEG, PNG, WebP or GIF bytes to HWC uint8 pixels with torchvision.io (measured on one core:
    1.6x PIL's speed on 224 px JPEGs, 2x on 32 px ones), other formats with PIL."""

    op: Literal["decode_image"]
    mode: Literal["RGB", "L"] = "RGB"
    """`RGB`: three channels; `L`: one (a mask, or grayscale)."""


class RandomResizedCrop(_GeometricOp):
    """Random area/aspect crop resized to `size` (training); for validation a plain resize to
    `size` x `size`, or with `validation_resize` torchvision's evaluation transform: the shorter
    side to `validation_resize`, then the central `size` square (ImageNet's Resize(256) +
    CenterCrop(224))."""

    op: Literal["random_resized_crop"]
    size: int = Field(gt=0)
    """The output's side, in pixels."""
    scale: tuple[float, float] = (0.08, 1.0)
    """The crop's area as a fraction of the image's: (min, max), drawn per row (training)."""
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    """The crop's aspect ratio, width / height: (min, max), drawn per row (training)."""
    validation_resize: int | None = Field(default=None, gt=0)
    """For validation: the shorter side resized to this, then the central `size` square (torchvision's
    Resize(256) + CenterCrop(224)); none: a plain resize to `size` x `size`. At least `size`."""

    @model_validator(mode="after")
    def _ranges(self):
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError("scale must be (min, max) with 0 < min <= max <= 1")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError("ratio must be (min, max) with 0 < min <= max")
        if self.validation_resize is not None and self.validation_resize < self.size:
            raise ValueError(
                f"validation_resize ({self.validation_resize}) must be at least size ({self.size}): "
                "the central crop is taken from it"
            )
        return self


class HorizontalFlip(_GeometricOp):
    """Mirror left-right with probability `p` (training only)."""

    op: Literal["horizontal_flip"]
    p: float = Field(default=0.5, ge=0, le=1)
    """The probability of a mirror, per row."""


class GaussianBlur(_ImageOp):
    """A `kernel_size` Gaussian blur applied `repeat` times (0 disables it): a knob that loads the CPUs.
    Blurs followed directly by a `center_crop` run on the crop plus the blurs' reach only (the same
    bytes, less work)."""

    op: Literal["gaussian_blur"]
    kernel_size: int = Field(default=11, gt=0)
    """The kernel's side in pixels; odd."""
    sigma: float = Field(default=1.0, gt=0)
    """The Gaussian's standard deviation, in pixels."""
    repeat: int = Field(default=1, ge=0)
    """Blurs per image; 0 disables the op. Raise it to load the CPUs."""

    @model_validator(mode="after")
    def _odd(self):
        if self.kernel_size % 2 == 0:
            raise ValueError("kernel_size must be odd")
        return self


class Resize(_GeometricOp):
    """Resize so the shorter side is `size`, keeping the aspect ratio (torchvision's Resize(int))."""

    op: Literal["resize"]
    size: int = Field(gt=0)
    """The shorter side's length after the resize, in pixels."""


class CenterCrop(_GeometricOp):
    """The central `size` x `size` square (images smaller than that are padded with zeros)."""

    op: Literal["center_crop"]
    size: int = Field(gt=0)
    """The square's side, in pixels."""


class ColorJitter(_ImageOp):
    """Random brightness, contrast and saturation factors in [1 - x, 1 + x] (training only)."""

    op: Literal["color_jitter"]
    brightness: float = Field(default=0.0, ge=0)
    """x: a brightness factor drawn in [1 - x, 1 + x]; 0 leaves it."""
    contrast: float = Field(default=0.0, ge=0)
    """x: a contrast factor drawn in [1 - x, 1 + x]; 0 leaves it."""
    saturation: float = Field(default=0.0, ge=0)
    """x: a saturation factor drawn in [1 - x, 1 + x]; 0 leaves it."""


class UserOp(_ImageOp):
    """Your own op, `package.module:function`, imported (never evaluated) on the data hosts and
    called as `function(images, rng, train, **params)` with a list of HWC uint8 arrays; it must return
    the same. A missing module or function fails before the cluster starts."""

    op: Literal["user"]
    function: FunctionPath
    """`package.module:function`, imported from the folder sm-launch runs in."""
    params: dict = {}
    """Keyword arguments the function is called with (checked against its signature at `plan`)."""
    deterministic: bool = False
    """True: the same input gives the same output, every call (it draws nothing from `rng`), so its
    output may be cached across epochs (`pipeline.cache`). False, the default: random."""


class MapOp(_Op):
    """Your function over the whole batch, `package.module:function`, called on the data hosts as
    `function(batch, rng, train, **params)` with a dict of NumPy arrays (one per field, one row
    each) and returning one: Ray Data's `map_batches` convention. It may add, drop or change
    fields, not rows; `id` and the reader's bookkeeping are kept for it."""

    op: Literal["map"]
    function: FunctionPath
    """`package.module:function`, imported from the folder sm-launch runs in."""
    params: dict = {}
    """Keyword arguments the function is called with (checked against its signature at `plan`)."""
    deterministic: bool = False
    """True: the same batch gives the same rows, every call (it draws nothing from `rng`), so its
    output may be cached across epochs (`pipeline.cache`). False, the default: random."""


class ToUint8CHW(_ImageOp):
    """HWC uint8 -> CHW uint8, the wire format to the trainer (normalised there, on its device)."""

    op: Literal["to_uint8_chw"]


class Normalize(_Op):
    """(x / 255 - mean) / std per channel. It runs on the trainer's device, after the uint8 CHW
    batch arrived: a quarter of the bytes of float32 travel between hosts."""

    op: Literal["normalize"]
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    """Per channel, on the 0-1 scale."""
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    """Per channel, on the 0-1 scale; positive."""

    @model_validator(mode="after")
    def _positive(self):
        if min(self.std) <= 0:
            raise ValueError("std must be positive")
        return self


OpSpec = Annotated[
    DecodeImage
    | Resize
    | RandomResizedCrop
    | CenterCrop
    | HorizontalFlip
    | GaussianBlur
    | ColorJitter
    | UserOp
    | MapOp
    | ToUint8CHW
    | Normalize,
    Field(discriminator="op"),
]

OP_NAMES = [
    "decode_image",
    "resize",
    "random_resized_crop",
    "center_crop",
    "horizontal_flip",
    "gaussian_blur",
    "color_jitter",
    "user",
    "map",
    "to_uint8_chw",
    "normalize",
]
IMAGE_OPS = frozenset(OP_NAMES) - {"map"}
"""Ops on the image field; a chain without any takes no image (tabular data: `map` ops only, or none)."""
