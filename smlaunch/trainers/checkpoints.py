"""Checkpoints that survive spot interruptions: written by rank 0, found again by a new run.

A checkpoint is a directory `<checkpoint dir>/<run>/step-<NNNNNNNN>/` holding `state.pt` (a
`TrainState`: model, optimizer, scheduler, the recipe's state, step, the epoch's data position; the one format the
built-in loop writes and resumes from) and `meta.json` (the step and the SHA-256 and size of
`state.pt`). Ray Train copies the directory into the checkpoint dir; on SageMaker that is
`/opt/ml/checkpoints`, which SageMaker syncs to S3 and restores into a new job. Each launch writes
under a run name of its own and only rank 0 writes, so names never collide between runs, ranks or
hosts. A copy cut short (the host was reclaimed mid-write) lacks `meta.json` or fails its hash,
and `latest_complete` passes over it: a half-written checkpoint is never resumed from.

A checkpoint is data, never code. The hash only vouches that a file was not cut short: anyone who
can write the checkpoint folder (or its S3 prefix) can also rewrite `meta.json`. So `state.pt` is
read with `torch.load(weights_only=True)`, which unpickles tensors, numbers, strings and
containers only, and a file that needs more (a planted pickle calling `os.system`, or another
program's checkpoint) is refused in one line naming it. What is written is held to the same
types (`checkpoint_data`): NumPy values become tensors and numbers, and a callback whose state
holds any other object is named when the checkpoint is written, not when a resume cannot read it.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from smlaunch.errors import UserError

log = logging.getLogger("smlaunch")

STATE = "state.pt"
META = "meta.json"


@dataclass
class TrainState:
    """What a built-in loop's checkpoint holds (`state.pt`): everything a run resumes from, on any
    number of ranks. The epoch's data position is one of two kinds: where the epoch stands in its
    order (`position`, File and FastFile channels: a few KiB at any size), or the ids it has drawn
    (`consumed_ids`, a Pipe channel, whose rows carry no position)."""

    model: dict
    optimizer: dict
    scheduler: dict
    step: int
    epochs_done: int
    world_size: int
    config_sha256: str
    position: dict | None = None
    """`pipelines.position.EpochPosition.state()` of the epoch in progress."""
    consumed_ids: Any = None
    """The ids the epoch in progress has drawn (an int64 tensor), where rows have no position."""
    recipe: dict | None = None
    """`trainers.recipe.Recipe.state_dict()` (precision, GradScaler, skipped steps, EMA) and, under
    `callbacks`, each callback's state (keep-best, early stop, yours); None in an older checkpoint."""
    validation: list | None = None
    """The run's validation results so far (a few numbers per pass): report.json lists the whole run's,
    across restarts and resumes."""

    @property
    def epoch(self) -> int:
        """The 1-based epoch the next step belongs to."""
        return self.epochs_done + 1

    def to_dict(self) -> dict:
        return {**asdict(self), "epoch": self.epoch}

    @classmethod
    def from_dict(cls, state: dict, where: str) -> TrainState:
        """The state of a `state.pt` read from `where`; a UserError in one line for one of another
        format (an older smlaunch's, or another program's)."""
        fields = set(cls.__dataclass_fields__)
        missing = sorted(fields - {"position", "consumed_ids", "recipe", "validation"} - set(state))
        if missing or not isinstance(state.get("position"), dict | None):
            why = f"no {', '.join(missing)}" if missing else "its position is a count of batches, an older format"
            raise UserError(
                f"checkpoint {where}: not a checkpoint this smlaunch resumes from ({why}); "
                "set trainer.resume: false or another trainer.checkpoint_dir to start afresh"
            )
        values: dict[str, Any] = {name: state.get(name) for name in fields}
        return cls(**values)


def save_train_state(directory: str, state: TrainState) -> None:
    """The built-in loop's checkpoint files in `directory` (`write_state`)."""
    write_state(directory, state.to_dict())


