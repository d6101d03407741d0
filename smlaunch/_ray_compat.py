"""Every use of Ray's private API, in one place: what smlaunch needs that Ray's public API does not
give, each with the reason and the Ray version it was checked against.

smlaunch pins Ray narrowly (pyproject.toml); a Ray upgrade moves private names without notice. So
no other module reaches into `ray._private`, `ray._raylet`, `ray.experimental.internal_kv`,
`ray.data._internal` or `ray.train.v2._internal`: they call the functions here, and
tests/test_ray_compat.py resolves every symbol listed in `PRIVATE_SYMBOLS`, so an upgrade that
moves one fails loudly in one test, naming it. Ray is imported inside each function: importing this
module costs nothing (`sm-launch --help` loads no Ray).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, cast

CHECKED_AGAINST = "2.60.0"
"""The Ray version every symbol below was read in (`ray.__version__`)."""

PRIVATE_SYMBOLS = {
    "ray._raylet:GcsClient": "a GCS client that needs no `ray.init` (the hosts' job state before the "
    "driver connects: `cluster.job_state`), and the node drain call, which has no public API",
    "ray._raylet:InnerGcsClient.internal_kv_put": "the job state's key-value calls (`cluster.job_state`): a "
    "`GcsClient` hands its calls to this class",
    "ray._raylet:InnerGcsClient.internal_kv_get": "idem",
    "ray._raylet:InnerGcsClient.internal_kv_keys": "idem",
    "ray._raylet:InnerGcsClient.drain_node": "draining a node as a spot reclaim does (`drain_node`)",
    "ray._raylet:AuthenticationTokenLoader": "re-reading RAY_AUTH_TOKEN once sm-launch set it (Ray caches it "
    "at import; its own tests reset it the same way: `ray/_private/authentication_test_utils.py`)",
    "ray._raylet:Config": "idem: re-initialised before the token cache is reset",
    "ray.core.generated.autoscaler_pb2:DrainNodeReason": "the PREEMPTION reason a drain names (`ray drain-node` "
    "takes it only from the command line)",
    "ray._private.state:state": "the draining nodes and every node's total and free resources (`ray.nodes()` has "
    "neither the draining flag nor the free resources)",
    "ray._private.state:GlobalState.get_draining_nodes": "idem",
    "ray._private.state:GlobalState.total_resources_per_node": "idem",
    "ray._private.state:GlobalState.available_resources_per_node": "idem",
    "ray._private.state:GlobalState.actor_table": "the job's actors left on a data host the elastic loop gives "
    "back (Ray Train's `PreemptionWatcher` lands on any node and kept a drained one up): the state API needs "
    "the dashboard, which `ray[data,train]` lacks",
    "ray._private.worker:print_to_stdstream": "where the driver prints the raylets' warnings to stdout, whatever "
    "`log_to_driver` says: replaced to send them to the run's log",
    "ray.experimental.internal_kv:_internal_kv_get": "the job's stop key and elastic placement in Ray's KV store, "
    "read from any worker (the public KV is the GCS client's, above)",
    "ray.experimental.internal_kv:_internal_kv_put": "idem, written",
    "ray.experimental.internal_kv:_internal_kv_del": "idem, removed",
    "ray.data._internal.execution.resource_manager:ResourceManager": "its global limits read again at the first "
    "step (Ray Data asks every 10 s, and a job starts before the nodes report: `pipelines.budget`)",
    "ray.data._internal.execution.resource_manager:ResourceManager.get_global_limits": "idem",
    "ray.data._internal.execution.resource_manager:ResourceManager.GLOBAL_LIMITS_UPDATE_INTERVAL_S": "idem",
    "ray.data._internal.execution.streaming_executor:StreamingExecutor": "its scheduling step paced where it "
    "changed nothing: held back by an object store budget, the loop spins (`pipelines.budget.calm_when_held`)",
    "ray.data._internal.execution.streaming_executor:StreamingExecutor._scheduling_loop_step": "idem",
    "ray.data._internal.execution.interfaces.op_runtime_metrics:OpRuntimeMetrics": "idem: the operators' "
    "counters that tell whether a step changed anything",
    "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator:DefaultAutoscalingCoordinator": "asking "
    "the autoscaler for data hosts by label through Ray Data's own coordinator, so its budget and ours agree "
    "(`cluster.autoscale.requests`)",
    "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator:get_or_create_autoscaling_coordinator": (
        "idem: its recount of the nodes, now rather than at its next 20 s tick"
    ),
    "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator:"
    "DefaultAutoscalingCoordinator.request_resources": "idem",
    "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator:"
    "DefaultAutoscalingCoordinator.cancel_request": "idem",
    "ray.train.v2._internal.execution.callback:ControllerCallback": "the only hook in Ray Train's controller that "
    "can turn a restart into the run's end, for an error no restart mends (`trainers.failures`); the public "
    "`UserCallback` is told of errors but cannot decide",
    "ray.train.v2._internal.execution.callback:ControllerCallback.before_controller_execute_failure_decision": (
        "idem: the hook, called before a restart"
    ),
    "ray.train.v2._internal.constants:get_env_vars_to_propagate": "the environment Ray Train gives the datasets' "
    "tasks, so the warm-up runs in the workers they will reuse (`pipelines.warmup`)",
    "ray.train.v2._internal.constants:RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR": "idem",
    "ray.train.v2._internal.constants:DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE": "idem",
}
"""`module:name` -> why the public API does not serve. Each is resolved by tests/test_ray_compat.py."""

FAKE_NODE_PROVIDER = "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider"
"""Ray's fake multi-node autoscaler provider, named (as a string) in the autoscaling cluster the
elastic bench and tests start on one machine (`cluster.autoscale.fake_cluster`)."""

PLACEMENT_GROUP_CLEANER_LOGGER = "ray.train.v2._internal.execution.controller.placement_group_cleaner"
"""The logger of Ray Train's placement-group cleaner, which warns every few seconds where Ray's state
API is missing (`ray[data,train]` has none): filtered in the workers (`cluster.worker_setup`)."""


def symbol(path: str) -> Any:
    """The private symbol `module:name` (or `module:name.attribute`), imported now."""
    module, _, names = path.partition(":")
    found: Any = importlib.import_module(module)
    for name in names.split("."):
        found = getattr(found, name)
    return found


def gcs_client(address: str) -> Any:
    """A GCS client of the cluster at `address` (`host:port`), usable before and without `ray.init`."""
    return symbol("ray._raylet:GcsClient")(address=address)


def drain_node(node_id: str, why: str, deadline_ms: int, address: str | None = None) -> tuple[bool, str]:
    """Drain the node `node_id` with the reason a spot reclaim gives (PREEMPTION: Ray Train's watcher
    and the built-in loop read it; a busy node accepts it, where IDLE_TERMINATION is refused);
    `deadline_ms` 0: no deadline. (accepted, Ray's message). `address`: the cluster's GCS, by
    default the connected driver's."""
    import ray

    reason = symbol("ray.core.generated.autoscaler_pb2:DrainNodeReason").Value("DRAIN_NODE_REASON_PREEMPTION")
    client = gcs_client(address or ray.get_runtime_context().gcs_address)
    accepted, message = client.drain_node(node_id, reason, why, deadline_ms)
    return accepted, message


def draining_nodes() -> set[str]:
    """The ids of the nodes being drained now."""
    return set(symbol("ray._private.state:state").get_draining_nodes())


RESTARTED_ANYWHERE = frozenset({"PreemptionWatcher"})
"""Actors of Ray's own that restart without end wherever there is room (Ray Train's preemption watcher:
`max_restarts=-1`, no selector, created once the worker group starts, on any node): killed on a
drained data host, they start again elsewhere."""


def _job_actors_on(node_id: str) -> list[dict[str, Any]]:
    import ray

    table = symbol("ray._private.state:state").actor_table(None)
    job = ray.get_runtime_context().get_job_id()
    return [
        actor
        for actor in table.values()
        if actor.get("State") == "ALIVE"
        and not actor.get("IsDetached")
        and actor.get("JobID") == job
        and (actor.get("Address") or {}).get("NodeID") == node_id
    ]


def actors_on(node_id: str) -> list[str]:
    """The class names of this job's live, non-detached actors on `node_id`. One still there keeps a
    drained node up for as long as it lives (the state API, which would list them, needs the
    dashboard)."""
    return [str(actor.get("ActorClassName")) for actor in _job_actors_on(node_id)]


def restartable_actor_pids(node_id: str) -> list[int]:
    """The processes of `RESTARTED_ANYWHERE` actors of this job on `node_id`: Ray offers no way to
    move an actor whose handle the caller lacks, but one killed on a draining node restarts elsewhere."""
    return [int(actor["Pid"]) for actor in _job_actors_on(node_id) if actor.get("ActorClassName") in RESTARTED_ANYWHERE]


def resources_per_node() -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """(total, free) resources of every node, by node id."""
    state = symbol("ray._private.state:state")
    return state.total_resources_per_node(), state.available_resources_per_node()


def kv_get(key: bytes, namespace: bytes) -> bytes | None:
    return cast("bytes | None", symbol("ray.experimental.internal_kv:_internal_kv_get")(key, namespace=namespace))


def kv_put(key: bytes, value: bytes, namespace: bytes) -> None:
    symbol("ray.experimental.internal_kv:_internal_kv_put")(key, value, overwrite=True, namespace=namespace)


def kv_delete(key: bytes, namespace: bytes) -> None:
    symbol("ray.experimental.internal_kv:_internal_kv_del")(key, namespace=namespace)


def reload_auth_token() -> None:
    """Make a loaded Ray read RAY_AUTH_MODE and RAY_AUTH_TOKEN from the environment again."""
    symbol("ray._raylet:Config").initialize("")
    symbol("ray._raylet:AuthenticationTokenLoader").instance().reset_cache()


class StdstreamPrinter(Protocol):
    """What Ray's driver calls for the raylets' messages; it passes `ignore_prefix` by keyword."""

    def __call__(self, data: dict[str, Any], ignore_prefix: bool) -> None: ...


def replace_stdstream_printer(printer: StdstreamPrinter) -> bool:
    """Route the driver's printing of the raylets' messages to `printer(data, ignore_prefix)`; False
    when this Ray has no such function (its lines then print as before). Idempotent: a printer
    marked `_smlaunch` is not replaced again."""
    import ray._private.worker as ray_worker

    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "_smlaunch", False):
        return False
    printer.__dict__["_smlaunch"] = True  # a function's attribute, which the protocol does not declare
    ray_worker.print_to_stdstream = printer
    return True


