"""Which part of the chain may be cached across epochs, and whether a run caches it: pure rules of
the config, asked by `sm-launch plan` and by the run alike (`docs/cache.md`).

Every system that caches preprocessing (tf.data's `snapshot`, Cachew, FFCV, DALI) caches only what
comes *before* the first random op and reruns the random rest each epoch: caching after a random
op freezes the augmentation, which cost accuracy in Cachew's own evaluation
(../shared/notes/cache.md §2). So the cached prefix is the ops up to the first one that draws from
the generator. Built-in ops know whether they do; a user's `user` or `map` op is random unless it
says `deterministic: true`, because a wrong "deterministic" silently trains on one draw forever,
while a wrong "random" only costs the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

DETERMINISTIC_OPS = frozenset({"decode_image", "resize", "center_crop", "gaussian_blur", "to_uint8_chw"})
"""Built-in ops whose output depends on their input alone. `random_resized_crop`, `horizontal_flip`
and `color_jitter` draw per row; `normalize` runs on the trainer's device, never in a data task."""
PAYING_OPS = frozenset({"decode_image", "gaussian_blur"})
"""Ops whose CPU time per row is far above reading their uint8 output back: decoding a JPEG or PNG,
and a blur (bench/cache.py). A prefix with one pays back from the second epoch on."""


def is_deterministic(op) -> bool:
    """Whether `op` (an `op_specs` model) gives the same output for the same input every call."""
    if op.op in ("user", "map"):
        return bool(op.deterministic)
    return op.op in DETERMINISTIC_OPS


def prefix_length(ops: list) -> int:
    """How many leading ops of the chain are deterministic: the cached prefix is `ops[:n]`."""
    for index, op in enumerate(ops):
        if not is_deterministic(op):
            return index
    return len(ops)


@dataclass(frozen=True)
class CacheChoice:
    """Whether the run caches the train channel's prefix (`on`), the prefix's length in ops, and the
    reason, as the plan says it."""

    on: bool
    prefix: int
    why: str

    def line(self) -> str:
        return f"cache: {'on' if self.on else 'off'} ({self.why})"


def cache_choice(cfg, epochs: int | None, cache_dir: str | None, user_loop: bool = False) -> CacheChoice:
    """The run's choice (`pipeline.cache`): `epochs` the run's planned passes over the train channel
    (None: not known before reading it); `cache_dir` where the cache would live (None: no folder
    every host sees); `user_loop`: a `trainer.loop` reads the epochs itself."""
    setting = cfg.pipeline.cache
    ops = cfg.pipeline.ops
    n = prefix_length(ops)
    prefix = [op.op if op.op not in ("user", "map") else op.function for op in ops[:n]]
    named = f"prefix: {', '.join(prefix)}" if prefix else "no deterministic prefix"
    if setting is False:
        return CacheChoice(False, n, "pipeline.cache: false")
    blocker = _blocker(cfg, n, cache_dir, user_loop)
    if blocker:
        if setting is True:
            from smlaunch.errors import ConfigError

            raise ConfigError(f"pipeline.cache: true, but {blocker}")
        return CacheChoice(False, n, f"auto: {blocker}")
    if setting is True:
        return CacheChoice(True, n, f"pipeline.cache: true; {named}; in {cache_dir}")
    if epochs is None:
        return CacheChoice(
            False, n, "auto: the run's epochs are not known before its channel is read: set pipeline.cache: true"
        )
    if epochs < 2:
        return CacheChoice(False, n, "auto: one epoch: a cache pays back only from the second")
    if not any(op.op in PAYING_OPS for op in ops[:n]):
        return CacheChoice(
            False, n, f"auto: {named}, which neither decodes nor blurs: set pipeline.cache: true if it is costly"
        )
    return CacheChoice(True, n, f"auto: {epochs} epochs; {named} runs once, not every epoch; in {cache_dir}")


def _blocker(cfg, n: int, cache_dir: str | None, user_loop: bool) -> str | None:
    """Why the run cannot cache, whatever the setting (None: it can)."""
    if n == 0:
        first = cfg.pipeline.ops[0].op if cfg.pipeline.ops else None
        return (
            "the chain has no ops" if first is None else f"the chain's first op ({first}) is random: nothing to cache"
        )
    if cfg.channels["train"].input_mode == "Pipe":
        return "the train channel is in Pipe mode, read as a stream each epoch"
    if user_loop:
        return "trainer.loop reads its epochs itself"
    if cache_dir is None:
        return "no folder every host sees: set pipeline.cache_dir (an s3:// prefix, or a shared file system)"
    return None
