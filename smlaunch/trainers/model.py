"""timm models by name: checked before any cluster starts, built with the data's classes and size."""

from __future__ import annotations

import difflib

from smlaunch.errors import ConfigError


def check_model_name(name: str) -> None:
    """`ConfigError` naming close matches when timm has no model `name`."""
    import timm

    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=5, cutoff=0.6)
        hint = f"; close matches: {', '.join(close)}" if close else "; see timm.list_models()"
        raise ConfigError(f"model.name: timm has no model {name!r}{hint}")


def create_model(name: str, num_classes: int, image_size: int, in_chans: int = 3):
    """A randomly initialised timm model; `img_size` is passed to models that take it (ViTs)."""
    import timm

    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes,
                                 in_chans=in_chans, img_size=image_size)
    except TypeError:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=in_chans)
