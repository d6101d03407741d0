"""Carry out a plan on the local simulated cluster: data in, cluster up, train, report, tear down."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path

import yaml

from smlaunch.cluster.plan import LaunchPlan
from smlaunch.config.schema import LaunchConfig
from smlaunch.launcher.job.train_spec import checkpoint_dir, output_root

log = logging.getLogger("smlaunch")


def prepare_job(cfg: LaunchConfig, plan: LaunchPlan) -> str | None:
    """The checkpoint to resume from (if any) and the resolved config file; the checks that need no
    cluster ran before (`launcher.job.preflight`). The train spec is built later, from the final plan."""
    found = None
    if cfg.trainer.resume:
        from smlaunch.trainers.checkpoints import latest_complete

        found = latest_complete(checkpoint_dir(cfg, plan))
        if found:
            log.info(f"resuming from checkpoint {found}")
    Path(plan.run_dir).mkdir(parents=True, exist_ok=True)
    (Path(plan.run_dir) / "resolved_config.yaml").write_text(
        yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return str(found) if found else None


def train_on_cluster(cfg: LaunchConfig, plan: LaunchPlan, resume_from: str | None, timings: dict,
                     stop=None, listed=None) -> dict:
    """Datasets, trainer, report, on the Ray cluster this process is connected to; `plan` is final
    (on SageMaker: after every host joined), and the workers' spec is built from it here. A `stop`
    the trainer has not honoured within its grace ends the fit (`stopping.overdue`). `listed`: the
    channels' listings already under way (a future of `list_channels`), else they are listed here."""
    from smlaunch.cluster.board import start_board
    from smlaunch.cluster.sampler import Samplers
    from smlaunch.launcher.report.job_report import build_report, write_report
    from smlaunch.launcher.job.live_events import LiveEvents
    from smlaunch.launcher.job.stopping import overdue
    from smlaunch.launcher.job.train_progress import TrainProgress
    from smlaunch.launcher.job.train_spec import builtin_rows, resumed_step, train_spec
    from smlaunch.pipelines.dataset import build_datasets, list_channels
    from smlaunch.pipelines.warmup import warm_preprocess_workers, warm_ray_data
    from smlaunch.trainers.fit import fit

    listings = listed.result() if listed is not None else list_channels(plan)
    data_classes = _data_classes(listings.get("train"))
    spec = train_spec(cfg, plan, resume_from, data_classes=data_classes,
                      train_units=_unit_count(listings.get("train"), next(c for c in plan.channels if c.name == "train")))
    samplers = Samplers(plan, cfg.monitor.sample_interval_s)
    started = time.perf_counter()
    try:
        datasets = build_datasets(cfg, plan, listings, spec.num_classes)
        warm_preprocess_workers(plan, cfg.pipeline.ops)  # while Ray Train starts its workers
        warm_ray_data(plan)
        try:  # TensorBoard is a view: a folder that cannot be written costs the events, not the job
            events = LiveEvents(Path(output_root(plan)) / "output" / "data" / "tensorboard")
        except OSError as exc:
            log.warning(f"TensorBoard events off: {exc}")
            events = None
        with TrainProgress(start_board(), spec.total_steps, resumed_step(resume_from), cfg.trainer.log_every,
                           events) as progress:
            result = fit(cfg, plan, datasets, spec, fatal=lambda: progress.fatal or overdue(stop))
    finally:
        samples = samplers.gather()
    timings = {**timings, "train_s": round(time.perf_counter() - started, 2)}
    from smlaunch.pipelines.corrupt import corrupt_summary

    result["corrupt_records"] = corrupt_summary()
    if isinstance(data_classes, list):
        result["classes"] = data_classes
    report = build_report(plan, result, cfg.trainer.batch_size, timings, samples,
                          cfg.monitor.model_dump(), builtin_rows(cfg, "train"))
    path = write_report(report, Path(output_root(plan)) / "output" / "data")
    report["path"] = str(path)
    return report


