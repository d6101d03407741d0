"""`sm-launch tune CONFIG --objective validation:NAME --range KEY=LOW:HIGH[:log] ...`: the job as a
SageMaker hyperparameter tuning job (`launcher.sagemaker.tuning`), uploaded and created as `submit`
does; `--dry-run` prints the request; `tune --status NAME` shows its trials and the best."""

from __future__ import annotations

import logging

from smlaunch.console import RESULT
from smlaunch.errors import UserError

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    parser.add_argument("config", nargs="?", help="YAML job config (not with --status)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--objective", metavar="METRIC", help="a metric the job prints, e.g. validation:accuracy")
    parser.add_argument(
        "--direction",
        choices=("Maximize", "Minimize"),
        help="default: Minimize for a loss, Maximize for anything else",
    )
    parser.add_argument(
        "--range",
        dest="ranges",
        action="append",
        default=[],
        metavar="KEY=LOW:HIGH[:log]",
        help="a dotted config key and its range (repeatable): integers make an integer range, "
        "KEY=A,B,C a categorical one",
    )
    parser.add_argument("--max-jobs", type=int, default=10, help="trials in all (default 10)")
    parser.add_argument("--max-parallel", type=int, default=2, help="trials at once (default 2)")
    parser.add_argument("--strategy", choices=("bayesian", "random", "hyperband"), default="bayesian")
    parser.add_argument("--job-name", help="tuning job name, 32 characters at most (default: <job>-<timestamp>)")
    parser.add_argument("--dry-run", action="store_true", help="print the request as JSON; upload and create nothing")
    parser.add_argument("--status", metavar="NAME", help="a tuning job's trials, their objective and the best")
    parser.add_argument("--region", help="AWS region for --status (default: boto3's)")


def main(args, failure) -> int:
    import sys

    if args.status:
        from smlaunch.launcher.sagemaker.tuning_status import tuning_status

        for line in tuning_status(args.status, args.region):
            log.log(RESULT, line)
        return 0
    if not args.config or not args.objective:
        raise UserError("tune: give CONFIG and --objective (or --status NAME)")
    if args.max_jobs < 1 or not 1 <= args.max_parallel <= args.max_jobs:
        raise UserError("tune: --max-jobs >= 1 and 1 <= --max-parallel <= --max-jobs")
    from smlaunch.config import load_config
    from smlaunch.launcher.sagemaker.submit import submit
    from smlaunch.launcher.sagemaker.tuning import (
        UNVERIFIED,
        check_ranges,
        parse_range,
        tuning_job_name,
        tuning_request,
    )

    ranges = [parse_range(text) for text in args.ranges]
    check_ranges(args.config, args.overrides, ranges)
    cfg = load_config(args.config, args.overrides)
    if cfg.sagemaker is not None and cfg.sagemaker.entry != "toolkit":
        cfg = cfg.model_copy(update={"sagemaker": cfg.sagemaker.model_copy(update={"entry": "toolkit"})})
    direction = args.direction or ("Minimize" if "loss" in args.objective else "Maximize")
    name = args.job_name or tuning_job_name(cfg.job)
    if len(name) > 32:
        raise UserError(f"tune: --job-name {name!r}: a tuning job's name has 32 characters at most")

    def recast(training: dict, job_name: str) -> dict:
        return tuning_request(
            training,
            job_name,
            args.objective,
            direction,
            ranges,
            args.max_jobs,
            args.max_parallel,
            args.strategy,
            cfg.trainer.epochs,
        )

    print(f"tune: note: {UNVERIFIED}", file=sys.stderr)
    submit(
        cfg,
        dry_run=args.dry_run,
        job_name=name,
        log=lambda line: log.log(RESULT if args.dry_run else logging.INFO, line),
        config_name=args.config,
        tuning=recast,
    )
    return 0
