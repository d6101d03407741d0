"""The warm-up of the preprocessing hosts' workers, on the real 3-node cluster: one task per CPU
slot of each data host, none on the train host, and the next task on a data host, in the runtime
environment Ray Train gives the datasets' tasks, runs in a worker it warmed (Ray reuses it), with
the chain's imports done; a task in the read tasks' environment runs in a warmed read worker of
its own. (In a whole job the chain tasks ran in the warmed workers: the Ray timeline in
BENCHMARKS.md `startup`; the read tasks in others: scale, 2026-11-29, late night.)"""

import pytest

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config import load_config


def _plan(configs, tmp_path):
    cfg = load_config(
        configs / "hetero.yaml", ["cluster.instance_groups.1.instance_count=2", f"run.dir={tmp_path}", "run.name=warm"]
    )
    return cfg, build_plan(cfg, LocalEnvironment(cpus=3, gpus=0, started="t"))


@pytest.mark.ray
def test_every_data_slot_is_warmed_and_the_next_task_runs_in_a_warmed_worker(data_cluster, configs, tmp_path):
    from smlaunch.pipelines.warmup import data_tasks_runtime_env, warm_preprocess_workers

    ray = data_cluster
    cfg, plan = _plan(configs, tmp_path)
    slots = {h.name: h.num_cpus for h in plan.hosts if h.subcluster == "data"}
    assert set(slots) == {"algo-2", "algo-3"}
    import numpy as np

    arrays = ray.put({"chars": np.zeros(8 << 20, np.uint8)})  # a listing's arrays (`units.LazyUnits`)
    warmed_all = ray.get(warm_preprocess_workers(plan, cfg.pipeline.ops, shared=[arrays]), timeout=120)
    done = [d for d in warmed_all if not d.get("reader")]
    assert sorted(d["host"] for d in done) == sorted(h for h, n in slots.items() for _ in range(n))
    # One read worker on every host that reads a channel (here the data hosts), a process of its own.
    readers = [d for d in warmed_all if d.get("reader")]
    assert sorted(d["host"] for d in readers) == sorted({h for c in plan.channels for h in c.hosts}), readers
    assert not {d["pid"] for d in readers} & {d["pid"] for d in done}, warmed_all
    # ... which the warm-up brought to every data host, for the first read tasks not to wait for them there.
    nodes = {n["NodeID"]: n["Labels"].get("sm-host") for n in ray.nodes() if n["Alive"]}
    held = ray.experimental.get_object_locations([arrays])[arrays]["node_ids"]
    assert {"algo-2", "algo-3"} <= {nodes[n] for n in held}, (held, nodes)
    assert all(d["error"] is None for d in done), done
    warmed = {d["pid"] for d in done if d["host"] == "algo-2"}

    def _after_warm_up() -> dict:  # nested: pickled by value for the worker
        import os
        import sys

        from smlaunch.pipelines.ops import chain

        return {
            "pid": os.getpid(),
            "warm": chain._PROCESS_WARM,
            "torchvision": "torchvision.io" in sys.modules,
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "root": os.geteuid() == 0,
        }

    # In the runtime environment the datasets' tasks get under Ray Train: theirs are the tasks it warms for.
    after = ray.get(
        ray.remote(_after_warm_up)
        .options(num_cpus=1, label_selector={"sm-host": "algo-2"}, runtime_env=data_tasks_runtime_env())
        .remote(),
        timeout=60,
    )
    assert after["pid"] in warmed and after["warm"] and after["torchvision"], (after, warmed)
    # A read task's environment (Ray merges its env_vars with its parent's) runs in the warmed read
    # worker, which imported no torch, and never in a chain worker.
    from smlaunch.pipelines.dataset import READ_WORKER_ENV

    read_env = data_tasks_runtime_env()
    read_env["env_vars"].update(READ_WORKER_ENV)
    read = ray.get(
        ray.remote(_after_warm_up)
        .options(num_cpus=0, label_selector={"sm-host": "algo-2"}, runtime_env=read_env)
        .remote(),
        timeout=60,
    )
    assert read["pid"] in {d["pid"] for d in readers if d["host"] == "algo-2"}, (read, readers)
    assert not read["torchvision"] and read["pid"] not in warmed, read

    # The warm-up imports at a lower CPU priority and gives it back where allowed (root may raise it):
    # the warmed worker's is a fresh Ray worker's (Ray starts its workers at its own niceness).
    def _priority() -> int:
        import os

        return os.getpriority(os.PRIO_PROCESS, 0)

    fresh = ray.get(
        ray.remote(_priority).options(num_cpus=0, label_selector={"sm-host": "algo-1"}).remote(), timeout=60
    )
    assert after["nice"] == fresh or not after["root"], (after, fresh)


@pytest.mark.ray
def test_a_chain_that_fails_is_reported_by_the_warm_up_not_raised(data_cluster, configs, tmp_path):
    from smlaunch.pipelines.warmup import warm_preprocess_workers

    cfg, plan = _plan(configs, tmp_path)
    ops = load_config(
        configs / "hetero.yaml", ["pipeline.ops.2={op: user, function: 'no_such_module:fn'}"]
    ).pipeline.ops
    done = [d for d in data_cluster.get(warm_preprocess_workers(plan, ops), timeout=120) if not d.get("reader")]
    assert done and all("no_such_module" in d["error"] for d in done), done
