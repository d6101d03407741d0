"""Which errors on a train rank Ray Train's restarts can mend, and one line for those they cannot.

Ray Train restarts the worker group after any error on any rank, `trainer.max_failures` times.
That is right for what a restart mends: a worker process that died (killed, OOM), a lost node,
a drained one; and for what its peers meet then (a collective whose peer is gone, a Ray actor or
object that went with it). It is wrong for an exception that will happen again: a `KeyError` in
our loop, a bug in the user's loss, a shape error. Each restart pays the workers' start-up and the
steps since the last checkpoint, and meets the same error: a 20-step job ended after three full
attempts and 3 min 11 s, with the user's `ValueError` buried in Ray's nested traceback (issue 76).

So a rank that meets an error no restart explains (`restartable`) posts it to the relay as one
line (`describe`: the user's function and its line, or an internal error), with the traceback
for the run's log, then raises it (`end_job_for`); Ray Train's controller, deciding to restart,
finds the posted error and ends the run instead (`no_restart_after_a_posted_error`), and the
launcher prints the posted line. What a restart mends is raised and restarted as before.
"""

from __future__ import annotations

import re
import sys
import traceback
from typing import Any

TRACEBACK_CHARS = 20_000
"""The most of a traceback a rank sends with its error (the run's log gets it, not the console)."""

_COLLECTIVE_TEXT = re.compile(
    r"gloo|nccl|c10d|ProcessGroup|Connection (?:reset|closed|refused)|Broken pipe|"
    r"[Tt]imed out waiting",
    re.IGNORECASE,
)
_COLLECTIVE_FILES = ("/torch/distributed/", "/torch/nn/parallel/")


def restartable(exc: BaseException) -> bool:
    """Whether a restart of the worker group can mend `exc` (or anything it was raised from): a
    Ray system error (an actor, worker, node or object that is gone; a placement that cannot be
    made; Ray's own memory monitor), a collective whose peer is gone (torch.distributed's errors,
    and gloo's and NCCL's, which arrive as a plain `RuntimeError` from torch.distributed's frames),
    or a dropped connection. A Ray task's error is judged by what the task raised."""
    import ray.exceptions as rex

    system = (
        rex.RayActorError,
        rex.ObjectLostError,
        rex.WorkerCrashedError,
        rex.NodeDiedError,
        rex.RaySystemError,
        rex.OutOfMemoryError,
        rex.ActorUnschedulableError,
        rex.TaskUnschedulableError,
        rex.ObjectStoreFullError,
        rex.GetTimeoutError,
        rex.LocalRayletDiedError,
    )
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, system) or isinstance(current, ConnectionError) or _from_a_collective(current):
            return True
        if isinstance(current, rex.RayTaskError) and current.cause is not None and current.cause is not current:
            current = current.cause
            continue
        current = current.__cause__ or current.__context__
    return False


def _from_a_collective(exc: BaseException) -> bool:
    dist_error = getattr(sys.modules.get("torch.distributed"), "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    if type(exc) is not RuntimeError:
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames and any(part in frames[-1].filename for part in _COLLECTIVE_FILES)) or bool(
        _COLLECTIVE_TEXT.search(str(exc).split("\n", 1)[0])
    )


def describe(exc: BaseException, rank: int, doing: str, named: dict[str, str]) -> tuple[str, bool]:
    """One line for an error no restart mends, and whether it came from the user's code.

    `named`: config field -> `module:function` of the user's functions the run calls (the model
    factory, the task's loss and evaluate). Where the traceback passes through the user's code,
    the line names the function the run entered it by and the deepest line of it (`task.loss
    tab:mse failed on rank 0 at step 5, at tab.py:24 in mse: ValueError: ...`); else the error is
    ours (`internal error on rank 0 at step 5, at smlaunch/trainers/loop.py:371 in _validate: ...`),
    with the deepest frame it was raised in where that is a library's."""
    from smlaunch.user_code import error_text, place_in_user_code

    place = place_in_user_code(exc, named)
    if place is not None:
        what, where = place
        return f"{what or 'your code'} failed on rank {rank} {doing}, at {where}: {error_text(exc)}", True
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/smlaunch/" in f.filename]
    where = ""
    if ours:
        where = f", at smlaunch/{ours[-1].filename.rsplit('/smlaunch/', 1)[1]}:{ours[-1].lineno} in {ours[-1].name}"
        if frames[-1] is not ours[-1]:
            deepest = frames[-1]
            where += (
                f" (raised at {deepest.filename.rsplit('/site-packages/', 1)[-1]}:{deepest.lineno} in {deepest.name})"
            )
    return f"internal error on rank {rank} {doing}{where}: {error_text(exc)}", False


def end_job_for(exc: BaseException, rank: int, line_for) -> bool:
    """Post `exc` to the relay as the error that ends the job, unless a restart can mend it (then
    False: the caller raises it, for Ray Train's restarts). A `UserError` (bad data, a lost host,
    ...) goes as its own line; any other error as `line_for(exc) -> (line, whether it is the user's
    code's)` says (`describe`; your own loop's `user_loop.error_line`), with its traceback for the
    run's log. Posted before the rank raises (the relay holds it when `send_event` returns), so Ray
    Train's controller finds it when it decides on the failure (`no_restart_after_a_posted_error`)."""
    from smlaunch.errors import ConfigError, DataError, user_error_in

    message, trace = user_error_in(exc), None
    if message is not None:
        kind = (
            "DataError"
            if isinstance(exc, DataError)
            else "ConfigError"
            if isinstance(exc, ConfigError)
            else "UserError"
        )
    elif restartable(exc):
        return False
    else:
        message, users = line_for(exc)
        kind = "UserError" if users else "InternalError"
        trace = "".join(traceback.format_exception(exc))[-TRACEBACK_CHARS:]
    from smlaunch.cluster.run_relay import send_event

    send_event("fatal", wait_s=5, text=message, error=kind, rank=rank, traceback=trace)
    return True


def no_restart_after_a_posted_error():
    """A callback for Ray Train's controller (`RunConfig(callbacks=...)`) that turns its decision
    to restart the worker group into one to end the run, when a rank posted an error no restart
    mends (`end_job_for`). The run then ends as Ray Train ends a failed one: its workers and
    placement group released, its placement-group cleaner stopped (an abandoned controller's is
    left running on a cluster without Ray's state API), `fit` raising within a second or two.

    Ray Train's public `UserCallback` is told of an error but cannot change the decision; its
    `ControllerCallback` (Ray 2.60's `ray.train.v2._internal`) can: an error its
    `before_controller_execute_failure_decision` raises becomes a `ControllerError`, which the
    failure policy never retries (`controller._run_controller_hook`). A Ray without that hook fails
    tests/launcher/attached/test_attached.py's count of worker-group starts."""
    from smlaunch._ray_compat import train_controller_callback_base

    controller_callback: type[Any] = train_controller_callback_base()

    class NoRestartAfterAPostedError(controller_callback):
        def before_controller_execute_failure_decision(self, failure_decision) -> None:
            if getattr(failure_decision, "value", None) != "RETRY":
                return
            from smlaunch.cluster.run_relay import ending_error
            from smlaunch.errors import UserError

            posted = ending_error()
            if posted is not None:
                raise UserError(posted["text"])

    return NoRestartAfterAPostedError()
