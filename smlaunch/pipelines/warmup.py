"""Warm the preprocessing hosts' Ray workers while the trainer starts.

A job's first batch used to wait for the data hosts' first Ray workers to start and import what
the chain needs (torch and torchvision for decoding, PIL, pyarrow, Ray Data's own modules): 4-6 s
per worker, paid after the train worker asked for data. Ray Train takes longer than that to start
its controller and worker group (about 20 s on the 2-core VM), and the data hosts sit idle
meanwhile. So when training starts, every CPU slot of the preprocessing hosts runs one small task
that does those imports and runs the chain once on a generated image; Ray keeps the worker
processes (`cluster.node.worker_pool_env`) and gives them the chain tasks that follow.
Read tasks run in worker processes of their own (`dataset.READ_WORKER_ENV`), so they cannot take
these; one read worker a reading host is warmed too, with a read's lighter imports
(`warm_read_workers`). Warming the read slots with the chain's imports (one more task per CPU)
was tried on 2026-11-29: with the hosts on one machine it started Ray Train's workers 2.5-4 s
later (their imports competed), so the job's first step came later on both folder sizes.

The warmed workers serve the job only if they run in the runtime environment of the datasets'
tasks, which Ray Train sets (`data_tasks_runtime_env`). A one-row Ray Data execution started with
the warm-up (to create Ray Data's helper actors early: `warm_ray_data`, 2026-11-24) is gone: on
the whole job it cost more than it saved, its three processes starting on the head while Ray
Train's did (first step 34.2 s with it, 26.1 s without; BENCHMARKS.md `startup`).

Nothing waits for the warm-up: a slot that is still warming when the first read task comes
only delays that task by what is left of its imports, as before. A chain that fails here (a user
op that does not import) fails again, with its proper error, on the first real batch; the warm-up
only returns the error's text.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence


def warm_preprocess_workers(plan, ops: list, runtime_env: dict | None = None, shared: Sequence = ()) -> list:
    """Start one warm-up task per CPU slot of every host that runs the chain; returns their refs
    (nobody needs to wait for them). `runtime_env`: that of the tasks the warmed workers are for,
    by default the datasets' tasks under Ray Train (`data_tasks_runtime_env`); `{}` for tasks this
    process starts itself. `shared`: object refs the read tasks will get (the listings' arrays,
    `units.LazyUnits`), fetched to each host by its warm-up: 68 MiB for 1.28M files, which the
    first read tasks of the pass waited 1-2 s for between two simulated hosts."""
    import ray

    from smlaunch.cluster.labels import host_selector

    subcluster = "data" if plan.data_selector else "train"
    task = ray.remote(warm_worker)
    runtime_env = data_tasks_runtime_env() if runtime_env is None else runtime_env
    refs: list[ray.ObjectRef] = []
    for host in plan.hosts:
        if host.subcluster != subcluster:
            continue
        pinned = task.options(
            num_cpus=1, max_retries=0, label_selector=host_selector(host.name), runtime_env=runtime_env
        )
        # The refs in a list, so the task's imports do not wait for their fetch; one slot a host fetches.
        refs.extend(
            pinned.remote(list(ops), list(shared) if slot == 0 else []) for slot in range(max(int(host.num_cpus), 1))
        )
    return refs + warm_read_workers(plan, runtime_env)


def warm_read_workers(plan, runtime_env: dict) -> list:
    """One light task on every host that reads a channel, in the read tasks' own runtime
    environment (`dataset.READ_WORKER_ENV`): Ray starts its worker process now, while Ray Train
    starts, and the pass's first read tasks (the short ones a first batch waits for,
    `units.headed_runs`) run in it. It imports what a read needs (Ray Data's task side, pyarrow,
    the readers), not torch: about 1.2 s on the 2-core VM, where a chain worker's take 4.

    One a host, not one a CPU: where the hosts share a machine (the local simulation), every
    process started beside Ray Train's delays its workers. `configs/hetero.yaml` with a 2-CPU data
    host, 2-core VM: Ray Train's workers were up 13.9 s after the listing without read workers
    warmed (mean of 8 jobs), 14.6 s with one a host (8), 16.5 s with one a CPU (4). The host's
    other read slots start their workers while the first reads run."""
    import ray

    from smlaunch.cluster.labels import host_selector
    from smlaunch.pipelines.dataset import READ_WORKER_ENV

    env = {**runtime_env, "env_vars": {**runtime_env.get("env_vars", {}), **READ_WORKER_ENV}}
    readers = sorted({h for c in plan.channels for h in c.hosts})
    task = ray.remote(warm_reader)
    return [
        task.options(num_cpus=0, max_retries=0, label_selector=host_selector(name), runtime_env=env).remote()
        for name in readers
    ]


def warm_reader() -> dict:
    """In a read worker: a read task's imports, at a low CPU priority (see `warm_worker`)."""
    with _lower_priority():
        import pyarrow  # noqa: F401 - imported to be warm, not used
        import ray.data  # noqa: F401 - imported to be warm, not used

        from smlaunch.cluster.labels import this_host
        from smlaunch.pipelines.sources import file_reader, pipe_reader  # noqa: F401 - imported to be warm

    return {"host": this_host(), "pid": os.getpid(), "error": None, "reader": True}


