"""The job's body, the same on every path: cluster up, resume point, datasets, train, report.

A path differs only in how its cluster comes up and goes down: one context manager each, which
yields a `ClusterUp` (the final plan, and the channels' listings where they were started early):
the local simulation (`launcher.local.run.local_cluster`), a SageMaker job's head
(`launcher.sagemaker.run`: its node, the other hosts' join, the job state they watch) and a
running Ray cluster (`launcher.attached.run`: matched, its channel trees exposed). `run_job` does
the rest once, so stop handling (the signal handler Ray's init replaced, the stop forwarded to the
trainer, a stop the trainer does not honour in time) and the run's timings (`cluster_start_s`,
`train_s`, `wall_s`) are the same everywhere.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from smlaunch.cluster.plan import LaunchPlan
from smlaunch.config.schema import LaunchConfig
from smlaunch.launcher.job.train_spec import checkpoint_dir, model_root, output_root

log = logging.getLogger("smlaunch")


@dataclass
class ClusterUp:
    """What a path's cluster context manager yields once the cluster is up and this process is
    connected. `report` is set by `run_job` before the block ends, so the path's teardown can read
    the outcome (a SageMaker head publishes it to the other hosts)."""

    plan: LaunchPlan
    """The final plan: on SageMaker after every host joined, on a running cluster as matched."""
    listed: Any = None
    """A future of the channels' listings started while the cluster came up, or None."""
    report: dict | None = None
    rendering: Any = None
    """The report's plots being drawn (`report.job_report.Rendering`) while the cluster goes down;
    a path that ships the output directory elsewhere on exit (an `s3://` run.dir) waits for them."""
    elastic: Any = None
    """The loop resizing the data hosts while training (`cluster.autoscale.controller`), or None."""

    def wait_for_outputs(self) -> None:
        if self.rendering is not None:
            self.rendering.wait()


def run_job(cfg: LaunchConfig, cluster: AbstractContextManager[ClusterUp], stop=None) -> dict:
    """Run the job on the cluster `cluster` brings up and return its report (also written under
    the head's output). `stop`: the run's `StopRequest` (SIGTERM or the toolkit's exit)."""
    from smlaunch.launcher.job.stopping import forward_stop_to_trainer
    from smlaunch.launcher.job.tracking_setup import start_tracking
    from smlaunch.launcher.report.job_report import Rendering, write_report
    from smlaunch.launcher.report.phases import command_started, mark, phases
    from smlaunch.text import plural

    since, started = command_started(), time.perf_counter()
    marks: dict[str, float] = {}
    preload_driver_imports()
    with cluster as up:
        if stop is not None:
            stop.install()  # ray.init replaced the SIGTERM handler with one that exits at once
        mark(marks, "cluster_up")
        timings = {"cluster_start_s": round(time.perf_counter() - started, 2)}
        log.info(f"cluster: {plural(len(up.plan.hosts), 'host')} up after {timings['cluster_start_s']:.1f} s")
        resume_from = prepare_job(cfg, up.plan)
        tracker = start_tracking(cfg, up.plan, resume_from)
        loop_hosts = sorted({w.host for w in up.plan.workers}) if cfg.trainer.loop else None
        try:
            with forward_stop_to_trainer(stop, drain=loop_hosts):
                report = train_on_cluster(
                    cfg, up.plan, resume_from, timings, stop, up.listed, marks, up.elastic, tracker
                )
        except BaseException:
            if tracker is not None:
                tracker.finish("KILLED" if stop is not None and stop.is_set() else "FAILED", [])
            raise
        report["summary"]["wall_s"] = round(time.perf_counter() - started, 2)
        report["summary"]["command_started_at"] = round(since, 3)  # what phases_s counts from (Unix time)
        report["summary"]["phases_s"] = phases(marks, since)
        path = write_report(report, Path(output_root(up.plan)) / "output" / "data", render=False)
        report["path"] = str(path)
        mark(marks, "report")
        up.report, up.rendering = report, Rendering(path)  # the plots are drawn while the cluster goes down
    mark(marks, "teardown")
    up.wait_for_outputs()
    report["summary"]["phases_s"] = phases(marks, since)
    _amend_summary(path, report["summary"])
    if tracker is not None:  # report.json, its plots and the model, then the status
        model = Path(model_root(up.plan)) / "model" / "model.pt"  # on S3 already: not uploaded again
        stopped = stop is not None and stop.is_set()
        tracker.finish("KILLED" if stopped else "FINISHED", [path, *sorted(path.parent.glob("*.png")), model])
    return report


