"""The config as smlaunch shows and saves it: every value, but the secrets of its environment sections.

`sagemaker.environment` and `kuberay.environment` set variables on the job's hosts; their values
reach the hosts by the environment itself (the training job's `Environment`, a Kubernetes Secret),
never by the config. So wherever the config is printed (`plan`, `plan --json`), saved (the run
folder's `resolved_config.yaml`, the simulated hosts' trees), or shipped to the hosts (submit's
source tarball, the KubeRay ConfigMap), a secret-looking variable's value is `***`
(`smlaunch.redaction`). Nothing on a host reads these two sections, so the masked config trains
exactly as the full one.
"""

from __future__ import annotations

from smlaunch.redaction import masked

ENVIRONMENT_SECTIONS = ("sagemaker", "kuberay")


def shown_config(cfg, **dump) -> dict:
    """`cfg.model_dump(mode="json", **dump)` with the secret values of its environment sections masked."""
    data = cfg.model_dump(mode="json", **dump)
    for section in ENVIRONMENT_SECTIONS:
        if isinstance(data.get(section), dict) and data[section].get("environment"):
            data[section]["environment"] = masked(data[section]["environment"])
    return data
