"""Checks that need no cluster, run by `plan`, `run` (before anything starts) and `submit`.

The schema already refused what the config alone can show. What is left needs a look at this
machine, not a cluster: that timm has the model, that user ops import, and that each local
channel source exists and holds files of its declared format. Each problem is one line naming
the config field; all of them are reported at once, so one `plan` shows everything to fix.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import ConfigError

SNIFF_FILES = 1000
"""Files per channel whose first bytes are checked (the first in sorted order); listing is cheap,
opening a million files is not."""


def preflight(cfg: LaunchConfig, sources: bool = True) -> None:
    """`ConfigError` listing every problem; `sources=False` skips local folders (a SageMaker host,
    where channels arrive under /opt/ml instead)."""
    problems = code_problems(cfg)
    if sources:
        problems += source_problems(cfg)
    if problems:
        raise ConfigError("; ".join(problems))


def code_problems(cfg: LaunchConfig) -> list[str]:
    """Every check but the local sources': the model, the ops, the recipe, and what the config says
    against the data it names (`fit_problems`). `submit` runs these as `plan` does, with its own look
    at the folders it uploads: none of them may wait for a billed host."""
    return model_problems(cfg) + op_problems(cfg) + recipe_problems(cfg) + fit_problems(cfg)


def model_problems(cfg: LaunchConfig) -> list[str]:
    """timm has the model, and a local `model.pretrained` file is there. An `s3://` file is not
    looked up: `plan` works offline, and rank 0 names a missing object in one line anyway. Whether
    the file's weights fit the model needs torch; that is checked when it is loaded."""
    from smlaunch.trainers.model import check_model_name, factory_problems
    from smlaunch.user_code import check

    problems = []
    if cfg.trainer.loop:  # called as loop(config): its model is its own business
        return [p for p in [check(cfg.trainer.loop, "trainer.loop", (dict(cfg.trainer.loop_config),))] if p]
    model = cfg.model
    if model is None:  # the schema asks for one unless trainer.loop is set
        return ["model: required (model.name, a timm model, or model.factory) unless trainer.loop is set"]
    if model.factory:
        problems += factory_problems(model.factory, dict(model.params))
    elif model.name is None:  # the schema asks for exactly one of them
        problems.append("model: set model.name (a timm model) or model.factory")
    else:
        try:
            check_model_name(model.name)
        except ConfigError as exc:
            problems.append(str(exc))
    if cfg.task is not None:  # called as loss(model, batch) and evaluate(model, batch)
        problems += [
            p
            for p in (
                check(cfg.task.loss, "task.loss", (None, None)),
                cfg.task.evaluate and check(cfg.task.evaluate, "task.evaluate", (None, None)),
            )
            if p
        ]
    weights = model.pretrained
    if weights and not weights.startswith("s3://"):
        path = Path(weights).expanduser()
        if not path.exists():
            problems.append(f"model.pretrained: {weights} does not exist")
        elif not path.is_file():
            problems.append(
                f"model.pretrained: {weights} is not a file (a weights file: .safetensors, .pth, .pt or .bin)"
            )
        elif path.stat().st_size == 0:
            problems.append(f"model.pretrained: {weights} is empty")
    return problems


def recipe_problems(cfg: LaunchConfig) -> list[str]:
    """The recipe's functions import and bind as the loop calls them (`optimizer.factory(model,
    **params)`, `schedule.factory(optimizer, total_steps, **params)`, `task.metrics()`,
    `task.predict(model, batch)`, each of `trainer.callbacks` a class), and fp16 has GPUs to run on.
    What they return is checked on the ranks, before the first step (`trainers.optim`)."""
    from smlaunch.cluster.topology import config_train_group
    from smlaunch.user_code import check

    if cfg.trainer.loop:  # the schema refused the recipe's keys beside your loop
        return []
    calls = [
        (cfg.optimizer, "optimizer.factory", (None,)),
        (cfg.schedule, "schedule.factory", (None, 0)),
    ]
    problems = [check(c.factory, field, args, dict(c.params)) for c, field, args in calls if c is not None]
    if cfg.schedule is not None and not problems[-1]:
        problems.append(_schedule_problem(cfg.schedule.factory, dict(cfg.schedule.params)))
    if cfg.task is not None and cfg.task.metrics and cfg.task.predict:
        problems += [check(cfg.task.metrics, "task.metrics"), check(cfg.task.predict, "task.predict", (None, None))]
    problems += [_class_problem(name, f"trainer.callbacks.{i}") for i, name in enumerate(cfg.trainer.callbacks)]
    if cfg.trainer.precision == "fp16":
        try:
            group = {g.name: g for g in cfg.cluster.instance_groups}[config_train_group(cfg)[0]]
        except ConfigError:
            group = None  # no group has GPUs: the plan says so in its own line
        if group is None or group.spec.gpus == 0:
            where = f"the train instances ({group.instance_type})" if group else "no instance group"
            problems.append(f"trainer.precision: fp16 needs a GPU, and {where} have none; use auto or fp32")
    return [p for p in problems if p]


