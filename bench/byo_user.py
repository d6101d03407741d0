"""The user's code for bench/byo.py, as a user would write it: a factory returning the same timm
model the built-in path builds by name, and a cross-entropy loss and accuracy of their own (the
images arrive uint8 CHW, as `task` documents without a `normalize` op, and are scaled here)."""

import torch.nn.functional as F


def timm_model(name, num_classes, image_size):
    from smlaunch.trainers.model import create_model

    return create_model(name, num_classes, image_size)


def _scaled(images):
    return images.float().div_(127.5).sub_(1.0)  # (x / 255 - 0.5) / 0.5, the built-in default


def cross_entropy(model, batch):
    return F.cross_entropy(model(_scaled(batch["image"])).float(), batch["label"])


def accuracy(model, batch):
    logits = model(_scaled(batch["image"])).float()
    return {
        "accuracy": (logits.argmax(1) == batch["label"]).double().mean().item(),
        "loss": F.cross_entropy(logits, batch["label"]).item(),
    }
