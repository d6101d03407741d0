"""`sm-launch submit`: check, upload, create the SageMaker training job (or, with --dry-run, print it).

The order is the point: everything that can be refused offline is refused before the first byte
goes to S3: the config (at load, then `config_problems`, naming config fields) and the request
(`validate_request`: botocore's validator, the service model's enums, limits and patterns, and the
service's own rules). Only then are the local channels, a local manifest, the pretrained weights
and the source tarball uploaded and CreateTrainingJob called with the request as printed by
--dry-run. A `file_system` channel uploads nothing: SageMaker mounts it, and its `source` is only
the local run's stand-in, so submit does not even look at it. Endpoints and credentials are
boto3's (so `AWS_ENDPOINT_URL` points it at a local server, as the tests do); the Ray token is
generated here per job and only ever shown masked.
"""

from __future__ import annotations

import json
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path

from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import ConfigError, UserError
from smlaunch.launcher.sagemaker.request_check import config_problems, validate_request
from smlaunch.launcher.sagemaker.training_job import (
    CONFIG_NAME,
    build_training_job_request,
    channel_uris,
    default_job_name,
    masked,
    pretrained_uri,
    sagemaker_section,
    sourcedir_uri,
)

JOB_NAME = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"


def submit(
    cfg: LaunchConfig,
    dry_run: bool = False,
    job_name: str | None = None,
    log: Callable[[str], None] | None = None,
    data_hosts: str | int | None = None,
    from_report: str | None = None,
    note: Callable[[str], None] | None = None,
    config_name: str = "CONFIG",
    tuning: Callable[[dict, str], dict] | None = None,
) -> dict:
    """Submit `cfg` as a training job; returns the request as sent (token masked). `data_hosts`
    (over `sagemaker.data_hosts`) and `from_report` size the data group first
    (`launcher.report.sizing`), whose line goes to `note` (default: `log`). `tuning` makes it a
    tuning job instead: (the training job's request, the tuning job's name) -> its request
    (`launcher.sagemaker.tuning`), validated and created as such, with the same uploads."""
    import logging
    import re

    log = log or logging.getLogger("smlaunch").info
    sm = sagemaker_section(cfg)
    if job_name is not None and not re.fullmatch(JOB_NAME, job_name):
        raise ConfigError(
            f"--job-name {job_name!r}: 1-63 letters, digits and hyphens, starting and ending with a letter or digit"
        )
    from smlaunch.launcher.report.sizing import size_data_group, sized_config

    sizing = size_data_group(cfg, data_hosts if data_hosts is not None else sm.data_hosts, from_report, config_name)
    if sizing is not None:
        cfg = sized_config(cfg, sizing)
        (note or log)(f"submit: {sizing.line()}")
    problems = config_problems(cfg)
    if problems:
        raise ConfigError("; ".join(problems))
    _preflight(cfg)
    name = job_name or default_job_name(cfg)
    region = sm.region or _default_region()
    if region is None and not dry_run:
        raise ConfigError("sagemaker.region: not set, and boto3 has no default region (AWS_REGION, ~/.aws/config)")
    token = secrets.token_urlsafe(32)
    request = build_training_job_request(cfg, name, token, region)
    operation = "CreateTrainingJob"
    if tuning is not None:
        request, operation = tuning(request, name), "CreateHyperParameterTuningJob"
    errors = validate_request(request, operation)
    if errors:
        raise UserError(f"the {operation} request for {name} is invalid: " + "; ".join(errors))
    from smlaunch.launcher.sagemaker.sourcedir import pack_sourcedir, resolved_config
    from smlaunch.user_code import code_files, code_folder, data_folders, user_functions

    code = None
    if user_functions(cfg):  # the user's modules ship under user_code/; an oversized folder is refused now
        code = code_files(code_folder(), skip=data_folders(cfg))
    uris, weights = channel_uris(cfg, name), pretrained_uri(cfg, name)
    shipped = resolved_config(cfg, uris, weights)  # validated as the hosts will load it
    shown = masked(request)
    if dry_run:
        log(json.dumps(shown, indent=2))
        return shown

    import boto3

    session = boto3.session.Session(region_name=region)
    s3 = session.client("s3")
    for channel, ch in cfg.channels.items():
        if ch.file_system is not None:
            fs = ch.file_system
            log(
                f"submit: channel {channel}: mounted from {fs.type} {fs.id}:{fs.directory} ({fs.access_mode}), "
                "nothing uploaded"
            )
        elif ch.source.startswith("s3://"):
            continue
        elif ch.is_manifest_file:
            _upload_file(s3, Path(ch.source).expanduser(), uris[channel])
            log(f"submit: channel {channel}: manifest {ch.source} -> {uris[channel]}")
        else:
            count = _upload_folder(s3, _local_folder(ch.source), uris[channel])
            log(f"submit: channel {channel}: {count} files from {ch.source} -> {uris[channel]}")
    pretrained = cfg.model.pretrained if cfg.model else False
    if weights is not None and pretrained and not pretrained.startswith("s3://"):
        _upload_file(s3, Path(pretrained).expanduser(), weights)
        log(f"submit: model.pretrained {pretrained} -> {weights}")
    with tempfile.TemporaryDirectory(prefix="smlaunch-submit-") as tmp:
        tarball = Path(tmp) / "sourcedir.tar.gz"
        members = pack_sourcedir(shipped, tarball, code)
        _upload_file(s3, tarball, sourcedir_uri(cfg, name))
    log(f"submit: source tarball ({len(members)} files, config {CONFIG_NAME}) -> {sourcedir_uri(cfg, name)}")
    if sm.entry == "toolkit":
        log(
            "submit: note: under the toolkit a stop (StopTrainingJob, spot) checkpoints only if the image's PID 1 "
            "forwards SIGTERM and then waits for every process (smlaunch-init does; tini and AWS's framework "
            "images' bash entry scripts do not): otherwise the job resumes from its last timed checkpoint, every "
            "300 s by default (trainer.checkpoint_every_s). sagemaker.entry: container stops cleanly"
        )
    if sm.vpc is not None and sm.install_package is not False:
        log(
            "submit: note: a host whose image lacks smlaunch's dependencies pip-installs them from PyPI, which a "
            "VPC reaches only through a NAT gateway (an image that has them needs no network)"
        )
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = session.client("sagemaker")
        create = client.create_hyper_parameter_tuning_job if tuning is not None else client.create_training_job
        answer: dict = dict(create(**request))
    except (BotoCoreError, ClientError) as exc:
        # a service message may quote the request back; the token must not reach the terminal
        reason = " ".join(str(exc).replace(token, "<SMLAUNCH_RAY_TOKEN>").split())
        if tuning is not None and "InstanceGroup" in reason:
            reason += " (a tuning job with instance groups is not documented by AWS: see docs/tracking.md)"
        raise UserError(f"{operation} {name}: {reason}") from None
    if tuning is not None:
        log(f"submit: created tuning job {name} ({answer.get('HyperParameterTuningJobArn', 'no ARN returned')})")
        return shown
    log(
        f"submit: created training job {name} ({answer.get('TrainingJobArn', 'no ARN returned')}), "
        f"{sm.entry} entry, hosts run sm-launch {sm.command}"
    )
    return shown


