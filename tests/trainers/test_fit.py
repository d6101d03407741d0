"""How `trainers.fit` turns Ray Train's failures into one line (Ray Train's own exception classes)."""

from pathlib import Path

import pytest

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config import load_config
from smlaunch.errors import UserError
from smlaunch.launcher.job.train_spec import train_spec
from smlaunch.trainers.fit import START_RETRIES, _raise_if_preempted, _raise_if_workers_never_started

TINY = str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")


def test_a_worker_group_that_never_starts_ends_in_one_line_and_other_failures_pass_through():
    from ray.train import ControllerError
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError

    cfg = load_config(TINY, ["cluster.instance_groups.0.gpus=2"])
    spec = train_spec(cfg, build_plan(cfg, LocalEnvironment(cpus=8, gpus=0, started="20261124-000000")))
    with pytest.raises(UserError) as raised:
        _raise_if_workers_never_started(ControllerError(WorkerGroupStartupTimeoutError(2)), spec)
    assert str(raised.value) == (
        f"the 2 train workers (1 CPU each, on algo-1) could not be placed in {START_RETRIES + 1} tries of 60 s: "
        "another job holds those nodes' CPUs, or they left; free them, or set trainer.max_workers lower"
    )
    _raise_if_workers_never_started(ControllerError(RuntimeError("other")), spec)  # not ours to rename
    _raise_if_workers_never_started(ValueError("x"), spec)


def test_the_spec_fit_takes_carries_the_plans_worker_decision_and_nothing_is_recounted():
    """`fit(spec, ...)` reads the count, devices and places of its workers from the spec alone:
    they must be the plan's (`place_workers`), rank by rank."""
    cfg = load_config(TINY, ["cluster.instance_groups.0.gpus=2", "cluster.instance_groups.0.instance_count=2"])
    plan = build_plan(cfg, LocalEnvironment(cpus=8, gpus=0, started="20261124-000000"))
    spec = train_spec(cfg, plan)
    assert spec.world_size == plan.train_workers == 4
    assert spec.use_gpu is plan.use_gpu is False  # CPU stand-ins for the planned GPUs on this machine
    assert [dict(s) for s in spec.worker_selectors] == plan.worker_selectors
    assert [s[plan.host_label] for s in spec.worker_selectors] == ["algo-1", "algo-1", "algo-2", "algo-2"]
    assert spec.train_hosts == ("algo-1", "algo-2")
    assert dict(spec.preprocess_selector) == plan.preprocess_selector


def test_a_drain_the_loop_did_not_return_on_ends_in_one_line():
    from ray.train.v2.api.exceptions import PreemptionError
    from ray.train.v2.api.preemption import PreemptionInfo

    info = PreemptionInfo(deadline_ms=None, preempted_node_to_ranks={"ab12": [0, 1]})
    with pytest.raises(UserError) as raised:
        _raise_if_preempted(PreemptionError(preemption_info=info, drain_timed_out=True))
    assert str(raised.value).startswith("train node(s) ab12 drained for preemption and the loop did not return")
    _raise_if_preempted(ValueError("x"))  # not a preemption: not ours to rename
