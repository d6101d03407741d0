"""Work on a Ray cluster that is already running (`--address ADDR` or `RAY_ADDRESS`).

smlaunch starts nothing there and stops nothing: it connects as a driver, matches the cluster's
nodes to the config's groups (`cluster.attached.attach`), and disconnects, leaving the cluster as it found
it. A cluster with token authentication (KubeRay's `authOptions.mode: token`) needs
`RAY_AUTH_MODE=token` and `RAY_AUTH_TOKEN` in the environment, as any Ray driver does.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Set

from smlaunch.cluster.attached.attach import AttachedCluster, match_groups
from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import UserError

TASK_TIMEOUT_S = 60
REACH_TIMEOUT_S = 10
"""How long the head's port may take to answer: Ray's own connect retries for ever."""


@contextlib.contextmanager
def connected(
    address: str, env_vars: dict[str, str] | None = None, code: str | None = None, data: Set[str] = frozenset()
):
    """A driver connection to the cluster at `address`; one line when it cannot be made.
    `env_vars` go into the Ray job's runtime environment: every task and actor of the job sees them.
    `code`: the user's code folder, shipped as the job's `working_dir` (a running cluster's workers
    have no copy of it; Ray unpacks it on each node, as their working folder, first on sys.path),
    without the channel folders in `data` (`user_code.data_folders`: they are read as channels)."""
    host, _, port = address.rpartition(":")
    if host and port.isdigit() and "://" not in address:  # `auto` and ray:// fail on their own
        from smlaunch.cluster.rendezvous import wait_for_port

        wait_for_port(host, int(port), REACH_TIMEOUT_S, "the Ray cluster (--address / RAY_ADDRESS)")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from smlaunch import console

    console.quiet_ray()
    runtime_env: dict[str, object] = {"env_vars": dict(env_vars)} if env_vars else {}
    if code is not None:
        from smlaunch.user_code import LEFT_OUT, LEFT_OUT_SUFFIXES, shipment

        shipped = shipment(code, skip=data)  # refused in one line past the limit, before anything is uploaded
        real = os.path.realpath(code)
        inside = [os.path.relpath(d, real) for d in sorted(data) if d.startswith(real + os.sep)]
        runtime_env.update(
            working_dir=code,
            excludes=[f"{name}/" for name in sorted(LEFT_OUT)]
            + [f"*{suffix}" for suffix in LEFT_OUT_SUFFIXES]
            + _venvs(code)
            + [f"/{rel}/" for rel in inside]
            + shipped.excluded_patterns(),  # credentials and .smlaunchignore's: what `plan` says is left out
        )
    try:
        ray.init(address=address, runtime_env=runtime_env or None, **console.ray_init_options())
    except Exception as exc:  # ConnectionError, an auth failure, a version mismatch: Ray's own words
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot connect to the Ray cluster at {address}: {first}") from exc
    try:
        yield ray
    finally:
        ray.shutdown()


def _venvs(folder: str, depth: int = 2) -> list[str]:
    """Virtual environments in `folder` down to `depth` levels (any name: a `pyvenv.cfg` tells),
    left out as anchored patterns (`/.venv-sdk/v2/`)."""
    found, pending = [], [("", 0)]
    while pending:
        rel, level = pending.pop()
        try:
            entries = list(os.scandir(os.path.join(folder, rel)))
        except OSError:
            continue
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            sub = os.path.join(rel, entry.name)
            if os.path.exists(os.path.join(entry.path, "pyvenv.cfg")):
                found.append(f"/{sub}/")
            elif level + 1 < depth:
                pending.append((sub, level + 1))
    return sorted(found)


def check_attached(cfg: LaunchConfig, address: str, log) -> AttachedCluster:
    """Match the cluster's nodes to the groups, then run one task on each matched node (placed by
    its `ray.io/node-id` label) to show work reaches it; the cluster is left as it was."""
    with connected(address) as ray:
        attached = match_groups(cfg, ray.nodes(), address)
        for note in attached.notes:
            log(f"note: {note}")

        @ray.remote(num_cpus=0, max_retries=0)
        def where() -> dict:
            context = ray.get_runtime_context()
            return {"node_id": context.get_node_id(), "labels": context.get_node_labels()}

        started = time.monotonic()
        refs = {n.node_id: where.options(label_selector={"ray.io/node-id": n.node_id}).remote() for n in attached.nodes}
        try:
            answers = {node: ray.get(ref, timeout=TASK_TIMEOUT_S) for node, ref in refs.items()}
        except ray.exceptions.GetTimeoutError as exc:
            raise UserError(f"cluster at {address}: a node did not run its task within {TASK_TIMEOUT_S} s") from exc
        wrong = [node[:8] for node, answer in answers.items() if answer["node_id"] != node]
        if wrong:
            raise UserError(f"cluster at {address}: tasks for nodes {', '.join(wrong)} ran elsewhere")
        log(f"tasks on {len(answers)} nodes answered in {time.monotonic() - started:.1f} s")
    return attached
