"""One host's part of a multi-host SageMaker job: the head trains, the others serve and wait.

Every host runs the same `sm-launch` command; the plan says which one is the head. The head
starts its Ray node, waits (with a deadline) for every host to join, trains, publishes the
outcome in the job state and waits briefly for the workers to leave: `head_cluster` is all of
that but the training, which is the job body every path runs (`launcher.job.run.run_job`). A worker resolves the head
(retrying: names come up late), joins with its group's labels, then watches the job state until
the head says it is done (exit 0), failed (exit 1, failure file) or vanished (exit 1 within
30 s). No host waits without a deadline. Everything Ray needs to authenticate comes from the
job's shared token (`ray_token`), passed to Ray through the environment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import sys
import time
from dataclasses import dataclass

from smlaunch.cluster.job_state import HEAD_LOST_S, HEARTBEAT, OUTCOME, Heartbeat, JobState, StoreUnavailable
from smlaunch.cluster.labels import HOST_LABEL
from smlaunch.cluster.plan import LaunchPlan
from smlaunch.cluster.sagemaker_env import SageMakerEnvironment
from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import UserError
from smlaunch.launcher.job.stopping import StopRequest

TOKEN_ENV = "SMLAUNCH_RAY_TOKEN"
NODE_START_S = 90.0
LEAVE_WAIT_S = 8.0
POLL_S = 0.5
HARD_STOP_AFTER_GRACE_S = 10.0
"""After `trainer.stop_grace_s`, how much longer the head waits before it exits at once (the fit did not
end on its own deadline), and twice that for a worker host waiting on the head; 90 + 20 < 120."""


@dataclass
class HostOutcome:
    exit_code: int
    message: str
    report: dict | None = None


def ray_environment(sm: SageMakerEnvironment, environ=os.environ) -> dict[str, str]:
    """Variables every Ray process of this host needs; set before `import ray`.

    A multi-host cluster needs one token on every host and nowhere else: it comes from the job's
    environment (`SMLAUNCH_RAY_TOKEN`, which `sm-launch submit` generates per job, or Ray's own
    `RAY_AUTH_TOKEN`). A one-host job makes its own. The value is never printed.
    """
    token = environ.get(TOKEN_ENV) or environ.get("RAY_AUTH_TOKEN")
    if not token:
        if len(sm.hosts) > 1:
            raise UserError(
                f"multi-host job without a Ray token: set {TOKEN_ENV} (e.g. 64 random hex characters) "
                "in the training job's environment so every host shares it"
            )
        token = secrets.token_hex(32)
    if len(token) < 32:
        raise UserError(f"{TOKEN_ENV}: the Ray token must be at least 32 characters")
    return {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    }


def run_host(
    cfg: LaunchConfig,
    plan: LaunchPlan,
    sm: SageMakerEnvironment,
    stop: StopRequest,
    check_only: bool = False,
    log=None,
    announce=None,
) -> HostOutcome:
    log = log or logging.getLogger("smlaunch").info
    os.environ.update(ray_environment(sm))
    os.environ.pop("RAY_ADDRESS", None)
    from smlaunch.cluster.ray_auth import reload_ray_auth

    reload_ray_auth()  # a user's module checked before (a trainer.loop's) may have loaded Ray
    if plan.current_host == plan.head:
        return _run_head(cfg, plan, sm, stop, check_only, log, announce)
    return _run_worker(cfg, plan, sm, stop, log)


def _node(plan: LaunchPlan, sm: SageMakerEnvironment, cfg: LaunchConfig, head_address: str | None, node_ip: str):
    import tempfile

    from smlaunch.cluster.node import RayNode, start_args, worker_pool_env

    if plan.current_host is None:
        raise ValueError("the plan of a SageMaker host names no current host (resourceconfig.json's current_host)")
    temp_dir = tempfile.mkdtemp(prefix=f"ray-{plan.current_host}-")
    me = plan.host(plan.current_host)
    args = start_args(
        me,
        head_address=head_address,
        node_ip=node_ip,
        port=cfg.cluster.port,
        temp_dir=temp_dir,
        object_store_bytes=me.object_store_bytes,
    )
    return RayNode(
        args,
        sm.path("output", "data", "smlaunch", "ray-node.log"),
        {**os.environ, **worker_pool_env(me.num_cpus)},
        temp_dir,
    )


def _run_head(cfg, plan, sm, stop, check_only, log, announce=None) -> HostOutcome:
    """The job's body (`launcher.job.run.run_job`) on the cluster `head_cluster` brings up, or
    `check`'s one task per host."""
    from smlaunch.launcher.job.run import run_job

    cluster = head_cluster(cfg, plan, sm, stop, log, announce)
    if check_only:
        with cluster as up:
            stop.install()  # ray.init replaces the SIGTERM handler with one that exits at once
            up.report = check_hosts(up.plan)
        return HostOutcome(0, "ok", up.report)
    report = run_job(cfg, cluster, stop)
    outcome = _outcome(report, stop)
    return HostOutcome(0 if outcome == b"ok" else 143, outcome.decode(), report)


