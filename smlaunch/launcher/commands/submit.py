"""`sm-launch submit CONFIG [--dry-run] [--job-name NAME]`: create the SageMaker training job.

Runs on the user's machine, never on a host of the job, so a failure goes to stderr only (no
failure file). See `smlaunch.launcher.sagemaker.submit` for the order of checks, uploads and the API call.
"""

from __future__ import annotations

import logging

from smlaunch.launcher.commands.job import add_config_arguments
from smlaunch.console import RESULT

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the CreateTrainingJob request as JSON; upload and create nothing")
    parser.add_argument("--job-name", help="training job name (default: <job>-<UTC timestamp>)")


def main(args, failure) -> int:
    from smlaunch.config import load_config
    from smlaunch.launcher.sagemaker.submit import submit

    cfg = load_config(args.config, args.overrides)
    submit(cfg, dry_run=args.dry_run, job_name=args.job_name,
           log=lambda line: log.log(RESULT if args.dry_run else logging.INFO, line))
    return 0
