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
    sm = None
    if on_sagemaker:
        from smlaunch.cluster.sagemaker_env import read_sagemaker_environment

        failure.at(base_dir(), keep_existing=True)
        sm = read_sagemaker_environment()
        hyperparameters = sm.hyperparameters
    else:  # `simulate --hyperparameter`: checked here, applied by each simulated host from its tree
        from smlaunch.config.hyperparameters import decoded

        hyperparameters = {key: decoded(value) for key, value in given_hyperparameters(args).items()}
    overrides = job_overrides(hyperparameters)
    cfg = load_config(args.config, args.overrides, overrides)
    if sm is not None:  # a tuning trial keeps its checkpoints and MLflow run apart from the other trials'
        from smlaunch.launcher.sagemaker.tuning import trial_overrides

        apart = trial_overrides(
            hyperparameters, sm.job_name, cfg.trainer.checkpoint_dir, str(base_dir() / "checkpoints")
        )
        if apart:
            overrides = {**overrides, **apart}
            cfg = load_config(args.config, args.overrides, overrides)
    if sm is None and overrides:  # simulate: checked here; each host applies them from its tree, as on SageMaker
        cfg = load_config(args.config, args.overrides)
    if sm is not None:
        from smlaunch.cluster.sagemaker.plan import build_sagemaker_plan

        plan = build_sagemaker_plan(cfg, sm, detect_local_environment())
    else:
        from smlaunch.cluster.plan import build_plan

        plan = build_plan(cfg, detect_local_environment())
        if write_failure_locally:
            failure.at(plan.head_host.opt_ml)
    preflight(cfg, sources=not on_sagemaker)
    return Job(cfg, plan, sm)


def job_overrides(hyperparameters: dict) -> dict:
    """The job's hyperparameters that override its config (`config.hyperparameters`), each named
    on the console (secret-looking values masked), with the keys the job ignores."""
    import logging

    from smlaunch.config.hyperparameters import config_overrides
    from smlaunch.redaction import masked

    overrides, ignored = config_overrides(hyperparameters)
    log = logging.getLogger("smlaunch")
    if overrides:
        shown = ", ".join(f"{k}={v}" for k, v in masked(overrides).items())
        log.info(f"hyperparameters: {shown} (as --set; a --set on the command line comes after them)")
    if ignored:
        log.info(f"hyperparameters: ignoring {', '.join(ignored)} (not a dotted config key such as trainer.epochs)")
    return overrides


def given_hyperparameters(args) -> dict[str, str]:
    """`simulate --hyperparameter KEY=VALUE`s as SageMaker writes a job's: strings, as given."""
    from smlaunch.errors import ConfigError

    given = {}
    for item in getattr(args, "hyperparameters", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--hyperparameter {item!r}: expected KEY=VALUE, e.g. trainer.learning_rate=0.01")
        given[key] = value
    return given
