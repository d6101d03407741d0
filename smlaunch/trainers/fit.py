"""Driver side of training: a `TorchTrainer` with one worker per planned GPU, each on its host,
fed by the channel datasets split without dropping a row.

Placement: everything `fit` needs comes from one value, the workers' `TrainSpec`: its workers (the
plan's, placed by `cluster.topology.place_workers`) give the count and the devices, and its
per-worker label selectors put worker i on the host the plan gives rank i. Ray Train numbers ranks
by node and GPU, so rank 0 is on the head, which holds the checkpoint directory.

Data: Ray Train's own `DataConfig` splits each dataset with `streaming_split(equal=True)`, which
drops up to `workers - 1` rows an epoch to make the shards equal. `UnevenSplit` keeps every row
(`equal=False`); the loop's control plane (`trainers.control`) handles the shards ending at
different steps.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ray.train import DataConfig

from smlaunch.cluster.drain import POLL_INTERVAL_S as PREEMPTION_POLL_INTERVAL_S
from smlaunch.trainers.spec import TrainSpec

if TYPE_CHECKING:
    from ray.train.v2.api.result import Result


class UnevenSplit(DataConfig):
    """`DataConfig` whose splits keep every row: `streaming_split(equal=False)`. (This module is
    imported only once a job runs: it needs Ray.)"""

    def configure(self, datasets, world_size, worker_handles, worker_node_ids, **kwargs):
        output: list[dict[str, Any]] = [{} for _ in range(world_size)]
        hints = worker_node_ids if self._enable_shard_locality else None
        for name, ds in datasets.items():
            if ds.name is None:
                ds.set_name(name)
            ds = ds.copy(ds)
            ds.context.execution_options = self._resolve_execution_options(name)
            for i, split in enumerate(ds.streaming_split(world_size, equal=False, locality_hints=hints)):
                output[i][name] = split
        return output


RAY_TRAIN_ENVIRONMENT = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
    "RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S": PREEMPTION_POLL_INTERVAL_S,
}
"""How often Ray Train's controller polls its workers (2 s by default). It also notices the workers'
end only at a poll: the fit returned 4.75 s after rank 0's last line of work with the default,
1.3 s with 0.5 s (configs/hetero.yaml, 2-core VM). A poll is one small call per worker."""


def set_ray_train_environment() -> None:
    """`RAY_TRAIN_ENVIRONMENT` into this process's environment (unless the user set it), from where
    Ray Train propagates it to its controller and workers. Before any task that must share their
    runtime environment is started (`pipelines.warmup.data_tasks_runtime_env`)."""
    for key, value in RAY_TRAIN_ENVIRONMENT.items():
        os.environ.setdefault(key, value)


START_RETRIES = 2
"""Worker-group starts Ray Train retries after the first times out (Ray Train's default: without end)."""


def _execution_options(spec: TrainSpec, options_type, selector: dict | None = None, budgeted: bool = False):
    """A channel's execution: preprocessing on the CPU hosts (`selector`: another bucket), under
    Ray Data's own object store budget, or, for the train channel of an elastic job (`budgeted`),
    under `spec.ingest_buffer_bytes`: a host given back ends once the trainer has taken the few
    blocks it holds (`pipelines.dataset.elastic_buffer_bytes`)."""
    options = options_type(label_selector=dict(selector if selector is not None else spec.preprocess_selector))
    if budgeted and spec.ingest_buffer_bytes:
        options.resource_limits = options.resource_limits.copy(object_store_memory=spec.ingest_buffer_bytes)
    return options


def fit(spec: TrainSpec, datasets: dict, fatal=None) -> dict:
    """Train `spec.world_size` workers and return rank 0's result (per-step records, validation,
    rows per host, ranks). `fatal()` returns an error that ends the fit: one a rank posted
    (`TrainProgress.posted_error`), or a stop gone overdue."""
    from ray.data import ExecutionOptions

    if TYPE_CHECKING:  # `ray.train` re-exports Ray Train v2's classes (the default, and what is used
        # here), but its stubs give v1's, which mypy reads first
        from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
        from ray.train.v2.torch.torch_trainer import TorchTrainer
    else:
        from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

    from smlaunch.trainers.failures import no_restart_after_a_posted_error
    from smlaunch.trainers.loop import train_loop
    from smlaunch.trainers.s3_store import ray_storage
    from smlaunch.trainers.user_loop import run_user_loop

    storage_path, storage_filesystem = ray_storage(spec.checkpoint_dir)
    from smlaunch.pipelines.dataset import CACHED_TRAIN

    selector_options = {name: _execution_options(spec, ExecutionOptions, budgeted=name == "train") for name in datasets}
    if spec.cached_train_selector is not None:  # the cached epochs' dataset: its own bucket
        selector_options[CACHED_TRAIN] = _execution_options(
            spec, ExecutionOptions, spec.cached_train_selector, budgeted=True
        )
    user_loop = spec.trainer.loop is not None
    trainer = TorchTrainer(
        run_user_loop if user_loop else train_loop,
        train_loop_config=spec,  # type: ignore[arg-type]  # Ray hands any object to the loop; its stub says dict
        scaling_config=ScalingConfig(
            num_workers=spec.world_size, use_gpu=spec.use_gpu, label_selector=[dict(s) for s in spec.worker_selectors]
        ),
        # A run name of its own per launch: Ray Train would otherwise resume silently from whatever
        # run of the same name it finds; resuming is ours (`resume_from`, complete checkpoints only).
        run_config=RunConfig(
            name=loop_run_name(spec) if user_loop else f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
            storage_path=storage_path,
            storage_filesystem=storage_filesystem,
            # Ray Train retries a worker group that cannot start (60 s each) without
            # end by default: on a cluster shared with another job that would wait for ever.
            # A preemption (a drained train node) the loop did not end cleanly on is a
            # failure: the job ends, and the next one resumes (`trainers.preemption`).
            failure_config=FailureConfig(
                max_failures=spec.trainer.max_failures,
                controller_failure_limit=START_RETRIES,
                max_preemption_failures=0,
            ),
            # Your loop's checkpoints are yours to keep (Ray's default: all of them).
            checkpoint_config=CheckpointConfig(num_to_keep=None if user_loop else 2),
            # A rank's error that no restart mends ends the run (`trainers.failures`).
            callbacks=[no_restart_after_a_posted_error()],
            worker_runtime_env={"env_vars": dict(spec.worker_env)} if spec.worker_env else None,
        ),
        datasets=datasets,
        # Your loop gets Ray Train's own split (equal shards, as a loop written for Ray Train assumes:
        # a rank with a batch more would wait in DDP's all-reduce for ever); ours keeps every row.
        dataset_config=(DataConfig if user_loop else UnevenSplit)(
            datasets_to_split="all", execution_options=selector_options
        ),
    )
    try:
        result = _fit_watching_train_hosts(trainer, list(spec.train_hosts), fatal=fatal)
        if user_loop:
            from smlaunch.trainers.user_loop import keep_final_checkpoint

            return keep_final_checkpoint(result, spec.model_dir)
        if result.return_value is None:  # Ray's answer for a run that did not complete, which fit() raises for
            raise RuntimeError("Ray Train's fit returned without rank 0's result")
        return result.return_value
    except Exception as exc:
        from smlaunch.errors import user_error_in

        if user_error_in(exc) is None:
            _raise_if_preempted(exc)
            _raise_if_a_train_host_was_lost(spec)
            _raise_if_workers_never_started(exc, spec)
        raise


def loop_run_name(spec: TrainSpec) -> str:
    """Ray Train's run name for `trainer.loop`: Ray resumes a run by its storage and name, so with
    `trainer.resume` the newest earlier loop run in the checkpoint directory (whose newest checkpoint
    `ray.train.get_checkpoint()` then returns), else a new name."""
    fresh = f"loop-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    if not spec.trainer.resume:
        return fresh
    from smlaunch.trainers.s3_store import is_s3

    if is_s3(spec.checkpoint_dir):
        return "loop"
    import glob

    runs = sorted(glob.glob(os.path.join(spec.checkpoint_dir, "loop*", "checkpoint_*")), key=os.path.getmtime)
    return os.path.basename(os.path.dirname(runs[-1])) if runs else fresh


def _fit_watching_train_hosts(trainer, hosts: list[str], interval_s: float = 2.0, fatal=None) -> Result:
    """`trainer.fit()`, given up on as soon as a train host is gone (several train hosts only).

    A group that lost a host's ranks cannot go on, and Ray Train's restart cannot place them
    anywhere else (each is pinned to its host): with `max_failures` > 0 the restarted group waited
    for the dead node without end (seen: over 10 minutes), and Ray Train's own abort (its Ctrl-C
    handler) did not end it either. So the fit runs in a thread while this one polls the train
    hosts; a lost one ends the job here, in one line, and the launcher's teardown of the cluster
    ends the fit thread. `fatal()` gives an error that ends the job too: a stop overdue, raised
    at once; or one a rank posted (bad data, a bug: `trainers.failures`), for which Ray Train ends
    the run itself (`no_restart_after_a_posted_error`): the fit is given `FATAL_END_S` to do so
    cleanly, then the posted line is raised, whatever Ray said."""
    import threading

    from smlaunch.pipelines.sources.host_loss import alive_hosts, train_host_lost_error

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = trainer.fit()
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="ray-train-fit", daemon=True)
    thread.start()
    hosts_checked = time.monotonic()
    posted, deadline = None, None  # deadline: set with posted
    while thread.is_alive():
        thread.join(timeout=FATAL_POLL_S)
        if posted is None and fatal is not None:
            posted = fatal()
            if posted and "rank" not in posted:  # a stop gone overdue: now
                _raise_posted(posted)
            deadline = time.monotonic() + FATAL_END_S if posted else None
        if posted and (not thread.is_alive() or (deadline is not None and time.monotonic() >= deadline)):
            _raise_posted(posted)  # Ray Train has ended the run (or taken too long to)
        if thread.is_alive() and len(hosts) > 1 and time.monotonic() - hosts_checked >= interval_s:
            hosts_checked = time.monotonic()
            try:
                alive = alive_hosts()
            except Exception:  # the cluster is going down: the fit will say why
                continue
            gone = [h for h in hosts if h not in alive]
            if gone:
                raise train_host_lost_error(gone[0])
    if "error" in outcome:
        posted = fatal() if fatal is not None else None  # the run ended on a posted error before it was read
        if posted:
            _raise_posted(posted)
        raise outcome["error"]
    return outcome["result"]


