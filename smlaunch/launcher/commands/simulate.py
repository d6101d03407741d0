"""`sm-launch simulate CONFIG`: the config's SageMaker path on this machine, one `sm-launch`
process per host of its instance groups (`launcher.sagemaker.simulate`).

`run` trains as the SageMaker job would, `--command check` only brings the hosts up and runs a
task on each. Every host's log is `RUN_DIR/<host>.log`; the command exits with the job's status
(0 when every host exited 0). SIGTERM or Ctrl-C is passed on to every host, as StopTrainingJob is.
"""

from __future__ import annotations

import logging
from pathlib import Path

from smlaunch.console import RESULT
from smlaunch.launcher.commands.job import add_config_arguments, given_hyperparameters, load_job

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--command",
        dest="host_command",
        choices=("run", "check"),
        default="run",
        help="what every host runs: the job (default), or the cluster check",
    )
    parser.add_argument(
        "--hyperparameter",
        dest="hyperparameters",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a SageMaker hyperparameter, written to every host's hyperparameters.json as a job's are "
        "(repeatable); a dotted KEY overrides the config there, e.g. trainer.learning_rate=0.01",
    )


def main(args, failure) -> int:
    import signal

    from smlaunch import console
    from smlaunch.cluster.sagemaker_env import is_sagemaker_host
    from smlaunch.errors import UserError
    from smlaunch.launcher.job.plan_text import summary
    from smlaunch.launcher.job.stopping import StopRequest
    from smlaunch.launcher.sagemaker.simulate import simulate

    if is_sagemaker_host():
        raise UserError("simulate: this is a SageMaker host already; run `sm-launch CONFIG` here")
    stop = StopRequest().install((signal.SIGTERM, signal.SIGINT))
    job = load_job(args, failure, write_failure_locally=False)
    console.log_to_file(Path(job.plan.run_dir) / "logs" / "sm-launch.log")
    for line in summary(job.cfg, job.plan):
        log.info(line)
    code = simulate(job.cfg, job.plan, args.host_command, stop, hyperparameters=given_hyperparameters(args))
    log.log(RESULT, f"simulated SageMaker job: {'every host exited 0' if code == 0 else f'exit {code}'}")
    return code
