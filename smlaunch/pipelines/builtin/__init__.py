"""The embedded datasets a channel may name as `builtin:<name>/<split>`: which ones exist, and
where each is once built (`cache` builds it; `digits` and `synthetic` write it)."""

from __future__ import annotations

import json
from pathlib import Path

from smlaunch.pipelines.builtin.cache import prepare_cached

NAMES = ("digits", "synthetic")


def prepare_builtin(name: str, root: Path | None = None) -> Path:
    """The directory of builtin dataset `name` (`train/`, `validation/`, `manifest.json`)."""
    if name == "digits":
        from smlaunch.pipelines.builtin.digits import VERSION, write_splits
    elif name == "synthetic":
        from smlaunch.pipelines.builtin.synthetic import VERSION, write_splits
    else:
        raise ValueError(f"unknown builtin dataset {name!r}; builtins: {', '.join(NAMES)}")
    return prepare_cached(VERSION, write_splits, root)


def builtin_facts(source: str) -> tuple[int, int] | None:
    """(classes, rows) of the builtin split a source names, without building the dataset (`plan` must not
    write to the console, nor wait for a build); None for other sources and unknown names or splits."""
    parsed = split_source(source)
    if parsed is None or parsed[0] not in NAMES:
        return None
    if parsed[0] == "digits":
        from smlaunch.pipelines.builtin import digits as module
    else:
        from smlaunch.pipelines.builtin import synthetic as module  # type: ignore[no-redef]
    rows = module.ROWS.get(parsed[1])
    return None if rows is None else (module.CLASSES, rows)


def split_source(source: str) -> tuple[str, str] | None:
    """`builtin:<name>/<split>` -> (name, split); None for other sources."""
    if not source.startswith("builtin:"):
        return None
    name, _, split = source[len("builtin:") :].partition("/")
    return name, split


def builtin_manifest(source: str) -> dict | None:
    """The manifest of the builtin dataset a source names (None for other sources)."""
    parsed = split_source(source)
    if parsed is None:
        return None
    return json.loads((prepare_builtin(parsed[0]) / "manifest.json").read_text())