def _raise_posted(posted: dict) -> None:
    from smlaunch.errors import ConfigError, DataError, UserError

    kinds: dict[str | None, type[UserError]] = {"DataError": DataError, "ConfigError": ConfigError}
    raise kinds.get(posted.get("error"), UserError)(posted["text"])


FATAL_END_S = 30.0
"""How long Ray Train gets to end a run after a rank posted its error (about a second is usual)."""
FATAL_POLL_S = 0.5
"""How often the fit's watcher asks for a rank's posted error (a local call)."""


def _raise_if_preempted(exc: BaseException) -> None:
    """Ray Train's `PreemptionError`: a train node was drained (a spot notice) and the loop did not
    return before the drain's deadline (`max_preemption_failures=0`: no restart on a node that is
    going). One line instead of the controller's traceback."""
    from smlaunch.errors import UserError

    chain = [exc, getattr(exc, "controller_failure", None), exc.__cause__]
    found = next((e for e in chain if e is not None and type(e).__name__ == "PreemptionError"), None)
    if found is None:
        return
    info = getattr(found, "preemption_info", None)
    nodes = ", ".join(info.preempted_node_ids) if info is not None else "a train node"
    raise UserError(
        f"train node(s) {nodes} drained for preemption and the loop did not return before the drain's "
        "deadline: a loop should report a checkpoint and return once ray.train.get_preemption_info() "
        "is not None; the next job resumes from its last reported checkpoint"
    ) from None