def preload_driver_imports() -> threading.Thread:
    """Import torch (Ray Train's torch trainer and the TensorBoard writer need it) in a thread while
    the cluster comes up: the driver mostly waits then (for the simulated hosts, the SageMaker
    hosts' join, a running cluster's answer), and the 2-4 s the imports take would otherwise sit
    between the cluster being up and Ray Train starting (3.2 s on `--address`, where it was not
    preloaded before). Only modules that do not import ray: ray must load after the cluster's auth
    settings are in the environment (`LocalCluster.__enter__`)."""

    def load() -> None:
        try:
            import tensorboardX.event_file_writer  # noqa: F401 - preloaded, not used here
            import torch  # noqa: F401 - preloaded, not used here
        except Exception as exc:  # a warm-up only: a run that fails at once exits while it imports, and says why itself
            log.debug("import warm-up: %s", exc)

    thread = threading.Thread(target=load, name="preload-imports", daemon=True)
    thread.start()
    return thread


def _amend_summary(path: Path, summary: dict) -> None:
    """The summary's last phases (the report's own writing, the teardown) into report.json, without
    drawing its plots again. On an `s3://` run.dir the local copy was uploaded and removed already."""
    import json

    if path.exists():
        written = json.loads(path.read_text())
        written["summary"] = summary
        path.write_text(json.dumps(written, indent=2))


def prepare_job(cfg: LaunchConfig, plan: LaunchPlan) -> str | None:
    """The checkpoint to resume from (if any) and the resolved config file; the checks that need no
    cluster ran before (`launcher.job.preflight`). The train spec is built later, from the final plan
    and the listings."""
    found = None
    if cfg.trainer.resume:
        from smlaunch.trainers.checkpoints import latest_complete

        found = latest_complete(checkpoint_dir(cfg, plan))
        if found:
            log.info(f"resuming from checkpoint {found}")
    Path(plan.run_dir).mkdir(parents=True, exist_ok=True)
    from smlaunch.config.shown import shown_config

    (Path(plan.run_dir) / "resolved_config.yaml").write_text(yaml.safe_dump(shown_config(cfg), sort_keys=False))
    return str(found) if found else None


