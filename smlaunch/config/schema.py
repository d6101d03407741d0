"""The typed config tree of a job, validated once at load.

Every model forbids unknown keys, so a typo fails at load naming the field and the valid keys
instead of being ignored. Cross-section rules (a channel routed to a group that exists, one
training group) live in `LaunchConfig`'s validator; rules that need the machine (GPU counts,
paths) belong to the plan.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from smlaunch.config.autoscale import AutoscaleConfig
from smlaunch.config.base import StrictModel
from smlaunch.config.channel import BUILTIN_SEEDS, ChannelConfig
from smlaunch.config.channel_rules import CLASSES_FROM_DATA
from smlaunch.config.consistency import cross_problem
from smlaunch.config.instance_types import InstanceSpec, check_training_type, is_cpu_only, known_spec
from smlaunch.config.kuberay import KubeRayConfig
from smlaunch.config.model_task import ModelConfig, TaskConfig
from smlaunch.config.op_specs import FUNCTION_PATTERN, IMAGE_OPS, FunctionPath, OpSpec
from smlaunch.config.recipe import EarlyStopConfig, EmaConfig, FactoryConfig, KeepBestConfig, recipe_problem
from smlaunch.config.sagemaker import SageMakerConfig
from smlaunch.config.tracking import TrackingConfig
from smlaunch.user_code import standard_library_problem


class InstanceGroup(StrictModel):
    """One SageMaker instance group: `instance_count` hosts of one `instance_type`."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9\-_]{0,63}$")
    """The group's name (letters, digits, `-`, `_`): SageMaker's instance group name, which channels'
    `instance_groups` and `cluster.train_group` refer to."""
    instance_type: str
    """A SageMaker training instance type, e.g. `ml.g5.xlarge`: one of botocore's `TrainingInstanceType`
    values (225 in botocore 1.44), the list CreateTrainingJob checks; a misspelled one gets the closest
    valid ones. A host's vCPUs, GPUs and memory come from `smlaunch/config/instance_types.py` (211 types,
    from AWS's EC2 specifications)."""
    instance_count: int = Field(default=1, ge=1)
    """Hosts in the group."""
    vcpus: int | None = Field(default=None, gt=0)
    """vCPUs of one host. Needed, with `gpus`, for a valid type the spec table lacks (at the time of
    writing g7, g7e, p6e-gb200, p6-b300), which is refused without them; on a known type it overrides
    the table."""
    gpus: int | None = Field(default=None, ge=0)
    """NVIDIA GPUs of one host. As `vcpus`: needed for a type the spec table lacks, and on a known type
    it overrides the table."""

    @field_validator("instance_type")
    @classmethod
    def _valid_type(cls, value: str) -> str:
        check_training_type(value)
        return value

    @model_validator(mode="after")
    def _spec_known(self):
        if known_spec(self.instance_type) is None and (self.vcpus is None or self.gpus is None):
            raise ValueError(
                f"{self.instance_type} is a SageMaker training type that smlaunch's spec table lacks; "
                "give its vcpus and gpus in this group (e.g. vcpus: 8, gpus: 1)"
            )
        return self

    @property
    def spec(self) -> InstanceSpec:
        """The table's spec with the group's own `vcpus`/`gpus` on top."""
        table = known_spec(self.instance_type) or InstanceSpec(0, 0)
        return table._replace(
            vcpus=self.vcpus if self.vcpus is not None else table.vcpus,
            gpus=self.gpus if self.gpus is not None else table.gpus,
        )


OBJECT_STORE_SHARE = 0.8
"""The most of a host's memory `cluster.object_store_mb` may take (Ray's default is 30 %; Ray refuses to
start a node whose memory is not above its object store, and a store near it starves the workers)."""