def fit_problems(cfg: LaunchConfig) -> list[str]:
    """What the config says against a builtin train dataset it names, from the dataset's manifest
    (its classes and rows are constants): a class count below the labels (each label past it a bad
    sample in a data task), and a batch no rank's share of an epoch fills (the first epoch would end
    the run with no step). Other sources are only known once listed or read."""
    from smlaunch.cluster.topology import config_train_group, place_workers
    from smlaunch.pipelines.builtin import builtin_facts
    from smlaunch.text import plural

    train = cfg.channels["train"]
    facts = builtin_facts(train.source)
    if cfg.trainer.loop or facts is None:
        return []
    classes, rows = facts
    problems = []
    if cfg.model and cfg.model.num_classes is not None and cfg.model.num_classes < classes:
        problems.append(
            f"model.num_classes: {cfg.model.num_classes}, and {train.source} has {classes} classes (labels "
            f"0..{classes - 1}); leave it out to take the dataset's, or set it to {classes} or more"
        )
    try:
        group = {g.name: g for g in cfg.cluster.instance_groups}[config_train_group(cfg)[0]]
    except ConfigError:
        return problems  # no train group: the plan names it
    workers = len(
        place_workers(
            [(f"{group.name}-{i}", group.spec.gpus) for i in range(group.instance_count)], cfg.trainer.max_workers
        )
    )
    share = rows // max(1, workers)
    if share < cfg.trainer.batch_size:
        problems.append(
            f"trainer.batch_size: {cfg.trainer.batch_size}, and {train.source}'s {rows} rows an epoch "
            f"over {plural(workers, 'train worker')} are {share} each: no full batch, so no step; use a batch of "
            f"at most {share}"
        )
    return problems


def _schedule_problem(factory: str, params: dict) -> str | None:
    """Whether `schedule.factory` returns a scheduler: called on a stand-in optimizer (one parameter, the
    model is not built at `plan`). A factory that fails on the stand-in is left to the ranks, which
    call it on the real optimizer."""
    import torch

    from smlaunch.user_code import resolve

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    try:
        made = resolve(factory, "schedule.factory")(optimizer, 1000, **params)
    except Exception:  # any: it may need a real model's groups; the ranks will say
        return None
    if all(callable(getattr(made, name, None)) for name in ("step", "state_dict", "load_state_dict")):
        return None
    return (
        f"schedule.factory: {factory} returned {type(made).__name__}; return a "
        "torch.optim.lr_scheduler.LRScheduler of the optimizer it is given"
    )


def _class_problem(path: str, field: str) -> str | None:
    import inspect

    from smlaunch.user_code import resolve

    try:
        found = resolve(path, field)
    except ConfigError as exc:
        return str(exc)
    return None if inspect.isclass(found) else f"{field}: {path} is not a class (a callback is package.module:Class)"


def op_problems(cfg: LaunchConfig) -> list[str]:
    """Each user and `map` op imports and takes `(images or batch, rng, train, **params)`."""
    from smlaunch.user_code import check

    problems = []
    for i, op in enumerate(cfg.pipeline.ops):
        if op.op in ("user", "map"):
            problem = check(op.function, f"pipeline.ops.{i}.function", (None, None, True), dict(op.params))
            if problem:
                problems.append(problem)
    return problems


def source_problems(cfg: LaunchConfig) -> list[str]:
    """Each local channel source (and local S3 seed folder): present, not empty, of its format."""
    problems = []
    for name, ch in cfg.channels.items():
        if ch.source.startswith(("s3://", "builtin:")):
            continue
        field = f"channels.{name}.source"
        path = Path(ch.source).expanduser()
        if ch.is_manifest:
            if not path.is_file():
                problems.append(f"{field}: {ch.source} is not a file (an augmented manifest)")
            continue
        if ch.is_manifest_file:
            problems += manifest_file_problems(field, ch.source, ch.record_format)
            continue
        problems += folder_problems(field, path, ch.record_format)
    for uri, folder in cfg.run.s3_seed.items():
        if not folder.startswith("builtin:") and not Path(folder).expanduser().is_dir():
            problems.append(f"run.s3_seed.{uri}: {folder} is not a directory")
    return problems


