"""Ray's private API is reached through `smlaunch._ray_compat` alone, and every private symbol it
uses exists in the installed Ray: an upgrade that moves one fails here, naming it, rather than in a
job on a billed cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import ray

from smlaunch import _ray_compat

PACKAGE = Path(__file__).resolve().parents[1] / "smlaunch"
PRIVATE = re.compile(
    r"\b(?:import|from)\s+ray\.(?:_private|_raylet|experimental\.internal_kv|core\.generated)\b|"
    r"\bray\.(?:_private|_raylet)\.\w|\bfrom ray\.\S*\._internal\b|internal_kv\._internal"
)


@pytest.mark.parametrize("path", sorted(_ray_compat.PRIVATE_SYMBOLS))
def test_each_private_symbol_exists_in_this_ray(path):
    assert _ray_compat.symbol(path) is not None, path
    assert _ray_compat.PRIVATE_SYMBOLS[path], f"{path}: say why the public API does not serve"


def test_the_checked_version_is_the_installed_one():
    """The pin (pyproject.toml) allows patch releases; a new minor must be read through again."""
    assert ray.__version__.split(".")[:2] == _ray_compat.CHECKED_AGAINST.split(".")[:2], ray.__version__


def test_the_named_modules_exist():
    for dotted in (_ray_compat.FAKE_NODE_PROVIDER.rsplit(".", 1)[0], _ray_compat.PLACEMENT_GROUP_CLEANER_LOGGER):
        __import__(dotted)


def test_no_other_module_reaches_into_ray_s_private_api():
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "_ray_compat.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert found == []
