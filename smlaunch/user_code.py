"""The user's functions, named in the config as `package.module:function`, found by import only.

A config never holds code (no `eval`): it names a function in the user's own modules, imported
here as `python -m` would from the folder sm-launch runs in. `plan` checks every name before any
cluster starts (the module imports, the function exists, its parameters bind to the config's
`params`), so a typo costs a second, not a billed cluster's start-up; the same calls find the
function on each rank and data host at run time.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Callable

from smlaunch.errors import ConfigError


def code_folder() -> str:
    """The folder user modules are imported from: the one sm-launch runs in (SM_LAUNCH_CODE_DIR
    when a launcher set it for the processes it starts)."""
    return os.environ.get("SM_LAUNCH_CODE_DIR") or os.getcwd()


def resolve(path: str, field: str) -> Callable:
    """The function `path` names; a one-line `ConfigError` naming `field` when it is not there."""
    folder = code_folder()
    if folder not in sys.path:
        sys.path.insert(0, folder)  # as `python -m` puts the working folder first
    module_name, _, name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or the module's own code failing as it imports
        raise ConfigError(f"{field}: cannot import {module_name} from {folder} ({type(exc).__name__}: {exc})") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"{field}: {module_name} has no function {name} ({getattr(module, '__file__', '?')})")
    return function


def binding_problem(function: Callable, field: str, args: tuple = (), params: dict | None = None) -> str | None:
    """Why `function(*args, **params)` would fail to bind (a missing or unknown argument), or None."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: take it on trust
        return None
    try:
        signature.bind(*args, **(params or {}))
    except TypeError as exc:
        return f"{field}: {getattr(function, '__qualname__', function)}{signature} cannot take these arguments ({exc})"
    return None


def check(path: str, field: str, args: tuple = (), params: dict | None = None) -> str | None:
    """One line saying why `path` cannot be called with `args` and `params`, or None."""
    try:
        function = resolve(path, field)
    except ConfigError as exc:
        return str(exc)
    return binding_problem(function, field, args, params)