def _preflight(cfg: LaunchConfig) -> None:
    """`preflight` as `plan` and `run` apply it (the model, ops, recipe, local sources), but of the local
    sources only the folders submit uploads: a file system channel's stand-in folder need not exist
    here, and a local ManifestFile is a file, checked by `config_problems`."""
    from smlaunch.launcher.job.preflight import code_problems, source_problems

    folders = {name: ch for name, ch in cfg.channels.items() if ch.file_system is None and not ch.is_manifest_file}
    problems = code_problems(cfg) + source_problems(cfg.model_copy(update={"channels": folders}))
    if problems:
        raise ConfigError("; ".join(problems))


def _default_region() -> str | None:
    import boto3

    return boto3.session.Session().region_name


def _local_folder(source: str) -> Path:
    """The folder to upload for a local or builtin source (building a builtin dataset first)."""
    if source.startswith("builtin:"):
        from smlaunch.pipelines.builtin import prepare_builtin, split_source

        parsed = split_source(source)
        assert parsed is not None, f"split_source parses every builtin: source, not {source!r}"
        dataset, split = parsed
        return prepare_builtin(dataset) / split
    return Path(source).expanduser()


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _upload_file(s3, path: Path, uri: str) -> None:
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = _split(uri)
    try:
        s3.upload_file(str(path), bucket, key)
    except (BotoCoreError, ClientError, S3UploadFailedError) as exc:
        raise UserError(f"upload to {uri}: {' '.join(str(exc).split())}") from None


def _upload_folder(s3, folder: Path, uri: str) -> int:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise UserError(f"{folder}: no files to upload for {uri}")
    for path in files:
        _upload_file(s3, path, uri.rstrip("/") + "/" + str(path.relative_to(folder)))
    return len(files)
