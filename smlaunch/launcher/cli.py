# PYTHON_ARGCOMPLETE_OK
"""`sm-launch`: the command line, and the one error boundary every subcommand runs behind.

Each subcommand is a module of `smlaunch.launcher.commands` with `add_arguments(parser)` and
`main(args, failure) -> exit status`. `main` here parses, sets up the console (`-q`, `-v`), runs
the subcommand and decides, the same way for all of them, what a failure looks like:

* a `ConfigError` (bad config or flag): one `sm-launch: error:` line, exit 2;
* any other `UserError` (bad data, a host that never joined, ...): one line, exit 1;
* Ctrl-C: `interrupted`, exit 130 (SIGTERM is the run command's: it stops, checkpoints, exits 143);
* anything else is a bug: its traceback, then one line, exit 1;

and in every case the line is also written to `output/failure` where the subcommand pointed
`failure` (SageMaker's FailureReason file: this host's on SageMaker, the head's locally).

Only argparse and the command modules (which import nothing heavy) load before a command runs,
so `--help`, `--version` and shell completion answer at once; torch and ray load when a job runs.
"""

from __future__ import annotations

import argparse
import importlib
import io
import logging
import sys
import traceback
from pathlib import Path

from smlaunch.launcher.commands import COMMANDS, DEFAULT

log = logging.getLogger("smlaunch")


class FailureFile:
    """Where a failure's line goes besides stderr. A subcommand points it at an `/opt/ml` tree once
    it knows which one; until then (and for commands that run on no host) nothing is written."""

    def __init__(self):
        self.opt_ml: str | None = None
        self.keep_existing = False

    def at(self, opt_ml: str | Path, keep_existing: bool = False) -> None:
        """`keep_existing` on SageMaker: the first failure wins, as the training toolkit does."""
        self.opt_ml, self.keep_existing = str(opt_ml), keep_existing

    def write(self, reason: str) -> None:
        if self.opt_ml is None:
            return
        failure = Path(self.opt_ml) / "output" / "failure"
        try:
            failure.parent.mkdir(parents=True, exist_ok=True)
            if not (self.keep_existing and failure.exists()):
                failure.write_text(" ".join(reason.split())[:1024] + "\n")  # FailureReason shows 1024
        except OSError as exc:
            log.debug("could not write %s: %s", failure, exc)


def version_text() -> str:
    """`sm-launch X (ray Y, torch Z, timm W, Python V)`, read from package metadata, nothing imported."""
    from importlib.metadata import PackageNotFoundError, version

    from smlaunch import __version__

    def of(name: str) -> str:
        try:
            return f"{name} {version(name)}"
        except PackageNotFoundError:
            return f"{name} missing"

    return (
        f"sm-launch {__version__} ({', '.join(of(n) for n in ('ray', 'torch', 'timm'))}, "
        f"Python {sys.version.split()[0]})"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sm-launch",
        description="Train a PyTorch model on a heterogeneous cluster: Ray Data preprocessing on the "
        "CPU hosts, Ray Train on the GPU hosts. On a SageMaker host (one with "
        "/opt/ml/input/config/resourceconfig.json) every host of the job runs the same "
        "command and takes its part; elsewhere the config's instance groups are simulated "
        "as separate Ray nodes on this machine.",
        epilog="examples:\n  sm-launch configs/hetero.yaml\n  sm-launch plan configs/hetero.yaml "
        "--set trainer.steps=50\n  sm-launch -q configs/hetero.yaml\n"
        "  sm-launch submit configs/hetero.yaml --dry-run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text())
    _verbosity_flags(parser, default=True)
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for name, (module, text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=text, description=text)
        _verbosity_flags(cmd, default=False)
        importlib.import_module(module).add_arguments(cmd)
    return parser


def _verbosity_flags(parser: argparse.ArgumentParser, default: bool) -> None:
    """-v/-q on the top level and on every subcommand (`sm-launch -q run X` = `sm-launch run -q X`)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if default else argparse.SUPPRESS,
        help="also print debug lines and Ray's own logs (they always go to the run's log files)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=False if default else argparse.SUPPRESS,
        help="print only errors and where the report is",
    )


def with_default_command(argv: list[str]) -> list[str]:
    """`sm-launch CONFIG ...` means `sm-launch run CONFIG ...`: insert `run` before the first
    argument that is neither an option nor a command."""
    for i, arg in enumerate(argv):
        if arg.startswith("-"):
            continue
        return argv if arg in COMMANDS else argv[:i] + [DEFAULT] + argv[i:]
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = with_default_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    try:
        import argcomplete

        argcomplete.autocomplete(parser)
    except ImportError:
        pass
    args = parser.parse_args(argv)
    from smlaunch import console

    console.setup(-1 if args.quiet else min(args.verbose, 1))
    if isinstance(sys.stdout, io.TextIOWrapper):  # not a stand-in such as StringIO, which has no buffering
        sys.stdout.reconfigure(line_buffering=True)  # CloudWatch and pipes see each line as it happens
    if args.command is None:
        parser.print_help()
        return 2
    failure = FailureFile()
    try:
        return importlib.import_module(COMMANDS[args.command][0]).main(args, failure)
    except KeyboardInterrupt:
        return _fail(failure, "interrupted", 130)
    except Exception as exc:  # Ray wraps errors raised in tasks and workers
        from smlaunch.errors import ConfigError, UserError, describe_error

        if isinstance(exc, ConfigError):
            return _fail(failure, str(exc), 2)
        if isinstance(exc, UserError):
            return _fail(failure, str(exc), 1)
        reason = describe_error(exc)
        if reason.startswith("internal error"):
            log.debug("traceback", exc_info=exc)
            traceback.print_exc()
        return _fail(failure, reason, 1)
    finally:
        console.close_file()


def _fail(failure: FailureFile, reason: str, code: int) -> int:
    log.error(reason)
    failure.write(reason)
    return code


if __name__ == "__main__":
    sys.exit(main())
