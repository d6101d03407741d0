"""Checks that need no cluster, run by `plan`, `run` (before anything starts) and `submit`.

The schema already refused what the config alone can show. What is left needs a look at this
machine, not a cluster: that timm has the model, that user ops import, and that each local
channel source exists and holds files of its declared format. Each problem is one line naming
the config field; all of them are reported at once, so one `plan` shows everything to fix.
"""

from __future__ import annotations

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
    problems = model_problems(cfg) + op_problems(cfg)
    if sources:
        problems += source_problems(cfg)
    if problems:
        raise ConfigError("; ".join(problems))


def model_problems(cfg: LaunchConfig) -> list[str]:
    from smlaunch.trainers.model import check_model_name

    try:
        check_model_name(cfg.model.name)
    except ConfigError as exc:
        return [str(exc)]
    return []


def op_problems(cfg: LaunchConfig) -> list[str]:
    problems = []
    for i, op in enumerate(cfg.pipeline.ops):
        if op.op == "user":
            from smlaunch.pipelines.ops import resolve_user_op

            try:
                resolve_user_op(op.function)
            except ConfigError as exc:
                problems.append(f"pipeline.ops.{i}.function: {exc}")
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
        problems += folder_problems(field, path, ch.record_format)
    for uri, folder in cfg.run.s3_seed.items():
        if not folder.startswith("builtin:") and not Path(folder).expanduser().is_dir():
            problems.append(f"run.s3_seed.{uri}: {folder} is not a directory")
    return problems


def folder_problems(field: str, path: Path, record_format: str) -> list[str]:
    from smlaunch.pipelines.formats.sniff import describe, matches, read_head

    if not path.is_dir():
        return [f"{field}: {path} is not a directory" + ("" if path.exists() else " (it does not exist)")]
    files = _data_files(path)
    if not files:
        return [f"{field}: {path} holds no files (hidden ones are skipped, as a channel's reader does)"]
    for file in files[:SNIFF_FILES]:
        try:
            head = read_head(file)
        except OSError as exc:
            return [f"{field}: {file}: {exc.strerror or exc}"]
        if head and not matches(head, record_format):  # an empty file is a file of no records
            return [f"{field}: {file} is {describe(head)}, not a {record_format} file "
                    f"(channel record_format: {record_format})"]
    return []


def _data_files(root: Path) -> list[Path]:
    """Non-hidden files under `root`, sorted as the channel readers list them."""
    found = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(directory) / n for n in sorted(names) if not n.startswith(".")]
    return found