def train_on_cluster(
    cfg: LaunchConfig,
    plan: LaunchPlan,
    resume_from: str | None,
    timings: dict,
    stop=None,
    listed=None,
    marks: dict | None = None,
    elastic=None,
    tracker=None,
) -> dict:
    """Datasets, trainer, report, on the Ray cluster this process is connected to; `plan` is final
    (on SageMaker: after every host joined), and the workers' spec is built from it here. A `stop`
    the trainer has not honoured within its grace ends the fit (`stopping.overdue`). `listed`: the
    channels' listings already under way (a future of `list_channels`), else they are listed here.
    `marks`: the run's phase marks (`launcher.report.phases`), given the listing's and rank 0's here.
    `elastic`: the loop resizing the data hosts, fed every step record while `fit` runs; `tracker`:
    the MLflow run (`launcher.tracking`), a view of the progress as TensorBoard's events are.
    The report is returned, not written: `run_job` writes it once, with the run's wall time."""
    from smlaunch.cluster.autoscale.controller import running
    from smlaunch.cluster.run_relay import start_relay
    from smlaunch.cluster.sampler import Samplers
    from smlaunch.launcher.job.cache_setup import run_cache, without_data_hosts
    from smlaunch.launcher.job.stopping import overdue
    from smlaunch.launcher.job.train_progress import TrainProgress
    from smlaunch.launcher.job.train_spec import listed_rows, resumed_step, train_spec
    from smlaunch.launcher.report.job_report import build_report
    from smlaunch.launcher.report.live_events import LiveEvents
    from smlaunch.launcher.report.phases import mark
    from smlaunch.pipelines.dataset import build_datasets, cached_train_selector, list_channels
    from smlaunch.pipelines.sources.node_trees import fallback_readers
    from smlaunch.pipelines.warmup import warm_preprocess_workers
    from smlaunch.trainers.fit import fit, set_ray_train_environment

    marks = {} if marks is None else marks
    listings = listed.result() if listed is not None else list_channels(plan)
    mark(marks, "listed")
    data_classes = _data_classes(listings.get("train"))
    train = next(c for c in plan.channels if c.name == "train")
    spec = train_spec(
        cfg,
        plan,
        resume_from,
        data_classes=data_classes,
        train_units=_unit_count(listings.get("train"), train),
        train_rows=listed_rows(listings.get("train"), train),  # the schedule's length with trainer.epochs
    )
    cache, line = run_cache(cfg, plan, listings.get("train"), spec.epoch_rows)  # `pipeline.cache`: keyed by the listing
    log.info(line)
    spec = dataclasses.replace(
        spec,
        cache=cache,
        cached_train_selector=cached_train_selector(plan, cache),
        files_outlive_cache=not (plan.elastic and plan.elastic.min_hosts == 0) or bool(fallback_readers(plan, train)),
    )
    if elastic is not None:
        elastic.without_hosts = without_data_hosts(plan, cache)
    samplers = Samplers(plan, cfg.monitor.sample_interval_s)
    if elastic is not None:
        from smlaunch._ray_compat import restartable_actor_pids

        elastic.on_drain = lambda node: samplers.release(node, restartable_actor_pids(node))
    started = time.perf_counter()
    try:
        shared: list = []  # the listings' arrays the read tasks gather their paths from
        datasets = build_datasets(cfg, plan, listings, spec.num_classes, shared=shared, cache=cache)
        set_ray_train_environment()  # before the warm-up: it takes the runtime environment Ray Train will set
        warm_preprocess_workers(plan, cfg.pipeline.ops, shared=shared)  # while Ray Train starts its workers
        try:  # TensorBoard is a view: a folder that cannot be written costs the events, not the job
            events = LiveEvents(Path(output_root(plan)) / "output" / "data" / "tensorboard")
        except OSError as exc:
            log.warning(f"TensorBoard events off: {exc}")
            events = None
        with (
            running(elastic),
            TrainProgress(
                start_relay(),
                spec.total_steps,
                resumed_step(resume_from),
                cfg.trainer.log_every,
                [events, tracker],
                on_step=elastic.on_step if elastic else None,
            ) as progress,
        ):
            result = fit(spec, datasets, fatal=lambda: progress.posted_error() or overdue(stop))
    finally:
        samples = samplers.gather()
    if cfg.trainer.loop:  # your loop: every rank counted the rows it took, by the host that made them
        from smlaunch.trainers.user_loop import merge_rank_summaries

        result["host_rows"] = merge_rank_summaries(progress.loop_ranks)
        if stop is not None and stop.is_set():  # it returned after the stop: exit 143, as the built-in loop
            result["stopped_at_step"] = result.get("final_step")
    if elastic is not None:
        result["autoscale"] = elastic.summary()
    timings = {**timings, "train_s": round(time.perf_counter() - started, 2)}
    from smlaunch.pipelines.corrupt import corrupt_summary

    result["corrupt_records"] = corrupt_summary()
    marks.update(result.pop("phase_marks", None) or {})  # rank 0's: workers up, model built, first batch, ...
    if isinstance(data_classes, list):
        result["classes"] = data_classes
    return build_report(
        plan, result, cfg.trainer.batch_size, timings, samples, cfg.monitor.model_dump(), spec.epoch_rows
    )


def _unit_count(listing, channel) -> int | None:
    """Units of the train channel as its reader cuts them (files, or Parquet row groups; every
    host's under ShardedByS3Key): what a complete epoch's positions cover (`pipelines.position`)."""
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
