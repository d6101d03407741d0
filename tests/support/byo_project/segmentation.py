"""A user's semantic segmentation project: images with a bright square on a dark ground, the
square's per-pixel mask beside each, a small fully convolutional net and a per-pixel loss. A crop
or flip that moved the image but not its mask would leave nothing to learn: the learning is the
check that sm-launch moves them together."""

import io

import numpy as np
import torch
import torch.nn.functional as F

SIDE = 48


def make_samples(count: int, seed: int):
    """(jpeg bytes, mask png bytes) pairs: noise around 40, a square of 160-255 covering 10-40 %."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        image = rng.integers(0, 80, (SIDE, SIDE, 3), dtype=np.uint8)
        mask = np.zeros((SIDE, SIDE), np.uint8)
        size = int(rng.integers(15, 30))
        top, left = (int(v) for v in rng.integers(0, SIDE - size, 2))
        image[top : top + size, left : left + size] = rng.integers(160, 256, (size, size, 3), dtype=np.uint8)
        mask[top : top + size, left : left + size] = 1
        jpeg, png = io.BytesIO(), io.BytesIO()
        Image.fromarray(image).save(jpeg, format="JPEG", quality=95)
        Image.fromarray(mask).save(png, format="PNG")
        out.append((jpeg.getvalue(), png.getvalue()))
    return out


def binary_mask(batch, rng, train):
    """The mask's classes as 0 and 1, whatever values the PNG held: a deterministic op (its config
    says `deterministic: true`), so a cache keeps its output with the decodes'."""
    batch["mask"] = np.minimum(batch["mask"], 1).astype(np.uint8)
    return batch


def fcn(width=8):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(width, width, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(width, 2, 1),
    )


def pixel_loss(model, batch):
    assert batch["image"].dtype == torch.float32 and batch["mask"].dtype == torch.uint8, (
        batch["image"].dtype,
        batch["mask"].dtype,
    )  # normalize in the chain: float images; masks as decoded
    return F.cross_entropy(model(batch["image"]).float(), batch["mask"].long().squeeze(1))


def iou(model, batch):
    predicted = model(batch["image"]).argmax(1)
    truth = batch["mask"].long().squeeze(1)
    inter = ((predicted == 1) & (truth == 1)).sum().item()
    union = ((predicted == 1) | (truth == 1)).sum().item()
    return {"iou": inter / max(union, 1), "pixel_accuracy": (predicted == truth).double().mean().item()}
