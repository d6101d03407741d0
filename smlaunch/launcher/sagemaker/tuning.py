"""`sm-launch tune`: the heterogeneous job as a SageMaker hyperparameter tuning job (issue 81).

The request is the training job `submit` would create, recast as a `HyperParameterTrainingJobDefinition`
(../shared/notes/tracking.md, section 5):

- both instance groups kept, as `ResourceConfig.InstanceGroups`, and each channel routed to its
  groups. The API's shape allows it; no AWS document says a tuning job accepts it, and both SageMaker
  Python SDKs drop it. The dry run says so, and a refusal by the service is one line naming it;
- the toolkit entry: a tuning definition's algorithm has no `ContainerEntrypoint`, so the image's
  training toolkit runs `smlaunch_entry.py` from the uploaded tarball (`sagemaker.entry: toolkit`);
- each range a dotted config key, as the trial's hyperparameters.json gives it
  (`config.hyperparameters`): checked here against the config like `--set`, so an unknown key or a
  value of the wrong type is refused before anything is uploaded;
- the objective a MetricDefinition of the job's (`launcher.sagemaker.metrics`), read from the head's
  validation line;
- per-trial checkpoints and MLflow runs: every trial shares the definition's checkpoint prefix, so
  each trial's launcher keeps its checkpoints (and the MLflow run id beside them) under its own
  training job's name (`trial_overrides`), and its MLflow run is named after it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from smlaunch.config.hyperparameters import decoded
from smlaunch.errors import ConfigError

TUNER_KEY = "_tuning_objective_metric"
"""The hyperparameter SageMaker adds to a tuning trial: how a host knows it is one."""
STRATEGIES = {"bayesian": "Bayesian", "random": "Random", "hyperband": "Hyperband"}
MAX_RANGES = 30
MAX_HYPERPARAMETERS = 100
"""Static and tunable together, the tuner's own key counted (../shared/notes/tracking.md, section 5)."""
UNVERIFIED = (
    "InstanceGroups in a tuning job's ResourceConfig: the API's shape allows it, but no AWS document says the "
    "service accepts it and both SageMaker Python SDKs drop it; unverified until one real "
    "CreateHyperParameterTuningJob succeeds"
)


@dataclass(frozen=True)
class Range:
    key: str
    kind: str
    """Integer, Continuous or Categorical."""
    low: str = ""
    high: str = ""
    scaling: str = "Auto"
    values: tuple[str, ...] = ()

    def shape(self) -> dict:
        if self.kind == "Categorical":
            return {"Name": self.key, "Values": list(self.values)}
        return {"Name": self.key, "MinValue": self.low, "MaxValue": self.high, "ScalingType": self.scaling}

    def sample(self):
        """A value the config must take: the low end, or the first category."""
        if self.kind == "Categorical":
            return decoded(self.values[0])
        return int(self.low) if self.kind == "Integer" else float(self.low)


def parse_range(text: str) -> Range:
    """`KEY=LOW:HIGH[:log|linear]` (integers: an Integer range) or `KEY=A,B,C` (Categorical)."""
    key, sep, spec = text.partition("=")
    if not sep or "." not in key or not spec:
        raise ConfigError(f"--range {text!r}: expected KEY=LOW:HIGH[:log], or KEY=A,B,C, with a dotted config KEY")
    if ":" not in spec:
        values = tuple(v.strip() for v in spec.split(","))
        if not all(values) or len(values) > 30:
            raise ConfigError(f"--range {text!r}: a categorical range has 1 to 30 values, none empty")
        return Range(key, "Categorical", values=values)
    parts = spec.split(":")
    scaling = {"log": "Logarithmic", "linear": "Linear"}.get(parts[2] if len(parts) == 3 else "auto", "Auto")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("log", "linear")):
        raise ConfigError(f"--range {text!r}: expected LOW:HIGH, LOW:HIGH:log or LOW:HIGH:linear")
    low, high = parts[0], parts[1]
    try:
        lo, hi = float(low), float(high)
    except ValueError:
        raise ConfigError(f"--range {text!r}: LOW and HIGH must be numbers") from None
    if not lo < hi:
        raise ConfigError(f"--range {text!r}: LOW must be under HIGH")
    if scaling == "Logarithmic" and lo <= 0:
        raise ConfigError(f"--range {text!r}: a log range needs LOW > 0")
    integer = re.fullmatch(r"-?\d+", low) and re.fullmatch(r"-?\d+", high)
    return Range(key, "Integer" if integer else "Continuous", low, high, scaling)