class ClusterConfig(StrictModel):
    """The job's instance groups and which one trains."""

    instance_groups: list[InstanceGroup] = Field(min_length=1, max_length=5)
    train_group: str | None = None
    """The group that hosts the Ray head and the train workers. Default: the group whose instance type
    has GPUs; a job whose groups all lack GPUs must name one (it then trains with one CPU worker per
    host)."""
    port: int = Field(default=6379, ge=1024, le=65535)
    """Ray head (GCS) port on a SageMaker (multi-host) job."""
    join_timeout_s: float = Field(default=300, gt=0, le=3600)
    """How long the head waits for every host to join, and a host waits for the head to appear; past it
    the head fails naming the hosts that never joined."""
    object_store_mb: int | None = Field(default=None, ge=64)
    """Ray object store per host. Default on a SageMaker job: Ray's (30 % of the host's memory);
    in a local simulation: 30 % of this machine shared by the simulated hosts, 256 MiB..4 GiB."""
    node_labels: dict[str, dict[str, str]] = {}
    """On a Ray cluster that is already running (`--address`): per group, the node labels that
    select its nodes. Default for a group: `{sm-group: <name>}`, what smlaunch and its KubeRay
    manifest set; map a group to labels the cluster already has (e.g. a worker group's)."""

    @model_validator(mode="after")
    def _groups(self):
        for host in self.instance_groups:
            memory = host.spec.memory_gib
            if self.object_store_mb and memory and self.object_store_mb > OBJECT_STORE_SHARE * memory * 1024:
                raise ValueError(
                    f"cluster.object_store_mb: {self.object_store_mb} MiB is over {OBJECT_STORE_SHARE:.0%} of "
                    f"{host.instance_type}'s {memory:g} GiB (group {host.name}): Ray's workers would be left "
                    "too little; leave it out (Ray takes 30 %) or lower it"
                )
        names = [g.name for g in self.instance_groups]
        if len(set(names)) != len(names):
            raise ValueError(f"instance group names must be unique, got {names}")
        for group, labels in self.node_labels.items():
            if group not in names:
                raise ValueError(f"node_labels: no instance group {group!r}; groups: {names}")
            if not labels:
                raise ValueError(f"node_labels.{group}: give at least one label (key: value)")
        if self.train_group is not None and self.train_group not in names:
            raise ValueError(f"train_group {self.train_group!r} is not an instance group; groups: {names}")
        return self


class PipelineConfig(StrictModel):
    """The preprocessing chain run on the data hosts, and how rows are batched for it."""

    ops: list[OpSpec] = []
    """The chain, in order (`docs/pipeline.md`). Each image field's ops start with `decode_image`, end
    with `to_uint8_chw` (the image's optionally then `normalize`), and hold a `random_resized_crop` or
    `center_crop` (or the field is a mask those move), so every image reaches the model at one size.
    `map` ops may sit anywhere. A chain without image ops (only `map` ops, or none, for data that needs
    no preprocessing) needs `task`. An unknown op name lists the valid ones, a misspelled one says which
    was meant."""
    batch_size: int = Field(default=64, gt=0)
    """Rows per preprocessing call, and per block read, so the first batch waits for one batch's work."""
    cache: bool | Literal["auto"] = "auto"
    """Cache the train channel's deterministic prefix (the ops before the first random one) across
    epochs: epoch 1 writes it, later epochs read it and run only the rest. `auto`: on for a run of
    two epochs or more whose prefix decodes images (`docs/cache.md`); the plan says which and why."""
    cache_dir: str | None = None
    """Where the cache lives: a folder every host sees, or an `s3://` prefix. Default: `<run.dir>/cache`
    on a local run; elsewhere set it (no folder there is every host's)."""

    @property
    def has_images(self) -> bool:
        return any(o.op in IMAGE_OPS for o in self.ops)

    @model_validator(mode="after")
    def _shape(self):
        by_field: dict[str, list[str]] = {}
        moved: dict[str, int] = {}  # a mask field: where the first op that moves it stands
        for i, o in enumerate(self.ops):
            if o.op in IMAGE_OPS:  # `map` ops may sit anywhere
                by_field.setdefault(getattr(o, "field", "image"), []).append(o.op)
                for mask in getattr(o, "masks", ()):
                    moved.setdefault(mask, i)
        for field, names in by_field.items():
            ops = "the chain's image ops" if field == "image" else f"the chain's ops on field {field}"
            if names[0] != "decode_image":
                raise ValueError(f"{ops} must start with decode_image")
            body = names[:-1] if names[-1] == "normalize" else names
            if not body or body[-1] != "to_uint8_chw":
                raise ValueError(
                    f"{ops} must end with to_uint8_chw (optionally followed by normalize, "
                    "which runs on the trainer's device)"
                )
            if "normalize" in body or body.count("to_uint8_chw") > 1:
                raise ValueError("normalize may only come last, right after the one to_uint8_chw")
            if not {"random_resized_crop", "center_crop"} & set(names) and field not in moved:
                raise ValueError(
                    f"add a random_resized_crop or center_crop so every {field} reaches the model at one size"
                )
        for mask, at in moved.items():
            decoded = [i for i, o in enumerate(self.ops) if o.op == "decode_image" and o.field == mask]
            if not decoded or decoded[0] > at:
                raise ValueError(
                    f"masks: {mask} is moved before it is decoded; add {{op: decode_image, field: {mask}, "
                    "mode: L} before that op"
                )
        return self


