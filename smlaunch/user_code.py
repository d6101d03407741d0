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
from dataclasses import dataclass, field

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
CODE_LIMIT_FILES = 20_000
"""The most files a code folder may ship: a folder of more (an ImageNet of tiny files beside the code,
under the byte limit) is data, and walking all of it would cost `plan` a minute."""
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


SECRET_FOLDERS = frozenset({".aws", ".ssh", ".gnupg"})
"""Folders of credentials by convention, at any depth: the AWS CLI's, SSH's, GnuPG's."""
SECRET_FILES = (".env*", "id_*", "!id_*.py", "*.pem", "*.key", "*.p12", ".netrc", ".pypirc")
"""Files that hold credentials by convention (gitignore syntax): dotenv files, SSH keys (`id_rsa`;
a module `id_map.py` is code and ships), TLS keys and certificates, `.netrc`, `.pypirc`. With
`SECRET_FOLDERS`, never shipped, whatever `.smlaunchignore` says."""
IGNORE_FILE = ".smlaunchignore"
"""Patterns (gitignore syntax) of what else a folder keeps from the job: data, notebooks, outputs."""


@dataclass
class Shipment:
    """What ships from a code folder, and what is left out of it and why."""

    files: list[tuple[str, str, int]]
    """(path relative to the folder, path, bytes), sorted."""
    secrets: list[str] = field(default_factory=list)
    """Relative paths left out because they may hold credentials (`SECRET_FOLDERS`, `SECRET_FILES`);
    a folder's ends in `/`."""
    ignored: list[str] = field(default_factory=list)
    """Relative paths left out by the folder's `.smlaunchignore`."""
    skipped: list[str] = field(default_factory=list)
    """Relative folders left out as never code: version control, caches, virtual environments, run
    folders (`LEFT_OUT`), and the config's own data folders."""

    @property
    def size(self) -> int:
        return sum(size for _, _, size in self.files)

    def excluded_patterns(self) -> list[str]:
        """The left-out paths as anchored patterns (`/rel`, `/rel/`), for Ray's `excludes` of a
        `working_dir`: Ray uploads exactly what this walk ships."""
        return [f"/{rel}" for rel in self.secrets + self.ignored]

    def left_out_text(self) -> str:
        """`; left out: ...` for the plan, naming each reason's first paths; empty when nothing was."""
        parts = []
        for paths, why in (
            (self.secrets, "may hold credentials"),
            (self.ignored, f"listed in {IGNORE_FILE}"),
            (self.skipped, "version control, caches, environments, run or data folders"),
        ):
            if paths:
                shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
                parts.append(f"{shown} ({why})")
        return "; left out: " + "; ".join(parts) if parts else ""


def _specs(folder: str):
    """(secret files' spec, the folder's `.smlaunchignore` spec or None), gitignore semantics (pathspec)."""
    import pathspec

    secrets = pathspec.GitIgnoreSpec.from_lines(SECRET_FILES)
    ignore_file = os.path.join(folder, IGNORE_FILE)
    try:
        with open(ignore_file, encoding="utf-8") as f:
            lines = f.read(1 << 20).splitlines()
    except FileNotFoundError:
        return secrets, None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{ignore_file}: cannot read it ({exc})") from None
    return secrets, pathspec.GitIgnoreSpec.from_lines(lines)


def shipment(
    folder: str, limit: int = CODE_LIMIT_BYTES, skip: Set[str] = frozenset(), files_limit: int = CODE_LIMIT_FILES
) -> Shipment:
    """What ships from `folder` (`Shipment`), leaving out what may hold credentials
    (`SECRET_FOLDERS`, `SECRET_FILES`), what the folder's `.smlaunchignore` lists, `LEFT_OUT` folders, virtual
    environments and the folders in `skip` (`data_folders`). A `ConfigError` naming the largest
    entries once past `limit` bytes or `files_limit` files (the walk stops there, so sm-launch run
    from a dataset's folder answers at once)."""
    secret_spec, ignore_spec = _specs(folder)
    out = Shipment(files=[])
    total = 0
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}

    def left_out(rel: str) -> list[str] | None:
        is_folder = rel.endswith("/")
        name = os.path.basename(rel.rstrip("/"))
        if name in SECRET_FOLDERS if is_folder else secret_spec.match_file(name):  # by name, at any depth
            return out.secrets
        if ignore_spec is not None and ignore_spec.match_file(rel):
            return out.ignored
        return None

    for directory, dirs, names in os.walk(folder):
        kept = []
        for d in sorted(dirs):
            path = os.path.join(directory, d)
            rel = os.path.relpath(path, folder) + "/"
            where = left_out(rel)
            if where is not None:
                where.append(rel)
            elif d in LEFT_OUT or _is_venv(path) or os.path.realpath(path) in skip:
                out.skipped.append(rel)
            else:
                kept.append(d)
        dirs[:] = kept
        for name in sorted(names):
            if name.endswith(LEFT_OUT_SUFFIXES):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, folder)
            where = left_out(rel)
            if where is not None:
                where.append(rel)
                continue
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            out.files.append((rel, path, size))
            total += size
            top = rel.split(os.sep, 1)[0]
            sizes[top] = sizes.get(top, 0) + size
            counts[top] = counts.get(top, 0) + 1
            if len(out.files) > files_limit:
                most = ", ".join(f"{n} ({c:,})" for n, c in sorted(counts.items(), key=lambda x: -x[1])[:3])
                raise ConfigError(
                    f"the code folder {folder} holds over {files_limit:,} files ({most}, ...): your modules "
                    "ship with the job from the folder sm-launch runs in; run it from a folder of code "
                    f"only (move the data out, read it through a channel, or list it in {IGNORE_FILE})"
                )
            if total > limit:
                largest = ", ".join(
                    f"{n} ({s / 2**20:.1f} MiB)" for n, s in sorted(sizes.items(), key=lambda x: -x[1])[:3]
                )
                raise ConfigError(
                    f"the code folder {folder} holds over {limit >> 20} MiB ({largest}, ...): your modules "
                    "ship with the job from the folder sm-launch runs in; run it from a folder of code "
                    f"only (move the data out, read it through a channel, or list it in {IGNORE_FILE})"
                )
    return out


def code_files(folder: str, limit: int = CODE_LIMIT_BYTES, skip: Set[str] = frozenset()) -> list[tuple[str, str, int]]:
    """(path relative to `folder`, path, bytes) of what ships from `folder` (`shipment`), sorted."""
    return shipment(folder, limit, skip).files


def code_summary(cfg) -> str | None:
    """What `plan` says of the code that ships: the folder, its files and size, and what is left out
    and why; None when the config names no function of the user's."""
    if not user_functions(cfg):
        return None
    folder = code_folder()
    shipped = shipment(folder, skip=data_folders(cfg))
    return (
        f"code: {folder} ({len(shipped.files)} files, {shipped.size / 2**20:.2f} MiB) ships with the job for "
        + ", ".join(path for _, path in user_functions(cfg))
        + shipped.left_out_text()
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
