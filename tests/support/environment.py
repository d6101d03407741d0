"""Environment variables set for a while, and what was there put back after."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def environment(**values: str | None):
    """Set each of `values` (None: unset it) inside the block; restore every one after it."""
    saved = {key: os.environ.get(key) for key in values}
    _apply(values)
    try:
        yield
    finally:
        _apply(saved)


def _apply(values: dict) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
