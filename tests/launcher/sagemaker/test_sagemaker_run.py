"""A SageMaker host's decisions: the shared Ray token (where it comes from, and refusing to run
without one), how a worker host ends (`watch_head`: what the head published, a silent head, its
own node dying, a stop the head never finishes) and how the head waits for the workers to leave
(`_finish`), against fakes of the job's store and the host's Ray node."""

import itertools
import time
from types import SimpleNamespace

import pytest

from smlaunch.cluster.job_state import HEARTBEAT, OUTCOME, StoreUnavailable
from smlaunch.cluster.sagemaker_env import SageMakerEnvironment
from smlaunch.errors import UserError
from smlaunch.launcher.job.stopping import StopRequest
from smlaunch.launcher.sagemaker import run as sagemaker_run
from smlaunch.launcher.sagemaker.run import ray_environment


def env(*hosts):
    return SageMakerEnvironment(
        base_dir="/opt/ml",
        current_host=hosts[0],
        hosts=hosts,
        current_instance_type="x",
        current_group="g",
        current_group_hosts=hosts,
        groups={},
        network_interface_name="eth0",
        channels={},
    )


def test_multi_host_job_needs_the_job_token_and_uses_it():
    with pytest.raises(UserError, match="multi-host job without a Ray token: set SMLAUNCH_RAY_TOKEN"):
        ray_environment(env("algo-1", "algo-2"), {})
    token = "ab" * 32
    variables = ray_environment(env("algo-1", "algo-2"), {"SMLAUNCH_RAY_TOKEN": token})
    assert variables["RAY_AUTH_MODE"] == "token" and variables["RAY_AUTH_TOKEN"] == token
    assert ray_environment(env("algo-1", "algo-2"), {"RAY_AUTH_TOKEN": token})["RAY_AUTH_TOKEN"] == token
    with pytest.raises(UserError, match="at least 32 characters"):
        ray_environment(env("algo-1", "algo-2"), {"SMLAUNCH_RAY_TOKEN": "short"})


def test_single_host_job_makes_its_own_token():
    first = ray_environment(env("algo-1"), {})["RAY_AUTH_TOKEN"]
    assert len(first) == 64 and first != ray_environment(env("algo-1"), {})["RAY_AUTH_TOKEN"]


class FakeStore:
    """The job's key-value store as a worker reads it: `values`, or StoreUnavailable while `down`;
    the heartbeat advances by one at each read while `beating`."""

    def __init__(self, values=None, down=False, beating=True):
        self.values, self.down, self.beating = dict(values or {}), down, beating
        self.beats = itertools.count()

    def get(self, key):
        if self.down:
            raise StoreUnavailable("store down")
        if key == HEARTBEAT and self.beating:
            return str(next(self.beats)).encode()
        return self.values.get(key)

    def put(self, key, value, timeout_s=None):
        if self.down:
            raise StoreUnavailable("store down")
        self.values[key] = value

    def keys(self, prefix):
        if self.down:
            raise StoreUnavailable("store down")
        return [k for k in self.values if k.startswith(prefix)]


def node(exit_code=None):
    return SimpleNamespace(exit_code=lambda: exit_code, log_tail=lambda: "raylet: out of memory")


@pytest.fixture
def quick(monkeypatch):
    """The head counts as lost after 1 s of silence (a loaded 2-core machine may stall a poll for a
    few tenths); a stop's hard deadline 0.1 s past its grace."""
    monkeypatch.setattr(sagemaker_run, "HEAD_LOST_S", 1.0)
    monkeypatch.setattr(sagemaker_run, "HARD_STOP_AFTER_GRACE_S", 0.1)
    monkeypatch.setattr(sagemaker_run, "LEAVE_WAIT_S", 0.3)


