"""What a SageMaker training host knows about its job, read from `/opt/ml/input/config`.

SageMaker writes `resourceconfig.json`, `inputdataconfig.json` and `hyperparameters.json` on every
host. The `sagemaker-training` toolkit turns them into `Environment` (and `SM_*` variables when it
launches a script), but importing it writes files and environment variables, and a launcher
started as the container entrypoint never sees `SM_*`. So this module reads the same files the
same way, into a frozen value, and falls back to the toolkit's `SM_RESOURCE_CONFIG`,
`SM_INPUT_DATA_CONFIG` and `SM_HPS` only where a file is missing. Field by field it agrees with
the toolkit (tests compare them on the same trees); see ../shared/notes/sagemaker.md §2.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from smlaunch.errors import ConfigError

DEFAULT_BASE_DIR = "/opt/ml"
HOMOGENEOUS_GROUP = "homogeneousCluster"
"""The group name SageMaker (and the toolkit's default) gives a job without instance groups."""


@dataclass(frozen=True)
class GroupInfo:
    name: str
    instance_type: str
    hosts: tuple[str, ...]
    """As SageMaker lists them: not sorted."""


@dataclass(frozen=True)
class SageMakerEnvironment:
    base_dir: str
    current_host: str
    hosts: tuple[str, ...]
    current_instance_type: str
    current_group: str
    current_group_hosts: tuple[str, ...]
    groups: dict[str, GroupInfo]
    """Empty when resourceconfig.json has no `instance_groups` (SDK local mode, old jobs)."""
    network_interface_name: str
    channels: dict[str, str]
    """Channel name -> TrainingInputMode (File, FastFile or Pipe), as this host received them."""
    hyperparameters: dict = field(default_factory=dict)
    """JSON-decoded values, without the toolkit's `sagemaker_*` keys."""
    job_name: str | None = None
    channel_specs: dict[str, dict] = field(default_factory=dict)
    """Channel name -> its inputdataconfig.json entry (S3DistributionType, RecordWrapperType, ...)."""

    @property
    def is_hetero(self) -> bool:
        return len(self.groups) > 1

    def path(self, *parts: str) -> Path:
        return Path(self.base_dir, *parts)


def base_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """`/opt/ml`, or `SAGEMAKER_BASE_DIR` as the toolkit honours it."""
    return Path(environ.get("SAGEMAKER_BASE_DIR", DEFAULT_BASE_DIR))


def is_sagemaker_host(environ: Mapping[str, str] = os.environ) -> bool:
    return (base_dir(environ) / "input" / "config" / "resourceconfig.json").is_file() or "SM_RESOURCE_CONFIG" in environ


def read_sagemaker_environment(environ: Mapping[str, str] = os.environ) -> SageMakerEnvironment:
    """Read this host's job description; a missing or malformed file is a one-line ConfigError."""
    root = base_dir(environ)
    config_dir = root / "input" / "config"
    resource = _read(config_dir / "resourceconfig.json", environ, "SM_RESOURCE_CONFIG")
    if resource is None:
        raise ConfigError(
            f"{config_dir / 'resourceconfig.json'}: not found and SM_RESOURCE_CONFIG is not set; "
            "is this a SageMaker training host?"
        )
    input_data = _read(config_dir / "inputdataconfig.json", environ, "SM_INPUT_DATA_CONFIG") or {}
    hyper = _read_hyperparameters(config_dir / "hyperparameters.json", environ)
    where = config_dir / "resourceconfig.json"
    for key in ("current_host", "hosts"):
        if key not in resource:
            raise ConfigError(f"{where}: missing key '{key}'")
    current_host = _typed(resource["current_host"], str, f"{where}: current_host")
    hosts = tuple(_host_names(resource["hosts"], f"{where}: hosts"))
    groups = {}
    for i, entry in enumerate(_typed(resource.get("instance_groups", []), list, f"{where}: instance_groups")):
        field = f"{where}: instance_groups[{i}]"
        missing = [k for k in ("instance_group_name", "instance_type", "hosts") if k not in _typed(entry, dict, field)]
        if missing:
            raise ConfigError(f"{field} lacks {', '.join(repr(k) for k in missing)}")
        name = _typed(entry["instance_group_name"], str, f"{field}.instance_group_name")
        groups[name] = GroupInfo(
            name=name,
            instance_type=_typed(entry["instance_type"], str, f"{field}.instance_type"),
            hosts=tuple(_host_names(entry["hosts"], f"{field}.hosts")),
        )
    current_group = resource.get("current_group_name", HOMOGENEOUS_GROUP)
    for name, spec in input_data.items():
        _typed(spec, dict, f"{config_dir / 'inputdataconfig.json'}: channel '{name}'")
    channels = {name: spec.get("TrainingInputMode", "File") for name, spec in input_data.items()}
    return SageMakerEnvironment(
        base_dir=str(root),
        current_host=current_host,
        hosts=hosts,
        current_instance_type=resource.get("current_instance_type", "local"),
        current_group=current_group,
        current_group_hosts=groups[current_group].hosts if current_group in groups else (),
        groups=groups,
        network_interface_name=resource.get("network_interface_name", "eth0"),
        channels=channels,
        hyperparameters={k: v for k, v in hyper.items() if not k.startswith("sagemaker_")},
        job_name=environ.get("TRAINING_JOB_NAME"),
        channel_specs={name: dict(spec) for name, spec in input_data.items() if isinstance(spec, dict)},
    )


def _typed(value, kind: type, where: str):
    """`value` if it is a `kind` (a JSON object, array or string), else a ConfigError naming `where`."""
    names: dict[type, str] = {dict: "a JSON object", list: "a JSON array", str: "a string"}
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: expected {names[kind]}, got {json.dumps(value)[:80]}")
    return value


def _host_names(value, where: str) -> list[str]:
    for host in _typed(value, list, where):
        _typed(host, str, f"{where} entry")
    return value


def _read(path: Path, environ: Mapping[str, str], variable: str):
    text = None
    if path.is_file():
        try:
            text, origin = path.read_bytes().decode("utf-8"), str(path)
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 at byte {exc.start}") from None
    elif variable in environ:
        text, origin = environ[variable], variable
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{origin}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{origin}: expected a JSON object, got {type(value).__name__}")
    return value


def _read_hyperparameters(path: Path, environ: Mapping[str, str]) -> dict:
    """Values are JSON-encoded strings (SDK v2); decode each, keeping the raw string if it is not JSON."""
    if not path.is_file() and "SM_HPS" in environ:
        return _read(path, environ, "SM_HPS")  # the toolkit exports them already decoded
    raw = _read(path, environ, "SM_HPS") or {}
    decoded = {}
    for key, value in raw.items():
        try:
            decoded[key] = json.loads(value)
        except (TypeError, ValueError):
            decoded[key] = value
    return decoded