class TrainerConfig(StrictModel):
    """Optimisation, checkpointing and recovery; exactly one of `steps` or `epochs`."""

    batch_size: int = Field(default=64, gt=0)
    """Rows per micro-batch on each train worker; the global batch is this x workers x
    `grad_accum_steps`."""
    steps: int | None = Field(default=None, gt=0)
    """Optimizer steps to train (each takes `grad_accum_steps` micro-batches). Exactly one of `steps` and
    `epochs`; with `loop` neither is needed, and `steps` gives the progress bar its total."""
    epochs: int | None = Field(default=None, gt=0)
    """Passes over the train channel. Exactly one of `steps` and `epochs`; refused with `loop` (the loop
    decides its epochs)."""
    optimizer: Literal["adamw", "sgd"] = "adamw"
    """AdamW, or SGD with `momentum`. Your own optimizer: the top-level `optimizer.factory`
    (`docs/recipe.md`)."""
    learning_rate: float = Field(default=1e-3, gt=0)
    """The peak rate: linear warmup (`warmup_steps`), then cosine decay to zero over the run's optimizer
    steps. Times the workers with `lr_scaling: linear`. Your own schedule: the top-level
    `schedule.factory`."""
    weight_decay: float = Field(default=0.05, ge=0)
    """The optimizer's weight decay."""
    momentum: float = Field(default=0.9, ge=0, lt=1)
    """SGD only."""
    warmup_steps: int | None = Field(default=None, ge=0)
    """Linear warmup before the cosine decay; default a tenth of the run, at most 100."""
    grad_accum_steps: int = Field(default=1, gt=0)
    """Micro-batches whose gradients add up to one optimizer step (DDP syncs on the last one only)."""
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    """`auto`: bf16 autocast on compute capability 8.0 and above (A10G, L4, A100, H100), fp16 with a
    GradScaler on 7.x (T4, V100), fp32 on CPU; `plan` says which and why. `fp16`: autocast with a
    GradScaler (a step whose gradients overflow is skipped, counted on the step lines as `skipped=N`,
    and does not advance the schedule); refused where the train instances have no GPU, and fp32 on a
    local run's CPU stand-ins."""
    clip_grad_norm: float | None = Field(default=None, gt=0)
    """Clip the gradients to this global L2 norm (after unscaling, before the optimizer step). The norm
    before clipping is on every step line as `grad_norm=`, clipped or not."""
    compile: bool = False
    """`torch.compile` the model (in place, before DDP wraps it). A model that fails to compile trains
    eagerly, with one warning line."""
    ema: EmaConfig | None = None
    """Keep an exponential moving average of the weights (e.g. `{decay: 0.999}`): validation measures the
    average, and `model.pt` holds it."""
    keep_best: KeepBestConfig | None = None
    """`{metric: NAME, mode: min|max}`: `model.pt` holds the weights of the best validation by `metric`
    (report.json's `summary.best` says which step); checkpoints still hold the last step, for resume.
    Needs a validation channel."""
    early_stop: EarlyStopConfig | None = None
    """`{metric, mode, patience, min_delta}`: stop after `patience` validations without an improvement of
    more than `min_delta`; the job prints `early stop ...`, saves and exits 0. Needs a validation channel."""
    callbacks: list[str] = Field(default=[], max_length=32)
    """Your callbacks, each `package.module:Class` (built with no arguments on every rank), whose methods
    the loop calls on its events (`docs/recipe.md#events`)."""
    checkpoint_interval: int = Field(default=0, ge=0)
    """Steps between checkpoints; 0 = none by step count (still at the end, on SIGTERM, and by
    `checkpoint_every_s`)."""
    checkpoint_every_s: float | None = Field(default=None, ge=0)
    """Also checkpoint at the first step boundary this many seconds after the last checkpoint, beside
    `checkpoint_interval` (rank 0's clock decides for every rank); 0: never. Default: never, except on a
    SageMaker host whose PID 1 lets no stop reach sm-launch (tini, a bash entry script:
    `docs/sagemaker.md#stops-under-the-toolkit`), where it is 300 s (`UNSAFE_STOP_CHECKPOINT_S`), the only
    protection left there. The report's summary gives what checkpoints cost: `checkpoints_written` by
    why, `checkpoint_s`, and `checkpoint_pct` of the time between the first and the last step."""
    checkpoint_dir: str | None = None
    """Default: `checkpoints` beside the model, which is the head's `/opt/ml/checkpoints` (SageMaker syncs
    it to the job's checkpoint S3 URI), or `checkpoints/` in the run's directory on a running Ray
    cluster. Checkpoints go to `<dir>/run-<time>-<pid>/step-<N>/`, each with a `meta.json` holding the
    state file's SHA-256."""
    resume: bool = True
    """Start from the newest complete checkpoint in `checkpoint_dir` (model, optimizer, schedule, step,
    epoch and the epoch's position: what it had drawn), on any number of workers; cut-short ones are
    skipped."""
    max_failures: int = Field(default=2, ge=0)
    """Times the train worker group restarts from the last checkpoint after a worker process dies
    (killed, out of memory) or a peer's collective fails with it. An exception raised in a step, a
    validation, the model's build or a data task (bad data, weights that do not fit, a bug in your code
    or ours) is not retried: it ends the job at once, as a restart would meet it again
    (`docs/checkpoints.md#what-survives-what`)."""
    stop_grace_s: float = Field(default=75, gt=0, le=90)
    """After SIGTERM, how long the trainer gets to reach a step boundary and checkpoint. Past it the job
    ends in one line (`the trainer did not stop within N s of SIGTERM ...`, exit 1) without that
    checkpoint, on every path (local, SageMaker, `--address`). SageMaker kills 120 s after its SIGTERM
    (hence at most 90: Ray's shutdown on every host needs the rest); on Kubernetes keep it below the
    pod's `terminationGracePeriodSeconds`."""
    validation_every_epochs: int = Field(default=1, ge=0)
    """Validate every N passes over the data (0: only at the end), with `steps` or `epochs`; always at
    the end. Only with a channel named `validation`: without one there is no validation (`plan` prints
    `validation: none`)."""
    log_every: int = Field(default=10, gt=0)
    """Steps between metric lines (`step=<n> loss=<x> images_per_sec=<x> data_wait_pct=<x>`); step 1
    prints one too."""
    prefetch_batches: int = Field(default=4, ge=0)
    """Batches Ray Data prepares ahead of the train step (pinned and copied to the GPU ahead, on GPU)."""
    max_workers: int | None = Field(default=None, ge=1)
    """At most this many train workers (the first ranks of the plan's placement), for a quick run of a
    big layout. Default: one per planned GPU."""
    lr_scaling: Literal["none", "linear"] = "none"
    """`linear`: the optimizer's peak rate is `learning_rate` x workers, as the global batch grows with
    them (Goyal et al., 2017: keep the rate per sample; use it with warmup). See
    `docs/training.md#batch-and-learning-rate`."""
    loop: FunctionPath | None = None
    """Your own Ray Train loop, `package.module:function` taking `config`
    (`docs/byo.md#your-own-ray-train-loop`): called on every planned worker as `function(config)` instead
    of the built-in loop; `model`, `task` and `steps`/`epochs` are then not needed (`steps` gives the
    progress bar its total)."""
    loop_config: dict = {}
    """The loop's `config` argument."""

    @field_validator("callbacks")
    @classmethod
    def _callback_names(cls, value: list[str]) -> list[str]:
        for i, name in enumerate(value):
            if not re.match(FUNCTION_PATTERN, name):
                raise ValueError(f"trainer.callbacks.{i}: {name!r} is not package.module:Class")
            refused = standard_library_problem(name)
            if refused:
                raise ValueError(f"{name} is {refused}")
        return value

    @model_validator(mode="after")
    def _length(self):
        if self.loop is None and (self.steps is None) == (self.epochs is None):
            raise ValueError("set exactly one of trainer.steps or trainer.epochs")
        if self.steps is not None and self.warmup_steps is not None and self.warmup_steps >= self.steps:
            raise ValueError(
                f"trainer.warmup_steps: {self.warmup_steps} is not below trainer.steps ({self.steps}): the rate "
                "would never reach trainer.learning_rate; warm up for a tenth of the run or less"
            )
        if self.loop is not None and self.epochs is not None:
            raise ValueError(
                "trainer.epochs: your loop (trainer.loop) decides its epochs; pass them in "
                "trainer.loop_config (trainer.steps only gives the progress bar a total)"
            )
        if self.loop_config and self.loop is None:
            raise ValueError("trainer.loop_config is the argument of trainer.loop; set trainer.loop or remove it")
        return self


