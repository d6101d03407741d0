"""The local path: every host of the config simulated as a Ray node on this machine.

`local_cluster` is this path's part of the job (`launcher.job.run.run_job` does the rest): each
host's `/opt/ml` tree, the channels delivered into them (a local S3 server for `s3://` sources),
Pipe mode's FIFO agents (`local_data`), the Ray nodes (`cluster.local.LocalCluster`), and, while
those start, torch's import and the channels' listing in threads. Everything it started ends with
the block.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

from smlaunch.cluster.plan import LaunchPlan
from smlaunch.config.schema import LaunchConfig
from smlaunch.launcher.job.run import ClusterUp

log = logging.getLogger("smlaunch")


def run_local(cfg: LaunchConfig, plan: LaunchPlan, stop=None) -> dict:
    """Run the whole job on this machine and return the report (also written to the head's output)."""
    from smlaunch.launcher.job.run import run_job

    return run_job(cfg, local_cluster(cfg, plan), stop)


@contextlib.contextmanager
def local_cluster(cfg: LaunchConfig, plan: LaunchPlan):
    """The simulated hosts with their data, up; torn down (nodes, agents, S3 server) on exit."""
    from smlaunch.cluster.local import LocalCluster
    from smlaunch.text import plural

    with local_data(cfg, plan):
        log.info(f"cluster: starting {plural(len(plan.hosts), 'simulated host')}")
        listed = list_while_starting(plan)
        with LocalCluster(plan):
            yield ClusterUp(plan, listed)


@contextlib.contextmanager
def local_data(cfg: LaunchConfig, plan: LaunchPlan):
    """Each simulated host's `/opt/ml` tree, filled as SageMaker fills a host's: the channels it
    receives (`s3://` ones from a local S3 server, `local_s3`), and a Pipe-mode agent per Pipe
    channel writing its FIFOs. Also what `sm-launch simulate` gives its host processes."""
    from smlaunch.cluster.host_tree import create_host_trees
    from smlaunch.pipelines.sources.channels import deliver_channels, start_pipe_agents

    create_host_trees(plan)
    with local_s3(cfg, plan) as s3_endpoint:
        deliver_channels(plan, s3_endpoint)
        agents = start_pipe_agents(plan, cfg.seed, s3_endpoint)
        try:
            yield
        finally:
            for agent in agents:
                agent.stop()


@contextlib.contextmanager
def local_s3(cfg: LaunchConfig, plan: LaunchPlan):
    """The S3 endpoint of a local run's `s3://` channels: a local S3 server seeded from `run.s3_seed`
    (the default), boto3's own (`aws`), or a given URL. Yields None when no channel uses S3."""
    if not any(c.source.startswith("s3://") for c in plan.channels):
        yield None
        return
    if cfg.run.s3_endpoint is not None:
        yield None if cfg.run.s3_endpoint == "aws" else cfg.run.s3_endpoint
        return
    from smlaunch.pipelines.builtin import prepare_builtin
    from smlaunch.pipelines.sources.local_s3 import LocalS3

    seeds = {
        uri: prepare_builtin(folder[len("builtin:") :]) if folder.startswith("builtin:") else Path(folder).expanduser()
        for uri, folder in cfg.run.s3_seed.items()
    }
    saved = {key: os.environ.get(key) for key in LocalS3.environment()}
    with LocalS3(seeds) as server:
        log.info(f"local S3 server at {server.endpoint_url}" + (f", seeded: {', '.join(seeds)}" if seeds else ""))
        _set_env(LocalS3.environment())  # simulated hosts inherit it: requests are signed with throwaway keys
        try:
            yield server.endpoint_url
        finally:
            _set_env(saved)


def list_while_starting(plan: LaunchPlan):
    """The channels' listings, as a future: the simulated hosts' channel directories are on this
    machine, so a thread lists them while the cluster starts (the driver mostly waits then). A
    1.28M-file image folder took 1.1 s to list and 1.5-2.4 s more to its first step when listed by
    a task on its host after the cluster was up (bench/scale.py). An error is raised where the
    listing is used, as a listing's error always was. A daemon thread, not an executor's: a lister
    stuck on a hung mount (its stall deadline already raised) must not hold the process at exit."""
    from concurrent.futures import Future

    from smlaunch.pipelines.dataset import list_channels

    listed: Future = Future()

    def run() -> None:
        try:
            listed.set_result(list_channels(plan, here=True))
        except BaseException as exc:  # handed to the thread that uses the listing
            listed.set_exception(exc)

    threading.Thread(target=run, name="list-channels", daemon=True).start()
    return listed


def _set_env(values: dict) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
