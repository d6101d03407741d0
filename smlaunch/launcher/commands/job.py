"""What `run`, `check` and `plan` share: the config argument, and turning it into a checked plan.

On a SageMaker host (one with `/opt/ml/input/config/resourceconfig.json`) the plan is this host's
part of the job, built from the job's files; elsewhere it is the local simulation. Everything that
can be checked without a cluster is checked here, before any of them starts anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: --help must not import pydantic models or the plan
    from smlaunch.cluster.plan import LaunchPlan
    from smlaunch.cluster.sagemaker_env import SageMakerEnvironment
    from smlaunch.config.schema import LaunchConfig


def add_config_arguments(parser) -> None:
    parser.add_argument("config", help="YAML job config, e.g. configs/hetero.yaml")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field by dotted path (repeatable), e.g. trainer.steps=50",
    )


@dataclass(frozen=True)
class Job:
    cfg: LaunchConfig
    plan: LaunchPlan
    sagemaker: SageMakerEnvironment | None
    """The SageMaker environment on a SageMaker host, None for a local simulation."""


def load_job(args, failure, write_failure_locally: bool = True) -> Job:
    """Config, checks and plan. Points `failure` at this host's tree on SageMaker, at the head's
    simulated tree locally (unless `write_failure_locally` is off: `plan` creates no run directory)."""
    from smlaunch.cluster.environment import detect_local_environment
    from smlaunch.cluster.sagemaker_env import base_dir, is_sagemaker_host
    from smlaunch.config import load_config
    from smlaunch.launcher.job.preflight import preflight

    on_sagemaker = is_sagemaker_host()
    if on_sagemaker:
        failure.at(base_dir(), keep_existing=True)
    cfg = load_config(args.config, args.overrides)
    if on_sagemaker:
        from smlaunch.cluster.sagemaker.plan import build_sagemaker_plan
        from smlaunch.cluster.sagemaker_env import read_sagemaker_environment

        sm = read_sagemaker_environment()
        plan = build_sagemaker_plan(cfg, sm, detect_local_environment())
    else:
        from smlaunch.cluster.plan import build_plan

        sm = None
        plan = build_plan(cfg, detect_local_environment())
        if write_failure_locally:
            failure.at(plan.head_host.opt_ml)
    preflight(cfg, sources=not on_sagemaker)
    return Job(cfg, plan, sm)