@pytest.mark.parametrize(
    "published, code, says",
    [
        (b"ok", 0, "head algo-1 finished the job"),
        (b"stopped by SIGTERM", 143, "head algo-1 stopped by SIGTERM"),
        (
            b"failed: channel 'train': part-3.tfrecord: bad data CRC",
            1,
            "job failed on head algo-1: channel 'train': part-3.tfrecord: bad data CRC",
        ),
    ],
)
def test_a_worker_ends_as_the_head_s_outcome_says(quick, published, code, says):
    outcome = sagemaker_run.watch_head(FakeStore({OUTCOME: published}), node(), "algo-1", StopRequest(), poll_s=0.01)
    assert (outcome.exit_code, outcome.message) == (code, says)


def test_a_worker_whose_ray_node_died_fails_with_the_node_s_log(quick):
    outcome = sagemaker_run.watch_head(
        FakeStore({OUTCOME: b"ok"}), node(exit_code=-9), "algo-1", StopRequest(), poll_s=0.01
    )
    assert outcome.exit_code == 1 and "exited with status -9: raylet: out of memory" in outcome.message


@pytest.mark.parametrize("store", [FakeStore(beating=False), FakeStore(down=True)], ids=["silent", "unreachable"])
def test_a_worker_gives_up_on_a_head_that_stops_beating_or_answering(quick, store):
    outcome = sagemaker_run.watch_head(store, node(), "algo-1", StopRequest(), poll_s=0.01)
    assert outcome.exit_code == 1 and outcome.message.startswith("lost the head algo-1: no heartbeat for")


def test_a_worker_waits_for_a_beating_head_however_long_then_follows_its_outcome(quick):
    store = FakeStore()
    started = time.monotonic()
    original = store.get

    def get(key):  # the head publishes after 2.5 s of beating: over twice HEAD_LOST_S
        if key == OUTCOME and time.monotonic() - started > 2.5:
            return b"ok"
        return original(key)

    store.get = get
    outcome = sagemaker_run.watch_head(store, node(), "algo-1", StopRequest(), poll_s=0.01)
    assert (outcome.exit_code, outcome.message) == (0, "head algo-1 finished the job")
    assert time.monotonic() - started > 2.5


def test_a_stopped_worker_leaves_with_143_when_the_head_never_finishes(quick):
    stop = StopRequest()
    stop.grace_s = 0.1
    stop.request("SIGTERM", "SIGTERM received")
    outcome = sagemaker_run.watch_head(FakeStore(), node(), "algo-1", stop, poll_s=0.01)
    assert (outcome.exit_code, outcome.message) == (143, "SIGTERM received and the head did not finish in time")


def plan(*workers):
    return SimpleNamespace(head="algo-1", hosts=[SimpleNamespace(name=h) for h in ("algo-1", *workers)])


def test_the_head_publishes_its_outcome_and_waits_only_for_workers_still_there(quick):
    store, lines = FakeStore({b"left/algo-2": b"1", b"left/algo-3": b"1"}), []
    sagemaker_run._finish(store, b"ok", plan("algo-2", "algo-3"), lines.append)
    assert store.values[OUTCOME] == b"ok" and lines == []


def test_the_head_names_workers_that_did_not_confirm_leaving_and_does_not_wait_past_the_deadline(quick):
    store, lines = FakeStore({b"left/algo-2": b"1"}), []
    sagemaker_run._finish(store, b"failed: boom", plan("algo-2", "algo-3", "algo-4"), lines.append)
    assert store.values[OUTCOME] == b"failed: boom"
    assert lines == [
        "note: algo-3, algo-4 did not confirm leaving within 0 s; they exit on their own once the head is gone"
    ]


def test_the_head_does_not_wait_on_a_store_that_went_away(quick):
    store, lines = FakeStore(), []
    sagemaker_run._finish(store, b"ok", plan("algo-2"), lines.append)  # the outcome is in
    store.down = True
    sagemaker_run._finish(SimpleNamespace(put=lambda *a: None, keys=store.keys), b"ok", plan("algo-2"), lines.append)
    assert store.values[OUTCOME] == b"ok" and len(lines) == 2 and "algo-2 did not confirm leaving" in lines[1]