def load_train_state(directory: str | os.PathLike) -> TrainState:
    """The `TrainState` of the checkpoint in `directory` (or at an `s3://` URI)."""
    return TrainState.from_dict(load_state(directory), str(directory))


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def write_state(directory: str, state: dict) -> None:
    """`state.pt` and, last, the `meta.json` that vouches for it."""
    import torch

    path = Path(directory) / STATE
    torch.save(checkpoint_data(state), path)
    meta = {"step": state["step"], "epoch": state["epoch"], "size": path.stat().st_size, "sha256": _sha256(path)}
    (Path(directory) / META).write_text(json.dumps(meta))


def is_complete(directory: Path) -> bool:
    try:
        meta = json.loads((directory / META).read_text())
        state = directory / STATE
        return state.stat().st_size == meta["size"] and _sha256(state) == meta["sha256"]
    except (OSError, ValueError, KeyError):
        return False


def latest_complete(root: str | os.PathLike) -> Path | str | None:
    """The complete checkpoint with the highest step under `root` (any run), or None; under an
    `s3://` root, its URI."""
    if str(root).startswith("s3://"):
        return _latest_complete_on_s3(str(root))
    root = Path(root)
    if not root.is_dir():
        return None
    found = sorted(root.glob("*/step-*"), key=lambda p: (p.name, p.stat().st_mtime), reverse=True)
    inside = root.resolve()
    for directory in found:
        if not directory.resolve().is_relative_to(inside):  # a link out of the folder: not this job's to read
            log.warning(f"checkpoint {directory} leads outside {root} ({directory.resolve()}); skipping it")
            continue
        if is_complete(directory):
            return directory
        log.warning(f"checkpoint {directory} is incomplete (cut short while written); skipping it")
    return None


def load_state(directory: str | os.PathLike) -> dict:
    """The state in `directory`, or in the `s3://` checkpoint it names (downloaded, hash checked)."""
    if str(directory).startswith("s3://"):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="smlaunch-resume-") as tmp:
            return _read_data(_fetch_from_s3(str(directory), tmp) / STATE, f"{directory}/{STATE}")
    return _read_data(Path(directory) / STATE, str(Path(directory) / STATE))


def _read_data(path: Path, name: str) -> dict:
    """`state.pt` unpickled as weights only: tensors, numbers, strings and containers; a UserError
    naming the file and the first object it would have built otherwise."""
    import pickle

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL (\S+)", str(exc))
        what = f" ({found.group(1)})" if found else ""
        raise UserError(
            f"checkpoint {name}: holds more than tensors and numbers{what}, and a checkpoint is read as data "
            "only (torch.load weights_only): not resuming from it; delete that step- folder if you did not "
            "write it, or set trainer.resume: false"
        ) from None
    if not isinstance(state, dict):
        raise UserError(f"checkpoint {name}: holds a {type(state).__name__}, not a checkpoint's dict")
    return state


_DATA = (type(None), bool, int, float, complex, str, bytes)
"""What `torch.load(weights_only=True)` reads besides tensors, sizes, dtypes, devices and containers."""


