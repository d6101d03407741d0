"""`Chain`: the Ray Data UDF that runs a YAML op chain on a batch, cheap geometry first.

A batch is a dict of NumPy arrays: `image` (encoded bytes in, uint8 CHW out), `label`, `id`, or
the fields a channel names (`pipelines.named_fields`), which `map` ops take whole.
Random ops draw from one generator per batch; with a seed it is derived from the seed and the
batch's row ids, so a batch is reproducible wherever it runs.

Order matters for cost, not only for the result: a Gaussian blur followed by a center crop blurs
pixels the crop then throws away. `plan_steps` rewrites such a run into "crop with a margin of
the blurs' reach, blur, trim the margin", which gives the same bytes (a pixel after `repeat`
passes of radius r depends only on pixels within repeat x r of it, and at the image's own edges
the reflected border is the same) for a fraction of the work. Tests check the equality.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from smlaunch.cluster.labels import this_host
from smlaunch.config import op_specs as specs
from smlaunch.config.columns import BOOKKEEPING_COLUMNS, POSITION_COLUMNS
from smlaunch.errors import DataError
from smlaunch.pipelines.cache.reader import CACHED_COLUMN, TAILED_COLUMN
from smlaunch.pipelines.ops.masks import check_mask_sizes, check_mask_values, mask_classes
from smlaunch.pipelines.ops.transforms import OPS, UndecodableImage, blur_image, center_crop

_PROCESS_WARM = False
"""Whether this worker process has run a batch already (its imports are done)."""


def plan_steps(ops: list, checks: MaskChecks | None = None) -> list[Callable]:
    """A run of image ops as callables `(fields, rng, train) -> fields`, each on its op's `field`
    (and its `masks`, checked to be its size); `normalize` is left to the trainer's device, and blurs
    that a center crop of the same field (moving no masks) follows are fused with it. `checks`: the
    masks whose decoded values are checked against their classes."""
    steps: list[Callable] = []
    pending_blurs: list[specs.GaussianBlur] = []
    for spec in ops:
        if spec.op == "gaussian_blur" and (not pending_blurs or pending_blurs[0].field == spec.field):
            pending_blurs.append(spec)
            continue
        if spec.op == "center_crop" and pending_blurs and not spec.masks and pending_blurs[0].field == spec.field:
            steps.append(_blur_then_crop(tuple(pending_blurs), spec))
        else:
            steps.extend(_single(b) for b in pending_blurs)
            if spec.op == "gaussian_blur":  # a blur of another field starts its own run
                pending_blurs = [spec]
                continue
            if spec.op != "normalize":
                steps.append(_single(spec, checks))
        pending_blurs = []
    steps.extend(_single(b) for b in pending_blurs)
    return steps


def plan_stages(ops: list, checks: MaskChecks | None = None) -> list:
    """The chain as stages in order: each run of image ops as one list of steps (`plan_steps`),
    each `map` op as a `MapStage` over the whole batch."""
    stages: list = []
    run: list = []
    for index, spec in enumerate(ops):
        if spec.op == "map":
            if run:
                stages.append(plan_steps(run, checks))
            stages.append(MapStage(spec, index))
            run = []
        else:
            run.append(spec)
    if run:
        stages.append(plan_steps(run, checks))
    return stages


class MaskChecks:
    """What a chain checks of its masks' values as they are decoded (`ops.masks`): each checked
    mask field's class count (`masks.mask_classes`), and the value allowed beside the classes (an
    ignore index; None: none)."""

    def __init__(self, classes: dict[str, int], ignore_index: int | None = None):
        self.classes, self.ignore_index = classes, ignore_index


class MapStage:
    """A `map` op: the user's function over the batch's fields (a dict of arrays, one row each),
    on the data host, returning the fields to go on with. The rows must stay the rows: the
    exactly-once accounting and the positions a checkpoint resumes from follow them."""

    def __init__(self, spec, index: int):
        self.spec, self.field = spec, f"pipeline.ops.{index}"
        self.function: Callable | None = None

    def __call__(self, fields: dict, rng, train: bool, rows: int) -> dict:
        from smlaunch.user_code import failed_on_data_host, resolve

        if self.function is None:
            self.function = resolve(self.spec.function, f"pipeline map op {self.spec.function}")
        try:
            out = self.function(fields, rng, train, **self.spec.params)
        except Exception as exc:  # the same on every try: the job ends in one line
            raise failed_on_data_host(
                exc, f"{self.field} map op {self.spec.function}", self.spec.function, this_host()
            ) from None
        if not isinstance(out, dict):
            raise DataError(
                f"map op {self.spec.function} returned {type(out).__name__}; return the batch as a dict "
                "of arrays, one row each"
            )
        fields = {}
        for name, values in out.items():
            if name in BOOKKEEPING_COLUMNS:
                continue  # the reader's bookkeeping is the chain's to carry
            if not isinstance(values, np.ndarray):
                try:
                    values = np.asarray(values)
                except ValueError:  # rows of their own shapes (decoded images of different sizes) stay a list
                    values = list(values)
            if len(values) != rows:
                raise DataError(
                    f"map op {self.spec.function}: field {name!r} has {len(values)} rows, the batch "
                    f"{rows}; a map op may change fields, not rows"
                )
            fields[name] = values
        return fields


def _rows(values, keep):
    """The rows of one field that `keep` marks (a mask, or a slice; of a list, or an array)."""
    if isinstance(keep, slice):
        return values[keep]
    if isinstance(values, list):
        return [v for v, k in zip(values, keep, strict=False) if k]
    return np.asarray(values)[keep]


def _joined(parts: list):
    """One field's slices made one again: an array where every slice is one of the same row shape,
    else a list of rows (images of their own sizes)."""
    arrays = all(isinstance(p, np.ndarray) for p in parts)
    if arrays and len({(p.dtype, p.shape[1:]) for p in parts}) == 1:
        return np.concatenate(parts)
    return [row for part in parts for row in part]


def _single(spec, checks: MaskChecks | None = None) -> Callable:
    function = OPS[spec.op]
    field, masks = spec.field, getattr(spec, "masks", ())
    if spec.op == "decode_image" and checks is not None and field in checks.classes:
        classes, ignore = checks.classes[field], checks.ignore_index

        def decode_mask(fields: dict, rng, train: bool) -> dict:
            fields[field] = function(_listed(fields[field]), spec, rng, train)
            check_mask_values(fields[field], field, classes, ignore)
            return fields

        return decode_mask
    if not masks:

        def step(fields: dict, rng, train: bool) -> dict:
            fields[field] = function(_listed(fields[field]), spec, rng, train)
            return fields

        return step

    def joint(fields: dict, rng, train: bool) -> dict:  # the masks move with the image's own draws
        images, moving = _listed(fields[field]), {m: _listed(fields[m]) for m in masks}
        check_mask_sizes(images, moving, field)
        fields[field], moved = function(images, spec, rng, train, list(moving.values()))
        fields.update(zip(masks, moved, strict=False))
        return fields

    return joint


def _listed(values):
    """A field's rows as a list (encoded bytes arrive as an array of objects)."""
    return values if isinstance(values, list) else list(values)


