"""Input channels on the hosts: where a channel's data comes from and how a host sees it.

In File mode SageMaker copies a channel to `/opt/ml/input/data/<channel>` on every host that
receives it before the job starts, in FastFile mode it mounts it there, and in Pipe mode it
streams it into FIFOs beside it; locally `deliver_channels` and `start_pipe_agents` play those
parts for the simulated hosts. Reading always goes through the host-local directory, as on
SageMaker, so the readers cannot tell a simulated host from a real one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

from smlaunch.cluster.plan import ChannelPlan, LaunchPlan
from smlaunch.errors import DataError
from smlaunch.pipelines.sources.fastfile import read_view, write_view
from smlaunch.pipelines.sources.file_list import FileList
from smlaunch.pipelines.sources.objects import ChannelObject, ObjectSource, objects_for_host


def channel_dir(opt_ml: str | Path | None, channel: str) -> Path:
    """`<opt_ml>/input/data/<channel>`; `opt_ml` None means this host's own tree (SAGEMAKER_BASE_DIR),
    so a task resolves it on the host it runs on."""
    if opt_ml is None:
        from smlaunch.cluster.sagemaker_env import base_dir

        opt_ml = base_dir()
    return Path(opt_ml) / "input" / "data" / channel


def channel_source(channel: ChannelPlan, s3_endpoint: str | None = None) -> ObjectSource:
    """Where `channel`'s objects come from, preparing a builtin dataset if needed."""
    if channel.source.startswith("builtin:"):
        from smlaunch.pipelines.builtin import prepare_builtin, split_source

        parsed = split_source(channel.source)
        assert parsed is not None, f"split_source parses every builtin: source, not {channel.source!r}"
        name, split = parsed
        return ObjectSource(str(prepare_builtin(name) / split))
    if channel.source.startswith("s3://"):
        return ObjectSource(channel.source, s3_endpoint)
    path = Path(channel.source).expanduser()
    if channel.s3_data_type == "S3Prefix" and not path.is_dir():
        raise DataError(f"channel '{channel.name}': source {channel.source} is not a directory")
    return ObjectSource(str(path))


def channel_objects(channel: ChannelPlan, s3_endpoint: str | None = None) -> tuple[ObjectSource, list[tuple[str, int]]]:
    """Where the channel's objects are read from, and (relative path, size) of each: the whole
    prefix, or what its ManifestFile lists."""
    if channel.s3_data_type == "ManifestFile":
        from smlaunch.pipelines.sources.manifest_file import manifest_file_objects

        try:
            return manifest_file_objects(channel.source, s3_endpoint)
        except DataError as exc:
            raise DataError(f"channel '{channel.name}': {exc}") from None
    source = channel_source(channel, s3_endpoint)
    return source, source.list()


def list_host_channel(opt_ml: str | None, channel: str) -> Sequence[tuple[str, int]]:
    """`list_record_files` of a channel as the host running this sees it."""
    return list_record_files(channel_dir(opt_ml, channel), channel)


def list_record_files(directory: Path, channel: str) -> Sequence[tuple[str, int]]:
    """(relative path, size) of every data file under `directory` (a FastFile view's objects, as its
    `FileList`), sorted; hidden files skipped."""
    if not directory.is_dir():
        raise DataError(f"channel '{channel}': {directory} does not exist on this host")
    view = read_view(directory)
    files: FileList | list[tuple[str, int]]
    if view is not None:
        files = view[1]
    else:
        files = []
        for root, dirs, names in os.walk(directory):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if not name.startswith("."):
                    path = Path(root) / name
                    files.append((str(path.relative_to(directory)), path.stat().st_size))
    if not files:
        raise DataError(f"channel '{channel}': no files in {directory}")
    return files


PIPE_EPOCHS_LIMIT = 100_000
"""Local Pipe agents offer this many epochs; the run stops them when training ends."""
LOCAL_READER_WAIT_S = 24 * 3600.0
"""A local agent waits for the trainer's next epoch as long as the run lasts (the run stops it)."""


def start_pipe_agents(plan: LaunchPlan, seed: int, s3_endpoint: str | None = None) -> list:
    """Play SageMaker's part for each Pipe-mode channel: an agent per receiving host feeding its FIFOs."""
    from smlaunch.pipelines.sources.manifest import manifest_objects
    from smlaunch.pipelines.sources.pipe_agent import PipeAgent

    agents = []
    for channel in plan.channels:
        if channel.input_mode != "Pipe":
            continue
        if channel.attribute_names:
            objects = manifest_objects(channel_source(channel, s3_endpoint), channel.attribute_names)
        else:
            source, listed = channel_objects(channel, s3_endpoint)
            objects = [ChannelObject(rel, size, functools.partial(source.read, rel)) for rel, size in listed]
        if not objects:  # every epoch's FIFO would be empty: fail now, as File mode does
            raise DataError(f"channel '{channel.name}': no objects under {channel.source}")
        for i, host in enumerate(channel.hosts):
            mine = objects_for_host(objects, channel.distribution, i, len(channel.hosts))
            agents.append(
                PipeAgent(
                    channel_dir(plan.host(host).opt_ml, channel.name).parent,
                    channel.name,
                    mine,
                    epochs=PIPE_EPOCHS_LIMIT,
                    seed=seed + i,
                    reader_wait_s=LOCAL_READER_WAIT_S,
                ).start()
            )
    return agents