def _symbol_or_none(path: str) -> Any:
    """`symbol(path)`, or None where this Ray has nothing by that name."""
    try:
        return symbol(path)
    except (ImportError, AttributeError):
        return None


def data_resource_manager() -> Any:
    """Ray Data's `ResourceManager` class, or None."""
    return _symbol_or_none("ray.data._internal.execution.resource_manager:ResourceManager")


def data_streaming_executor() -> Any:
    """Ray Data's `StreamingExecutor` class, or None."""
    return _symbol_or_none("ray.data._internal.execution.streaming_executor:StreamingExecutor")


def data_operator_metrics() -> Any:
    """Ray Data's `OpRuntimeMetrics` class (each operator's counters), or None."""
    return _symbol_or_none("ray.data._internal.execution.interfaces.op_runtime_metrics:OpRuntimeMetrics")


def autoscaling_coordinator(requester: str) -> Any:
    """Ray Data's autoscaling coordinator client for `requester` (one thread may use it)."""
    path = "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator:DefaultAutoscalingCoordinator"
    return symbol(path)(requester)


def coordinator_actor() -> Any:
    """The cluster's autoscaling coordinator actor (Ray Data's singleton), created if missing."""
    path = "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator:get_or_create_autoscaling_coordinator"
    return symbol(path)()


def train_controller_callback_base() -> Any:
    """Ray Train's `ControllerCallback` class, to subclass."""
    return symbol("ray.train.v2._internal.execution.callback:ControllerCallback")


def train_propagated_env() -> dict[str, str]:
    """The environment variables Ray Train's controller runs with (and so the datasets' tasks)."""
    constants = "ray.train.v2._internal.constants:"
    env: dict[str, str] = symbol(constants + "get_env_vars_to_propagate")()
    env.setdefault(
        symbol(constants + "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR"),
        symbol(constants + "DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE"),
    )
    return env