def _blur_then_crop(blurs: tuple, crop: specs.CenterCrop) -> Callable:
    reach = sum(b.repeat * (b.kernel_size // 2) for b in blurs)
    widest = max(b.kernel_size // 2 for b in blurs)

    def step(fields: dict, rng, train: bool) -> dict:
        fields[crop.field] = [
            _blur_then_crop_one(img, blurs, crop, reach, widest) for img in _listed(fields[crop.field])
        ]
        return fields

    return step


def _blur_then_crop_one(img: np.ndarray, blurs, crop: specs.CenterCrop, reach: int, widest: int) -> np.ndarray:
    h, w = img.shape[:2]
    size = crop.size
    if h < size or w < size or size <= widest:  # padding or edge borders: take the plain path
        for blur in blurs:
            img = blur_image(img, blur)
        return center_crop([img], crop, None, True)[0]
    top, left = (h - size) // 2, (w - size) // 2
    t0, l0 = max(0, top - reach), max(0, left - reach)
    window = img[t0 : min(h, top + size + reach), l0 : min(w, left + size + reach)]
    for blur in blurs:
        window = blur_image(window, blur)
    return np.ascontiguousarray(window[top - t0 : top - t0 + size, left - l0 : left - l0 + size])


class Chain:
    """Callable applied by `Dataset.map_batches`: runs the ops and tags rows with their host and
    the chain's time per row.

    It runs as a Ray task on a data node; `host` is looked up there, from the node's host label
    (`cluster.plan.host_label`), so the trainer can count where every row was produced.
    """

    def __init__(
        self,
        ops: list,
        host_names: list[str],
        train: bool = True,
        seed: int | None = None,
        channel: str | None = None,
        max_corrupted_records: int = 0,
        num_classes: int | None = None,
        ignore_index: int | None = None,
        cache=None,
    ):
        """`num_classes`: the task's classes, which a mask's decoded values must be (`masks.mask_classes`;
        None: not checked), besides `ignore_index`. `cache`: the run's `CacheSpec` (None: no cache):
        each batch read from the channel writes its prefix output, and a batch read from the cache
        runs only the ops after the prefix."""
        self.channel = channel
        self.mask_checks = MaskChecks(mask_classes(list(ops), num_classes), ignore_index)
        self.max_corrupted_records = max_corrupted_records
        self.ops = list(ops)
        self.host_names = host_names
        self.train = train
        self.seed = seed
        self.cache = cache
        self._stages: tuple[list, list] | None = None
        self._writer: Any = None  # the `cache.writer.ShardWriter`, made in the worker on the first batch

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if TAILED_COLUMN in batch:  # the cached read ran this chain already (`cache.reader`)
            return {name: values for name, values in batch.items() if name != TAILED_COLUMN}
        prefix, tail = self._planned()
        ids = np.asarray(batch["id"], dtype=np.int64)
        # A File channel's positions and seeks (`pipelines.order`): what a checkpoint resumes from.
        kept = {name: np.asarray(batch[name], dtype=np.int64) for name in POSITION_COLUMNS if name in batch}
        cached = CACHED_COLUMN in batch
        skipped = ("id", CACHED_COLUMN, *POSITION_COLUMNS)
        fields: dict[str, Any] = {name: values for name, values in batch.items() if name not in skipped}
        if cached:  # the prefix's output, read back from the cache: only the rest of the chain runs
            from smlaunch.pipelines.cache.blobs import field_from_blobs

            fields = {
                name: field_from_blobs(values) if values.dtype == object else values for name, values in fields.items()
            }
        elif "label" in fields:
            fields["label"] = np.asarray(fields["label"], dtype=np.int64)
        started = time.perf_counter()
        if not cached:
            fields, ids, kept = self._prefix(fields, ids, kept, prefix)
        if self.cache is not None and not cached and len(ids):
            self._write(ids, fields)
        rest_started = time.perf_counter()
        out = self._run(fields, ids, tail)
        ended = time.perf_counter()
        # Each row carries its share of the batch's chain time: summed per host by the trainer,
        # it gives the images/s one CPU slot of that host delivers, which the advisor scales. A
        # worker process's first batch pays for its imports (torchvision: seconds) and is marked
        # -1, not counted. With a cache, the share of the rest (the ops after the prefix) too: what
        # the epochs that read the cache cost, known from the epoch that writes it.
        global _PROCESS_WARM
        rows, warm = max(len(ids), 1), _PROCESS_WARM
        _PROCESS_WARM = True
        out.update(
            {
                "id": ids,
                "host": np.full(len(ids), self._host_index(), dtype=np.int16),
                "prep_s": np.full(len(ids), (ended - started) / rows if warm else -1.0, dtype=np.float32),
            }
        )
        if self.cache is not None or cached:
            out["tail_s"] = np.full(len(ids), (ended - rest_started) / rows if warm else -1.0, dtype=np.float32)
        out.update(kept)
        return out

    def _prefix(self, fields: dict, ids: np.ndarray, kept: dict, prefix: list) -> tuple[dict, np.ndarray, dict]:
        """The prefix over the call's rows, a chunk (`CacheSpec.chunk_rows`) at a time; rows whose
        image does not decode are skipped (under the channel's budget) with their positions."""
        step = (self.cache.chunk_rows if self.cache is not None else 0) or len(ids)
        if len(ids) <= step:
            return self._prefix_slice(fields, ids, kept, prefix)
        parts = [
            self._prefix_slice(
                {name: _rows(values, slice(at, at + step)) for name, values in fields.items()},
                ids[at : at + step],
                {name: values[at : at + step] for name, values in kept.items()},
                prefix,
            )
            for at in range(0, len(ids), step)
        ]
        return (
            {name: _joined([part[0][name] for part in parts]) for name in parts[0][0]},
            np.concatenate([part[1] for part in parts]),
            {name: np.concatenate([part[2][name] for part in parts]) for name in kept},
        )

    def _prefix_slice(self, fields: dict, ids: np.ndarray, kept: dict, prefix: list) -> tuple[dict, np.ndarray, dict]:
        while True:
            try:
                return self._run(dict(fields), ids, prefix), ids, kept
            except UndecodableImage as exc:  # `row` of the images an op was given: the batch's
                row, reason = exc.row, exc.reason
            self._undecodable(int(ids[row]), reason)  # raises unless skipped (outside `except`: no chained cause)
            keep = np.arange(len(ids)) != row
            fields = {name: _rows(values, keep) for name, values in fields.items()}
            ids = ids[keep]
            kept = {name: values[keep] for name, values in kept.items()}

    def _planned(self) -> tuple[list, list]:
        """The stages of the prefix a cache holds and of the rest (all in the first without a
        cache), planned on the first batch."""
        if self._stages is None:
            n = self.cache.prefix if self.cache is not None else len(self.ops)
            self._stages = (plan_stages(self.ops[:n], self.mask_checks), plan_stages(self.ops[n:], self.mask_checks))
        return self._stages

    def _write(self, ids: np.ndarray, fields: dict) -> None:
        """The batch's prefix output as a cache shard; a failed write (a full disk) turns the cache
        off for the run, in one line, and the batch goes on (`cache.writer`)."""
        from smlaunch.pipelines.cache.writer import ShardWriter

        if self._writer is None:
            self._writer = ShardWriter(self.cache)
        self._writer.write(ids, fields)

    def _run(self, fields: dict, ids: np.ndarray, stages: list) -> dict:
        """The `stages` over the batch's `fields`; the random draws depend on the seed and the rows' ids only."""
        rng = np.random.default_rng(None if self.seed is None else [self.seed, *ids[:4].tolist(), len(ids)])
        for stage in stages:
            if isinstance(stage, MapStage):
                fields = stage(fields, rng, self.train, len(ids))
                continue
            if not len(ids):  # every image of the batch was skipped
                fields.update(
                    {field: np.empty((0, *self._out_shape(field)), np.uint8) for field in self._image_fields()}
                )
                continue
            for step in stage:
                fields = step(fields, rng, self.train)
        return fields

    def _image_fields(self) -> list[str]:
        return list(
            dict.fromkeys(
                f
                for spec in self.ops
                if spec.op != "map"
                for f in (getattr(spec, "field", "image"), *getattr(spec, "masks", ()))
            )
        )

    def _undecodable(self, sample_id: int, reason: str) -> None:
        """Skip the sample under the channel's `max_corrupted_records` (counted with its damaged
        records, its file named from the id: `corrupt.undecodable_sample`), else fail in one line."""
        if self.channel is None:
            raise DataError(f"sample id {sample_id}: {reason}")
        from smlaunch.pipelines.corrupt import undecodable_sample

        undecodable_sample(self.channel, self.max_corrupted_records, sample_id, reason)

    def _out_shape(self, field: str = "image") -> tuple[int, int, int]:
        """(channels, height, width) of `field` out of the chain: the last crop's size that moved it."""
        size = next(
            spec.size
            for spec in reversed(self.ops)
            if spec.op in ("random_resized_crop", "center_crop") and field in (spec.field, *spec.masks)
        )
        mode = next(spec.mode for spec in self.ops if spec.op == "decode_image" and spec.field == field)
        return (1 if mode == "L" else 3), size, size

    def _host_index(self) -> int:
        name = this_host()
        return self.host_names.index(name) if name in self.host_names else -1
