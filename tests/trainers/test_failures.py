"""Which errors on a train rank a restart can mend (`trainers.failures.restartable`), and the one line
for those it cannot (`describe`). The whole jobs, where such a line ends the job at its first
occurrence, are tests/launcher/test_byo_jobs.py's and tests/launcher/attached/test_attached.py's;
a killed worker's restart, tests/reliability/test_train_failures.py's."""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import signal
import sys

import pytest
import ray.exceptions

from smlaunch.trainers.failures import describe, restartable
from smlaunch.trainers.validation import ChannelValidation
from support.ports import free_port


def _collective_with_a_peer_that_dies(port: int, rank: int, queue) -> None:
    """Rank 1 dies (SIGKILL) in the third all-reduce; rank 0 puts what it met into `queue`."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    tensor = torch.ones(4)
    for step in range(50):
        if rank == 1 and step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.all_reduce(tensor)
        except Exception as exc:  # noqa: BLE001 - what a surviving rank meets, judged in the parent
            queue.put((restartable(exc), type(exc).__name__, str(exc).split("\n", 1)[0]))
            return
    queue.put((None, "no error", ""))


def test_a_collective_whose_peer_died_is_restartable():
    """What a surviving DDP rank meets when its peer's process is killed (gloo: a plain RuntimeError
    raised from torch.distributed's frames) is what Ray Train's restarts are for."""
    context = multiprocessing.get_context("spawn")
    queue, port = context.Queue(), free_port()
    ranks = [context.Process(target=_collective_with_a_peer_that_dies, args=(port, r, queue)) for r in (0, 1)]
    for process in ranks:
        process.start()
    try:
        verdict, kind, text = queue.get(timeout=120)
    finally:
        for process in ranks:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    assert verdict is True, (kind, text)


def test_ray_s_system_errors_are_restartable_and_a_task_s_own_error_is_not():
    assert restartable(ray.exceptions.ActorDiedError())
    assert restartable(ray.exceptions.WorkerCrashedError())
    assert restartable(ray.exceptions.NodeDiedError("gone"))
    lost = ray.exceptions.RayTaskError("read", "Traceback ...", ray.exceptions.WorkerCrashedError())
    assert restartable(lost)
    bug = ray.exceptions.RayTaskError("map", "Traceback ...", ValueError("bad row"))
    assert not restartable(bug)
    for error in (
        KeyError("validation"),
        ValueError("bad"),
        RuntimeError("mat1 and mat2 shapes cannot be multiplied"),
        IndexError("out of range"),
        TypeError("not callable"),
    ):
        assert not restartable(error), error
    try:  # raised from another error: judged by what it came from
        try:
            raise ray.exceptions.ActorDiedError()
        except ray.exceptions.ActorDiedError as exc:
            raise RuntimeError("the coordinator is gone") from exc
    except RuntimeError as exc:
        assert restartable(exc)


def _users_module(tmp_path, monkeypatch, name: str, source: str):
    """A module of the user's, imported by name from their folder (as a rank imports it)."""
    monkeypatch.setenv("SM_LAUNCH_CODE_DIR", str(tmp_path))
    (tmp_path / f"{name}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, tmp_path / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _raised(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the error under test
        return exc
    raise AssertionError("nothing raised")


def test_an_error_in_the_user_s_loss_names_the_field_the_function_and_its_deepest_line(tmp_path, monkeypatch):
    mine = _users_module(
        tmp_path,
        monkeypatch,
        "mine",
        (
            "def loss(model, batch):\n"
            "    return helper(batch)\n"
            "\n"
            "def helper(batch):\n"
            "    raise ValueError('a bad batch\\nsecond line')\n"
            "\n"
            "class Net:\n"
            "    def forward(self, x):\n"
            "        return x['missing']\n"
        ),
    )
    named = {"model.factory": "mine:net", "task.loss": "mine:loss", "task.evaluate": "mine:metrics"}
    line, users = describe(_raised(lambda: mine.loss(None, {})), 0, "at step 5", named)
    assert (
        users
        and line == "task.loss mine:loss failed on rank 0 at step 5, at mine.py:5 in helper: ValueError: a bad batch"
    )
    line, users = describe(_raised(lambda: mine.Net().forward({})), 1, "at step 2", named)
    assert (
        users
        and line
        == "the model of model.factory mine:net failed on rank 1 at step 2, at mine.py:9 in "
        "forward: KeyError: 'missing'"
    )


def test_an_error_of_ours_is_an_internal_error_at_our_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SM_LAUNCH_CODE_DIR", str(tmp_path))
    schedule = ChannelValidation(every_epochs=1)
    line, users = describe(
        _raised(lambda: schedule.at_end([{"epoch": 1}], 15)),
        0,
        "in the validation at step 15",
        {"task.loss": "mine:loss"},
    )
    assert not users
    assert line.startswith("internal error on rank 0 in the validation at step 15, at smlaunch/trainers/validation.py:")
    assert line.endswith(" in at_end: KeyError: 'step'")


@pytest.mark.parametrize(
    "every, after, at_end",
    [
        (1, [True, True, True], True),
        (2, [False, True, False], True),
        (0, [False] * 3, True),  # with `steps` or `epochs` alike: only at the end
    ],
)
def test_a_channel_s_schedule_validates_after_its_epochs_and_at_the_end(every, after, at_end):
    schedule = ChannelValidation(every)
    assert [schedule.after_epoch(n) for n in (1, 2, 3)] == after
    assert schedule.at_end([], 10) is at_end and schedule.at_end([{"step": 9}], 10)
    assert not schedule.at_end([{"step": 10}], 10)  # the last epoch's pass was at the last step
