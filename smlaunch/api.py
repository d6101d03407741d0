"""`smlaunch.run` and `smlaunch.plan`: the CLI's `run` and `plan` for notebooks and scripts.

`config` is a YAML path or the same tree as a dict; `overrides` a dict of dotted keys to values,
as `--set` takes them (`{"trainer.steps": 50}`). The calls take the CLI's own path (the same
checks, plan, cluster and report), but a failure is raised, not printed: a `ConfigError` for a
bad config (the CLI's exit 2), a `DataError` or another `UserError` for bad data (exit 1), each
one line. `run` returns the report's summary, the numbers the CLI prints at the end.

The values of a dict config and of the overrides are what a notebook has at hand: NumPy scalars
(and 0-d arrays) are their Python numbers, a `Path` its string, a tuple a list; from there the
YAML rules apply unchanged (`np.bool_` is a bool, refused where a number goes; NaN and infinity
are refused where a number goes). Anything YAML would not write as the same data (a set, an
array, bytes, an object, a non-string key) is refused in one line naming its dotted key.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePath
from types import SimpleNamespace
from typing import Any


def plan(config: str | Path | Mapping, overrides: Mapping[str, Any] | None = None):
    """The `LaunchPlan` `sm-launch plan` prints (this machine's local simulation), after the same checks."""
    from smlaunch.launcher.cli import FailureFile
    from smlaunch.launcher.commands.job import load_job

    with _config_file(config) as path:
        return load_job(_args("plan", path, overrides), FailureFile(), write_failure_locally=False).plan


def run(config: str | Path | Mapping, overrides: Mapping[str, Any] | None = None, quiet: bool = False) -> dict:
    """Run the job as `sm-launch run` would here (the local simulation, or the Ray cluster
    RAY_ADDRESS names); the report's summary. Progress and metric lines go to the console, as the
    CLI's do, unless `quiet`."""
    from smlaunch import console
    from smlaunch.launcher.cli import FailureFile
    from smlaunch.launcher.job.stopping import StopRequest

    console.setup(-1 if quiet else 0)
    stop = StopRequest()  # no signal handlers: a notebook's own stay as they are
    failure = FailureFile()
    try:  # the console's file is closed on every way out, a refused config value's too
        with _config_file(config) as path:
            args = _args("run", path, overrides)
            try:
                report = _run(args, failure, stop, os.environ.get("RAY_ADDRESS"))
            except Exception as exc:  # Ray wraps errors raised in its tasks and workers
                from smlaunch.errors import UserError, user_error_in

                message = user_error_in(exc) if not isinstance(exc, UserError) else None
                failure.write(str(exc) if isinstance(exc, UserError) else message or str(exc))
                if message is not None:
                    raise UserError(message) from None
                raise
    finally:
        console.close_file()
    return report["summary"]


def _run(args, failure, stop, address: str | None) -> dict:
    from smlaunch.launcher.commands.run import log_report

    if address:
        from smlaunch.config import load_config
        from smlaunch.launcher.attached.run import run_attached
        from smlaunch.launcher.job.preflight import preflight

        cfg = load_config(args.config, args.overrides)
        preflight(cfg, sources=False)
        return log_report(run_attached(cfg, address, stop))
    from smlaunch.launcher.commands.job import load_job
    from smlaunch.launcher.commands.run import start_local_log
    from smlaunch.launcher.local.run import run_local

    job = load_job(args, failure)
    start_local_log(job.cfg, job.plan)
    return log_report(run_local(job.cfg, job.plan, stop=stop))


def _args(command: str, path: str, overrides: Mapping[str, Any] | None) -> SimpleNamespace:
    """What the CLI's parser gives the commands: `--set KEY=VALUE` items, each value as flow YAML."""
    from smlaunch.errors import ConfigError

    if overrides is None:
        overrides = {}
    if not isinstance(overrides, Mapping):
        raise ConfigError(
            f"overrides: expected a dict of dotted keys to values, e.g. {{'trainer.steps': 50}}, got {_a(overrides)}"
        )
    items = []
    for key, value in plain_values(dict(overrides), "overrides").items():
        if "=" in key:
            raise ConfigError(f"overrides: key {key!r}: a dotted key has no '=' (e.g. 'trainer.steps')")
        items.append(f"{key}={_flow_yaml(value)}")
    return SimpleNamespace(command=command, config=path, overrides=items, address=None, quiet=False, verbose=0)


def _flow_yaml(value: Any) -> str:
    """`value` as the YAML `--set` reads back as the same value (JSON would turn NaN into a string)."""
    return _yaml_text(value, flow=True).removesuffix("\n...\n").removesuffix("\n")


def _yaml_text(tree: Any, flow: bool = False) -> str:
    """`plain_values`' tree as YAML that reads back as the same tree: lines never wrapped, and
    every character YAML may not hold raw (`\\x85`, `\\u2028`: line breaks to YAML) escaped."""
    import yaml

    return yaml.safe_dump(tree, default_flow_style=flow, sort_keys=False, width=math.inf, allow_unicode=False)


def plain_values(tree: Any, where: str) -> Any:
    """`tree` as YAML's data (dicts with string keys, lists, str, int, float, bool, None): NumPy
    scalars and 0-d arrays become Python numbers, a `Path` its string, a tuple a list. Anything else
    raises a one-line `ConfigError`: `<where>: <dotted key>: <why>`. Shared by a dict config and
    the overrides, so both follow one rule."""
    from smlaunch.config.loader import MAX_DEPTH
    from smlaunch.errors import ConfigError

    def fail(path: list[str], why: str) -> ConfigError:
        return ConfigError(f"{where}: {'.'.join(path) + ': ' if path else ''}{why}")

    def convert(value: Any, path: list[str], inside: tuple[int, ...]) -> Any:
        if isinstance(value, Mapping | list | tuple):
            if len(inside) >= MAX_DEPTH:  # as the loader counts: the root is the first
                raise fail(path, f"nested more than {MAX_DEPTH} deep")
            if id(value) in inside:
                raise fail(path, f"{_a(value)} that contains itself (a cycle)")
            inside = (*inside, id(value))
        if isinstance(value, Mapping):
            out = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise fail(path, f"key {key!r} ({_a(key)}) is not a string; config keys are names")
                out[str.__str__(key)] = convert(item, [*path, _shown(key)], inside)
            return out
        if isinstance(value, list | tuple):
            return [convert(item, [*path, str(i)], inside) for i, item in enumerate(value)]
        scalar = _scalar(value)
        if type(scalar) is int and scalar.bit_length() > _MAX_INT_BITS:
            digits = int(scalar.bit_length() * math.log10(2)) + 1
            raise fail(path, f"an int of ~{digits} digits is not a config value (YAML reads up to 4300)")
        if scalar is not _NOT_A_VALUE:
            return scalar
        numpy = sys.modules.get("numpy")  # a NumPy value is only possible once NumPy is imported
        if numpy is not None and isinstance(value, numpy.ndarray) and value.ndim == 0:
            return convert(value[()], path, inside)
        what, hint = _a(value), _HINTS.get(type(value), "")
        if numpy is not None and isinstance(value, numpy.ndarray):
            what, hint = f"{what} of shape {value.shape}", "; pass a list (.tolist()) where the config takes one"
        raise fail(path, f"{what} is not a config value (a str, number, bool, None, list or dict){hint}")

    return convert(tree, [], ())


_NOT_A_VALUE = object()
_MAX_INT_BITS = 14_000
"""About Python's 4,300 digits, past which `str(int)` (so YAML) fails; far past any config number."""
_HINTS: dict[type, str] = {set: "; pass a list", frozenset: "; pass a list", bytes: "; pass a str"}


def _scalar(value: Any) -> Any:
    """The YAML scalar `value` stands for, or `_NOT_A_VALUE`. A subclass (an enum member, NumPy's
    `str_`) gives its plain value; NumPy's narrower floats give the decimal they print as
    (`np.float32(0.01)` is 0.01, the number written, not 0.009999999776482582)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, PurePath):
        return str(value)
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(value, numpy.generic):
        return _NOT_A_VALUE
    if isinstance(value, numpy.bool_):
        return bool(value)
    if isinstance(value, numpy.integer):
        return int(value)
    if isinstance(value, numpy.floating):
        if isinstance(value, numpy.float16 | numpy.float32) and math.isfinite(value):
            return float(str(value))
        return float(value)
    return _NOT_A_VALUE


def _a(value: Any) -> str:
    """`a set`, `a numpy.ndarray`, `an int`: what the user passed, by its type."""
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _shown(key: str) -> str:
    """A key as the dotted path shows it: as written, or quoted if it holds a line break or other
    unprintable character (the message is one line)."""
    return key if key.isprintable() else repr(str.__str__(key))


class _config_file:
    """A path config as it is; a dict written to a temporary YAML file for the life of the call."""

    def __init__(self, config):
        self.config, self.tmp = config, None

    def __enter__(self) -> str:
        from smlaunch.errors import ConfigError

        if isinstance(self.config, str | os.PathLike):
            return os.fspath(self.config)
        if not isinstance(self.config, Mapping):
            raise ConfigError(f"config: expected a YAML file's path or a dict, got {_a(self.config)}")
        tree = plain_values(self.config, "config (a dict)")
        self.tmp = tempfile.TemporaryDirectory(prefix="smlaunch-config-")
        path = Path(self.tmp.name) / "config.yaml"
        path.write_text(_yaml_text(tree))
        return str(path)

    def __exit__(self, kind, exc, trace) -> None:
        if self.tmp is None:
            return
        path = str(Path(self.tmp.name) / "config.yaml")
        self.tmp.cleanup()
        from smlaunch.errors import ConfigError

        if isinstance(exc, ConfigError) and path in str(exc):  # the file is ours, not the user's
            message = str(exc).replace(f"config file {path}", "config (a dict)").replace(path, "config (a dict)")
            raise ConfigError(message) from None