class RunConfig(StrictModel):
    """Where a run keeps its simulated hosts, outputs and Ray state, and which S3 it uses."""

    dir: str = "runs"
    """Where runs go; a relative path is the folder sm-launch runs in, on every path. On a running Ray
    cluster (`--address`) the model, checkpoints and report go there, so rank 0's node and the driver
    must both see it (a shared path), or an `s3://bucket/prefix`, uploaded
    (`docs/ray-clusters.md#where-the-outputs-go`). A local run refuses `s3://`."""
    name: str | None = None
    """Run directory name under `dir`; default: `<job>-<timestamp>`."""
    s3_endpoint: str | None = None
    """For `s3://` sources in a local run: none starts a local S3 server (moto) on 127.0.0.1 with
    throwaway keys, seeded from `s3_seed`; `aws` uses boto3's own endpoint and credentials; an http(s)
    URL uses that endpoint. On a running Ray cluster none and `aws` both mean boto3's own, on every
    node; a URL is set as `AWS_ENDPOINT_URL_S3` for the whole Ray job (channels, `model.pretrained`, an
    `s3://` run.dir)."""
    s3_seed: dict[str, str] = {}
    """`s3://bucket/prefix/` -> local folder (or `builtin:digits`, `builtin:synthetic`) uploaded to the
    local S3 server at start."""

    @model_validator(mode="after")
    def _s3(self):
        if self.s3_endpoint not in (None, "aws") and not re.match(r"https?://", self.s3_endpoint or ""):
            raise ValueError(f"s3_endpoint {self.s3_endpoint!r}: expected aws or an http(s) URL")
        for uri, folder in self.s3_seed.items():
            if self.s3_endpoint is not None:
                raise ValueError("s3_seed fills the local S3 server; it needs s3_endpoint unset")
            if not uri.startswith("s3://") or len(uri) < 6:
                raise ValueError(f"s3_seed key {uri!r}: expected s3://bucket/prefix")
            if folder.startswith("builtin:") and folder not in BUILTIN_SEEDS:
                raise ValueError(f"s3_seed {uri}: unknown builtin {folder!r}; builtins: {', '.join(BUILTIN_SEEDS)}")
        return self


