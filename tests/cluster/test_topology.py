"""The one rule that places train workers (`topology.place_workers`), for every path."""

from smlaunch.cluster.topology import WorkerPlan, place_workers


def test_one_worker_per_gpu_in_host_order_capped():
    assert place_workers([("algo-2", 2), ("algo-3", 2)], cap=3) == (
        WorkerPlan(0, "algo-2", 0),
        WorkerPlan(1, "algo-2", 1),
        WorkerPlan(2, "algo-3", 0),
    )


def test_hosts_without_gpus_get_one_cpu_worker_each():
    assert place_workers([("algo-2", 0), ("algo-3", 0)]) == (
        WorkerPlan(0, "algo-2", None),
        WorkerPlan(1, "algo-3", None),
    )


def test_cpu_workers_spread_over_the_cpus_of_a_running_cluster_s_nodes():
    """Five planned workers on nodes of 1, 4 and 2 CPUs: dealt round robin, ranked node by node."""
    placed = place_workers([("a", 0, 1), ("b", 0, 4), ("c", 0, 2)], cap=5)
    assert [(w.rank, w.host) for w in placed] == [(0, "a"), (1, "b"), (2, "b"), (3, "c"), (4, "c")]
    assert place_workers([("a", 2, 8)], cap=1) == (WorkerPlan(0, "a", 0),)  # GPUs first, whatever the CPUs
