"""The train workers' spec (`trainers.spec.TrainSpec`) from the config and the final plan, derived
once: what the rest of the run needs of the config (the report's epoch size, the workers' classes)
is read from the spec, not derived again.

Pure but for reading a builtin dataset's manifest (its class count and rows per epoch), once. The schema
guarantees a crop op, and `model.num_classes` unless the train channel's data can tell the class
count (a builtin dataset, image folders, Parquet): the caller reads that from the data and passes it.

The run's length in optimizer steps (`total_steps`: the schedule's cosine and the progress bar's total)
is `trainer.steps`, or, with `trainer.epochs`, counted from the rows of an epoch where they are known
before training: a builtin dataset's manifest, or the train channel's listing (an image folder's files,
a file a row; Parquet footers' row counts). Elsewhere (TFRecord, RecordIO, WebDataset, Pipe mode) it is
None and the schedule stays constant after warmup; `schedule_unknown` says why, for `plan`, which lists
nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from smlaunch.cluster.plan import ChannelPlan, LaunchPlan
from smlaunch.config.formats import CHANNEL_FORMATS
from smlaunch.config.schema import LaunchConfig
from smlaunch.pipelines.dataset import elastic_buffer_bytes
from smlaunch.trainers.s3_store import is_s3, join


def train_spec(
    cfg: LaunchConfig,
    plan: LaunchPlan,
    resume_from: str | None = None,
    data_classes: list[str] | tuple[str, ...] | int | None = None,
    train_units: int | None = None,
    train_rows: int | None = None,
):
    """`data_classes`: what the train channel's data says of its classes: their names (image
    folders; label i is name i), a count (Parquet: the largest label + 1), or None (not read).
    `train_rows`: the rows of an epoch as the train channel's listing counts them (`listed_rows`),
    or None; a builtin dataset's manifest counts them itself."""
    from smlaunch.errors import ConfigError
    from smlaunch.pipelines.sources.host_loss import fragile_channels
    from smlaunch.trainers.spec import TrainSpec

    # The model's input size: the image's last crop, or a `resize` after it (a square stays a square).
    sizing = [
        op
        for op in cfg.pipeline.ops
        if op.op in ("random_resized_crop", "center_crop", "resize") and getattr(op, "field", "image") == "image"
    ]
    cropped = any(op.op != "resize" for op in sizing)
    rows, builtin_classes = _builtin_train_facts(cfg)
    t = cfg.trainer
    total = total_steps(cfg, plan, rows or train_rows)
    # A user's task has classes only if it says so (`model.num_classes`); classification always has them.
    if cfg.trainer.loop:  # the user's loop: its model, classes and loss are its own
        num_classes, names = None, None
    else:
        num_classes, names = (
            _classes(cfg, data_classes, builtin_classes)
            if cfg.task is None
            else (cfg.model.num_classes if cfg.model else None, None)
        )
    factory = cfg.model.factory if cfg.model else None
    label = cfg.model.label if cfg.model else cfg.trainer.loop
    if label is None:  # the schema asks for one of them
        raise ConfigError("model: required (model.name, a timm model, or model.factory) unless trainer.loop is set")
    return TrainSpec(
        model=label,
        num_classes=num_classes,
        image_size=sizing[-1].size if cropped else None,
        model_factory=factory,
        model_params=dict(cfg.model.params) if cfg.model and factory else None,
        task_loss=cfg.task.loss if cfg.task else None,
        task_evaluate=cfg.task.evaluate if cfg.task else None,
        task_metrics=cfg.task.metrics if cfg.task else None,
        task_predict=cfg.task.predict if cfg.task else None,
        optimizer=cfg.optimizer,
        schedule=cfg.schedule,
        normalize_in_chain=bool(cfg.pipeline.ops) and cfg.pipeline.ops[-1].op == "normalize",
        seed=cfg.seed,
        trainer=t,
        learning_rate=plan.learning_rate,
        total_steps=total,
        epoch_rows=rows,
        workers=plan.workers,
        host_names=tuple(h.name for h in plan.hosts),
        model_dir=_absolute(join(model_root(plan), "model")),
        checkpoint_dir=checkpoint_dir(cfg, plan),
        config_sha256=config_hash(cfg),
        normalize=_normalize(cfg),
        fragile_channels=tuple(fragile_channels(plan)),
        worker_selectors=tuple(plan.worker_selectors),
        preprocess_selector=dict(plan.preprocess_selector),
        worker_env=dict(plan.worker_env),
        resume_from=resume_from,
        pretrained=pretrained_weights(cfg),
        class_names=names,
        shuffle_buffer_rows=cfg.channels["train"].shuffle.buffer_rows,
        train_units=train_units,
        ingest_buffer_bytes=elastic_buffer_bytes(cfg, plan),
        checkpoint_every_s=plan.checkpoint_every_s,
        validation=cfg.validates,
    )