def data_tasks_runtime_env() -> dict:
    """The runtime environment the datasets' tasks run with under Ray Train, so the warmed workers
    are the ones Ray gives them. Ray reuses a worker only for tasks of the same job and runtime
    environment, and the datasets' tasks are started by Ray Train's controller (its DatasetManager
    actor, then the split coordinators), which runs with the environment variables Ray Train
    propagates (`ray.train.v2._internal.constants.get_env_vars_to_propagate`, and
    `RAY_WARN_BLOCKING_GET_INSIDE_ASYNC=0`; `TrainController`'s options). With the job's own
    environment the warm-up ran in workers no read or chain task ever used: each real task started
    a cold worker (Ray timeline of `configs/hetero.yaml`, 2-core VM)."""
    from smlaunch._ray_compat import train_propagated_env

    return {"env_vars": train_propagated_env()}


def warm_worker(ops: list, shared: Sequence = ()) -> dict:
    """In the worker: the imports of a read and a chain task, then the job's `Chain` on one small
    JPEG (which also marks the process warm, so the first real batch's time is the chain's own).
    Returns where it ran (host, pid) and the chain's error, if any.

    At a low CPU priority while it imports: where hosts share a machine (the local simulation),
    Ray Train's controller and worker start at the same time and are the longer path; on a data
    host of its own nothing else competes. The priority is put back after (where allowed)."""
    with _lower_priority():
        done = _warm(ops)
    import ray

    if shared:
        with contextlib.suppress(Exception):  # a read task that needs them fetches them again
            ray.get(list(shared))
    return done


def _warm(ops: list) -> dict:
    import io

    import numpy as np
    import pyarrow  # noqa: F401 - imported to be warm: the read tasks' blocks
    import ray
    import ray.data  # noqa: F401 - imported to be warm: Ray Data's task-side modules
    from PIL import Image

    from smlaunch.cluster.labels import this_host
    from smlaunch.pipelines.ops.chain import Chain

    done = {"host": this_host(), "pid": os.getpid(), "error": None}
    buf = io.BytesIO()
    Image.fromarray(np.full((32, 32, 3), 128, dtype=np.uint8)).save(buf, format="JPEG")
    batch = {
        "image": np.array([buf.getvalue()], dtype=object),
        "label": np.zeros(1, np.int64),
        "id": np.zeros(1, np.int64),
    }
    try:
        Chain(ops, [])(batch)
    except Exception as exc:  # the real batch raises it again, with the sample named
        return {**done, "error": f"{type(exc).__name__}: {exc}"}
    return done


@contextlib.contextmanager
def _lower_priority():
    """`nice` +10 within the block, the old priority restored after. Raising it back needs
    CAP_SYS_NICE; where that is refused the worker keeps the lower priority, which changes nothing
    on a data host of its own (its other processes are Ray's and this host's chain work)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = True
    try:
        os.setpriority(os.PRIO_PROCESS, 0, before + 10)
    except OSError:
        lowered = False
    try:
        yield
    finally:
        if lowered:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, 0, before)