def manifest_file_problems(field: str, source: str, record_format: str) -> list[str]:
    """A local ManifestFile parses and, when its prefix is a local folder, lists files that exist
    and are of the channel's format."""
    from smlaunch.errors import DataError
    from smlaunch.pipelines.sources.manifest_file import manifest_file_objects, read_manifest_file

    try:
        prefix, _ = read_manifest_file(source)
        if prefix.startswith("s3://"):
            return []
        base, listed = manifest_file_objects(source)
    except DataError as exc:
        return [f"{field}: {exc}"]
    return _sniff(field, [Path(base.uri) / rel for rel, _ in listed], record_format)


def folder_problems(field: str, path: Path, record_format: str) -> list[str]:
    if not path.is_dir():
        return [f"{field}: {path} is not a directory" + ("" if path.exists() else " (it does not exist)")]
    files = list(itertools.islice(_data_files(path), SNIFF_FILES))
    if not files:
        return [f"{field}: {path} holds no files (hidden ones are skipped, as a channel's reader does)"]
    from smlaunch.pipelines.formats import CHANNEL_FORMATS

    spec = CHANNEL_FORMATS[record_format]
    if spec.layout == "images":
        return _image_folder_problems(field, path, files)
    files = [
        f for f in files if spec.is_data(str(f.relative_to(path)))
    ]  # as the listing counts data (Parquet: no _SUCCESS)
    return _sniff(field, files, record_format)


def _sniff(field: str, files: list[Path], record_format: str) -> list[str]:
    from smlaunch.pipelines.formats.sniff import describe, matches, read_head, suggestion

    for file in files[:SNIFF_FILES]:
        try:
            head = read_head(file)
        except OSError as exc:
            return [f"{field}: {file}: {exc.strerror or exc}"]
        if head and not matches(head, record_format):  # an empty file is a file of no records
            return [
                f"{field}: {file} is {describe(head)}, not a {record_format} file (channel record_format: "
                f"{record_format}){suggestion(head) or _hint(files[:SNIFF_FILES], file)}"
            ]
    return []


def _hint(files: list[Path], skip: Path) -> str:
    """When the mismatched file says nothing (a README), what another file looks like."""
    from smlaunch.pipelines.formats.sniff import describe, read_head, suggestion

    for file in files:
        if file == skip:
            continue
        try:
            head = read_head(file)
        except OSError:
            continue
        if suggestion(head):
            return f"; {file.name} is {describe(head)}{suggestion(head)}"
    return ""


def _image_folder_problems(field: str, path: Path, files: list[Path]) -> list[str]:
    """torchvision's ImageFolder rules: images in class folders; a class folder with none is an
    error. Each class folder is read up to its first image only: walking a 1.28M-image folder
    whole here took over a minute before the cluster started (the hosts list it anyway)."""
    from smlaunch.pipelines.formats.sniff import describe, read_head, suggestion

    with os.scandir(path) as entries:
        classes = sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
    empty = [name for name in classes if not _holds_image(path / name)]
    if len(empty) == len(classes):
        head = read_head(files[0])
        return [
            f"{field}: {path} holds no images in class folders (<class>/<image>.jpg, ...); {files[0]} is "
            f"{describe(head)}{suggestion(head)}"
        ]
    if empty:
        return [
            f"{field}: class folder {', '.join(empty)} in {path} holds no image (torchvision's ImageFolder "
            "refuses it too)"
        ]
    return []


def _holds_image(folder: Path) -> bool:
    """Whether an image (by extension) is under `folder`, at any depth; stops at the first."""
    from smlaunch.config.formats import IMAGE_EXTENSIONS

    pending = [folder]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif entry.name.lower().endswith(IMAGE_EXTENSIONS):
                    return True
    return False


def _data_files(root: Path):
    """Non-hidden files under `root`, sorted as the channel readers list them, one at a time
    (the checks look at the first `SNIFF_FILES`)."""
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        yield from (Path(directory) / n for n in sorted(names) if not n.startswith("."))
