"""The `sagemaker:` section: what `sm-launch submit` needs to create the training job.

Only `submit` reads it; a run on a SageMaker host or a local run ignores it, so the section is
optional and a job without it fails at submit with one line naming the fields to set. Values the
service checks only once the job is created (a role, an image) are checked here for shape, so a
typo fails before anything is uploaded.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from smlaunch.config.base import StrictModel

RESERVED_ENV = ("SMLAUNCH_RAY_TOKEN", "SMLAUNCH_COMMAND", "SMLAUNCH_PIP_INSTALL")
"""Environment variables `submit` sets itself (the Ray token is generated per job, never configured)."""
MAX_RUN_LIMIT_S = 28 * 24 * 3600
"""MaxRuntimeInSeconds may not exceed 28 days (API `StoppingCondition`)."""


def environment_names(value: dict[str, str]) -> dict[str, str]:
    """`value` when every key is a valid environment variable name (a letter or `_`, then letters,
    digits and `_`); the first bad one's ValueError otherwise."""
    for key in value:
        if not key or not (key[0].isalpha() or key[0] == "_") or not all(c.isalnum() or c == "_" for c in key):
            raise ValueError(f"{key!r} is not a valid environment variable name")
    return value


KmsKeyId = Annotated[str, Field(pattern=r"^[a-zA-Z0-9:/_-]+$", max_length=2048)]
"""A KMS key id, key ARN, alias name (`alias/...`) or alias ARN; botocore's `KmsKeyId` shape."""
SubnetId = Annotated[str, Field(pattern=r"^subnet-[0-9a-z]+$", max_length=32)]
SecurityGroupId = Annotated[str, Field(pattern=r"^sg-[0-9a-z]+$", max_length=32)]


