"""Ray Data's resource budget from an execution's first step instead of its second second.

Each Ray Data execution (every epoch of a channel, every validation pass, every pass of
`iter_batches`) asks Ray Data's cluster-wide autoscaling coordinator for its subcluster's
resources. The answer arrives asynchronously, and until it does the execution's limits are zero.
Ray 2.60's `ResourceManager` keeps its limits for `GLOBAL_LIMITS_UPDATE_INTERVAL_S` (1 s), so the
zero read at the execution's first step holds for a whole second, and during that second every
operator runs one task at a time (Ray Data's liveness rule): the read tasks of a pass ran one
after the other on one worker while the host's other CPUs idled (Ray timeline, 2-core VM; a
20,000-row TFRecord pass took 0.33 s as two sequential 120 ms tasks).

`budget_from_first_step` makes the executing process ask again at every scheduling step until
the coordinator has answered (the answer comes within milliseconds once its actor exists), for
at most `PROMPT_WINDOW_S`; after that Ray's own interval applies. It wraps one method of a Ray
Data internal class, the only place the interval lives; if a later Ray moves it, nothing is
patched and Ray's behaviour is unchanged (tests/pipelines/test_budget.py then fails, which is
the signal to look again).

`calm_when_held` stops the same loop from spinning once an object store budget holds it back.
The loop waits with `ray.wait(active tasks, timeout=0.1)`; when the budget holds back the outputs
of tasks that are done, every active task is "ready", the wait returns at once and the loop goes
round without a pause until the trainer takes a block. Ray Train's `SplitCoordinator`, on the
train host, then took 34 % of a core against 8-12 % (py-spy, bench/elastic.py, issue 57), and
the elastic jobs' own budget, which ends a drained data host within seconds, was given up for it.
A step that changed nothing now ends no sooner than `HELD_STEP_S` after it began.

Both must run in the process that executes the Dataset: the driver for `iter_batches`, Ray Train's
split coordinator actor for a training channel. Planning calls a datasource's `get_read_tasks`
in that process before the execution starts, so both of smlaunch's datasources call it there.
"""

from __future__ import annotations

import functools
import time

PROMPT_WINDOW_S = 2.0
"""How long an execution keeps asking for its limits at every step before falling back to Ray's
interval: an answer of nothing (another Dataset holds the whole subcluster) looks the same as no
answer, and would otherwise be asked again at every step. The coordinator's client keeps one
call in flight, so asking again costs a `ray.wait(timeout=0)` until the last call is answered."""

HELD_STEP_S = 0.02
"""The shortest scheduling step that changed nothing (no task started or ended, no output made
or taken): at most 50 such steps a second, where a held-back loop ran thousands. A block the
trainer takes is seen at most this late; a chain task takes a batch's time (tens of ms or more)."""

PROGRESS_COUNTERS = (
    "num_tasks_submitted",
    "num_tasks_finished",
    "num_task_outputs_generated",
    "num_outputs_taken",
    "num_external_outqueue_blocks",
)
"""Each operator's counters (`OpRuntimeMetrics`) that move when a step does anything: the last
is the output's queue, which the consumer's thread drains between steps."""

_installed = False
_calm_installed = False


def budget_from_first_step() -> bool:
    """Install the prompt first reading of the limits in this process (once); True if installed."""
    global _installed
    if _installed:
        return True
    from smlaunch._ray_compat import data_resource_manager

    ResourceManager = data_resource_manager()
    if ResourceManager is None:
        return False
    original = getattr(ResourceManager, "get_global_limits", None)
    if original is None or not hasattr(ResourceManager, "GLOBAL_LIMITS_UPDATE_INTERVAL_S"):
        return False

    @functools.wraps(original)
    def get_global_limits(self):
        limits = original(self)
        first = self.__dict__.setdefault("_smlaunch_first_limits_at", time.monotonic())
        unanswered = not (limits.cpu or limits.gpu or limits.object_store_memory)
        if unanswered and time.monotonic() - first < PROMPT_WINDOW_S:
            self._global_limits_last_update_time = 0  # read them again at the next step
        return limits

    ResourceManager.get_global_limits = get_global_limits
    _installed = True
    return True


def _progress(topology) -> tuple:
    return tuple(tuple(getattr(op.metrics, name) for name in PROGRESS_COUNTERS) for op in topology)


def calm_when_held() -> bool:
    """Pace the scheduling loop's steps that change nothing in this process (once); True if
    installed. Nothing is patched where Ray's executor lacks the step or the counters."""
    global _calm_installed
    if _calm_installed:
        return True
    from smlaunch._ray_compat import data_operator_metrics, data_streaming_executor

    executor, metrics = data_streaming_executor(), data_operator_metrics()
    original = getattr(executor, "_scheduling_loop_step", None)
    fields = getattr(metrics, "__dataclass_fields__", {})
    if original is None or not all(name in fields for name in PROGRESS_COUNTERS):
        return False

    @functools.wraps(original)
    def _scheduling_loop_step(self, topology):
        start = time.monotonic()
        before = _progress(topology)
        more = original(self, topology)
        if more and _progress(topology) == before:
            left = HELD_STEP_S - (time.monotonic() - start)
            if left > 0:
                time.sleep(left)
        return more

    executor._scheduling_loop_step = _scheduling_loop_step
    _calm_installed = True
    return True


def tune_this_execution() -> None:
    """Both changes, in the process about to execute a Dataset (see the module's docstring)."""
    budget_from_first_step()
    calm_when_held()
