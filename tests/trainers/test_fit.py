"""How `trainers.fit` turns Ray Train's failures into one line (Ray Train's own exception classes)."""

from pathlib import Path

import pytest

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config import load_config
from smlaunch.errors import UserError
from smlaunch.trainers.fit import START_RETRIES, _raise_if_workers_never_started

TINY = str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")


def test_a_worker_group_that_never_starts_ends_in_one_line_and_other_failures_pass_through():
    from ray.train import ControllerError
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError

    plan = build_plan(load_config(TINY, ["cluster.instance_groups.0.gpus=2"]),
                      LocalEnvironment(cpus=8, gpus=0, started="20261124-000000"))
    with pytest.raises(UserError) as raised:
        _raise_if_workers_never_started(ControllerError(WorkerGroupStartupTimeoutError(2)), plan)
    assert str(raised.value) == (
        f"the 2 train workers (1 CPU each, on algo-1) could not be placed in {START_RETRIES + 1} tries of 60 s: "
        "another job holds those nodes' CPUs, or they left; free them, or set trainer.max_workers lower")
    _raise_if_workers_never_started(ControllerError(RuntimeError("other")), plan)  # not ours to rename
    _raise_if_workers_never_started(ValueError("x"), plan)
