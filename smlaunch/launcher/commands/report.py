"""`sm-launch report RUN_DIR`: draw a run's report again from its `report.json`.

RUN_DIR may be a local run's directory (the head's `hosts/<head>/opt/ml/output/data` is found
under it), a job's downloaded `output/data` folder, the `report.json` itself, or a submitted
job's output in S3: `--job NAME` (found with DescribeTrainingJob) or the `s3://.../output.tar.gz`
URI, downloaded and unpacked into `./<job>-output` (or `--into DIR`) first. The verdict and
the advisor are computed again, with `--price TYPE=USD` on top of the prices the run used.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from smlaunch.console import RESULT
from smlaunch.errors import UserError

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    parser.add_argument(
        "run_dir",
        nargs="?",
        help="a run directory, an output/data folder, a report.json, or a job's s3://.../output.tar.gz",
    )
    parser.add_argument("--job", help="a submitted training job: read its report from its output in S3")
    parser.add_argument("--into", help="where a job's output is unpacked (default: ./<job>-output)")
    parser.add_argument("--region", help="AWS region for --job and s3:// (default: boto3's)")
    parser.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="TYPE=USD",
        help="USD per instance-hour for an ml.* type, over the run's prices (repeatable)",
    )


def main(args, failure) -> int:
    from smlaunch.launcher.report.job_report import log_summary

    run_dir = args.run_dir
    if args.job and run_dir:
        raise UserError(
            f"report: --job {args.job} reads the job's output from S3; give no RUN_DIR with it "
            "(--into says where it is unpacked)"
        )
    if args.job or (run_dir or "").startswith("s3://"):
        run_dir = str(_download(args))
    elif not run_dir:
        raise UserError("report: give a run directory, a report.json, an s3:// output URI or --job NAME")
    path, report = rerender(run_dir, args.price)
    log_summary(report, log)
    log.log(
        RESULT, f"report: {path} (summary.md, throughput.png, data_wait.png, utilisation.png, tensorboard/ beside it)"
    )
    return 0


def _download(args) -> Path:
    from smlaunch.launcher.sagemaker import job_client

    sagemaker, _, s3 = job_client.clients(args.region)
    uri = job_client.output_uri(job_client.describe(sagemaker, args.job)) if args.job else args.run_dir
    parts = [p for p in uri[5:].split("/") if p]  # .../<job>/output/output.tar.gz, as SageMaker writes it
    name = args.job or (parts[-3] if len(parts) >= 4 and parts[-2] == "output" else "job")
    into = Path(args.into or f"{name}-output")
    log.info(f"report: {uri} -> {into}")
    return job_client.fetch_output(s3, uri, into)


def rerender(path: str, prices: list[str]) -> tuple[Path, dict]:
    from smlaunch.config.instance_types import check_training_type
    from smlaunch.launcher.report.job_report import add_analysis, report_file, write_report

    report_path = report_file(path)
    try:
        report = json.loads(report_path.read_text())
        monitor = dict(report.get("monitor") or {})
        epoch_images = monitor.pop("epoch_images", None)
        overrides = dict(monitor.get("prices") or {})
        for item in prices:
            name, _, value = item.partition("=")
            try:
                overrides[name] = float(value)
            except ValueError:
                raise UserError(f"--price {item}: expected TYPE=USD_PER_HOUR, e.g. ml.c5.4xlarge=0.816") from None
            try:
                check_training_type(name)
            except ValueError as exc:
                raise UserError(f"--price {item}: {exc}") from None
        add_analysis(report, {**monitor, "prices": overrides}, epoch_images)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, UserError):
            raise
        raise UserError(f"{report_path}: not a report this version can read ({type(exc).__name__}: {exc})") from None
    write_report(report, report_path.parent)
    return report_path, report