def deliver_channels(plan: LaunchPlan, s3_endpoint: str | None = None) -> None:
    """Before the job starts, as SageMaker does: give each File-mode channel to the hosts that receive
    it, and expose each FastFile channel as a view that fetches nothing yet. With ShardedByS3Key
    host i of n receives every n-th object.

    A File channel from a local folder that every host receives whole is that folder, linked
    (`link_folder`): nothing is listed, copied or linked file by file. Hard-linking a folder of
    1.28 million images took 72 s before the cluster could start, for files the hosts already
    see. Sharded, or from S3, the objects are copied (hard links from a local folder)."""
    for channel in plan.channels:
        if channel.input_mode not in ("File", "FastFile"):
            continue
        if channel.file_system is not None:
            mount_file_system(channel, [channel_dir(plan.host(h).opt_ml, channel.name) for h in channel.hosts])
            continue
        if (
            channel.input_mode == "File"
            and channel.distribution == "FullyReplicated"
            and channel.s3_data_type == "S3Prefix"
            and not channel.source.startswith("s3://")
        ):
            folder = Path(channel_source(channel).uri).expanduser().resolve()
            if not _holds_a_file(folder):
                raise DataError(f"channel '{channel.name}': no objects under {channel.source}")
            for host in channel.hosts:
                link_folder(folder, channel_dir(plan.host(host).opt_ml, channel.name))
            continue
        source, objects = channel_objects(channel, s3_endpoint)
        if not objects:
            raise DataError(f"channel '{channel.name}': no objects under {channel.source}")
        for i, host in enumerate(channel.hosts):
            target = channel_dir(plan.host(host).opt_ml, channel.name)
            mine = objects_for_host(objects, channel.distribution, i, len(channel.hosts))
            if channel.input_mode == "FastFile":
                write_view(target, source, mine)
            else:
                copy_objects(source, mine, target)


def mount_file_system(channel: ChannelPlan, targets: list[Path]) -> None:
    """Stand in for an FSx / EFS mount: every receiving host's channel directory is the `source`
    folder itself (a symbolic link, nothing copied), as every host of a job mounts one file system."""
    folder = Path(channel.source).expanduser().resolve()
    if not folder.is_dir():
        raise DataError(
            f"channel '{channel.name}': source {channel.source} (the local stand-in for "
            f"{channel.file_system}) is not a directory"
        )
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            continue
        target.symlink_to(folder, target_is_directory=True)


def link_folder(folder: Path, target: Path) -> None:
    """Make the host's channel directory `target` a symbolic link to `folder`. As with a copy, the
    channel holds the folder's files; unlike one, a file the job writes there lands in `folder`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink():
        target.unlink()
    target.symlink_to(folder, target_is_directory=True)


def _holds_a_file(folder: Path) -> bool:
    """Whether `folder` holds a file that is not hidden, at any depth (stops at the first)."""
    for _, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if any(not name.startswith(".") for name in names):
            return True
    return False


def copy_objects(source: ObjectSource, objects: list[tuple[str, int]], target: Path, link: bool = True) -> None:
    """Download `objects` into `target` (each through a temporary name, so a half-copied file is
    never read); from a local folder, hard links when `link` and the filesystem allow. Shows
    progress in files and MB while it lasts (File mode from S3 can take a while)."""
    from smlaunch.console import Progress

    total_mb = sum(size for _, size in objects) / 1e6
    with Progress(f"copying to {target}", total=len(objects), unit="file", leave=False) as bar:
        done = 0
        for rel, size in objects:
            _copy_object(source, rel, target, link)
            done += size
            bar.describe(f"{done / 1e6:,.1f}/{total_mb:,.1f} MB")
            bar.update(1)


def _copy_object(source: ObjectSource, rel: str, target: Path, link: bool) -> None:
    dest = target / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    if link and not source.is_s3:
        try:
            os.link(Path(source.uri).expanduser() / rel, dest)
            return
        except OSError:
            pass
    tmp = dest.with_name(f".{dest.name}.part")
    with open(tmp, "wb") as f:
        for chunk in source.read(rel):
            f.write(chunk)
    tmp.replace(dest)
