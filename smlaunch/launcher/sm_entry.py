"""The entry script of a submitted job, shipped as `smlaunch_entry.py` at the top of its source tarball.

Runs on every host, in either entry way: exec'd by the container entrypoint line (container mode,
so it is PID 1) or started by the SageMaker training toolkit as `sagemaker_program` (toolkit
mode). It installs the shipped package (and its dependencies) unless `SMLAUNCH_PIP_INSTALL=0`,
in which case the shipped code goes first on PYTHONPATH, and then *replaces itself* with
`python -m smlaunch.launcher.cli <SMLAUNCH_COMMAND> smlaunch-config.yaml`, so the launcher keeps
the PID and receives SIGTERM directly. Standard library only: nothing else is installed yet.
"""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "smlaunch-config.yaml"
COMMANDS = ("run", "check", "plan")


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


def main() -> int:
    command = os.environ.get("SMLAUNCH_COMMAND", "run")
    if command not in COMMANDS:
        return _fail(f"SMLAUNCH_COMMAND={command!r}: expected one of {', '.join(COMMANDS)}")
    env = dict(os.environ)
    if env.get("SMLAUNCH_PIP_INSTALL", "1") != "0":
        print(f"smlaunch_entry: pip install {HERE}", flush=True)
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
                               "--quiet", str(HERE)], check=False)
        if done.returncode != 0:
            return _fail(f"pip install of the shipped smlaunch package failed (exit {done.returncode}); does the "
                         "job reach PyPI, or set sagemaker.install_package: false for an image that has the dependencies")
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    argv = [sys.executable, "-m", "smlaunch.launcher.cli", command, str(CONFIG)]
    print(f"smlaunch_entry: exec sm-launch {command} {CONFIG}", flush=True)
    os.execve(sys.executable, argv, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
