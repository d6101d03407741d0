"""Input channels on the hosts: where a channel's data comes from and how a host sees it.

In File mode SageMaker copies a channel to `/opt/ml/input/data/<channel>` on every host that
receives it before the job starts; locally `deliver_file_channels` plays that part for the
simulated hosts. Reading always goes through the host-local directory, as on SageMaker.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from smlaunch.cluster.plan import ChannelPlan, LaunchPlan
from smlaunch.errors import DataError


def channel_dir(opt_ml: str | Path | None, channel: str) -> Path:
    """`<opt_ml>/input/data/<channel>`; `opt_ml` None means this host's own tree (SAGEMAKER_BASE_DIR),
    so a task resolves it on the host it runs on."""
    if opt_ml is None:
        from smlaunch.cluster.sagemaker_env import base_dir

        opt_ml = base_dir()
    return Path(opt_ml) / "input" / "data" / channel


def resolve_source(channel: ChannelPlan) -> Path:
    """The local directory holding `channel`'s record files, preparing a builtin one if needed."""
    if channel.source.startswith("builtin:digits/"):
        from smlaunch.pipelines.digits import prepare_digits

        return prepare_digits() / channel.source.split("/", 1)[1]
    path = Path(channel.source).expanduser()
    if not path.is_dir():
        raise DataError(f"channel '{channel.name}': source {channel.source} is not a directory")
    return path


def list_host_channel(opt_ml: str | None, channel: str) -> list[tuple[str, int]]:
    """`list_record_files` of a channel as the host running this sees it."""
    return list_record_files(channel_dir(opt_ml, channel), channel)


def list_record_files(directory: Path, channel: str) -> list[tuple[str, int]]:
    """(relative path, size) of every data file under `directory`, sorted; hidden files skipped."""
    if not directory.is_dir():
        raise DataError(f"channel '{channel}': {directory} does not exist on this host")
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


def start_pipe_agents(plan: LaunchPlan, seed: int) -> list:
    """Play SageMaker's part for each Pipe-mode channel: an agent per receiving host feeding its FIFOs."""
    from smlaunch.pipelines.agent import PipeAgent, local_objects, objects_for_host

    agents = []
    for channel in plan.channels:
        if channel.input_mode != "Pipe":
            continue
        objects = local_objects(resolve_source(channel))
        for i, host in enumerate(channel.hosts):
            mine = objects_for_host(objects, channel.distribution, i, len(channel.hosts))
            agents.append(PipeAgent(channel_dir(plan.host(host).opt_ml, channel.name).parent, channel.name, mine,
                                    epochs=PIPE_EPOCHS_LIMIT, seed=seed + i,
                                    reader_wait_s=LOCAL_READER_WAIT_S).start())
    return agents


def deliver_file_channels(plan: LaunchPlan) -> None:
    """Copy each File-mode channel to the hosts that receive it (hard links where possible)."""
    for channel in plan.channels:
        if channel.input_mode != "File":
            continue
        source = resolve_source(channel)
        files = list_record_files(source, channel.name)
        for host in channel.hosts:
            target = channel_dir(plan.host(host).opt_ml, channel.name)
            for rel, _ in files:
                dest = target / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.exists():
                    dest.unlink()
                try:
                    os.link(source / rel, dest)
                except OSError:
                    shutil.copy2(source / rel, dest)