@contextlib.contextmanager
def head_cluster(cfg, plan, sm, stop, log, announce=None):
    """The head's side of the job's cluster: its Ray node, every host joined (with a deadline), the
    plan made again with the GPUs they reported (`announce`d), this process connected. On the way
    out the outcome is published in the job state (`ok`, `stopped: ...` from the report the body
    left, or `failed: ...`), the workers get `LEAVE_WAIT_S` to leave, and the node stops. A trainer
    that ignores a stop past `stop_grace_s + HARD_STOP_AFTER_GRACE_S` ends this process at once."""
    from smlaunch.cluster.rendezvous import interface_address, wait_for_hosts, wait_for_port
    from smlaunch.cluster.sagemaker.plan import with_joined_resources
    from smlaunch.launcher.job.run import ClusterUp

    started = time.perf_counter()
    ip = interface_address(sm.network_interface_name)
    address = f"{ip}:{cfg.cluster.port}"
    node = _node(plan, sm, cfg, None, ip).start()
    state = heartbeat = None
    failed = True
    try:
        wait_for_port(
            ip, cfg.cluster.port, NODE_START_S, f"Ray head on {plan.head}", alive=lambda: node.exit_code() is None
        )
        state = JobState(address)
        heartbeat = Heartbeat(state).start()
        log(f"head {plan.head} at {address}; waiting for {len(plan.hosts)} hosts")
        took = wait_for_hosts(
            lambda: _joined(state, stop, node), [h.name for h in plan.hosts], plan.join_timeout_s, log
        )
        log(
            f"hosts_joined={len(plan.hosts)} hosts_joined_s={time.perf_counter() - started:.2f} "
            f"(waited {took:.2f} s after the head was up)"
        )
        plan = with_joined_resources(plan, state.alive_nodes(), cfg)
        if announce is not None:  # the job's summary, with the workers placed on the GPUs the hosts reported
            announce(plan)
        import ray

        from smlaunch import console

        console.quiet_ray()
        ray.init(
            address=address,
            **console.ray_init_options(),
            runtime_env={"worker_process_setup_hook": "smlaunch.cluster.worker_setup.setup"},
        )
        up = ClusterUp(plan)
        with _hard_stop(stop):
            yield up
        _finish(state, _outcome(up.report, stop), plan, log)
        failed = False
    except BaseException as exc:
        if state is not None:
            from smlaunch.errors import describe_error

            try:  # keep the head up until the workers have read it, as on success
                _finish(state, f"failed: {describe_error(exc)}".encode(), plan, log)
            except StoreUnavailable:
                pass
        raise
    finally:
        _shutdown(heartbeat, node, state, keep_temp=failed)


def _outcome(report: dict | None, stop: StopRequest) -> bytes:
    """What the head publishes for a run that ended without an error: `ok`, or the stop's step."""
    stopped = (report or {}).get("summary", {}).get("stopped_at_step")
    return b"ok" if stopped is None else f"stopped: {stop.signal_name} at step {stopped}".encode()


def _joined(state: JobState, stop: StopRequest, node) -> set[str]:
    if stop.is_set():
        raise UserError(f"{stop.signal_name} received while waiting for hosts to join")
    if node.exit_code() is not None:
        raise UserError(f"this host's Ray node exited with status {node.exit_code()}: {node.log_tail()}")
    try:
        return {n["labels"].get(HOST_LABEL) for n in state.alive_nodes()}
    except StoreUnavailable:
        return set()


@contextlib.contextmanager
def _hard_stop(stop: StopRequest):
    """Within the block: a stop the trainer has not honoured `HARD_STOP_AFTER_GRACE_S` after the
    fit's own deadline (`stopping.overdue`) ends this process, inside SageMaker's 120 s."""
    import threading

    def give_up() -> None:
        if stop.event.wait() and not finished.wait(stop.grace_s + HARD_STOP_AFTER_GRACE_S):
            logging.getLogger("smlaunch").error(
                f"trainer did not stop within {stop.grace_s + HARD_STOP_AFTER_GRACE_S:g} s "
                f"of {stop.signal_name}; shutting down"
            )
            os._exit(143)  # the node child follows (PDEATHSIG); workers see the head vanish

    finished = threading.Event()
    threading.Thread(target=give_up, name="smlaunch-stop-deadline", daemon=True).start()
    try:
        yield
    finally:
        finished.set()


