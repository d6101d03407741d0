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
import re
import sys
import traceback
from collections.abc import Callable, Set

from smlaunch.errors import ConfigError, UserCodeError


def code_folder() -> str:
    """The folder user modules are imported from: the one sm-launch runs in (SM_LAUNCH_CODE_DIR
    when a launcher set it for the processes it starts)."""
    return os.environ.get("SM_LAUNCH_CODE_DIR") or os.getcwd()


def standard_library_problem(path: str) -> str | None:
    """Why `path` (`package.module:function`) may not be named in a config, or None.

    A config names your code, never Python's own: `os:system`, `subprocess:run`, `builtins:eval`,
    `importlib:import_module`, `pickle:loads` and every other module of the standard library
    (`sys.stdlib_module_names`, `builtins` included) would turn whoever can write a config into
    whoever can run a command on every host, called with the `params` the config gives. Nothing a
    model, loss, op, metric or callback needs is a bare standard-library function; wrap it in your
    own module if one is."""
    top = path.partition(":")[0].split(".", 1)[0]
    if top in sys.stdlib_module_names or top == "builtins":
        return (
            f"a function of Python's standard library ({top}): a config names your own code or an installed "
            "package's, never os, subprocess, builtins, importlib, pickle or the like"
        )
    return None


def resolve(path: str, field: str) -> Callable:
    """The function `path` names; a one-line `ConfigError` naming `field` when it is not there (or is
    Python's own: `standard_library_problem`, the rule every path that imports user code goes through)."""
    refused = standard_library_problem(path)
    if refused:
        raise ConfigError(f"{field}: {path} is {refused}")
    folder = code_folder()
    if folder not in sys.path:
        sys.path.insert(0, folder)  # as `python -m` puts the working folder first
    module_name, _, name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except (SystemExit, KeyboardInterrupt) as exc:  # a script's `sys.exit()` (or `exit()`) run at import
        raise ConfigError(
            f"{field}: importing {module_name} from {folder} raised {type(exc).__name__}({exc}): a module the "
            "config names must not end the process as it imports; put its script part under "
            '`if __name__ == "__main__":`'
        ) from None
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
LEFT_OUT = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        ".tox",
        ".nox",
        "node_modules",
        "runs",
        ".venv",
        "venv",
        ".cache",
    }
)
"""Folders never shipped: version control, caches, virtual environments, sm-launch's own run folders."""
LEFT_OUT_SUFFIXES = (".pyc", ".pyo")


def user_functions(cfg) -> list[tuple[str, str]]:
    """(config field, `package.module:function`) of every function of the user's the config names
    (sm-launch's own stand-ins, `smlaunch.*`, are installed on every host and are not the user's)."""
    named = [("model.factory", cfg.model.factory)] if cfg.model and cfg.model.factory else []
    named += [("trainer.loop", cfg.trainer.loop)] if cfg.trainer.loop else []
    if cfg.task is not None:
        named += [("task.loss", cfg.task.loss)] + ([("task.evaluate", cfg.task.evaluate)] if cfg.task.evaluate else [])
        named += [(f"task.{k}", getattr(cfg.task, k)) for k in ("metrics", "predict") if getattr(cfg.task, k)]
    named += [(f"{k}.factory", getattr(cfg, k).factory) for k in ("optimizer", "schedule") if getattr(cfg, k)]
    named += [(f"trainer.callbacks.{i}", name) for i, name in enumerate(cfg.trainer.callbacks)]
    named += [
        (f"pipeline.ops.{i}.function", op.function) for i, op in enumerate(cfg.pipeline.ops) if op.op in ("user", "map")
    ]
    return [(field, path) for field, path in named if not path.startswith("smlaunch.")]  # sm-launch's own ship anyway


def _is_venv(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg"))


def data_folders(cfg) -> set[str]:
    """The config's local channel sources: data that travels as channels, never with the code."""
    return {
        os.path.realpath(os.path.expanduser(ch.source))
        for ch in cfg.channels.values()
        if not ch.source.startswith(("s3://", "builtin:"))
    }


def code_files(folder: str, limit: int = CODE_LIMIT_BYTES, skip: Set[str] = frozenset()) -> list[tuple[str, str, int]]:
    """(path relative to `folder`, path, bytes) of what ships from `folder`, sorted, leaving out
    `LEFT_OUT` folders, virtual environments and the folders in `skip` (`data_folders`); a
    `ConfigError` naming the largest entries once past `limit` (the walk stops soon after, so
    sm-launch run from a dataset's folder answers at once)."""
    files: list[tuple[str, str, int]] = []
    total = 0
    sizes: dict[str, int] = {}
    for directory, dirs, names in os.walk(folder):
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in LEFT_OUT
            and not _is_venv(os.path.join(directory, d))
            and os.path.realpath(os.path.join(directory, d)) not in skip
        )
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
                largest = ", ".join(
                    f"{n} ({s / 2**20:.1f} MiB)" for n, s in sorted(sizes.items(), key=lambda x: -x[1])[:3]
                )
                raise ConfigError(
                    f"the code folder {folder} holds over {limit >> 20} MiB ({largest}, ...): your modules "
                    "ship with the job from the folder sm-launch runs in; run it from a folder of code "
                    "only (move the data out, or read it through a channel)"
                )
    return files


