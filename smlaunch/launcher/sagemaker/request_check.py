"""Offline checks of a CreateTrainingJob request, and of a config before anything is uploaded.

Three layers, each returning one line per problem:
1. botocore's own `ParamValidator` against the SageMaker service model shipped with botocore
   (required members, types, minimum lengths and values): what boto3 would refuse client-side.
2. What that validator leaves to the service but the same model states: enums (instance types,
   modes), maximum lengths and sizes, and patterns (job name, role ARN, S3 URIs, variable names).
3. Rules the model cannot express (../shared/notes/sagemaker.md §4, §6, §8): at most 5 instance
   groups, InstanceGroupNames on every S3 channel or on none and only naming the job's groups,
   spot's MaxWaitTimeInSeconds >= MaxRuntimeInSeconds and only with spot, FastFile only for
   S3Prefix, AttributeNames for an AugmentedManifestFile, unique names, one data source per
   channel, and a file system channel in File mode inside a VpcConfig.
`config_problems` applies what depends on the service to the config, naming config fields, and
reads what submit would upload (a local ManifestFile, the pretrained weights) far enough to refuse
it before the first upload.

A FileSystemDataSource has no InstanceGroupNames in the API (botocore's model; the SageMaker
Python SDK's FileSystemInput has no instance groups either), so the all-or-nothing routing rule
is applied to S3 channels only. That the service applies it the same way is an inference: no
document says how it counts a file system channel in a heterogeneous job.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from smlaunch.config.schema import LaunchConfig

MAX_GROUPS = 5


@functools.lru_cache(maxsize=4)
def _operation(name: str = "CreateTrainingJob"):
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker").operation_model(name)


def validate_request(request: dict, operation: str = "CreateTrainingJob") -> list[str]:
    """Every problem with `request` (CreateTrainingJob's, or CreateHyperParameterTuningJob's, whose
    training job definition the service rules apply to), one line each; empty when it may be sent."""
    from botocore.validate import ParamValidator

    shape = _operation(operation).input_shape
    report = ParamValidator().validate(request, shape)
    errors = (
        [line.strip() for line in report.generate_report().splitlines() if line.strip()] if report.has_errors() else []
    )
    _walk(request, shape, "", errors)
    errors.extend(service_rule_errors(request.get("TrainingJobDefinition", request)))
    return errors


def _walk(value, shape, path: str, errors: list[str]) -> None:
    kind = shape.type_name
    meta = shape.metadata
    if kind == "structure" and isinstance(value, dict):
        for key, item in value.items():
            if key in shape.members:
                _walk(item, shape.members[key], f"{path}.{key}" if path else key, errors)
    elif kind == "list" and isinstance(value, list):
        if "max" in meta and len(value) > meta["max"]:
            errors.append(f"{path}: {len(value)} items, the service allows at most {meta['max']}")
        for i, item in enumerate(value):
            _walk(item, shape.member, f"{path}[{i}]", errors)
    elif kind == "map" and isinstance(value, dict):
        if "max" in meta and len(value) > meta["max"]:
            errors.append(f"{path}: {len(value)} entries, the service allows at most {meta['max']}")
        for key, item in value.items():
            _walk(key, shape.key, f"{path} key {key!r}", errors)
            _walk(item, shape.value, f"{path}.{key}", errors)
    elif kind == "string" and isinstance(value, str):
        if shape.enum and value not in shape.enum:
            shown = ", ".join(shape.enum[:6]) + (", ..." if len(shape.enum) > 6 else "")
            errors.append(f"{path}: {value!r} is not one of the service's values ({shown})")
        elif "max" in meta and len(value) > meta["max"]:
            errors.append(f"{path}: {len(value)} characters, the service allows at most {meta['max']}")
        elif "pattern" in meta and not _matches(meta["pattern"], value):
            errors.append(f"{path}: {value!r} does not match the service's pattern {meta['pattern']}")
    elif kind in ("integer", "long") and isinstance(value, int) and "max" in meta and value > meta["max"]:
        errors.append(f"{path}: {value} is above the service's maximum {meta['max']}")


@functools.cache
def _pattern(pattern: str):
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error:  # Java-only syntax such as \p{L}: left to the service
        return None


def _matches(pattern: str, value: str) -> bool:
    compiled = _pattern(pattern)
    return compiled is None or compiled.fullmatch(value) is not None


def service_rule_errors(request: dict) -> list[str]:
    errors = []
    resources = request.get("ResourceConfig") or {}
    groups = [g.get("InstanceGroupName") for g in resources.get("InstanceGroups") or []]
    if len(groups) > MAX_GROUPS:
        errors.append(f"ResourceConfig.InstanceGroups: {len(groups)} groups, a job may have at most {MAX_GROUPS}")
    if groups and ("InstanceType" in resources or "InstanceCount" in resources):
        errors.append("ResourceConfig: InstanceGroups excludes InstanceType and InstanceCount")
    if len(set(groups)) != len(groups):
        errors.append(f"ResourceConfig.InstanceGroups: group names must be unique, got {groups}")
    channels = request.get("InputDataConfig") or []
    names = [c.get("ChannelName") for c in channels]
    if len(set(names)) != len(names):
        errors.append(f"InputDataConfig: channel names must be unique, got {names}")
    routed: list[str] = []
    unrouted: list[str] = []
    for channel in channels:
        name = channel.get("ChannelName")
        source = channel.get("DataSource") or {}
        s3 = source.get("S3DataSource") or {}
        kinds = [k for k in ("S3DataSource", "FileSystemDataSource", "DatasetSource") if source.get(k)]
        if len(kinds) > 1:
            errors.append(f"InputDataConfig {name}: DataSource takes one of {', '.join(kinds)}, not several")
        if source.get("FileSystemDataSource"):
            errors += _file_system_errors(name, channel, request)
        elif s3:  # an unnamed channel shows as None, as in the other lines
            (routed if s3.get("InstanceGroupNames") else unrouted).append(str(name))
        for group in s3.get("InstanceGroupNames") or []:
            if group not in groups:
                errors.append(
                    f"InputDataConfig {name}: InstanceGroupNames names {group!r}, not a group of the "
                    f"job ({', '.join(map(str, groups)) or 'no InstanceGroups'})"
                )
        mode = channel.get("InputMode") or (request.get("AlgorithmSpecification") or {}).get("TrainingInputMode")
        if mode == "FastFile" and s3.get("S3DataType", "S3Prefix") != "S3Prefix":
            errors.append(f"InputDataConfig {name}: FastFile needs S3DataType S3Prefix, not {s3.get('S3DataType')}")
        if s3.get("S3DataType") == "AugmentedManifestFile" and not s3.get("AttributeNames"):
            errors.append(f"InputDataConfig {name}: an AugmentedManifestFile needs AttributeNames")
    if routed and unrouted:
        errors.append(
            f"InputDataConfig: InstanceGroupNames must be on every channel or none; channels "
            f"{', '.join(routed)} have them, {', '.join(unrouted)} do not"
        )
    stopping = request.get("StoppingCondition") or {}
    wait, run = stopping.get("MaxWaitTimeInSeconds"), stopping.get("MaxRuntimeInSeconds", 86400)
    if request.get("EnableManagedSpotTraining"):
        if wait is None:
            errors.append("StoppingCondition.MaxWaitTimeInSeconds: required with EnableManagedSpotTraining")
        elif isinstance(wait, int) and isinstance(run, int) and wait < run:
            errors.append(f"StoppingCondition: MaxWaitTimeInSeconds ({wait}) must be >= MaxRuntimeInSeconds ({run})")
    elif wait is not None:
        errors.append("StoppingCondition.MaxWaitTimeInSeconds: only valid with EnableManagedSpotTraining")
    for tag in request.get("Tags") or []:
        if str(tag.get("Key", "")).lower().startswith("aws:"):
            errors.append(f"Tags: key {tag.get('Key')!r} uses the reserved aws: prefix")
    return errors


def _file_system_errors(name: str, channel: dict, request: dict) -> list[str]:
    """A file system is mounted in File mode only, and reached only from inside a VPC (§4)."""
    errors = []
    mode = channel.get("InputMode") or (request.get("AlgorithmSpecification") or {}).get("TrainingInputMode")
    if mode != "File":
        errors.append(f"InputDataConfig {name}: a FileSystemDataSource needs InputMode File, not {mode}")
    if not request.get("VpcConfig"):
        errors.append(
            f"InputDataConfig {name}: a FileSystemDataSource needs VpcConfig (the file system's subnets "
            "and security groups)"
        )
    return errors


def config_problems(cfg: LaunchConfig) -> list[str]:
    """What the config asks that the service would refuse, naming the config field; checked before
    any upload. (Group count, routing, manifests and instance counts are already refused at load.)"""
    problems = []  # instance types: refused at load (config.instance_types)
    if len(cfg.cluster.instance_groups) > MAX_GROUPS:
        problems.append(
            f"cluster.instance_groups: {len(cfg.cluster.instance_groups)} groups, a job may have at most {MAX_GROUPS}"
        )
    from smlaunch.launcher.sagemaker.training_job import CODE_CHANNEL, uses_code_channel

    code_channel = cfg.sagemaker is not None and uses_code_channel(cfg.sagemaker)
    for name, ch in cfg.channels.items():
        if code_channel and name == CODE_CHANNEL:
            problems.append(f"channels.{name}: the name is taken by the channel that carries the source tarball")
        if ch.is_manifest and not ch.source.startswith("s3://"):
            problems.append(
                f"channels.{name}.source: a local augmented manifest cannot be submitted (its -ref "
                "attributes must name S3 objects); upload it and give its s3:// URI"
            )
        if ch.is_manifest_file and not ch.source.startswith("s3://"):
            problems += manifest_file_problems(f"channels.{name}.source", Path(ch.source).expanduser())
        if ch.file_system is not None and (cfg.sagemaker is None or cfg.sagemaker.vpc is None):
            problems.append(
                f"channels.{name}.file_system: SageMaker mounts {ch.file_system.type} "
                f"{ch.file_system.id} only inside a VPC; set sagemaker.vpc (subnets and "
                "security_group_ids that reach the file system)"
            )
    weights = cfg.model.pretrained if cfg.model else False
    if weights is not False and not weights.startswith("s3://") and not Path(weights).expanduser().is_file():
        state = "is not a file" if Path(weights).expanduser().exists() else "does not exist"
        problems.append(
            f"model.pretrained: {weights} {state}; submit uploads a local weights file (or give its s3:// URI)"
        )
    problems += _account_problems(cfg)
    if len(cfg.channels) + code_channel > 20:
        problems.append(
            f"channels: {len(cfg.channels)} channels, a job may have at most 20 "
            "(one is taken by the source tarball's channel)"
        )
    return problems


def _account_problems(cfg: LaunchConfig) -> list[str]:
    """Settings of the `sagemaker:` section that clash with the rest of the config."""
    sm = cfg.sagemaker
    problems: list[str] = []
    if sm is None:
        return problems
    if sm.volume_kms_key:
        from smlaunch.config.instance_types import has_local_storage

        local = [
            f"{g.name} ({g.instance_type})" for g in cfg.cluster.instance_groups if has_local_storage(g.instance_type)
        ]
        if local:
            problems.append(
                f"sagemaker.volume_kms_key: {', '.join(local)} use local NVMe storage, which SageMaker "
                "encrypts in hardware and refuses a VolumeKmsKeyId for; remove the key or use types "
                "without instance storage"
            )
    if sm.enable_network_isolation and cfg.model and cfg.model.pretrained is not False:
        problems.append(
            f"model.pretrained: under sagemaker.enable_network_isolation the hosts cannot download "
            f"{cfg.model.pretrained} from S3; bake the weights into the image or turn isolation off"
        )
    return problems


def manifest_file_problems(field: str, path: Path) -> list[str]:
    """A local ManifestFile that submit would upload: SageMaker's JSON list `[{"prefix": "s3://..."},
    "key", ...]`. Only the list is uploaded, so its prefix must already be in S3."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [f"{field}: {path} does not exist (a ManifestFile)"]
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{field}: {path}: {getattr(exc, 'strerror', None) or exc}"]
    except ValueError as exc:
        return [
            f"{field}: {path} is not JSON ({exc}); a ManifestFile is a JSON list "
            '[{"prefix": "s3://bucket/prefix/"}, "key", ...]'
        ]
    head = manifest[0] if isinstance(manifest, list) and manifest else None
    prefix = head.get("prefix") if isinstance(head, dict) else None
    if not isinstance(prefix, str) or not all(isinstance(k, str) for k in manifest[1:]):
        return [
            f'{field}: {path} is not a ManifestFile: expected a JSON list [{{"prefix": "s3://bucket/prefix/"}}, '
            '"key", ...]'
        ]
    if not re.match(r"s3://[^/]+", prefix):
        return [
            f"{field}: {path} has prefix {prefix!r}, but a local manifest's objects must already be in S3 "
            "(submit uploads only the manifest); give an s3:// prefix, or use the folder as an S3Prefix "
            "source"
        ]
    if len(manifest) < 2:
        return [f"{field}: {path} lists no objects after its prefix"]
    return []