def check_hosts(plan: LaunchPlan) -> dict:
    """One task per host, placed by its `sm-host` label: labels route work where the plan says."""
    import ray

    @ray.remote(num_cpus=0, max_retries=0)
    def where() -> dict:
        from smlaunch.cluster.sagemaker_env import base_dir

        labels = ray.get_runtime_context().get_node_labels()
        return {"host": labels.get(HOST_LABEL), "subcluster": labels.get("ray-subcluster"), "opt_ml": str(base_dir())}

    refs = {h.name: where.options(label_selector={HOST_LABEL: h.name}).remote() for h in plan.hosts}
    answers = {name: ray.get(ref, timeout=60) for name, ref in refs.items()}
    wrong = [n for n, a in answers.items() if a["host"] != n]
    if wrong:
        raise UserError(f"tasks for {', '.join(wrong)} ran elsewhere: {answers}")
    return {"hosts": answers, "plan": plan.to_dict()}


def _finish(state: JobState, outcome: bytes, plan: LaunchPlan, log) -> None:
    """Publish the outcome and give the workers `LEAVE_WAIT_S` to say they are leaving."""
    state.put(OUTCOME, outcome)
    workers = [h.name for h in plan.hosts if h.name != plan.head]
    deadline = time.monotonic() + LEAVE_WAIT_S
    while workers and time.monotonic() < deadline:
        try:
            left = {k.decode().split("/", 1)[1] for k in state.keys(b"left/")}
        except StoreUnavailable:
            break
        workers = [w for w in workers if w not in left]
        time.sleep(0.2)
    if workers:
        log(
            f"note: {', '.join(workers)} did not confirm leaving within {LEAVE_WAIT_S:.0f} s; they exit on "
            f"their own once the head is gone"
        )


def _shutdown(heartbeat, node, state, keep_temp: bool) -> None:
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    if heartbeat is not None:
        heartbeat.stop()
    node.stop(keep_temp=keep_temp)
    if keep_temp and node.temp_dir:
        from pathlib import Path

        from smlaunch.cluster.node import keep_ray_logs

        # output/data is uploaded with the job's output even when it fails; /tmp is not
        kept = keep_ray_logs(Path(node.temp_dir) / "session_latest" / "logs", node.log_path.parent / "ray-logs")
        logging.getLogger("smlaunch").warning(f"Ray logs of this host kept in {kept or node.temp_dir}")
    if state is not None:
        state.close()


def _run_worker(cfg, plan, sm, stop, log) -> HostOutcome:
    from smlaunch.cluster.rendezvous import interface_address, resolve_host, wait_for_port

    head_ip = resolve_host(plan.head, plan.join_timeout_s)
    ip = interface_address(sm.network_interface_name)
    wait_for_port(
        head_ip, cfg.cluster.port, plan.join_timeout_s, f"Ray head on {plan.head}", alive=lambda: not stop.is_set()
    )
    address = f"{head_ip}:{cfg.cluster.port}"
    node = _node(plan, sm, cfg, address, ip).start()
    state = JobState(address)
    outcome = None
    try:
        log(f"{plan.current_host} joining head {plan.head} at {address}")
        outcome = watch_head(state, node, plan.head, stop)
        try:
            state.put(f"left/{plan.current_host}".encode(), b"1", timeout_s=1)
        except StoreUnavailable:
            pass
        return outcome
    finally:
        _shutdown(None, node, state, keep_temp=outcome is None or outcome.exit_code == 1)


def watch_head(state: JobState, node, head: str, stop: StopRequest, poll_s: float = POLL_S) -> HostOutcome:
    """Until the head publishes an outcome, vanishes for `HEAD_LOST_S`, or this host's node dies."""
    last_beat, last_change = None, time.monotonic()
    stop_seen = None
    while True:
        now = time.monotonic()
        code = node.exit_code()
        if code is not None:
            return HostOutcome(1, f"this host's Ray node exited with status {code}: {node.log_tail()}")
        try:
            outcome = state.get(OUTCOME)
            if outcome is not None:
                text = outcome.decode(errors="replace")
                if text == "ok":
                    return HostOutcome(0, f"head {head} finished the job")
                if text.startswith("stopped"):
                    return HostOutcome(143, f"head {head} {text}")
                return HostOutcome(1, f"job failed on head {head}: {text.removeprefix('failed: ')}")
            beat = state.get(HEARTBEAT)
            if beat != last_beat:
                last_beat, last_change = beat, now
        except StoreUnavailable:
            pass
        if now - last_change > HEAD_LOST_S:
            return HostOutcome(
                1, f"lost the head {head}: no heartbeat for {HEAD_LOST_S:.0f} s (host failed or was stopped)"
            )
        if stop.is_set():
            stop_seen = stop_seen or now
            if now - stop_seen > stop.grace_s + 2 * HARD_STOP_AFTER_GRACE_S:
                return HostOutcome(143, f"{stop.signal_name} received and the head did not finish in time")
        time.sleep(poll_s)
