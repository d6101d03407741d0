"""A SageMaker job's hyperparameters as config overrides (issue 81).

SageMaker writes the job's `HyperParameters` to `/opt/ml/input/config/hyperparameters.json`, string
to string, on every host; the SageMaker Python SDK v2 JSON-encodes each value, a tuner writes its
ranges' values raw, and the training toolkit also passes them as `--name value` arguments. Each
dotted key there (`trainer.learning_rate`) is the same override as `--set trainer.learning_rate=...`,
its value JSON-decoded where it is JSON (`0.01`, `"adamw"`, `[1, 2]`) and the raw string where not
(`adamw`): this is what `sm-launch tune`'s ranges ride on. The toolkit's own keys (`sagemaker_*`)
and the tuner's (`_tuning_objective_metric`), and `config` (the entry script's), are not the job's
config; any other key without a dot is not a config field either, and is named as ignored. An
unknown dotted key is an error at load, as in the file (`loader.load_config`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

TOOL_KEYS = ("_tuning_objective_metric", "config")
"""Keys the tuner and the entry script set for themselves: never config fields, never reported."""
TOOL_PREFIXES = ("sagemaker_",)
"""The training toolkit's and the SDK's own keys (`sagemaker_program`, `sagemaker_estimator_class_name`, ...)."""


def decoded(value: Any) -> Any:
    """A hyperparameter's value: JSON-decoded where the string is JSON, else as written."""
    if not isinstance(value, str):
        return value  # the toolkit's SM_HPS holds values decoded already
    try:
        return json.loads(value)
    except ValueError:
        return value


def config_overrides(hyperparameters: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(dotted key -> value, in the file's order; the other keys that are not the tools' own, which
    the job ignores and says so). The values are taken as decoded already (`decoded`, as
    `cluster.sagemaker_env` reads the file): decoding twice would turn the string `"1e5"` into a number."""
    overrides: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in hyperparameters.items():
        if key in TOOL_KEYS or key.startswith(TOOL_PREFIXES):
            continue
        if "." in key:
            overrides[key] = value
        else:
            ignored.append(key)
    return overrides, ignored
