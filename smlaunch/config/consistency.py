"""Rules between sections of the config that would otherwise first fail on a running cluster.

Each field is valid alone, but together they cannot train: an image decoded to one channel for a
model that takes three, a chain op on a field no channel gives, a built-in classification over
channels that name no label. Each would pass `plan`, start a billed cluster, and fail at the first
step or data task (a broadcast error, a KeyError) or at the first validation, an epoch in. The
rules need the config alone, so they are checked as it loads (`schema.LaunchConfig`), one line
naming the field.
"""

from __future__ import annotations

from smlaunch.config.channel_rules import names_whole_batch

VALIDATED_CHANNELS = ("train", "validation")
"""The channels the built-in loop reads through the chain (a user's loop reads any; see `cross_problem`)."""


def batch_field_names(channel) -> set[str]:
    """The fields a channel's batches carry, by name: a `fields` naming more than image, label and id
    lists them all; otherwise image and label (renamed or not), as an image folder and a builtin
    dataset always give."""
    if names_whole_batch(channel.fields):
        return set(channel.fields) | {"id"}
    return {"image", "label", "id"}


def cross_problem(cfg) -> str | None:
    """The first rule between sections the config breaks, as one line; None when it breaks none.
    Rules about the chain's fields stop at its first `map` op: a map may add, drop or change fields."""
    default_buffer = type(cfg.channels["train"].shuffle).model_fields["buffer_rows"].default
    for name, channel in cfg.channels.items():
        if name != "train" and channel.shuffle.buffer_rows != default_buffer:
            return (
                f"channels.{name}.shuffle.buffer_rows: only the train channel's batches pass a shuffle buffer "
                "(validation reads one fixed order); remove it"
            )
    if cfg.trainer.loop is not None:
        return None
    channels = {name: cfg.channels[name] for name in VALIDATED_CHANNELS if name in cfg.channels}
    ops = cfg.pipeline.ops
    before_map = ops[: next((i for i, op in enumerate(ops) if op.op == "map"), len(ops))]
    for i, op in enumerate(before_map):
        for key, names in (("field", [getattr(op, "field", None)]), ("masks", list(getattr(op, "masks", ())))):
            for name in names:
                missing = [c for c, ch in channels.items() if name is not None and name not in batch_field_names(ch)]
                if missing:
                    given = ", ".join(sorted(batch_field_names(channels[missing[0]]) - {"id"}))
                    return (
                        f"pipeline.ops.{i}.{key}: channel '{missing[0]}' gives no field {name!r} (it gives "
                        f"{given}); name it in channels.{missing[0]}.fields, or fix the op's field"
                    )
    if cfg.task is None:
        for name, ch in channels.items():
            lacking = [f for f in ("image", "label") if f not in batch_field_names(ch)]
            if lacking:
                return (
                    f"channels.{name}.fields: the built-in classification reads image and label, and these "
                    f"fields have no {' and no '.join(lacking)}; name {'them' if len(lacking) > 1 else 'it'} "
                    "(e.g. label: <column>), or set task.loss to your function"
                )
    return _channels_problem(cfg, before_map)


def _channels_problem(cfg, before_map: list) -> str | None:
    """An image decoded to one channel (`mode: L`) where three are needed."""
    decodes = [(i, op) for i, op in enumerate(before_map) if op.op == "decode_image" and op.field == "image"]
    if not decodes or decodes[-1][1].mode != "L" or len(before_map) < len(cfg.pipeline.ops):
        return None
    i = decodes[-1][0]
    if cfg.task is None:
        needs = "the built-in classification normalises three channels"
    elif cfg.model is not None and cfg.model.name:
        needs = f"timm's {cfg.model.name} takes three channels"
    elif any(op.op == "normalize" for op in cfg.pipeline.ops):
        needs = "normalize has a mean and std for three channels"
    else:
        return None  # your model and task, on one channel: yours to read
    return (
        f"pipeline.ops.{i}.mode: L decodes the image to one channel, and {needs}; use mode: RGB "
        "(a grey image's channel is repeated three times)"
    )
