"""The preprocessing ops a YAML chain may name, as typed config.

Each op is one pydantic model tagged by `op`; the chain is a list of them. Keeping the specs apart
from their NumPy implementations (`ops.py`) lets the config load and `sm-launch plan` run without
importing NumPy, PIL or torch.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DecodeImage(_Op):
    """JPEG/PNG bytes -> HWC uint8."""

    op: Literal["decode_image"]
    mode: Literal["RGB", "L"] = "RGB"


class RandomResizedCrop(_Op):
    """Random area/aspect crop resized to `size` (training); a plain resize for validation."""

    op: Literal["random_resized_crop"]
    size: int = Field(gt=0)
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)

    @model_validator(mode="after")
    def _ranges(self):
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError("scale must be (min, max) with 0 < min <= max <= 1")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError("ratio must be (min, max) with 0 < min <= max")
        return self


class HorizontalFlip(_Op):
    """Mirror left-right with probability `p` (training only)."""

    op: Literal["horizontal_flip"]
    p: float = Field(default=0.5, ge=0, le=1)


class GaussianBlur(_Op):
    """A `kernel_size` Gaussian blur applied `repeat` times (0 disables it)."""

    op: Literal["gaussian_blur"]
    kernel_size: int = Field(default=11, gt=0)
    sigma: float = Field(default=1.0, gt=0)
    repeat: int = Field(default=1, ge=0)

    @model_validator(mode="after")
    def _odd(self):
        if self.kernel_size % 2 == 0:
            raise ValueError("kernel_size must be odd")
        return self


class ToUint8CHW(_Op):
    """HWC uint8 -> CHW uint8, the wire format to the trainer (normalised there, on its device)."""

    op: Literal["to_uint8_chw"]


OpSpec = Annotated[
    Union[DecodeImage, RandomResizedCrop, HorizontalFlip, GaussianBlur, ToUint8CHW],
    Field(discriminator="op"),
]

OP_NAMES = ["decode_image", "random_resized_crop", "horizontal_flip", "gaussian_blur",
            "to_uint8_chw"]