class MonitorConfig(StrictModel):
    """Utilisation sampling on every host, and the offload advisor's inputs."""

    sample_interval_s: float = Field(default=0.5, ge=0.05, le=60)
    """Seconds between samples of CPU, memory, IO wait, network and GPU on each host (0.5 s, as
    SageMaker Debugger's system monitor)."""
    prices: dict[str, float] = {}
    """USD per instance-hour by `ml.*` type, over the built-in dated table (`smlaunch/cluster/prices.py`:
    approximate us-east-1 on-demand), for the advisor's costs."""
    cpu_instance_types: list[str] | None = None
    """CPU types the advisor may recommend; default: c5 and m5, xlarge to 9xlarge."""
    max_data_hosts: int = Field(default=8, ge=1, le=64)
    """Largest count of data hosts the advisor's table predicts for."""

    @field_validator("prices")
    @classmethod
    def _prices(cls, value: dict[str, float]) -> dict[str, float]:
        for name, price in value.items():
            check_training_type(name)
            if price < 0:
                raise ValueError(f"{name}: a price must be >= 0 (USD per instance-hour)")
        return value

    @field_validator("cpu_instance_types")
    @classmethod
    def _candidates(cls, value):
        for name in value or []:
            check_training_type(name)
            if not is_cpu_only(name):
                raise ValueError(
                    f"{name!r} is not a CPU-only type of smlaunch's spec table (the advisor needs its vCPUs)"
                )
        return value


