"""The plan as a person reads it: every line `sm-launch plan` prints (`plan_lines`), the few a run
starts with (`summary`), and the JSON form (`plan_json`). Pure functions of the config and the
plan, shared by the commands and by the paths that learn their plan only once attached
(`launcher.attached.run`).
"""

from __future__ import annotations

from smlaunch.redaction import masked
from smlaunch.text import plural


def plan_json(cfg, plan) -> dict:
    """Everything `plan` prints, as data: the plan's fields (hosts, channels, `workers` as
    {rank, host, gpu}, global batch, learning rate, notes, ...) and the resolved config."""
    from smlaunch.config.shown import shown_config

    return {**plan.to_dict(), "config": shown_config(cfg)}


def plan_lines(cfg, plan) -> list[str]:
    import yaml

    from smlaunch.config.shown import shown_config

    lines = [
        "# resolved config",
        *yaml.safe_dump(shown_config(cfg), sort_keys=False).splitlines(),
        "",
        "# plan",
    ]
    if plan.mode == "sagemaker":
        me = plan.host(plan.current_host)
        lines.append(f"SageMaker job: this host is {me.name} ({me.role}, {me.group})")
        lines.append(
            f"head: {plan.head} ({plan.head_host.group}, {plan.head_host.instance_type}) at {plan.head_address}"
        )
    else:
        lines.append(f"head: {plan.head} ({plan.head_host.group}, {plan.head_host.instance_type})")
    t = cfg.trainer
    lines.append(
        f"train workers: {plan.train_workers} ({'GPU, NCCL' if plan.use_gpu else 'CPU, gloo'}): "
        + workers_text(plan.workers)
    )
    if not t.loop:  # your loop's batch and rate are its own
        lines.append(
            f"global batch: {plan.global_batch} = {t.batch_size} x {plural(plan.train_workers, 'worker')} x "
            f"{t.grad_accum_steps} accumulation; learning rate {plan.learning_rate:g}"
            + (" (linear scaling)" if t.lr_scaling == "linear" else "")
        )
    if plan.worker_env:
        shown = masked(plan.worker_env)
        lines.append("train workers' environment: " + " ".join(f"{k}={v}" for k, v in shown.items()))
    lines.append(
        f"preprocessing selector: {plan.preprocess_selector}"
        + ("" if plan.data_selector else " (no CPU-only group: the train hosts' CPUs)")
    )
    lines.append("hosts:")
    for h in plan.hosts:
        labels = ",".join(f"{k}={v}" for k, v in h.labels.items())
        lines.append(
            f"  {h.name:8} {h.role:6} group={h.group} type={h.instance_type} cpus={h.num_cpus or '?'} "
            f"gpus={h.num_gpus} object_store={_mib(h.object_store_bytes)} labels={labels}"
        )
    lines.append("channels:")
    for c in plan.channels:
        extras = (
            ([f"{c.file_system} file system, files split between the hosts"] if c.file_system else [c.distribution])
            + ([c.s3_data_type] if c.s3_data_type != "S3Prefix" else [])
            + ([f"attributes {','.join(c.attribute_names)}"] if c.attribute_names else [])
            + ([_fields(c)] if _custom_fields(c) else [])
            + ([f"skip up to {c.max_corrupted_records} corrupt"] if c.max_corrupted_records else [])
            + ([_order(cfg, c)] if c.input_mode != "Pipe" else [])
        )
        where = f"/opt/ml/input/data/{c.name}" + ("_<epoch>" if c.input_mode == "Pipe" else "")
        lines.append(
            f"  {c.name}: {c.input_mode} {c.record_format} ({', '.join(extras)}) from {c.source} -> "
            f"{where} on {', '.join(c.hosts)}"
        )
    if cfg.trainer.loop:
        lines.append(loop_line(cfg, plan))
    if cfg.model and cfg.model.factory:
        from smlaunch.user_code import code_folder

        params = ", ".join(f"{k}={v!r}" for k, v in cfg.model.params.items())
        lines.append(f"model: {cfg.model.factory}({params}) on every rank, imported from {code_folder()}")
    if cfg.task is not None:
        lines.append(
            f"task: loss {cfg.task.loss}"
            + (f", validation {cfg.task.evaluate or 'the mean loss'}" if cfg.validates else "")
        )
    if not cfg.trainer.loop:
        lines.append(validation_line(cfg))
        lines.append(recipe_line(cfg, plan))
    if cfg.pipeline.ops:
        from smlaunch.launcher.job.cache_setup import cache_line

        lines.append(cache_line(cfg, plan))
    if cfg.tracking.mlflow is not None:
        lines.append(tracking_line(cfg))
    from smlaunch.user_code import code_summary

    code = code_summary(cfg)
    if code:
        lines.append(code)
    if cfg.model and cfg.model.pretrained:
        lines.append(
            f"model: fine-tuning {cfg.model.label} from {cfg.model.pretrained} (loaded on rank 0, the "
            "classifier re-sized to the class count)"
        )
    lines.append(f"run directory: {plan.run_dir}" + (" (on the head)" if plan.mode == "sagemaker" else ""))
    if plan.checkpoint_every_s and plan.stop_is_clean:  # an unsafe PID 1's line below says it
        lines.append(f"checkpoints: every {plan.checkpoint_every_s:g} s (trainer.checkpoint_every_s)")
    if plan.stop:
        lines.append(plan.stop)
    lines += [f"note: {note}" for note in plan.notes]
    return lines


