"""`sm-launch submit CONFIG [--dry-run] [--job-name NAME] [--data-hosts auto|N] [--from-report PATH]`:
create the SageMaker training job, its data group sized first if asked (`launcher.report.sizing`).

Runs on the user's machine, never on a host of the job, so a failure goes to stderr only (no
failure file). See `smlaunch.launcher.sagemaker.submit` for the order of checks, uploads and the API call.
"""

from __future__ import annotations

import logging

from smlaunch.console import RESULT
from smlaunch.launcher.commands.job import add_config_arguments

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the CreateTrainingJob request as JSON; upload and create nothing"
    )
    parser.add_argument("--job-name", help="training job name (default: <job>-<UTC timestamp>)")
    parser.add_argument(
        "--data-hosts",
        type=data_hosts,
        metavar="auto|N",
        help="the data group's host count: auto sizes it from the advisor of the newest report of "
        "this config under run.dir; N forces N (default: sagemaker.data_hosts, else the "
        "group's instance_count)",
    )
    parser.add_argument(
        "--from-report",
        metavar="PATH",
        help="size the data group from this report (a report.json or a run's directory) instead of "
        "the newest one of this config (implies --data-hosts auto)",
    )


def data_hosts(value: str):
    """`auto` or a count >= 1 (argparse says which when it is neither)."""
    import argparse

    if value == "auto":
        return value
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected auto or a host count >= 1")
    return count


def main(args, failure) -> int:
    import sys

    from smlaunch.config import load_config
    from smlaunch.launcher.sagemaker.submit import submit

    cfg = load_config(args.config, args.overrides)

    def note(line: str) -> None:
        """The sizing line: on stderr in a dry run, whose stdout is the request's JSON alone."""
        if not args.dry_run:
            log.info(line)
        elif not args.quiet:
            print(line, file=sys.stderr)

    submit(
        cfg,
        dry_run=args.dry_run,
        job_name=args.job_name,
        log=lambda line: log.log(RESULT if args.dry_run else logging.INFO, line),
        data_hosts=args.data_hosts,
        from_report=args.from_report,
        note=note,
        config_name=args.config,
    )
    return 0
