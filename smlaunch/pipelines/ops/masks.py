"""Checks of segmentation masks as the chain decodes and moves them: class ids within the task's
classes, and each mask its image's size.

A mask that breaks either does not fail anywhere else; it trains wrong:

- Values outside the classes. A palette PNG (Pascal VOC's) read with `mode: L` gives each colour's
  luminance, not its index (class 1, dark red, reads 38); a binary mask saved as 0/255 holds 255; a
  colour-coded mask gives grey levels. A loss that ignores or clamps such targets learns from the
  wrong pixels without a word.
- Another size than its image. The image's crop box cuts the mask too, NumPy clips the slice at the
  mask's edge, and the resize to the crop's size stretches what is left: image and mask no longer
  line up, silently.

Each is a bad sample, reported as an undecodable image is (`transforms.UndecodableImage`, by its
row, which the chain turns into the sample id and the run's counter into its file): the job ends in
one line naming the file, or skips and counts it under the channel's `max_corrupted_records`.

Cost: one `max` over each mask's uint8 pixels (a 512 x 512 mask of 21 classes, one core: 4 us, against
6 ms to decode its PNG), and a count of its values only for a mask that fails; a shape compare per
row and mask (1 us a batch).
"""

from __future__ import annotations

import numpy as np

from smlaunch.pipelines.ops.transforms import UndecodableImage

SHOWN_VALUES = 4
"""Values outside the classes a message lists, smallest first."""


def mask_classes(ops: list, num_classes: int | None) -> dict[str, int]:
    """Mask field -> the class count its decoded values are checked against: the fields a geometric
    op moves as `masks` that `decode_image` reads with `mode: L`, when the task declares `num_classes`.

    Left unchecked: a mask decoded as RGB (colours, which a `map` op may turn into ids), and a mask
    a `map` op follows (it may remap the values, 0/255 to 0/1, and the classes then describe its
    output, not the file)."""
    if num_classes is None:
        return {}
    masks = {mask for spec in ops for mask in getattr(spec, "masks", ())}
    bounds = {}
    for i, spec in enumerate(ops):
        if (
            spec.op == "decode_image"
            and spec.field in masks
            and spec.mode == "L"
            and not any(later.op == "map" for later in ops[i + 1 :])
        ):
            bounds[spec.field] = num_classes
    return bounds


def check_mask_values(masks: list[np.ndarray], field: str, classes: int, ignore_index: int | None = None) -> None:
    """Raise `UndecodableImage` for the first of `masks` (uint8 HW1, as decoded) holding a value
    outside `0..classes-1` other than `ignore_index`."""
    for row, mask in enumerate(masks):
        if int(mask.max(initial=0)) < classes:  # the whole cost of a good mask
            continue
        counts = np.bincount(mask.ravel(), minlength=256)
        outside = np.flatnonzero(counts)
        outside = outside[(outside >= classes) & (outside != (-1 if ignore_index is None else ignore_index))]
        if len(outside):
            raise UndecodableImage(row, _outside_message(field, outside, int(counts[outside].sum()), mask, classes))


def _outside_message(field: str, outside: np.ndarray, pixels: int, mask: np.ndarray, classes: int) -> str:
    shown = ", ".join(str(v) for v in outside[:SHOWN_VALUES].tolist()) + (
        ", ..." if len(outside) > SHOWN_VALUES else ""
    )
    plural = "s" if len(outside) > 1 else ""
    return (
        f"field {field}: mask value{plural} {shown} outside classes 0..{classes - 1} (model.num_classes: "
        f"{classes}) in {pixels} of {mask.size} pixels; a mask's pixels are class ids (a palette or colour "
        f"mask read with mode L gives grey levels): fix the file, set model.num_classes to at least "
        f"{int(outside[-1]) + 1} if they are classes, or task.ignore_index if one marks pixels of no class"
    )


def check_mask_sizes(images: list[np.ndarray], masks: dict[str, list[np.ndarray]], field: str) -> None:
    """Raise `UndecodableImage` for the first row where a mask's height and width are not its image's."""
    for name, rows in masks.items():
        for row, (image, mask) in enumerate(zip(images, rows, strict=False)):
            if image.shape[:2] != mask.shape[:2]:
                raise UndecodableImage(
                    row,
                    f"field {name}: a {_size(mask)} mask for a {_size(image)} image (field {field}); a mask must "
                    "have its image's height and width (the image's crop and flip move it): fix the file",
                )


def _size(pixels: np.ndarray) -> str:
    """`width x height` in pixels, as image tools print it."""
    return f"{pixels.shape[1]}x{pixels.shape[0]}" if pixels.ndim >= 2 else "x".join(map(str, pixels.shape))