def checkpoint_data(value: Any, where: str = "state") -> Any:
    """`value` in the types a weights-only load reads back: NumPy arrays as tensors, NumPy scalars as
    numbers; a UserError naming the key of anything else (a callback's state holding an object),
    which the resume could not read."""
    import numpy as np
    import torch

    if isinstance(value, _DATA + (torch.Tensor, torch.Size, torch.dtype, torch.device)):
        return value
    if type(value) in (dict, collections.OrderedDict):
        return type(value)((checkpoint_data(k, where), checkpoint_data(v, f"{where}.{k}")) for k, v in value.items())
    if type(value) in (list, tuple, set):
        return type(value)(checkpoint_data(v, f"{where}.{i}") for i, v in enumerate(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.dtype != object:
        return torch.from_numpy(np.ascontiguousarray(value))
    raise UserError(
        f"checkpoint: {where} is a {type(value).__module__}.{type(value).__qualname__}; a checkpoint holds "
        "tensors, numbers, strings, lists and dicts only (it is read back as data, never code): "
        "return those from state_dict()"
    )


def _latest_complete_on_s3(uri: str) -> str | None:
    """The newest checkpoint `uri/<run>/step-N` (any run) whose `state.pt` has the size its
    `meta.json` gives, as an `s3://` URI; None if there is none."""
    from smlaunch.trainers.s3_store import list_objects, read_json, split

    bucket, key = split(uri)
    sizes = {item["Key"]: item["Size"] for item in list_objects(bucket, f"{key}/" if key else "")}
    # A run's name is one key segment, never `.` or `..`: keys are written as paths on download.
    pattern = re.compile(re.escape(f"{key}/" if key else "") + r"(?!\.\.?/)[^/]+/step-\d+/" + re.escape(META) + "$")
    for meta_key in sorted((k for k in sizes if pattern.match(k)), key=lambda k: k.split("/")[-2], reverse=True):
        directory = meta_key.rsplit("/", 1)[0]
        try:
            meta = read_json(f"s3://{bucket}/{meta_key}")
            if sizes.get(f"{directory}/{STATE}") == meta["size"]:
                return f"s3://{bucket}/{directory}"
        except (ValueError, KeyError, TypeError):
            pass
        log.warning(f"checkpoint s3://{bucket}/{directory} is incomplete (cut short while written); skipping it")
    return None


def _fetch_from_s3(uri: str, local: str | os.PathLike) -> Path:
    """The checkpoint at `uri` downloaded into `local`, its SHA-256 checked."""
    from smlaunch.trainers.s3_store import download_dir

    download_dir(uri, local)
    if not is_complete(Path(local)):
        raise UserError(
            f"checkpoint {uri}: state.pt does not match its meta.json (size or SHA-256); "
            "delete that step- folder to resume from the one before"
        )
    return Path(local)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class CheckpointLog:
    """When rank 0 wrote checkpoints, why and in how long: the report's `checkpoints`, which show
    what a cadence costs (`launcher.report.job_report`), and the clock of `trainer.checkpoint_every_s`."""

    RECENT = 10

    def __init__(self, every_s: float):
        import collections
        import time

        self.every_s = every_s
        self.by_why: dict[str, dict] = {}
        """why (interval, timer, stop, end) -> {n, s}: bounded, whatever the run's length."""
        self.recent: collections.deque = collections.deque(maxlen=self.RECENT)
        """{step, why, s} of the latest checkpoints."""
        self._last = time.monotonic()  # the timer counts from the start of training, then from each checkpoint
        self._last_state: tuple[int, int] | None = None  # (step, epochs done) of the last one

    def due(self) -> bool:
        import time

        return bool(self.every_s) and time.monotonic() - self._last >= self.every_s

    def holds(self, step: int, epochs_done: int | None = None) -> bool:
        """A checkpoint of this step is written (and, given `epochs_done`, with the same epochs done:
        the very same state). Another of that step would go to the same directory (`checkpoint_name`),
        copied over a complete one. The run's end skips it at the step alone, as it always did; a stop
        only when the state is the same, since an epoch that closed at that step changed it."""
        if self._last_state is None or self._last_state[0] != step:
            return False
        return epochs_done is None or self._last_state[1] == epochs_done

    def written(self, step: int, epochs_done: int, why: str, started: float) -> None:
        import time

        self._last = time.monotonic()
        self._last_state = (step, epochs_done)
        took = self._last - started
        totals = self.by_why.setdefault(why, {"n": 0, "s": 0.0})
        totals["n"] += 1
        totals["s"] = round(totals["s"] + took, 3)
        self.recent.append({"step": step, "why": why, "s": round(took, 3)})

    def summary(self) -> dict:
        return {"by_why": {why: dict(t) for why, t in self.by_why.items()}, "recent": list(self.recent)}
