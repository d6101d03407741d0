"""The CreateTrainingJob request of a config: a pure function, no network, no uploads.

`sm-launch submit --dry-run` prints exactly what `build_training_job_request` returns (the Ray
token masked), and a real submit sends it after the uploads it names have happened, so the
printed request is the one sent. Every host of the job runs the same `sm-launch` command from
the shipped config and must find its channels where that config expects them, so routing here
follows `cluster.sagemaker.plan`: a channel without `instance_groups` goes to the data groups.

Two entry ways (../shared/notes/sagemaker.md §7, §8): `container` (the default) sets
`ContainerEntrypoint`, a `/bin/sh -c` line that unpacks the source tarball (delivered by a
File-mode channel routed to every group) and `exec`s the entry script, which `exec`s sm-launch:
sm-launch ends up PID 1 and receives SageMaker's SIGTERM itself. `toolkit` leaves the image's
own entry (`train`) in place and names the entry script in the `sagemaker_program` and
`sagemaker_submit_directory` hyperparameters, as the SageMaker Python SDK does; the toolkit
then downloads the tarball itself but does not forward SIGTERM (toolkit issue #125; the launcher
watches the toolkit instead, which helps where the image's PID 1 passes SIGTERM on: `cluster.process_tree`). Under
network isolation the toolkit cannot reach S3 either: the tarball then comes by the same code
channel as in container mode and `sagemaker_submit_directory` names its local path, as the
SageMaker Python SDK does.

Data channels (../shared/notes/sagemaker.md §4): an S3 channel names its S3 data type as the
config does (a ManifestFile's S3Uri is the manifest object, not a prefix) and is routed with
InstanceGroupNames; a `file_system` channel becomes a FileSystemDataSource, which has no
InstanceGroupNames: SageMaker mounts it on every host, and only the routed hosts read it. Only
RecordIO channels name a RecordWrapperType, so a host's inputdataconfig.json says RecordIO exactly
when the stream is wrapped (an augmented manifest).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import ConfigError
from smlaunch.pipelines.formats import CHANNEL_FORMATS

ENTRY_SCRIPT = "smlaunch_entry.py"
CONFIG_NAME = "smlaunch-config.yaml"
TARBALL = "sourcedir.tar.gz"
CODE_CHANNEL = "smlaunch-code"
"""The File-mode channel that carries the tarball in container mode (not a name a data channel may use)."""
TENSORBOARD_LOCAL_PATH = "/opt/ml/output/data/tensorboard"
"""Where the head writes live TensorBoard events (`launcher.report.live_events`), synced by TensorBoardOutputConfig."""
TOKEN_ENV = "SMLAUNCH_RAY_TOKEN"  # = launcher.sagemaker.run.TOKEN_ENV, without importing it
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
CONTAINER_SCRIPT = (
    'set -e; ml="${SAGEMAKER_BASE_DIR:-/opt/ml}"; mkdir -p "$ml/code"; '
    f'tar -xzf "$ml/input/data/{CODE_CHANNEL}/{TARBALL}" -C "$ml/code"; '
    f'exec python3 "$ml/code/{ENTRY_SCRIPT}"'
)
"""Unpack the code channel's tarball into /opt/ml/code and exec the entry script (each exec keeps
the PID, so sm-launch becomes PID 1). Honours SAGEMAKER_BASE_DIR like the rest of sm-launch, so
tests run the very same line against a fake /opt/ml."""


def sagemaker_section(cfg: LaunchConfig):
    if cfg.sagemaker is None:
        raise ConfigError(
            "sagemaker: section missing; submit needs sagemaker.image_uri, sagemaker.role_arn and "
            "sagemaker.bucket (see the example in configs/hetero.yaml)"
        )
    return cfg.sagemaker


def default_job_name(cfg: LaunchConfig, now: float | None = None) -> str:
    """`<job>-<YYYYmmdd-HHMMSS>`, within the 63 characters a training job name may have."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"{cfg.job[: 63 - len(stamp) - 1].rstrip('-')}-{stamp}"


def job_prefix(cfg: LaunchConfig, job_name: str) -> str:
    """`s3://<bucket>/<prefix>/<job name>`: everything this submission uploads goes under it."""
    sm = sagemaker_section(cfg)
    return "/".join(p for p in (f"s3://{sm.bucket}", sm.prefix, job_name) if p)


def sourcedir_uri(cfg: LaunchConfig, job_name: str) -> str:
    return f"{job_prefix(cfg, job_name)}/code/{TARBALL}"


