"""Environment variables set for a while, and what was there put back after."""

from __future__ import annotations

import contextlib

import pytest


@contextlib.contextmanager
def environment(**values: str | None):
    """Set each of `values` (None: unset it) inside the block; pytest's MonkeyPatch restores them."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in values.items():
            if value is None:
                patch.delenv(key, raising=False)
            else:
                patch.setenv(key, value)
        yield
