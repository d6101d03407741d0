"""`smlaunch.run` and `smlaunch.plan`: the CLI's `run` and `plan` for notebooks and scripts.

`config` is a YAML path or the same tree as a dict; `overrides` a dict of dotted keys to values,
as `--set` takes them (`{"trainer.steps": 50}`). The calls take the CLI's own path (the same
checks, plan, cluster and report), but a failure is raised, not printed: a `ConfigError` for a
bad config (the CLI's exit 2), a `DataError` or another `UserError` for bad data (exit 1), each
one line. `run` returns the report's summary, the numbers the CLI prints at the end.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def plan(config: str | Path | dict, overrides: dict[str, Any] | None = None):
    """The `LaunchPlan` `sm-launch plan` prints (this machine's local simulation), after the same checks."""
    from smlaunch.launcher.cli import FailureFile
    from smlaunch.launcher.commands.job import load_job

    with _config_file(config) as path:
        return load_job(_args("plan", path, overrides), FailureFile(), write_failure_locally=False).plan


def run(config: str | Path | dict, overrides: dict[str, Any] | None = None, quiet: bool = False) -> dict:
    """Run the job as `sm-launch run` would here (the local simulation, or the Ray cluster
    RAY_ADDRESS names); the report's summary. Progress and metric lines go to the console, as the
    CLI's do, unless `quiet`."""
    import os

    from smlaunch import console
    from smlaunch.launcher.cli import FailureFile
    from smlaunch.launcher.job.stopping import StopRequest

    console.setup(-1 if quiet else 0)
    stop = StopRequest()  # no signal handlers: a notebook's own stay as they are
    failure = FailureFile()
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


def _args(command: str, path: str, overrides: dict[str, Any] | None) -> SimpleNamespace:
    """What the CLI's parser gives the commands: `--set KEY=VALUE` items, each value as JSON (which YAML reads)."""
    items = [f"{key}={json.dumps(value)}" for key, value in (overrides or {}).items()]
    return SimpleNamespace(command=command, config=path, overrides=items, address=None, quiet=False, verbose=0)


class _config_file:
    """A path config as it is; a dict written to a temporary YAML file for the life of the call."""

    def __init__(self, config):
        self.config, self.tmp = config, None

    def __enter__(self) -> str:
        if not isinstance(self.config, dict):
            return str(self.config)
        import yaml

        self.tmp = tempfile.TemporaryDirectory(prefix="smlaunch-config-")
        path = Path(self.tmp.name) / "config.yaml"
        path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        return str(path)

    def __exit__(self, kind, exc, trace) -> None:
        if self.tmp is None:
            return
        path = str(Path(self.tmp.name) / "config.yaml")
        self.tmp.cleanup()
        from smlaunch.errors import ConfigError

        if isinstance(exc, ConfigError) and path in str(exc):  # the file is ours, not the user's
            raise ConfigError(str(exc).replace(path, "config (a dict)")) from None
