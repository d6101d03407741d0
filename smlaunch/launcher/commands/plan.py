"""`sm-launch plan CONFIG`: check the config as `run` would, print the resolved config and the plan.

Starts nothing and writes nothing: the plan is a pure function of the config and this machine
(or, on a SageMaker host, the job's files). `summary` is the short form `run` prints first.
"""

from __future__ import annotations

import logging

from smlaunch.console import RESULT
from smlaunch.launcher.commands.job import add_config_arguments, load_job
from smlaunch.launcher.job.plan_text import plan_json, plan_lines

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--json", action="store_true", help="print the plan (and the resolved config) as one JSON object instead"
    )
    parser.add_argument(
        "--rates-from",
        metavar="RUN",
        dest="rates_from",
        help="a run of this model and chain (its directory or report.json): add the advisor's "
        "prediction for this plan's cluster from its measured rates",
    )


def main(args, failure) -> int:
    job = load_job(args, failure, write_failure_locally=False)
    sizing = data_hosts_sizing(job.cfg, job.plan, args.config)
    if args.json:
        import json

        shown = plan_json(job.cfg, job.plan)
        if sizing is not None:
            shown["data_hosts"] = sizing
        log.log(RESULT, json.dumps(shown, indent=2))
        return 0
    for line in plan_lines(job.cfg, job.plan) + ([sizing["line"]] if sizing else []):
        log.log(RESULT, line)
    for line in prediction_lines(job.cfg, job.plan, args.rates_from):
        log.log(RESULT, line)
    return 0


def prediction_lines(cfg, plan, rates_from: str | None) -> list[str]:
    """The advisor's prediction for this plan's cluster (`advisor.advise_plan`), from the rates a
    run measured; without one, the line says how to get it."""
    if not rates_from:
        return [
            "advisor: no prediction without measured rates: run this config briefly (e.g. --set "
            "trainer.steps=300) and plan again with --rates-from RUN_DIR"
        ]
    import json

    from smlaunch.cluster.prices import PRICES_DATED, price_table
    from smlaunch.launcher.report.advisor import advise_plan, plan_advice_lines
    from smlaunch.launcher.report.job_report import report_file

    path = report_file(rates_from)
    measured = json.loads(path.read_text())
    hosts = [
        {"subcluster": h.subcluster, "instance_type": h.instance_type, "vcpus": h.vcpus or h.num_cpus}
        for h in plan.hosts
    ]
    advisor = advise_plan(
        hosts, plan.train_workers, measured, cfg.monitor.model_dump(), price_table(cfg.monitor.prices), PRICES_DATED
    )
    return plan_advice_lines(advisor, str(path))


def data_hosts_sizing(cfg, plan, config_name: str) -> dict | None:
    """What `submit` will make of `sagemaker.data_hosts` (`launcher.report.sizing`): the count, the
    report and why, and a `line` for the plan; None when the config does not ask, and on a
    SageMaker host (whose groups are the job's). A report that cannot be found is a line saying
    so, not a failure: the config is fine to run, only `submit` refuses it."""
    if plan.mode == "sagemaker" or cfg.sagemaker is None or cfg.sagemaker.data_hosts is None:
        return None
    from smlaunch.errors import UserError
    from smlaunch.launcher.report.sizing import size_data_group

    try:
        sizing = size_data_group(cfg, cfg.sagemaker.data_hosts, config_name=config_name)
    except UserError as exc:  # ConfigError too
        return {
            "error": str(exc),
            "line": f"data hosts: {cfg.sagemaker.data_hosts}, but submit will refuse it: "
            + str(exc).removeprefix("data hosts auto: "),
        }
    if sizing is None:  # only when nothing asks for sizing, as above
        return None
    return {
        "group": sizing.group,
        "instance_type": sizing.instance_type,
        "count": sizing.count,
        "config_count": sizing.was,
        "report": str(sizing.report) if sizing.report else None,
        "why": sizing.why,
        "line": sizing.line(),
    }
