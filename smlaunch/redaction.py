"""Secrets by name: the one rule for what smlaunch shows as `***` wherever it prints, logs or saves a
value (the plan, `submit --dry-run`, the run folder's config, report.json, the KubeRay ConfigMap).

A variable or hyperparameter whose name holds TOKEN, SECRET, PASSWORD, PASSWD, KEY, CREDENTIAL or
AUTH (any case: `HF_TOKEN`, `WANDB_API_KEY`, `db_password`) is taken for a secret: its name is
shown, its value never. A name is all there is to go by; the rule errs towards masking, since a
masked NCCL setting costs a reader a look at the config, and a printed token costs a rotation.
Standard library only: the SageMaker entry script uses it before smlaunch's dependencies are
installed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
MASK = "***"


def looks_secret(name: str) -> bool:
    """Whether a variable or hyperparameter called `name` holds a secret (`SECRET_NAME`)."""
    return bool(SECRET_NAME.search(name))


def masked(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with the value of every secret-looking name replaced by `MASK` (an empty one stays
    empty: it tells the reader the variable is unset, and holds nothing)."""
    return {
        name: MASK if looks_secret(str(name)) and value not in (None, "") else value for name, value in values.items()
    }


def masked_arguments(arguments: list[str]) -> list[str]:
    """Command-line arguments as SageMaker passes hyperparameters (`--name value`, `--name=value`),
    the values of secret-looking names masked."""
    out: list[str] = []
    hide_next = False
    for argument in arguments:
        if hide_next and not argument.startswith("--"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        name, equals, _ = argument.partition("=")
        if argument.startswith("--") and looks_secret(name):
            if equals:
                out.append(f"{name}={MASK}")
                continue
            hide_next = True
        out.append(argument)
    return out
