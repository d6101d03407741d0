"""`sm-launch run CONFIG --address ADDR`: the job on a Ray cluster that is already running.

Nothing is started or stopped there. The driver connects, matches the labelled nodes to the
config's groups (`cluster.attached.attach`, one line for what is missing, before any work), plans the job
on them (`cluster.attached.plan`), exposes the channels on the receiving nodes (`node_trees`), and
trains with the same datasets, selectors and trainer as the local simulation and SageMaker
(`launcher.job.run.run_job`; `attached_cluster` is this path's part). The job's actors are the
driver's, so they end with it; its channel trees and its stop key are removed; the cluster is left
as it was found.

Every host is named and pinned by its Ray node id (`host_label()` is `ray.io/node-id` for the
whole Ray job, set in its runtime environment), since the cluster's nodes carry group labels,
not per-host ones.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from pathlib import Path

from smlaunch import console
from smlaunch.cluster.labels import HOST_LABEL_ENV, NODE_ID_LABEL
from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import UserError
from smlaunch.trainers.s3_store import check_writable, is_s3, join, upload_dir

log = logging.getLogger("smlaunch")


def run_attached(cfg: LaunchConfig, address: str, stop=None) -> dict:
    """Train `cfg` on the cluster at `address`; returns the report (also written under run.dir)."""
    from smlaunch.launcher.job.run import run_job

    return run_job(cfg, attached_cluster(cfg, address, stop), stop)


@contextlib.contextmanager
def attached_cluster(cfg: LaunchConfig, address: str, stop=None):
    """This path's part of the job: connected to the cluster at `address`, its nodes matched to the
    config's groups and planned on, rank 0's view of run.dir checked, the channels exposed on the
    receiving nodes. With `autoscale:` the scaled group is first brought to its minimum, and the
    loop that resizes it is handed to the job (`ClusterUp.elastic`). On the way out the channel
    trees and the stop key are removed, the autoscaler's request withdrawn, the connection closed,
    and an `s3://` run.dir gets the driver's files (the report's path then names it)."""
    from smlaunch.cluster.attached.attach import match_groups
    from smlaunch.cluster.attached.plan import attachable, attached_plan
    from smlaunch.launcher.attached.connect import connected
    from smlaunch.launcher.attached.elastic import controller, grow_to_minimum
    from smlaunch.launcher.job.plan_text import summary
    from smlaunch.launcher.job.run import ClusterUp
    from smlaunch.pipelines.sources.node_trees import node_trees

    attachable(cfg)
    env = {HOST_LABEL_ENV: NODE_ID_LABEL, **_endpoint_env(cfg), **_autoscale_env(cfg)}
    with contextlib.ExitStack() as stack:
        stack.enter_context(_driver_env(env))
        from smlaunch.user_code import code_folder, data_folders, user_functions

        ray = stack.enter_context(
            connected(
                address, env_vars=env, code=code_folder() if user_functions(cfg) else None, data=data_folders(cfg)
            )
        )
        if stop is not None:  # now, not when the body starts: matching and checks below take a while
            stop.install()  # ray.init replaced the SIGTERM handler with one that exits at once
        _refuse_a_second_job(ray, address)
        requests = grow_to_minimum(cfg, address)
        if requests is not None:
            stack.callback(requests.close)  # the added hosts go once idle
        attached = match_groups(cfg, ray.nodes(), address)
        staging = tempfile.mkdtemp(prefix="smlaunch-staging-") if is_s3(cfg.run.dir) else None
        try:
            plan = attached_plan(cfg, attached, time.strftime("%Y%m%d-%H%M%S"), staging=staging or "unused")
            for where, field in ((plan.output_dir, "run.dir"), (cfg.trainer.checkpoint_dir, "trainer.checkpoint_dir")):
                if where is not None and is_s3(where):
                    check_writable(where, field)
        except BaseException:
            if staging:
                os.rmdir(staging)  # still empty
            raise
        with _uploaded(plan, staging):
            console.log_to_file(Path(plan.run_dir) / "logs" / "sm-launch.log")
            for line in summary(cfg, plan):
                log.info(line)
            log.info(f"run directory: {plan.output_dir} (model, checkpoints, report; rank 0's node writes there too)")
            _check_rank0_sees(plan, ray)
            endpoint = None if cfg.run.s3_endpoint in (None, "aws") else cfg.run.s3_endpoint
            with _stop_key_cleared(), node_trees(plan, endpoint, log.info) as exposed:
                up = ClusterUp(exposed)
                if plan.elastic is not None:
                    up.elastic = controller(plan, requests, [n.node_id for n in attached.groups[plan.elastic.group]])
                try:
                    yield up
                finally:  # the upload below takes the whole output directory: the plots first
                    up.wait_for_outputs()
    if plan.output_dir is not None and is_s3(plan.output_dir) and up.report is not None:
        up.report["path"] = join(plan.output_dir, "output", "data", Path(up.report["path"]).name)


def _autoscale_env(cfg: LaunchConfig) -> dict[str, str]:
    """With `autoscale:`, Ray Data's own scale-up is off for the job, in every process that runs its
    Datasets: smlaunch's loop, which reads the trainer's wait, is then the only one asking. Ray
    2.60's default (`RATE_BASED`) asks for twice the CPUs in use once half are busy, whatever the
    trainer takes (with one data host starved it asked for 4 more CPUs before the first step, in
    tests/launcher/attached/test_elastic.py); `V2` adds a node of every shape past 75 %
    (ray-project/ray#45331). Utilization is usage over the execution's limits
    (`ResourceManager.get_global_limits`: the smaller of its options' and the cluster's), and the
    train channel's object store limit is small with elastic hosts
    (`pipelines.dataset.elastic_buffer_bytes`), which the outputs of running tasks overshoot: a
    threshold of 2.0 could be reached. No utilization reaches 1e9."""
    if not cfg.autoscale:
        return {}
    never = "1e9"
    return {
        "RAY_DATA_CLUSTER_SCALING_UP_UTIL_THRESHOLD": never,  # V2
        **{
            f"RAY_DATA_DEFAULT_CLUSTER_SCALING_UP_{what}_UTIL_THRESHOLD": never  # RATE_BASED
            for what in ("CPU", "GPU", "MEMORY", "OBJECT_STORE_MEMORY")
        },
    }


def _endpoint_env(cfg: LaunchConfig) -> dict[str, str]:
    """`run.s3_endpoint` (a URL) for every S3 client of the job: boto3's and pyarrow's, on the
    driver and on every node (channels, pretrained weights, an `s3://` run.dir)."""
    url = cfg.run.s3_endpoint
    return {"AWS_ENDPOINT_URL_S3": url} if url not in (None, "aws") else {}


def _check_rank0_sees(plan, ray) -> None:
    """A path run.dir must be one file system for the driver and rank 0's node (the model and
    checkpoints are written there, the report and the resume listing here): a marker the driver
    writes is looked for from that node, and its absence fails in one line before any work."""
    if is_s3(plan.output_dir):
        return
    import uuid

    from smlaunch.cluster.labels import host_selector

    node = plan.workers[0].host
    marker = Path(plan.output_dir) / f".smlaunch-visible-{uuid.uuid4().hex[:12]}"
    marker.write_text("")
    try:
        seen = ray.get(
            ray.remote(_exists).options(num_cpus=0, label_selector=host_selector(node)).remote(str(marker)), timeout=60
        )
    finally:
        marker.unlink(missing_ok=True)
    if not seen:
        raise UserError(
            f"run.dir: {Path(plan.output_dir).parent} is not the same directory on node {node} (rank 0's, "
            "which writes the model and checkpoints there) as here; give a path every node and the driver "
            "mount (a shared file system), or an s3:// URI"
        )


def _exists(path: str) -> bool:
    return os.path.exists(path)


@contextlib.contextmanager
def _uploaded(plan, staging: str | None):
    """With an `s3://` run directory: the driver's staged files (logs, resolved config, TensorBoard
    events, report) uploaded there when the run ends, failed or not (the log then ends with why),
    then removed here; kept and named if the upload fails."""
    try:
        yield
    except BaseException as exc:
        if is_s3(plan.output_dir):
            text = str(exc).strip()
            log.error(f"the run failed: {text.splitlines()[0] if text else type(exc).__name__}")
        raise
    finally:
        if is_s3(plan.output_dir):
            import shutil

            try:
                count = upload_dir(plan.run_dir, plan.output_dir)
            except Exception as exc:  # the run's own outcome matters more; say where the files are
                log.warning(
                    f"could not upload {plan.run_dir} to {plan.output_dir} ({exc}); the logs and report stay there"
                )
            else:
                log.info(f"uploaded {count} files (logs, config, report) to {plan.output_dir}")
                console.close_file()
                if staging is not None:  # made for every s3:// run directory
                    shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _driver_env(env: dict[str, str]):
    """The driver's own side of what the job's runtime environment sets on the nodes."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _refuse_a_second_job(ray, address: str) -> None:
    """The run's relay is a named actor that dies with its driver: a live one is another job's."""
    from smlaunch.cluster.run_relay import NAME, NAMESPACE

    try:
        ray.get_actor(NAME, namespace=NAMESPACE)
    except ValueError:
        return
    raise UserError(
        f"cluster at {address}: another smlaunch job is running there (its {NAME} actor is alive); "
        "one job per cluster: wait for it, or give this job a cluster of its own"
    )


@contextlib.contextmanager
def _stop_key_cleared():
    """The stop request lives in the cluster's KV store, which outlives the job: clear it before
    (an earlier stopped run's would stop this one at step 1) and after."""
    from smlaunch._ray_compat import kv_delete
    from smlaunch.cluster.job_state import NAMESPACE, STOP

    kv_delete(STOP, NAMESPACE)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            kv_delete(STOP, NAMESPACE)