def code_summary(cfg) -> str | None:
    """What `plan` says of the code that ships: the folder, its files and size; None when the
    config names no function of the user's."""
    if not user_functions(cfg):
        return None
    folder = code_folder()
    files = code_files(folder, skip=data_folders(cfg))
    size = sum(size for _, _, size in files)
    return f"code: {folder} ({len(files)} files, {size / 2**20:.2f} MiB) ships with the job for " + ", ".join(
        path for _, path in user_functions(cfg)
    )


_TEXT_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _frames(exc: BaseException) -> list[tuple[str, int, str]]:
    """(file, line, function) of `exc`'s traceback, outermost first. A Ray task's error (a data
    task's, reaching a train rank) carries the task's own traceback as text in its message: those
    frames are deeper than the local ones, and are added after them."""
    frames = [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(exc.__traceback__)]
    ray_exceptions = sys.modules.get("ray.exceptions")
    if ray_exceptions is not None and isinstance(exc, ray_exceptions.RayTaskError):
        frames += [(file, int(line), name) for file, line, name in _TEXT_FRAME.findall(str(exc))]
    return frames


def _module_folders(named: dict[str, str]) -> list[str]:
    """The folders the modules of the `module:function`s in `named` were imported from (on a cluster,
    the copy the job shipped; a package's module from the folder above the package), and the code folder."""
    from pathlib import Path

    folders = []
    for path in named.values():
        module = sys.modules.get(path.partition(":")[0])
        if module is None:
            continue
        file = getattr(module, "__file__", None)
        if file:
            file_path = Path(file)
            folders.append(str(file_path.parents[module.__name__.count(".") + (file_path.name == "__init__.py")]))
    return list(dict.fromkeys(folders + [code_folder()]))


def place_in_user_code(exc: BaseException, named: dict[str, str]) -> tuple[str | None, str] | None:
    """Where `exc` came from in the user's code, or None when its traceback never passes through it.

    `named`: config field -> `module:function` of the user's functions the caller runs. Returns what
    the traceback entered the user's code by (`task.loss tab:mse`; `the model of model.factory
    tab:mlp` for its `forward`; None: another of their functions), and `file:line in function` of
    the deepest frame there,
    the file relative to the folder its module was imported from. Frames in site-packages and in
    smlaunch itself are never the user's."""
    folders = [folder.rstrip("/") + "/" for folder in _module_folders(named)]
    users = []
    for file, line, name in _frames(exc):
        if "/site-packages/" in file or "/smlaunch/" in file:
            continue
        folder = next((f for f in folders if file.startswith(f)), None)
        if folder is not None:
            users.append((file[len(folder) :], line, name))
    if not users:
        return None
    entry, deepest = users[0], users[-1]
    module = entry[0].removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    what = next((f"{field} {path}" for field, path in named.items() if path == f"{module}:{entry[2]}"), None)
    if what is None and entry[2] == "forward" and "model.factory" in named:
        what = f"the model of model.factory {named['model.factory']}"  # entered by its forward
    return what, f"{deepest[0]}:{deepest[1]} in {deepest[2]}"


def error_text(exc: BaseException) -> str:
    """`Type: the message's first line` (at most 300 characters of it)."""
    text = str(exc).split("\n", 1)[0][:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failed_on_data_host(exc: Exception, what: str, path: str, host: str | None) -> UserCodeError:
    """The one line for `exc`, raised by the user's function `path` (`what`: its op, as the config
    names it) in a data task: a `UserCodeError`, which ends the job at its first occurrence (a data
    task's error would otherwise reach the ranks as Ray's nested traceback, and every restart of
    the worker group would meet it again)."""
    place = place_in_user_code(exc, {what: path})
    return UserCodeError(
        f"{what} failed on {host or 'a data host'}" + (f", at {place[1]}" if place else "") + f": {error_text(exc)}"
    )
