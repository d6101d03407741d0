"""`sm-launch run CONFIG` (the default command) and `sm-launch check CONFIG`.

Locally: every host of the config is simulated as a Ray node on this machine, the job trains,
and the report is written on the head's simulated tree. On a SageMaker host: this host takes its
part (the head trains, the others serve their CPUs and wait). `check` brings the same cluster up,
runs one task per host to show the labels route work where the plan says, and tears it down.
With `--address` (or RAY_ADDRESS off SageMaker) both work on a Ray cluster that is already
running, starting and stopping nothing there (`launcher.attached.run`).

SIGTERM (StopTrainingJob, MaxRuntime, a spot interruption) stops training at the next step
boundary with a checkpoint; the command then exits 143. So does the exit of the training toolkit
that started it (`SMLAUNCH_SUPERVISOR`, set by the entry script): the toolkit swallows the signal.
"""

from __future__ import annotations

import logging
from pathlib import Path

from smlaunch.console import RESULT
from smlaunch.launcher.commands.job import add_config_arguments, load_job
from smlaunch.text import plural

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--address",
        help="a Ray cluster that is already running (default: RAY_ADDRESS): start "
        "nothing, match its labelled nodes to the config's groups and run "
        "there",
    )


def main(args, failure) -> int:
    import os

    from smlaunch.cluster.process_tree import SUPERVISOR_ENV
    from smlaunch.launcher.job.stopping import StopRequest, watch_supervisor

    stop = StopRequest().install()
    address = args.address or _ray_address()
    if address:
        return _attached(args, address, stop)
    watch_supervisor(stop, os.environ.pop(SUPERVISOR_ENV, None))  # popped: Ray's processes must not inherit it
    job = load_job(args, failure)
    stop.grace_s = job.cfg.trainer.stop_grace_s
    if job.sagemaker is not None:
        return _on_sagemaker(args.command, job, stop)
    return _local(args.command, job, stop)


def _ray_address() -> str | None:
    """RAY_ADDRESS names a running cluster, except on a SageMaker host (the job brings its own up)."""
    import os

    from smlaunch.cluster.sagemaker_env import is_sagemaker_host

    return None if is_sagemaker_host() else os.environ.get("RAY_ADDRESS") or None


def _attached(args, address: str, stop) -> int:
    """The job, or `check`, on a running cluster: nothing started there, nothing left behind."""
    from smlaunch.config import load_config
    from smlaunch.launcher.job.preflight import preflight

    cfg = load_config(args.config, args.overrides)
    stop.grace_s = cfg.trainer.stop_grace_s
    preflight(cfg, sources=False)
    if args.command == "run":
        from smlaunch.launcher.attached.run import run_attached

        return _reported(run_attached(cfg, address, stop))
    from smlaunch.cluster.attached.plan import attachable
    from smlaunch.launcher.attached.connect import check_attached

    attachable(cfg)
    attached = check_attached(cfg, address, log.info)
    groups = "; ".join(
        f"{name}: {plural(len(nodes), 'node')} ({', '.join(n.short for n in nodes)})"
        for name, nodes in attached.groups.items()
    )
    workers = f"{attached.train_workers} train workers on {'GPUs' if attached.on_gpu else 'CPUs'}"
    log.log(RESULT, f"cluster at {address}: every group has its nodes and each ran a task; {groups}; {workers}")
    return 0


def start_local_log(cfg, plan) -> None:
    """The run's log file in its run directory, opened with the plan's summary lines."""
    from smlaunch import console
    from smlaunch.launcher.job.plan_text import summary

    logs = Path(plan.run_dir) / "logs"
    console.log_to_file(logs / "sm-launch.log")
    for line in summary(cfg, plan):
        log.info(line)
    log.info(f"run directory: {plan.run_dir} (logs, Ray's too: {logs})")


def _local(command: str, job, stop) -> int:
    cfg, plan = job.cfg, job.plan
    start_local_log(cfg, plan)
    if command == "check":
        from smlaunch.cluster.local import LocalCluster
        from smlaunch.launcher.sagemaker.run import check_hosts

        with LocalCluster(plan):
            answers = check_hosts(plan)["hosts"]
        log.log(RESULT, f"all {plural(len(answers), 'simulated host')} ran a task: {', '.join(answers)}")
        return 0
    from smlaunch.launcher.local.run import run_local

    return _reported(run_local(cfg, plan, stop=stop))


def log_report(report: dict) -> dict:
    """The end of a run on every path (the Python API's too): the summary and the report's path."""
    from smlaunch.launcher.report.job_report import log_summary

    log_summary(report, log)
    log.log(RESULT, f"report: {report['path']}")
    return report


def _reported(report: dict) -> int:
    """`log_report`, and the exit status (143 for a run that stopped on a signal, as SageMaker and
    shells expect)."""
    return 143 if log_report(report)["summary"].get("stopped_at_step") is not None else 0


def _on_sagemaker(command: str, job, stop) -> int:
    from smlaunch import console
    from smlaunch.errors import UserError
    from smlaunch.launcher.job.plan_text import summary
    from smlaunch.launcher.sagemaker.run import run_host

    cfg, plan, sm = job.cfg, job.plan, job.sagemaker
    console.log_to_file(sm.path("output", "data", "smlaunch", "sm-launch.log"))
    if plan.stop:  # what a stop will do under this container's PID 1 (`cluster.plan.stop_protection`)
        log.log(logging.INFO if plan.stop_is_clean else logging.WARNING, plan.stop)

    def announce(final) -> None:
        """The head's summary once every host joined: the workers it names are the ones that train
        (the plan before the join placed them on the GPUs the instance types promise)."""
        for line in summary(cfg, final):
            log.info(line)

    outcome = run_host(cfg, plan, sm, stop, check_only=command == "check", log=log.info, announce=announce)
    if outcome.exit_code == 1:
        raise UserError(outcome.message)
    log.log(RESULT, f"{plan.current_host}: {outcome.message}")
    if outcome.report and "summary" in outcome.report:
        _reported(outcome.report)
    return outcome.exit_code