def trial_overrides(hyperparameters: dict, job_name: str | None, checkpoint_dir: str | None, default: str) -> dict:
    """On a tuning trial (the tuner's key among the hyperparameters), the overrides that keep its
    state apart from the other trials': its checkpoints (and the MLflow run id beside them) under its
    own training job's name. Every trial shares the tuning definition's checkpoint prefix, and would
    otherwise resume another trial's checkpoint."""
    if TUNER_KEY not in hyperparameters or not job_name:
        return {}
    return {"trainer.checkpoint_dir": f"{(checkpoint_dir or default).rstrip('/')}/{job_name}"}


def tuning_job_name(job: str, now: float | None = None) -> str:
    """`<job>-<yymmdd-HHMMSS>` in the 32 characters a tuning job's name may have."""
    stamp = time.strftime("%y%m%d-%H%M%S", time.gmtime(now))
    return f"{job[: 32 - len(stamp) - 1].rstrip('-')}-{stamp}"


def check_ranges(cfg_path: str, overrides, ranges: list[Range]) -> None:
    """Each range's key and value as the trial's config will take them: a one-line error if not."""
    from smlaunch.config import load_config

    if not ranges:
        raise ConfigError("tune: give at least one --range KEY=LOW:HIGH")
    if len(ranges) > MAX_RANGES:
        raise ConfigError(f"tune: {len(ranges)} ranges, over the {MAX_RANGES} a tuning job takes")
    keys = [r.key for r in ranges]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"tune: a key has two ranges: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
    for r in ranges:
        values = [decoded(v) for v in r.values] if r.kind == "Categorical" else [r.sample()]
        for value in values:
            load_config(cfg_path, overrides, {r.key: value})


def tuning_request(
    training: dict,
    name: str,
    objective: str,
    direction: str,
    ranges: list[Range],
    max_jobs: int,
    max_parallel: int,
    strategy: str,
    epochs: int | None,
) -> dict:
    """CreateHyperParameterTuningJob's parameters from a toolkit-entry CreateTrainingJob request."""
    names = [m["Name"] for m in training["AlgorithmSpecification"]["MetricDefinitions"]]
    if objective not in names:
        raise ConfigError(f"tune: --objective {objective!r} is no metric the job prints; it prints {', '.join(names)}")
    static = dict(training.get("HyperParameters", {}))
    if len(static) + len(ranges) + 1 > MAX_HYPERPARAMETERS:
        raise ConfigError(f"tune: {len(static) + len(ranges) + 1} hyperparameters, over {MAX_HYPERPARAMETERS}")
    kinds: dict[str, list] = {"Integer": [], "Continuous": [], "Categorical": []}
    for r in ranges:
        kinds[r.kind].append(r.shape())
    resource = {k: v for k, v in training["ResourceConfig"].items() if k != "KeepAlivePeriodInSeconds"}
    definition = {
        "StaticHyperParameters": static,
        "AlgorithmSpecification": {
            k: v for k, v in training["AlgorithmSpecification"].items() if k != "ContainerEntrypoint"
        },
        **{
            k: training[k]
            for k in (
                "RoleArn",
                "InputDataConfig",
                "VpcConfig",
                "OutputDataConfig",
                "StoppingCondition",
                "EnableNetworkIsolation",
                "EnableInterContainerTrafficEncryption",
                "EnableManagedSpotTraining",
                "CheckpointConfig",
                "RetryStrategy",
                "Environment",
            )
            if k in training
        },
        "ResourceConfig": resource,
    }
    config: dict = {
        "Strategy": STRATEGIES[strategy],
        "HyperParameterTuningJobObjective": {"Type": direction, "MetricName": objective},
        "ResourceLimits": {"MaxNumberOfTrainingJobs": max_jobs, "MaxParallelTrainingJobs": max_parallel},
        "ParameterRanges": {f"{kind}ParameterRanges": shapes for kind, shapes in kinds.items()},
        "TrainingJobEarlyStoppingType": "Off",
    }
    if strategy == "hyperband":
        if not epochs:
            raise ConfigError("tune: --strategy hyperband needs trainer.epochs (its resource is the epoch)")
        config["StrategyConfig"] = {"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": epochs}}
    request = {"HyperParameterTuningJobName": name, "HyperParameterTuningJobConfig": config}
    request["TrainingJobDefinition"] = definition
    if training.get("Tags"):
        request["Tags"] = training["Tags"]
    return request
