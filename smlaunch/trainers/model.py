"""timm models by name: checked before any cluster starts, built with the data's classes and size.

Checking a name needs timm's registry, and importing timm imports torch: seconds. `plan` should
answer at once, so the registry's names are cached once per installed timm version (a JSON list
in the smlaunch cache) and later checks read that list without importing either.
"""

from __future__ import annotations

import difflib
import json
import os

from smlaunch.errors import ConfigError


def timm_model_names() -> frozenset[str]:
    """Every architecture timm can build, from the cache for this timm version if it has it."""
    from importlib.metadata import PackageNotFoundError, version

    from smlaunch.pipelines.builtin import cache_root

    try:
        cache = cache_root() / f"timm-{version('timm')}-models.json"
    except PackageNotFoundError:
        cache = None
    if cache is not None:
        try:
            return frozenset(json.loads(cache.read_text()))
        except (OSError, ValueError):
            pass
    import timm

    names = sorted(timm.list_models())
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            partial = cache.with_name(f".{cache.name}.{os.getpid()}")
            partial.write_text(json.dumps(names))
            partial.replace(cache)  # readers never see half a list
        except OSError:
            pass
    return frozenset(names)


def check_model_name(name: str) -> None:
    """`ConfigError` naming close matches when timm has no model `name`. A pretrained tag
    (`resnet50.a1_in1k`) names the same architecture as the part before the dot."""
    names = timm_model_names()
    if name.split(".", 1)[0] in names:
        return
    close = difflib.get_close_matches(name, sorted(names), n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see timm.list_models()"
    raise ConfigError(f"model.name: timm has no model {name!r}{hint}")


def create_model(name: str, num_classes: int, image_size: int, in_chans: int = 3):
    """A randomly initialised timm model; `img_size` is passed to models that take it (ViTs)."""
    import timm

    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes,
                                 in_chans=in_chans, img_size=image_size)
    except TypeError:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=in_chans)
