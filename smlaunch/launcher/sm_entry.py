"""The entry script of a submitted job, shipped as `smlaunch_entry.py` at the top of its source tarball.

Runs on every host, in either entry way: exec'd by the container entrypoint line (container mode,
so it is PID 1) or started by the SageMaker training toolkit as `sagemaker_program` (toolkit
mode). `SMLAUNCH_PIP_INSTALL` says how the shipped package gets onto the host: `auto` (the
default) checks that this Python already has every dependency the shipped pyproject.toml names, at
a version it allows, and then only puts the shipped code first on PYTHONPATH (well under a second,
no network); anything missing and `1` pip-install the package (20-30 s, from PyPI); `0` never
installs. It then *replaces itself* with
`python -m smlaunch.launcher.cli <SMLAUNCH_COMMAND> <config>`, so the launcher keeps the PID and
receives SIGTERM directly. Standard library only: nothing else is installed yet.

In toolkit mode SageMaker's SIGTERM goes to the container's PID 1, not to the launcher
(`cluster.process_tree` has the cases). The script names its supervisor (the nearest ancestor that
is not a shell, as `pid:start time`) in `SMLAUNCH_SUPERVISOR`, and the launcher stops, checkpoints
and exits when that process is gone (`launcher.job.stopping.watch_supervisor`), the same path as a
SIGTERM of its own. Whether a stop gets that far depends on the container's PID 1; sm-launch says
at start what a stop will do under it (`cluster.process_tree.Pid1`).

The project is the nearest folder at or above this file holding `pyproject.toml`, so the same
script also serves a source dir staged by hand for the SageMaker Python SDK
(`entry_point="smlaunch/launcher/sm_entry.py"`); the config is `--config PATH` (a hyperparameter
`config`, which the toolkit passes as arguments) or `SMLAUNCH_CONFIG`, relative to the project,
default `smlaunch-config.yaml` (what `sm-launch submit` ships).
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = next((p for p in (HERE, *HERE.parents) if (p / "pyproject.toml").is_file()), HERE)
COMMANDS = ("run", "check", "plan")
USER_CODE = "user_code"
"""The tarball's folder of the user's own modules (model factory, task, map ops), when the config names any."""


def missing_requirements(project: Path) -> list[str] | None:
    """The dependencies in `project`'s pyproject.toml (and those of their extras, one level down)
    that this Python lacks or has at a version outside the range; None if that cannot be told
    (no TOML parser, no readable pyproject). Versions are compared with the `packaging`
    that pip vendors; without it, being installed is enough."""
    from importlib import metadata

    try:
        import tomllib
    except ImportError:  # Python 3.10: the TOML parser pip vendors
        try:
            from pip._vendor import tomli as tomllib
        except ImportError:
            return None
    try:
        requirements = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    except (OSError, KeyError, ValueError):
        return None
    try:
        from pip._vendor.packaging.requirements import Requirement

        parse: type[Requirement] | None = Requirement
    except ImportError:
        parse = None
    missing: list[str] = []

    def check(line: str, extras_of: str | None = None) -> None:
        extras: set[str] = set()
        if parse is None:
            match = re.match(r"\s*([A-Za-z0-9._-]+)", line)  # a PEP 508 line starts with its name
            if match is None:  # not a requirement: pip's install says what is wrong with it
                missing.append(line.split(";")[0].strip())
                return
            name = match.group(1)
            version, wanted = _installed(metadata, name), None
        else:
            req = parse(line)
            if extras_of is not None and (req.marker is None or not req.marker.evaluate({"extra": extras_of})):
                return
            name, extras, wanted = req.name, req.extras, req.specifier
            version = _installed(metadata, name)
        if version is None or (wanted is not None and not wanted.contains(version, prereleases=True)):
            missing.append(line.split(";")[0].strip())
            return
        for extra in extras:
            for dependency in metadata.requires(name) or []:
                check(dependency, extra)

    for line in requirements:
        check(line)
    return missing


def _installed(metadata, name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _fail(reason: str) -> int:
    """One line on stderr and in SageMaker's failure file (its first 1024 characters become FailureReason)."""
    print(f"sm-launch: error: {reason}", file=sys.stderr, flush=True)
    failure = Path(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")) / "output" / "failure"
    try:
        failure.parent.mkdir(parents=True, exist_ok=True)
        if not failure.exists():
            failure.write_text(reason[:1024] + "\n")
    except OSError:
        pass
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="smlaunch_entry")
    parser.add_argument("--config", default=os.environ.get("SMLAUNCH_CONFIG", "smlaunch-config.yaml"))
    args, ignored = parser.parse_known_args(argv)
    sys.path.insert(0, str(PROJECT))  # the shipped package: its redaction and process_tree are standard library only
    if ignored:
        from smlaunch.redaction import masked_arguments

        shown = masked_arguments(ignored)
        print(
            f"smlaunch_entry: arguments {shown}: sm-launch reads the job's hyperparameters from "
            "hyperparameters.json (a dotted key overrides the config)",
            flush=True,
        )
    config = PROJECT / args.config
    if not config.is_file():
        return _fail(f"config {config} does not exist (--config / SMLAUNCH_CONFIG are relative to {PROJECT})")
    command = os.environ.get("SMLAUNCH_COMMAND", "run")
    if command not in COMMANDS:
        return _fail(f"SMLAUNCH_COMMAND={command!r}: expected one of {', '.join(COMMANDS)}")
    from smlaunch.cluster.process_tree import SUPERVISOR_ENV, is_alive, supervisor

    watched = supervisor()  # now: an install takes 20-30 s, and the supervisor may be gone by then
    env = dict(os.environ)
    mode = env.get("SMLAUNCH_PIP_INSTALL", "auto")
    if mode not in ("auto", "1", "0"):
        return _fail(f"SMLAUNCH_PIP_INSTALL={mode!r}: expected auto, 1 or 0 (sagemaker.install_package)")
    missing = missing_requirements(PROJECT) if mode == "auto" else None
    if missing == []:
        print("smlaunch_entry: every dependency is installed; the shipped code goes on PYTHONPATH", flush=True)
    if mode == "1" or (mode == "auto" and missing != []):
        why = f" (missing: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''})" if missing else ""
        print(f"smlaunch_entry: pip install {PROJECT}{why}", flush=True)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--quiet",
                str(PROJECT),
            ],
            check=False,
        )
        if done.returncode != 0:
            return _fail(
                f"pip install of the shipped smlaunch package failed (exit {done.returncode}); does the "
                "job reach PyPI, or set sagemaker.install_package: false for an image that has the dependencies"
            )
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(PROJECT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if (PROJECT / USER_CODE).is_dir():  # the user's modules `submit` shipped (smlaunch.user_code)
        env["SM_LAUNCH_CODE_DIR"] = str(PROJECT / USER_CODE)
    if watched:
        if not is_alive(watched):  # gone while we installed: the stop came before sm-launch could start
            print("smlaunch_entry: the process that started this script has exited (a stop); not starting", flush=True)
            return 143
        env[SUPERVISOR_ENV] = watched
    print(f"smlaunch_entry: exec sm-launch {command} {config}", flush=True)
    os.execve(sys.executable, [sys.executable, "-m", "smlaunch.launcher.cli", command, str(config)], env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
