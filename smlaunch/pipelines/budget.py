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

It must run in the process that executes the Dataset: the driver for `iter_batches`, Ray Train's
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

_installed = False


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