def validation_line(cfg) -> str:
    """When the built-in loop validates (`LaunchConfig.validates`), or that it never does, and why."""
    t = cfg.trainer
    if cfg.validates:
        every = t.validation_every_epochs
        when = "after every epoch" if every == 1 else f"after every {every}th epoch" if every else ""
        return f"validation: channel 'validation', {when + ' and ' if when else ''}at the end of the run"
    others = [f"'{name}'" for name in cfg.channels if name != "train"]
    unread = f"; {', '.join(others)} {'is' if len(others) == 1 else 'are'} not read" if others else ""
    return (
        f"validation: none (no channel named 'validation'{unread}): the model trains and is saved "
        "without a held-out measurement"
    )


def planned_precision(cfg, plan) -> tuple[str, str]:
    """(precision, why) the ranks will choose (`config.precision`): from the train instance type's GPU
    model where the workers use GPUs, else as on CPU (a local run's stand-ins)."""
    from smlaunch.config.instance_types import known_spec
    from smlaunch.config.precision import capability_of, choose_precision

    on_gpu = [w for w in plan.workers if w.on_gpu]
    capability = None
    if on_gpu:
        spec = known_spec(plan.host(on_gpu[0].host).instance_type)
        capability = capability_of(spec.accelerator if spec else None) or (8, 0)  # unknown GPU: as the ranks see it
    return choose_precision(cfg.trainer.precision, capability)


def recipe_line(cfg, plan) -> str:
    """The built-in loop's recipe (`docs/recipe.md`): optimizer, schedule, precision and why, and
    the features that are on."""
    from smlaunch.launcher.job.train_spec import schedule_course

    t = cfg.trainer
    precision, why = planned_precision(cfg, plan)
    parts = [
        f"optimizer {cfg.optimizer.factory if cfg.optimizer else t.optimizer}",
        f"schedule {cfg.schedule.factory if cfg.schedule else 'warmup-cosine ' + schedule_course(cfg, plan)}",
        f"precision {precision} ({why})",
    ]
    parts += [f"clip_grad_norm {t.clip_grad_norm:g}"] if t.clip_grad_norm else []
    parts += ["compile"] if t.compile else []
    parts += [f"EMA decay {t.ema.decay:g}"] if t.ema else []
    parts += [f"keep best {t.keep_best.metric} ({t.keep_best.mode})"] if t.keep_best else []
    if t.early_stop:
        e = t.early_stop
        parts.append(f"early stop on {e.metric} ({e.mode}, patience {e.patience}, min_delta {e.min_delta:g})")
    if cfg.task is not None and cfg.task.metrics:
        parts.append(f"whole-set metrics {cfg.task.metrics}")
    parts += [f"callbacks {', '.join(t.callbacks)}"] if t.callbacks else []
    return "recipe: " + "; ".join(parts)


def loop_line(cfg, plan) -> str:
    """What `trainer.loop` gets: its workers, its config and the channels it reads by name."""
    from smlaunch.user_code import code_folder

    names = ", ".join(f"'{c.name}'" for c in plan.channels)
    return (
        f"loop: {cfg.trainer.loop}(config) on each of {plural(plan.train_workers, 'Ray Train worker')}, imported "
        f"from {code_folder()}; ray.train.get_dataset_shard({names}) gives each rank an equal share (Ray "
        "Train's split); the checkpoints it reports go to the checkpoint directory"
    )


def workers_text(workers) -> str:
    """`ranks 0-3 on algo-1 (GPUs 0-3); ranks 4-5 on algo-2 (CPU stand-ins for GPUs 0-1)`: ranks
    grouped by host."""
    parts = []
    for host in dict.fromkeys(w.host for w in workers):
        mine = [w for w in workers if w.host == host]
        ranks = _span([w.rank for w in mine])
        gpus = [w.gpu for w in mine if w.gpu is not None]
        device = f"GPU{'s' if len(gpus) > 1 else ''} {_span(gpus)}" if gpus else "CPU"
        if any(w.stand_in for w in mine):
            device = f"CPU stand-in{'s' if len(mine) > 1 else ''} for {device}"
        parts.append(f"rank{'s' if len(mine) > 1 else ''} {ranks} on {host} ({device})")
    return "; ".join(parts)