class LaunchConfig(StrictModel):
    """The whole job."""

    job: str = Field(default="smlaunch-job", pattern=r"^[A-Za-z0-9][A-Za-z0-9\-]{0,62}$")
    """The job's name: it names the run directory (`<job>-<timestamp>`) and a submitted training job."""
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    """Seeds the model's initialisation and each epoch's data order; 0..2^32-1, what NumPy's and torch's
    generators take."""
    cluster: ClusterConfig
    channels: dict[str, ChannelConfig] = Field(min_length=1)
    """Input channels by name; a name is 1-64 letters, digits, `.`, `-` or `_`."""
    pipeline: PipelineConfig = PipelineConfig()
    model: ModelConfig | None = None
    """Required unless `trainer.loop` runs your own loop (which builds its own model); refused beside
    one."""
    task: TaskConfig | None = None
    """Your loss and metrics (`TaskConfig`); default: classification of `image` by `label`."""
    trainer: TrainerConfig
    optimizer: FactoryConfig | None = None
    """Your optimizer: `factory` called as `factory(model, **params)` on every rank, returning a
    `torch.optim.Optimizer` (parameter groups allowed: every trainable parameter in exactly one).
    Default: `trainer.optimizer` (AdamW or SGD)."""
    schedule: FactoryConfig | None = None
    """Your learning-rate schedule: `factory` called as `factory(optimizer, total_steps, **params)`,
    returning a `torch.optim.lr_scheduler.LRScheduler` stepped once per optimizer step. Default: linear
    warmup then cosine to zero (`trainer.warmup_steps`)."""
    run: RunConfig = RunConfig()
    monitor: MonitorConfig = MonitorConfig()
    tracking: TrackingConfig = TrackingConfig()
    """Experiment tracking: `tracking.mlflow` (`docs/tracking.md`)."""
    sagemaker: SageMakerConfig | None = None
    """How `sm-launch submit` creates the training job (`docs/sagemaker.md`); only submit reads it, and
    without it submit fails naming the fields to set."""
    kuberay: KubeRayConfig | None = None
    """How `sm-launch kuberay` writes the RayJob manifest (`docs/ray-clusters.md`); only that command
    reads it, and every field has a default."""
    autoscale: AutoscaleConfig | None = None
    """Elastic data hosts on a Ray cluster with an autoscaler (`run --address`, KubeRay:
    `docs/elastic.md`); where groups are fixed (SageMaker, the local simulation) the plan says so, and
    `submit --data-hosts auto` sizes the group before the job instead."""

    @property
    def validates(self) -> bool:
        """Whether the built-in loop runs validation passes: only over a channel named `validation`
        (your own loop reads what it likes). Asked by the train spec and the plan alike."""
        return "validation" in self.channels and self.trainer.loop is None

    @model_validator(mode="after")
    def _cross(self):
        groups = {g.name for g in self.cluster.instance_groups}
        for name, channel in self.channels.items():
            if not re.fullmatch(r"[A-Za-z0-9.\-_]{1,64}", name):
                raise ValueError(f"channels: channel name {name!r} must match [A-Za-z0-9.-_]{{1,64}}")
            for group in channel.instance_groups or []:
                if group not in groups:
                    raise ValueError(
                        f"channels.{name}.instance_groups: no instance group {group!r}; groups: {sorted(groups)}"
                    )
        head_group = self.kuberay.head_group if self.kuberay else None
        if head_group is not None and head_group not in groups:
            raise ValueError(f"kuberay.head_group: no instance group {head_group!r}; groups: {sorted(groups)}")
        if "train" not in self.channels:
            raise ValueError(f"channels: a channel named 'train' is required; channels: {sorted(self.channels)}")
        train = self.channels["train"]
        problem = recipe_problem(self)
        if problem:
            raise ValueError(problem)
        if self.trainer.loop is not None:
            if self.model is not None or self.task is not None:
                raise ValueError(
                    f"{'model' if self.model is not None else 'task'}: your loop (trainer.loop) builds "
                    "its own model and loss; remove this section (pass settings in trainer.loop_config)"
                )
            return self
        if self.model is None:
            raise ValueError(
                "model: required (model.name, a timm model, or model.factory) unless trainer.loop "
                "runs your own Ray Train loop"
            )
        problem = cross_problem(self)
        if problem:
            raise ValueError(problem)
        if self.task is None and not self.pipeline.has_images:
            raise ValueError(
                "pipeline.ops: the built-in classification task trains on images (decode_image ... "
                "to_uint8_chw); for other data set task.loss (and task.evaluate) to your functions"
            )
        if (
            self.task is None
            and self.model.num_classes is None
            and not train.source.startswith("builtin:")
            and train.record_format not in CLASSES_FROM_DATA
        ):
            raise ValueError(
                f"model.num_classes: required for a {train.record_format} train channel (source "
                f"{train.source}); it is read from the data only for builtin datasets and "
                f"record_format {' or '.join(CLASSES_FROM_DATA)}"
            )
        return self