def channel_uris(cfg: LaunchConfig, job_name: str) -> dict[str, str]:
    """Each S3 channel's S3Uri: its `s3://` source as given, else where submit uploads it: a local
    folder or builtin dataset to `<job prefix>/data/<channel>/`, a local ManifestFile (the JSON
    list itself; its objects are already in S3) to `<job prefix>/data/<channel>/<file name>`. A
    `file_system` channel has none: SageMaker mounts it and nothing is uploaded for it."""
    uris = {}
    for name, ch in cfg.channels.items():
        if ch.file_system is not None:
            continue
        if ch.source.startswith("s3://"):
            uris[name] = ch.source
        elif ch.is_manifest_file:
            uris[name] = f"{job_prefix(cfg, job_name)}/data/{name}/{Path(ch.source).expanduser().name}"
        else:
            uris[name] = f"{job_prefix(cfg, job_name)}/data/{name}/"
    return uris


def pretrained_uri(cfg: LaunchConfig, job_name: str) -> str | None:
    """Where the hosts find `model.pretrained`: an `s3://` value as given, a local weights file at
    `<job prefix>/pretrained/<file name>` (submit uploads it there); None for false."""
    weights = cfg.model.pretrained if cfg.model else False
    if weights is False:
        return None
    if weights.startswith("s3://"):
        return weights
    return f"{job_prefix(cfg, job_name)}/pretrained/{Path(weights).expanduser().name}"


def train_group(cfg: LaunchConfig) -> str:
    """The group that trains, by the same rule every host's plan applies (`cluster.topology`)."""
    from smlaunch.cluster.topology import config_train_group

    return config_train_group(cfg)[0]


def receiving_groups(cfg: LaunchConfig) -> dict[str, list[str]]:
    """Channel -> InstanceGroupNames, by the rule every host's plan applies (`cluster.topology`)."""
    from smlaunch.cluster.topology import receiving_groups as routes

    return {
        name: list(groups)
        for name, groups in routes(
            {name: ch.instance_groups for name, ch in cfg.channels.items()},
            [g.name for g in cfg.cluster.instance_groups],
            train_group(cfg),
        ).items()
    }


def data_channel(name: str, ch, routed: list[str], uri: str | None) -> dict:
    """One InputDataConfig entry: a FileSystemDataSource for a `file_system` channel (File mode, no
    S3 upload, no routing field in the API), else an S3DataSource routed to `routed`."""
    if ch.file_system is not None:
        fs = ch.file_system
        return {
            "ChannelName": name,
            "InputMode": "File",
            "DataSource": {
                "FileSystemDataSource": {
                    "FileSystemId": fs.id,
                    "FileSystemAccessMode": fs.access_mode,
                    "FileSystemType": fs.type,
                    "DirectoryPath": fs.directory,
                }
            },
        }
    s3 = {
        "S3DataType": ch.s3_data_type,
        "S3Uri": uri,
        "S3DataDistributionType": ch.s3_distribution,
        "InstanceGroupNames": list(routed),
    }
    if ch.attribute_names:
        s3["AttributeNames"] = list(ch.attribute_names)
    channel = {"ChannelName": name, "DataSource": {"S3DataSource": s3}, "InputMode": ch.input_mode}
    wrapper = CHANNEL_FORMATS[ch.record_format].sagemaker_wrapper
    if wrapper != "None":
        # an augmented manifest streams one record per attribute, which needs RecordIO framing;
        # RecordIO files are delivered as they are
        channel["RecordWrapperType"] = wrapper if ch.is_manifest else "None"
    return channel