def _span(numbers: list[int]) -> str:
    return (
        str(numbers[0])
        if len(numbers) == 1
        else (
            f"{numbers[0]}-{numbers[-1]}"
            if numbers == list(range(numbers[0], numbers[-1] + 1))
            else ",".join(map(str, numbers))
        )
    )


def summary(cfg, plan) -> list[str]:
    """The plan in a few lines, as a run starts: what trains where, on what data."""
    t = cfg.trainer
    length = plural(t.steps, "step") if t.steps else plural(t.epochs, "epoch")
    workers = plural(plan.train_workers, "train worker")
    device = "GPU" if plan.use_gpu else "CPU"
    lines = [
        f"job {cfg.job}: your loop {t.loop} on {workers} ({device})"
        if t.loop
        else f"job {cfg.job}: {length} of {cfg.model.label}, batch {t.batch_size} x {workers} ({device}), "
        f"global batch {plan.global_batch}"
    ]
    hosts = "; ".join(
        f"{h.name} {h.subcluster}{' (head)' if h.role == 'head' else ''} {h.group} "
        f"{h.instance_type}, {plural(h.num_cpus, 'CPU')}" + (f", {plural(h.num_gpus, 'GPU')}" if h.num_gpus else "")
        for h in plan.hosts
    )
    lines.append(f"hosts: {hosts}")
    if plan.train_workers > 1:
        lines.append(f"train workers: {workers_text(plan.workers)}")
    lines.append(
        "channels: "
        + "; ".join(
            f"{c.name} {c.input_mode} {c.record_format} from {c.source} -> {', '.join(c.hosts)}" for c in plan.channels
        )
    )
    if not cfg.validates and not t.loop:
        lines.append(validation_line(cfg))
    lines += [f"note: {note}" for note in plan.notes if not note.startswith("CPUs scaled")]
    return lines


def _custom_fields(channel) -> bool:
    """The channel names its image, label or id other than its format's defaults, or fields of its own."""
    from smlaunch.pipelines.formats import CHANNEL_FORMATS

    default = CHANNEL_FORMATS[channel.record_format].fields
    return (
        default is not None
        and not channel.attribute_names
        and (channel.fields != tuple(default.values()) or bool(channel.more))
    )


def _fields(channel) -> str:
    """`fields image, label, id` (the data's names), or a named batch's `fields x1<-col1, ...`."""
    if not channel.more and all(channel.fields[:2]):
        return f"fields {', '.join(f or '-' for f in channel.fields)}"
    named = {"image": channel.fields[0], "label": channel.fields[1], "id": channel.fields[2], **dict(channel.more)}
    return "fields " + ", ".join(
        name if name == source else f"{name}<-{source}" for name, source in named.items() if source
    )


def _mib(size: int | None) -> str:
    return f"{size // 2**20}MiB" if size else "ray-default"


def _order(cfg, c) -> str:
    """How a File or FastFile channel is ordered (`pipelines.order`), and the trainer's buffer for `train`."""
    if not c.shuffle:
        return "one fixed order"
    text = f"new order each epoch (seed {cfg.seed}), {c.open_units} files open per pass"
    buffer = cfg.channels[c.name].shuffle.buffer_rows
    if c.name == "train" and buffer and not cfg.trainer.loop:  # the built-in loop's buffer; your loop has none
        from smlaunch.config.op_specs import CenterCrop, RandomResizedCrop

        crop = next(
            (op.size for op in reversed(cfg.pipeline.ops) if isinstance(op, (RandomResizedCrop, CenterCrop))), 0
        )
        text += f", {buffer}-row shuffle buffer per train worker (~{buffer * 3 * crop * crop / 1e6:.0f} MB)"
    return text


def tracking_line(cfg) -> str:
    """The plan's line: where the run goes, what it is called, what a resume does."""
    mlflow = cfg.tracking.mlflow
    name = f"named {mlflow.run_name!r}" if mlflow.run_name else "named after the job"
    resume = "a resume reopens it (its id beside the checkpoints)" if cfg.trainer.resume else "a new run each time"
    plugin = ""
    if mlflow.uri.startswith("arn:"):
        plugin = "; the image needs pip install 'smlaunch[sagemaker-mlflow]'"
    return f"tracking: MLflow at {mlflow.uri}, experiment {mlflow.experiment!r}, the run {name}; {resume}{plugin}"