class VpcConfig(StrictModel):
    """The VPC the job's hosts join (CreateTrainingJob `VpcConfig`). SageMaker mounts an FSx for
    Lustre or EFS channel only from inside the file system's VPC, so `submit` refuses a
    `file_system` channel without it. Inside a VPC the hosts reach S3 only through an S3 VPC
    endpoint or a NAT gateway, PyPI (`install_package`) only through a NAT gateway, and the
    security groups must let the job's hosts reach each other (an inbound rule from the group
    itself) for Ray and NCCL. Counts and shapes are botocore's `VpcConfig` limits."""

    subnets: list[SubnetId] = Field(min_length=1, max_length=16)
    """Subnet ids (`subnet-...`), 1-16; the file system must be reachable from them."""
    security_group_ids: list[SecurityGroupId] = Field(min_length=1, max_length=5)
    """Security group ids (`sg-...`), 1-5, of the subnets' VPC."""

    @field_validator("subnets", "security_group_ids")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        repeated = sorted({v for v in value if value.count(v) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} listed more than once")
        return value


class RetryStrategy(StrictModel):
    """CreateTrainingJob `RetryStrategy`: SageMaker restarts a job that failed with an
    InternalServerError (not one that failed in the job's own code), on new hosts; the job resumes
    from its synced checkpoints as after a spot interruption."""

    maximum_retry_attempts: int = Field(ge=1, le=30)
    """How many times (1-30)."""


class SageMakerConfig(StrictModel):
    """How the job is created: image, role, where code and data go in S3, limits, spot, entry."""

    image_uri: str = Field(min_length=1, max_length=255)
    """The training image for every group, with Python 3.10+ and pip: e.g. an AWS PyTorch Deep Learning
    Container (`763104351884.dkr.ecr.<region>.amazonaws.com/pytorch-training:<version>-gpu-py311-...-sagemaker`)."""
    role_arn: str = Field(pattern=r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
    """The execution role the job runs as (reads the inputs, writes output and checkpoints)."""
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
    """S3 bucket where submit uploads the source tarball and local channels, and the default output and
    checkpoint location; it must exist."""
    prefix: str = Field(default="smlaunch", pattern=r"^$|^[^/](.*[^/])?$")
    """Key prefix in `bucket`, without leading or trailing `/`. Everything of one job goes under
    `s3://<bucket>/<prefix>/<job name>/` (`code/sourcedir.tar.gz`, `data/<channel>/`, `checkpoints/`)."""
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$")
    """Default: boto3's (AWS_REGION, AWS_DEFAULT_REGION, ~/.aws/config)."""
    entry: Literal["container", "toolkit"] = "container"
    """`container`: `ContainerEntrypoint` execs sm-launch as PID 1, so it gets SIGTERM. `toolkit`: the
    image's training toolkit runs the entry script as `sagemaker_program`; a stop then checkpoints only
    under a PID 1 that forwards SIGTERM and then waits for every process (`cluster.process_tree`; tini
    and bash entry scripts do not: `docs/sagemaker.md#stops-under-the-toolkit`)."""
    command: Literal["run", "check", "plan"] = "run"
    """What every host runs: `run` trains; `check` only brings the Ray cluster up and down (a cheap first
    job); `plan` prints each host's plan."""
    install_package: Literal["auto"] | bool = "auto"
    """How the shipped package gets onto each host. `auto`: if the image already has every dependency
    at a version pyproject.toml allows, the shipped code only goes on PYTHONPATH (no network; 0.21 s
    added, BENCHMARKS.md `entry_startup`); otherwise as `true`. `true`: pip-install it and its
    dependencies (from PyPI, 20-30 s per host even when all are present). `false`: never install
    (PYTHONPATH only)."""
    max_run_s: int = Field(default=86400, ge=1, le=MAX_RUN_LIMIT_S)
    """MaxRuntimeInSeconds (at most 28 days): SageMaker sends SIGTERM after this long, and SIGKILL 120 s
    later."""
    spot: bool = False
    """Managed spot training (EnableManagedSpotTraining); an interrupted job restarts from the synced
    checkpoints."""
    max_wait_s: int | None = Field(default=None, ge=1)
    """MaxWaitTimeInSeconds, spot only, >= max_run_s; default with spot: twice max_run_s."""
    checkpoint_s3_uri: str | None = Field(default=None, pattern=r"^s3://[^/]+(/.*)?$")
    """Where /opt/ml/checkpoints is synced; default `s3://<bucket>/<prefix>/<job name>/checkpoints/`
    (per job: set a fixed URI to resume across jobs)."""
    output_s3_uri: str | None = Field(default=None, pattern=r"^s3://[^/]+(/.*)?$")
    """S3OutputPath (SageMaker adds `<job name>/output/model.tar.gz`); default `s3://<bucket>/<prefix>/output/`."""
    volume_size_gb: int = Field(default=30, ge=1, le=16384)
    """EBS volume per host (File-mode channels are copied there; NVMe types use their instance store)."""
    environment: dict[str, str] = {}
    """Extra variables for every host (e.g. NCCL settings: a variable set here wins over the ones
    smlaunch sets for the instance type); at most 100 with the ones submit sets. `SMLAUNCH_RAY_TOKEN`,
    `SMLAUNCH_COMMAND` and `SMLAUNCH_PIP_INSTALL` are set by submit and refused here."""
    tags: dict[str, str] = {}
    """Tags on the training job (keys of 1-128 characters, not starting with `aws:`)."""
    vpc: VpcConfig | None = None
    """Subnets and security groups the hosts join; required for a `file_system` channel."""
    volume_kms_key: KmsKeyId | None = None
    """ResourceConfig.VolumeKmsKeyId: the KMS key (id, ARN or alias) for each host's EBS volume. Instance
    types with local NVMe storage (g4dn, g5, g6, p4d, p5, c5d, ...) encrypt it in hardware and refuse a
    key: submit refuses it for them."""
    output_kms_key: KmsKeyId | None = None
    """OutputDataConfig.KmsKeyId: the KMS key SageMaker encrypts the model and output artifacts with."""
    enable_network_isolation: bool = False
    """EnableNetworkIsolation: the containers make no network calls except to each other (Ray and
    NCCL still work). Needs an image with the dependencies (`install_package` not `true`: no PyPI)
    and no `model.pretrained` download; `entry: toolkit` then gets its source through a `code`
    channel, as the SageMaker Python SDK does."""
    enable_inter_container_traffic_encryption: bool = False
    """EnableInterContainerTrafficEncryption: traffic between hosts is encrypted (IPsec). Every
    byte Ray moves between hosts (the preprocessed batches, object transfers) and NCCL's gradients
    pay for it: expect lower images/s on a job whose data hosts ship many batches; measure it."""
    retry_strategy: RetryStrategy | None = None
    """RetryStrategy, e.g. `{maximum_retry_attempts: 2}`."""
    keep_alive_period_s: int | None = Field(default=None, ge=0, le=3600)
    """ResourceConfig.KeepAlivePeriodInSeconds: keep the hosts in a managed warm pool this long
    after the job (0-3600; billed), so the next matching job skips provisioning."""
    tensorboard_s3_uri: str | None = Field(default=None, pattern=r"^s3://[^/]+(/.*)?$")
    """TensorBoardOutputConfig.S3OutputPath: SageMaker syncs the head's live TensorBoard events
    (`/opt/ml/output/data/tensorboard`, flushed every 5 s and at each validation) there while the job
    runs: `tensorboard --logdir s3://...` shows the loss during the job."""
    metrics: list[str] = Field(default=[], max_length=40)
    """More MetricDefinitions, as `train:NAME` (a number your loss returns beside it, or your
    `trainer.loop` reports) or `validation:NAME` (a key `task.evaluate` returns), for the names
    `submit` cannot know before the job runs; the built-in ones and `task.metrics`' are sent anyway
    (`launcher.sagemaker.metrics`; SageMaker takes 40 in all)."""
    data_hosts: Literal["auto"] | int | None = None
    """The data group's host count for the job (`submit --data-hosts` overrides it). None: the
    group's `instance_count`; `auto`: the count the advisor of the newest report of this config under
    `run.dir` recommends (`launcher.report.sizing`, `docs/sagemaker.md#sizing-the-data-group-from-the-last-report`;
    run the config briefly first), within the
    `autoscale:` bounds if the config has them; N: N hosts. The data group is the one `autoscale:`
    scales, else the one CPU-only group besides the train group."""

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(r"(train|validation):[A-Za-z0-9_./-]{1,200}", name):
                raise ValueError(
                    f"{name!r}: expected train:NAME or validation:NAME, NAME as the job prints it (letters, "
                    "digits, _ . / -)"
                )
        return value

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key in RESERVED_ENV:
                raise ValueError(f"{key} is set by sm-launch submit (the Ray token is generated per job)")
        return environment_names(value)

    @field_validator("data_hosts", mode="before")
    @classmethod
    def _data_hosts(cls, value):
        if value is None or value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError(f"{value!r}: expected auto or a host count >= 1")

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key.lower().startswith("aws:") or not 1 <= len(key) <= 128:
                raise ValueError(f"tag key {key!r}: 1-128 characters, not starting with aws:")
        return value

    @model_validator(mode="after")
    def _isolation(self):
        if self.enable_network_isolation and self.install_package is True:
            raise ValueError(
                "enable_network_isolation: the hosts cannot reach PyPI to install the package; set "
                "install_package: auto or false and use an image that has smlaunch's dependencies"
            )
        return self

    @model_validator(mode="after")
    def _spot(self):
        if self.max_wait_s is not None:
            if not self.spot:
                raise ValueError("max_wait_s (MaxWaitTimeInSeconds) is for spot jobs only; set spot: true or remove it")
            if self.max_wait_s < self.max_run_s:
                raise ValueError(
                    f"max_wait_s ({self.max_wait_s}) must be >= max_run_s ({self.max_run_s}): it "
                    "counts the time waiting for spot capacity plus the run"
                )
        return self

    @property
    def wait_s(self) -> int | None:
        """MaxWaitTimeInSeconds to request: None without spot."""
        if not self.spot:
            return None
        return self.max_wait_s or 2 * self.max_run_s
