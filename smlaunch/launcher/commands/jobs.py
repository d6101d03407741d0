"""`sm-launch status JOB`, `sm-launch logs JOB [--follow]`, `sm-launch stop JOB`: a submitted job.

Run on the user's machine (never on a host of the job), so errors go to stderr only. The work is
in `smlaunch.launcher.sagemaker.job_client`.
"""

from __future__ import annotations

import logging

from smlaunch.console import RESULT

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    parser.add_argument("job", help="training job name (as `sm-launch submit` printed it)")
    parser.add_argument("--region", help="AWS region (default: boto3's: AWS_REGION, ~/.aws/config)")
    if parser.prog.split()[-1] == "logs":
        parser.add_argument(
            "--follow", "-f", action="store_true", help="keep printing new lines until the job has ended"
        )


def main(args, failure) -> int:
    from smlaunch.launcher.sagemaker import job_client

    sagemaker, logs, _ = job_client.clients(args.region)
    if args.command == "status":
        for line in job_client.status_lines(job_client.describe(sagemaker, args.job)):
            log.log(RESULT, line)
    elif args.command == "stop":
        d = job_client.stop(sagemaker, args.job)
        log.log(
            RESULT,
            f"{args.job}: {d['TrainingJobStatus']}; SageMaker sends SIGTERM to every host, which stops "
            "at the next step boundary with a checkpoint (`sm-launch logs --follow` to watch)",
        )
    else:
        status = job_client.follow_logs(sagemaker, logs, args.job, lambda line: print(line, flush=True), args.follow)
        log.info(f"{args.job}: {status}")
    return 0
