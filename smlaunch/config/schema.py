"""The typed config tree of a job, validated once at load.

Every model forbids unknown keys, so a typo fails at load naming the field and the valid keys
instead of being ignored. Cross-section rules (a channel routed to a group that exists, one
training group) live in `LaunchConfig`'s validator; rules that need the machine (GPU counts,
paths) belong to the plan.
"""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from smlaunch.cluster.instances import INSTANCE_TYPES
from smlaunch.pipelines.op_specs import OpSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstanceGroup(_Strict):
    """One SageMaker instance group: `instance_count` hosts of one `instance_type`."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9\-_]{0,63}$")
    instance_type: str
    instance_count: int = Field(default=1, ge=1)

    @field_validator("instance_type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in INSTANCE_TYPES:
            families = sorted({t.rsplit(".", 1)[0] for t in INSTANCE_TYPES})
            raise ValueError(f"unknown instance type {value!r}; known families: {', '.join(families)}")
        return value


class ClusterConfig(_Strict):
    """The job's instance groups and which one trains."""

    instance_groups: list[InstanceGroup] = Field(min_length=1, max_length=5)
    train_group: Optional[str] = None
    """Group that hosts the Ray head and the train workers; default: the group with GPUs."""
    port: int = Field(default=6379, ge=1024, le=65535)
    """Ray head (GCS) port on a multi-host job."""
    join_timeout_s: float = Field(default=300, gt=0, le=3600)
    """How long the head waits for every host to join, and a host waits for the head to appear."""
    object_store_mb: Optional[int] = Field(default=None, ge=64)
    """Ray object store per host on a SageMaker job; default: Ray's (30 % of memory)."""

    @model_validator(mode="after")
    def _groups(self):
        names = [g.name for g in self.instance_groups]
        if len(set(names)) != len(names):
            raise ValueError(f"instance group names must be unique, got {names}")
        if self.train_group is not None and self.train_group not in names:
            raise ValueError(f"train_group {self.train_group!r} is not an instance group; groups: {names}")
        return self


class ChannelConfig(_Strict):
    """A SageMaker input channel: where its data comes from and how the hosts see it."""

    input_mode: Literal["File", "Pipe"] = "File"
    """File: copied to each receiving host before the job; Pipe: streamed, one FIFO per epoch."""
    record_format: Literal["tfrecord", "recordio"] = "tfrecord"
    """Framing of the `tf.train.Example` records in the channel's files or stream."""
    s3_distribution: Literal["FullyReplicated", "ShardedByS3Key"] = "FullyReplicated"
    """Every receiving host gets all objects, or host i of n every n-th (SageMaker's S3DistributionType)."""
    source: str
    """`builtin:digits/<split>` (the embedded dataset) or a local directory of record files."""
    instance_groups: Optional[list[str]] = None
    """Groups that receive the channel (SageMaker's InstanceGroupNames); default: the data groups."""

    @model_validator(mode="after")
    def _sharding(self):
        if self.input_mode == "File" and self.s3_distribution == "ShardedByS3Key":
            raise ValueError("s3_distribution ShardedByS3Key is supported in Pipe mode only so far; "
                             "use input_mode: Pipe, or FullyReplicated")
        return self

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if value.startswith("builtin:") and value not in BUILTIN_SOURCES:
            raise ValueError(f"unknown builtin source {value!r}; builtins: {', '.join(BUILTIN_SOURCES)}")
        return value


BUILTIN_SOURCES = ["builtin:digits/train", "builtin:digits/validation"]


class PipelineConfig(_Strict):
    """The preprocessing chain run on the data hosts, and how rows are batched for it."""

    ops: list[OpSpec] = Field(min_length=1)
    batch_size: int = Field(default=64, gt=0)
    """Rows per preprocessing call."""

    @model_validator(mode="after")
    def _shape(self):
        names = [o.op for o in self.ops]
        if names[0] != "decode_image":
            raise ValueError("the chain must start with decode_image")
        if names[-1] != "to_uint8_chw":
            raise ValueError("the chain must end with to_uint8_chw")
        return self


class ModelConfig(_Strict):
    """A timm model, built with the classes and input size the data has."""

    name: str
    num_classes: Optional[int] = Field(default=None, gt=1)
    """Default: what the channel's dataset declares (the builtin digits: 10)."""
    pretrained: Literal[False] = False
    """Weights are never downloaded at run time; models train from scratch."""


class TrainerConfig(_Strict):
    """Optimisation settings; exactly one of `steps` or `epochs`."""

    batch_size: int = Field(default=64, gt=0)
    steps: Optional[int] = Field(default=None, gt=0)
    epochs: Optional[int] = Field(default=None, gt=0)
    learning_rate: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=0.05, ge=0)
    checkpoint_interval: int = Field(default=0, ge=0)
    """Steps between checkpoints; 0 = only at the end."""
    log_every: int = Field(default=10, gt=0)

    @model_validator(mode="after")
    def _length(self):
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("set exactly one of trainer.steps or trainer.epochs")
        return self


class RunConfig(_Strict):
    """Where a local run keeps its simulated hosts, outputs and Ray state."""

    dir: str = "runs"
    name: Optional[str] = None
    """Run directory name under `dir`; default: job name plus a timestamp."""


class LaunchConfig(_Strict):
    """The whole job."""

    job: str = Field(default="smlaunch-job", pattern=r"^[A-Za-z0-9][A-Za-z0-9\-]{0,62}$")
    seed: int = 0
    cluster: ClusterConfig
    channels: dict[str, ChannelConfig] = Field(min_length=1)
    pipeline: PipelineConfig
    model: ModelConfig
    trainer: TrainerConfig
    run: RunConfig = RunConfig()

    @model_validator(mode="after")
    def _cross(self):
        groups = {g.name for g in self.cluster.instance_groups}
        for name, channel in self.channels.items():
            if not re.fullmatch(r"[A-Za-z0-9.\-_]{1,64}", name):
                raise ValueError(f"channel name {name!r} must match [A-Za-z0-9.-_]{{1,64}}")
            for group in channel.instance_groups or []:
                if group not in groups:
                    raise ValueError(f"channels.{name}.instance_groups: no instance group {group!r}; "
                                     f"groups: {sorted(groups)}")
        if "train" not in self.channels:
            raise ValueError(f"a channel named 'train' is required; channels: {sorted(self.channels)}")
        return self