def build_training_job_request(cfg: LaunchConfig, job_name: str, ray_token: str, region: str | None = None) -> dict:
    """The CreateTrainingJob parameters (boto3 `create_training_job(**request)`) for `cfg`."""
    from smlaunch.launcher.sagemaker.metrics import metric_definitions

    sm = sagemaker_section(cfg)
    prefix = job_prefix(cfg, job_name)
    groups = [g.name for g in cfg.cluster.instance_groups]
    uris = channel_uris(cfg, job_name)
    inputs = [
        data_channel(name, cfg.channels[name], routed, uris.get(name)) for name, routed in receiving_groups(cfg).items()
    ]
    algorithm: dict = {
        "TrainingImage": sm.image_uri,
        "TrainingInputMode": "File",
        "MetricDefinitions": metric_definitions(cfg),
    }
    hyperparameters: dict[str, str] = {}
    if uses_code_channel(sm):
        # The service wants InstanceGroupNames on every channel or none: the code goes to every group.
        inputs.append(
            {
                "ChannelName": CODE_CHANNEL,
                "InputMode": "File",
                "RecordWrapperType": "None",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": sourcedir_uri(cfg, job_name),
                        "S3DataDistributionType": "FullyReplicated",
                        "InstanceGroupNames": groups,
                    }
                },
            }
        )
    if sm.entry == "container":
        algorithm["ContainerEntrypoint"] = ["/bin/sh", "-c", CONTAINER_SCRIPT]
    else:
        submitted = (
            f"/opt/ml/input/data/{CODE_CHANNEL}/{TARBALL}"
            if sm.enable_network_isolation
            else sourcedir_uri(cfg, job_name)
        )
        toolkit = {
            "sagemaker_program": ENTRY_SCRIPT,
            "sagemaker_submit_directory": submitted,
            "sagemaker_container_log_level": 20,
            "sagemaker_job_name": job_name,
        }
        if region:
            toolkit["sagemaker_region"] = region
        # JSON-encoded values, as the SageMaker Python SDK writes them and the toolkit decodes them
        hyperparameters = {k: json.dumps(v) for k, v in toolkit.items()}
    environment = {
        **sm.environment,
        TOKEN_ENV: ray_token,
        "SMLAUNCH_COMMAND": sm.command,
        "SMLAUNCH_PIP_INSTALL": {"auto": "auto", True: "1", False: "0"}[sm.install_package],
        "PYTHONUNBUFFERED": "1",
    }
    stopping = {"MaxRuntimeInSeconds": sm.max_run_s}
    if sm.wait_s is not None:
        stopping["MaxWaitTimeInSeconds"] = sm.wait_s
    request = {
        "TrainingJobName": job_name,
        "RoleArn": sm.role_arn,
        "AlgorithmSpecification": algorithm,
        "InputDataConfig": inputs,
        "OutputDataConfig": {
            "S3OutputPath": sm.output_s3_uri or "/".join(p for p in (f"s3://{sm.bucket}", sm.prefix, "output/") if p)
        },
        "ResourceConfig": {
            "InstanceGroups": [
                {"InstanceGroupName": g.name, "InstanceType": g.instance_type, "InstanceCount": g.instance_count}
                for g in cfg.cluster.instance_groups
            ],
            "VolumeSizeInGB": sm.volume_size_gb,
        },
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": sm.spot,
        "CheckpointConfig": {
            "S3Uri": sm.checkpoint_s3_uri or f"{prefix}/checkpoints/",
            "LocalPath": CHECKPOINT_LOCAL_PATH,
        },
        "Environment": environment,
    }
    if hyperparameters:
        request["HyperParameters"] = hyperparameters
    if sm.vpc is not None:
        request["VpcConfig"] = {"SecurityGroupIds": list(sm.vpc.security_group_ids), "Subnets": list(sm.vpc.subnets)}
    _account_settings(sm, request)
    if sm.tags:
        request["Tags"] = [{"Key": k, "Value": v} for k, v in sm.tags.items()]
    return request


def uses_code_channel(sm) -> bool:
    """The source tarball comes by the File-mode `CODE_CHANNEL`: always in container mode, and under
    network isolation in toolkit mode (the toolkit cannot download it)."""
    return sm.entry == "container" or sm.enable_network_isolation


def _account_settings(sm, request: dict) -> None:
    """Encryption, isolation, retries, warm pool and TensorBoard: set only when configured, so a
    request without them stays what the SageMaker Python SDK builds by default."""
    if sm.volume_kms_key:
        request["ResourceConfig"]["VolumeKmsKeyId"] = sm.volume_kms_key
    if sm.keep_alive_period_s is not None:
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = sm.keep_alive_period_s
    if sm.output_kms_key:
        request["OutputDataConfig"]["KmsKeyId"] = sm.output_kms_key
    if sm.enable_network_isolation:
        request["EnableNetworkIsolation"] = True
    if sm.enable_inter_container_traffic_encryption:
        request["EnableInterContainerTrafficEncryption"] = True
    if sm.retry_strategy is not None:
        request["RetryStrategy"] = {"MaximumRetryAttempts": sm.retry_strategy.maximum_retry_attempts}
    if sm.tensorboard_s3_uri:
        request["TensorBoardOutputConfig"] = {
            "S3OutputPath": sm.tensorboard_s3_uri,
            "LocalPath": TENSORBOARD_LOCAL_PATH,
        }


def masked(request: dict) -> dict:
    """A copy safe to print or log: the Ray token replaced by its length, and the value of every
    other secret-looking variable or hyperparameter by `***` (`smlaunch.redaction`)."""
    from smlaunch.redaction import masked as masked_values

    out = json.loads(json.dumps(request))
    job = out.get("TrainingJobDefinition", out)  # a tuning job's request holds the training job's
    token = job.get("Environment", {}).get(TOKEN_ENV)
    for section in ("Environment", "HyperParameters", "StaticHyperParameters"):
        if section in job:
            job[section] = masked_values(job[section])
    if token is not None:
        job["Environment"][TOKEN_ENV] = f"<generated, {len(token)} chars>"
    return out