def total_steps(cfg: LaunchConfig, plan: LaunchPlan, rows: int | None) -> int | None:
    """The run's optimizer steps: `trainer.steps`, or `trainer.epochs` of `epoch_steps` where the
    rows of an epoch are known, else None (the schedule then stays constant after warmup)."""
    t = cfg.trainer
    if t.steps:
        return t.steps
    if not (t.epochs and rows):
        return None
    return t.epochs * epoch_steps(cfg, plan, rows) or None


def epoch_steps(cfg: LaunchConfig, plan: LaunchPlan, rows: int) -> int:
    """Optimizer steps the built-in loop takes over an epoch of `rows` rows, the ranks' shares taken
    as even: each rank trains on the full micro-batches of its share only (a final partial one is
    counted, not trained on), and a step takes up to `grad_accum_steps` of them, so an epoch's last
    step may take fewer (`trainers.loop`). Never fewer steps than `rows // global batch`, and one
    more at most: the cosine is not at zero while the run still trains. Shares are uneven
    (`streaming_split(equal=False)` deals blocks as the ranks ask), and the few drain steps that adds
    per epoch fall past the count, at the decay's tail, where the rate is ~0 anyway."""
    t = cfg.trainer
    share = -(-rows // max(1, len(plan.workers)))
    return -(-(share // t.batch_size) // t.grad_accum_steps)


def listed_rows(listing, channel: ChannelPlan) -> int | None:
    """Rows of an epoch of `channel` as its listing (`pipelines.sources.listing`) counts them: an
    image folder's files, each one sample, or the rows in a Parquet host's footers; every host's under
    ShardedByS3Key, where each host holds its own, else the first host's, which stands for all (as
    `run._unit_count` counts units). None for any other format: a record file's samples are counted
    only by reading it."""
    if listing is None or not counted_by_listing(channel):
        return None
    sharded = channel.distribution == "ShardedByS3Key" and channel.file_system is None
    hosts = list(listing.files) if sharded else [next(iter(listing.files))]
    if CHANNEL_FORMATS[channel.record_format].layout == "row_groups":
        return sum(listing.rows[host] for host in hosts)
    return sum(len(listing.files[host]) for host in hosts)


def counted_by_listing(channel: ChannelPlan) -> bool:
    """Whether the channel's listing counts its rows (`listed_rows`): image folders (a file a row) and
    Parquet (its footers' row counts), unless in Pipe mode, which lists nothing."""
    return channel.input_mode != "Pipe" and CHANNEL_FORMATS[channel.record_format].layout in ("images", "row_groups")


def schedule_unknown(cfg: LaunchConfig, plan: LaunchPlan) -> str | None:
    """Why the run's length is not known before training, so the built-in schedule stays constant
    after warmup; None where `trainer.steps` sets it or the rows of an epoch are counted before the
    first step (a builtin dataset's manifest, an image folder's or a Parquet channel's listing)."""
    if cfg.trainer.steps or not cfg.trainer.epochs:
        return None
    channel = next(c for c in plan.channels if c.name == "train")
    if cfg.channels["train"].source.startswith("builtin:") or counted_by_listing(channel):
        return None
    if channel.input_mode == "Pipe":
        return f"trainer.epochs over a Pipe channel ({channel.record_format}) has no known length before it is read"
    return f"trainer.epochs over a {channel.record_format} channel has no known length before it is read"


def schedule_course(cfg: LaunchConfig, plan: LaunchPlan) -> str:
    """The built-in schedule's course as `plan` prints it, `(warmup N steps, then ...)`: cosine to
    zero at the last step where the run's length is known, or counted before the first step (from a
    builtin dataset's manifest or the train channel's listing, which `plan` reads neither of), else
    constant, and why (`schedule_unknown`): a plan must not promise a decay the run will not make."""
    from smlaunch.text import plural
    from smlaunch.trainers.optim import warmup_length

    t = cfg.trainer
    why = schedule_unknown(cfg, plan)
    if why is not None:
        warmup = plural(warmup_length(None, t.warmup_steps), "step")
        return f"(warmup {warmup}, then constant: {why}; set trainer.steps for a cosine decay)"
    if t.steps:
        return (
            f"(warmup {plural(warmup_length(t.steps, t.warmup_steps), 'step')}, then cosine to zero at step {t.steps})"
        )
    warmup = (
        plural(warmup_length(None, t.warmup_steps), "step")
        if t.warmup_steps is not None
        else "a tenth of the run up to 100 steps"
    )
    train = next(c for c in plan.channels if c.name == "train")
    counted = "when the train channel is listed" if counted_by_listing(train) else "from the builtin dataset's manifest"
    return (
        f"(warmup {warmup}, then cosine to zero over the steps of {plural(t.epochs or 0, 'epoch')}, counted {counted})"
    )


def pretrained_weights(cfg: LaunchConfig) -> str | None:
    """`model.pretrained` as rank 0 reads it: `s3://` as given, a local path made absolute here (a
    train worker's working directory is not the launcher's; rank 0 runs on this, the head, host)."""
    weights = cfg.model.pretrained if cfg.model else False
    if not weights:
        return None
    if weights.startswith("s3://"):
        return weights
    return str(Path(weights).expanduser().resolve())


def _classes(cfg: LaunchConfig, data_classes, builtin_classes: int | None) -> tuple[int, tuple[str, ...] | None]:
    """(num_classes, class names where known): `model.num_classes`, else the data's, else a builtin
    dataset's (`builtin_classes`). A set `model.num_classes` must agree with the class folders the data has, and leave
    room for the largest label it holds; the model would otherwise mislabel or fail mid-run."""
    from smlaunch.errors import ConfigError

    names = tuple(str(n) for n in data_classes) if isinstance(data_classes, (list, tuple)) else None
    counted = len(names) if names is not None else data_classes if isinstance(data_classes, int) else None
    source = cfg.channels["train"].source
    configured = cfg.model.num_classes if cfg.model else None
    if configured is not None:
        if names is not None and len(names) != configured:
            raise ConfigError(
                f"model.num_classes: {configured}, but the train channel ({source}) has "
                f"{len(names)} class folders ({_preview(names)}); make them agree or leave "
                "model.num_classes unset to take the data's"
            )
        if counted is not None and counted > configured:
            raise ConfigError(
                f"model.num_classes: {configured}, but the train channel ({source}) holds labels up "
                f"to {counted - 1}; set model.num_classes to at least {counted} or leave it unset"
            )
        return configured, names
    if counted is not None:
        if counted < 2:
            shown = f" ({_preview(names)})" if names else ""
            raise ConfigError(
                f"model.num_classes: the train channel ({source}) has {counted} "
                f"class{'' if counted == 1 else 'es'}{shown}; a classifier needs at least 2"
            )
        return counted, names
    if builtin_classes is None:
        raise ConfigError(
            f"model.num_classes: not set, and the class count of the train channel ({source}) "
            "was not read from its data; set model.num_classes"
        )
    return builtin_classes, None


def _preview(names: tuple[str, ...], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f", ... ({len(names) - shown} more)" if len(names) > shown else "")


def config_hash(cfg: LaunchConfig) -> str:
    return hashlib.sha256(json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def _builtin_train_facts(cfg: LaunchConfig) -> tuple[int | None, int | None]:
    """(rows per epoch, class count) of a builtin train channel, from its manifest; (None, None) for
    any other source."""
    from smlaunch.pipelines.builtin import builtin_manifest, split_source

    source = cfg.channels["train"].source
    parsed, manifest = split_source(source), builtin_manifest(source)
    if parsed is None or manifest is None:
        return None, None
    return manifest["splits"][parsed[1]]["records"], manifest["classes"]


def resumed_step(resume_from: str | None) -> int:
    """The step a checkpoint holds (0 for none), for the progress bar's start."""
    if not resume_from:
        return 0
    from smlaunch.errors import UserError
    from smlaunch.trainers.s3_store import read_json

    try:
        if is_s3(resume_from):
            return int(read_json(join(resume_from, "meta.json"))["step"])
        return int(json.loads((Path(resume_from) / "meta.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError, UserError):
        return 0


def _normalize(cfg: LaunchConfig) -> dict:
    """The chain's trailing `normalize` (mean and std per channel), else (x / 127.5 - 1)."""
    last = cfg.pipeline.ops[-1] if cfg.pipeline.ops else None
    if last is not None and last.op == "normalize":
        return {"mean": list(last.mean), "std": list(last.std)}
    return {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}


def checkpoint_dir(cfg: LaunchConfig, plan: LaunchPlan) -> str:
    """`trainer.checkpoint_dir`, else `checkpoints` beside the model (absolute: Ray Train needs it)."""
    return _absolute(cfg.trainer.checkpoint_dir or join(model_root(plan), "checkpoints"))


def model_root(plan: LaunchPlan) -> str:
    """Where model/ and checkpoints/ go: the head's /opt/ml, as SageMaker uploads them from there,
    or the run directory (a path or an `s3://` URI) on a cluster smlaunch attached to."""
    return plan.output_dir or host_opt_ml(plan.head_host)


def output_root(plan: LaunchPlan) -> str:
    """Where the driver writes output/data/ (report, TensorBoard): beside the model, or, when that
    is on S3, the local run directory, which is uploaded there when the run ends."""
    return plan.run_dir if is_s3(plan.output_dir) else model_root(plan)


def _absolute(where: str) -> str:
    return where if is_s3(where) else str(Path(where).expanduser().resolve())


def host_opt_ml(host) -> str:
    """A host's /opt/ml tree; on a SageMaker job only this host's is known (`SAGEMAKER_BASE_DIR`)."""
    from smlaunch.cluster.sagemaker_env import base_dir

    return host.opt_ml if host.opt_ml is not None else str(base_dir())