def _unit_count(listing, channel) -> int | None:
    """Units of the train channel as its reader cuts them (files, or Parquet row groups; every
    host's under ShardedByS3Key): what a complete epoch's positions cover (`trainers.position`)."""
    if listing is None:
        return None
    sharded = channel.distribution == "ShardedByS3Key" and channel.file_system is None
    shares = listing.files.values() if sharded else [next(iter(listing.files.values()))]
    groups = listing.row_groups
    return sum(groups[rel] for files in shares for rel, _ in files) if groups else sum(len(f) for f in shares)


def _data_classes(listing):
    """What the train channel's data says about its classes: image folders' names, a Parquet label
    column's count, or None (the config or a builtin dataset says)."""
    if listing is None:
        return None
    return listing.classes if listing.classes is not None else listing.num_classes


def run_local(cfg: LaunchConfig, plan: LaunchPlan, stop=None) -> dict:
    """Run the whole job on this machine and return the report (also written to the head's output)."""
    from smlaunch.cluster.host_tree import create_host_trees
    from smlaunch.pipelines.sources.channels import deliver_channels, start_pipe_agents

    started = time.perf_counter()
    resume_from = prepare_job(cfg, plan)
    create_host_trees(plan)
    with local_s3(cfg, plan) as s3_endpoint:
        deliver_channels(plan, s3_endpoint)
        agents = start_pipe_agents(plan, cfg.seed, s3_endpoint)
        report = _train_locally(cfg, plan, resume_from, agents, started, stop)
    report["summary"]["wall_s"] = round(time.perf_counter() - started, 2)
    from smlaunch.launcher.report.job_report import write_report

    write_report({k: v for k, v in report.items() if k != "path"}, Path(report["path"]).parent)
    return report


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

    seeds = {uri: prepare_builtin(folder[len("builtin:"):]) if folder.startswith("builtin:") else Path(folder).expanduser()
             for uri, folder in cfg.run.s3_seed.items()}
    saved = {key: os.environ.get(key) for key in LocalS3.environment()}
    with LocalS3(seeds) as server:
        log.info(f"local S3 server at {server.endpoint_url}" + (f", seeded: {', '.join(seeds)}" if seeds else ""))
        _set_env(LocalS3.environment())  # simulated hosts inherit it: requests are signed with throwaway keys
        try:
            yield server.endpoint_url
        finally:
            _set_env(saved)


def preload_driver_imports() -> threading.Thread:
    """Import torch (Ray Train's torch trainer and the TensorBoard writer need it) in a thread while
    the cluster starts: the driver mostly waits for the simulated hosts then, and the 2-4 s the
    import takes would otherwise sit between the cluster being up and Ray Train starting. Only
    modules that do not import ray: ray must load after the cluster's auth settings are in the
    environment (`LocalCluster.__enter__`)."""
    def load() -> None:
        import torch  # noqa: F401
        import tensorboardX.event_file_writer  # noqa: F401

    thread = threading.Thread(target=load, name="preload-imports", daemon=True)
    thread.start()
    return thread


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
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that uses the listing
            listed.set_exception(exc)

    threading.Thread(target=run, name="list-channels", daemon=True).start()
    return listed


def _set_env(values: dict) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _train_locally(cfg, plan, resume_from, agents, started, stop) -> dict:
    from smlaunch.cluster.local import LocalCluster
    from smlaunch.launcher.job.stopping import forward_stop_to_trainer

    from smlaunch.text import plural

    log.info(f"cluster: starting {plural(len(plan.hosts), 'simulated host')}")
    preload_driver_imports()
    listed = list_while_starting(plan)
    try:
        with LocalCluster(plan):
            if stop is not None:
                stop.install()  # ray.init replaced the SIGTERM handler with one that exits at once
            timings = {"cluster_start_s": round(time.perf_counter() - started, 2)}
            log.info(f"cluster: {plural(len(plan.hosts), 'host')} up after {timings['cluster_start_s']:.1f} s")
            with forward_stop_to_trainer(stop):
                return train_on_cluster(cfg, plan, resume_from, timings, stop, listed)
    finally:
        for agent in agents:
            agent.stop()