def _raise_if_workers_never_started(exc: BaseException, spec: TrainSpec) -> None:
    """Ray Train gave up placing the worker group (`START_RETRIES` + 1 tries): one line saying
    what it waited for, instead of the controller's traceback."""
    from smlaunch.errors import UserError

    chain = [exc, getattr(exc, "controller_failure", None), exc.__cause__]
    if not any(
        type(e).__name__ in ("WorkerGroupStartupTimeoutError", "InsufficientClusterResourcesError")
        for e in chain
        if e is not None
    ):
        return
    wants = "GPU" if spec.use_gpu else "CPU"
    hosts = ", ".join(spec.train_hosts)
    each_s = float(os.environ.get("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", "60"))
    raise UserError(
        f"the {spec.world_size} train workers (1 {wants} each, on {hosts}) could not be placed in "
        f"{START_RETRIES + 1} tries of {each_s:g} s: another job holds those nodes' {wants}s, or they "
        "left; free them, or set trainer.max_workers lower"
    ) from None


def _raise_if_a_train_host_was_lost(spec: TrainSpec) -> None:
    """After a failed fit: a train host that is gone explains it better than Ray's error does (a
    rank's peers fail in their next collective; a group restarted without it cannot be placed).

    The ranks' collectives fail within a second of a host's loss, before Ray's health checks
    declare its node dead (period x threshold: 3 s x 5 by default), so with several train hosts
    this waits up to that long for the verdict."""
    from smlaunch.pipelines.sources.host_loss import alive_hosts, train_host_lost_error

    hosts = list(spec.train_hosts)
    period_s = int(os.environ.get("RAY_health_check_period_ms", "3000")) / 1000
    threshold = int(os.environ.get("RAY_health_check_failure_threshold", "5"))
    deadline = time.monotonic() + (period_s * threshold + 3 if len(hosts) > 1 else 0)
    while True:
        try:
            alive = alive_hosts()
        except Exception:  # the cluster itself is going down: Ray's error stands
            return
        for host in hosts:
            if host not in alive:
                raise train_host_lost_error(host) from None
        if time.monotonic() >= deadline:
            return
        time.sleep(0.5)
