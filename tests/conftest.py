"""Shared fixtures: a per-session dataset cache, and the path of the repo's configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def dataset_cache(tmp_path_factory):
    """Keep the builtin dataset out of the user's home; built once per test session."""
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("SMLAUNCH_CACHE")
    os.environ["SMLAUNCH_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("SMLAUNCH_CACHE", None)
    else:
        os.environ["SMLAUNCH_CACHE"] = old


@pytest.fixture
def configs() -> Path:
    return ROOT / "configs"
