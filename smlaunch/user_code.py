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


CODE_LIMIT_BYTES = 100 << 20
"""The most a code folder may ship (Ray's `working_dir` allows 500 MiB; a folder past 100 MiB is
data, not code, and would be uploaded with every job)."""
LEFT_OUT = frozenset({".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
                      ".ipynb_checkpoints", ".tox", ".nox", "node_modules", "runs", ".venv", "venv", ".cache"})
"""Folders never shipped: version control, caches, virtual environments, sm-launch's own run folders."""
LEFT_OUT_SUFFIXES = (".pyc", ".pyo")


def user_functions(cfg) -> list[tuple[str, str]]:
    """(config field, `package.module:function`) of every function of the user's the config names
    (sm-launch's own stand-ins, `smlaunch.*`, are installed on every host and are not the user's)."""
    named = [("model.factory", cfg.model.factory)] if cfg.model and cfg.model.factory else []
    named += [("trainer.loop", cfg.trainer.loop)] if cfg.trainer.loop else []
    if cfg.task is not None:
        named += [("task.loss", cfg.task.loss)] + ([("task.evaluate", cfg.task.evaluate)] if cfg.task.evaluate else [])
    named += [(f"pipeline.ops.{i}.function", op.function) for i, op in enumerate(cfg.pipeline.ops)
              if op.op in ("user", "map")]
    return [(field, path) for field, path in named if not path.startswith("smlaunch.")]  # sm-launch's own ship anyway


def _is_venv(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg"))


def data_folders(cfg) -> set[str]:
    """The config's local channel sources: data that travels as channels, never with the code."""
    return {os.path.realpath(os.path.expanduser(ch.source)) for ch in cfg.channels.values()
            if not ch.source.startswith(("s3://", "builtin:"))}


def code_files(folder: str, limit: int = CODE_LIMIT_BYTES, skip: set[str] = frozenset()) -> list[tuple[str, str, int]]:
    """(path relative to `folder`, path, bytes) of what ships from `folder`, sorted, leaving out
    `LEFT_OUT` folders, virtual environments and the folders in `skip` (`data_folders`); a
    `ConfigError` naming the largest entries once past `limit` (the walk stops soon after, so
    sm-launch run from a dataset's folder answers at once)."""
    files, total, sizes = [], 0, {}
    for directory, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in LEFT_OUT and not _is_venv(os.path.join(directory, d))
                         and os.path.realpath(os.path.join(directory, d)) not in skip)
        for name in sorted(names):
            if name.endswith(LEFT_OUT_SUFFIXES):
                continue
            path = os.path.join(directory, name)
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            rel = os.path.relpath(path, folder)
            files.append((rel, path, size))
            total += size
            top = rel.split(os.sep, 1)[0]
            sizes[top] = sizes.get(top, 0) + size
            if total > limit:
                largest = ", ".join(f"{n} ({s / 2**20:.1f} MiB)" for n, s in sorted(sizes.items(), key=lambda x: -x[1])[:3])
                raise ConfigError(f"the code folder {folder} holds over {limit >> 20} MiB ({largest}, ...): your modules "
                                  "ship with the job from the folder sm-launch runs in; run it from a folder of code "
                                  "only (move the data out, or read it through a channel)")
    return files


def code_summary(cfg) -> str | None:
    """What `plan` says of the code that ships: the folder, its files and size; None when the
    config names no function of the user's."""
    if not user_functions(cfg):
        return None
    folder = code_folder()
    files = code_files(folder, skip=data_folders(cfg))
    size = sum(size for _, _, size in files)
    return (f"code: {folder} ({len(files)} files, {size / 2**20:.2f} MiB) ships with the job for "
            + ", ".join(path for _, path in user_functions(cfg)))
