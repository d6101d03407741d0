"""SIGTERM: stop at the next step boundary, checkpoint, and leave inside SageMaker's 120 s.

StopTrainingJob, MaxRuntimeInSeconds and (users assume) spot reclaims send SIGTERM and SIGKILL
120 s later; the training toolkit does not forward the signal (toolkit issue #125), so the
launcher, running as the entry point, handles it itself. The handler only records the request.
A relay thread then writes the `stop` key in Ray's KV store, which the train loop polls
(`trainers.control`): every rank stops at the same step, checkpoints and returns, and the
launcher shuts Ray down. If that has not happened after `STOP_GRACE_S`, the launcher gives up
waiting and tears down anyway.
"""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager

from smlaunch.cluster.job_state import NAMESPACE, STOP

STOP_GRACE_S = 75.0
"""After SIGTERM, how long the trainer gets to reach a step boundary and checkpoint; the rest of
SageMaker's 120 s covers Ray's shutdown on every host."""


class StopRequest:
    """Records SIGTERM; `event` is set once, `signal_name` says which signal."""

    def __init__(self):
        self.event = threading.Event()
        self.signal_name: str | None = None

    def install(self, signals=(signal.SIGTERM,)) -> "StopRequest":
        for sig in signals:
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.event.is_set():
            return
        self.signal_name = signal.Signals(signum).name
        self.event.set()
        # Not logged here: a signal handler may interrupt a thread that holds the logging lock.
        threading.Thread(target=logging.getLogger("smlaunch").warning, daemon=True,
                         args=(f"{self.signal_name} received: stopping at the next step boundary "
                               f"(up to {STOP_GRACE_S:.0f} s)",)).start()

    def is_set(self) -> bool:
        return self.event.is_set()


@contextmanager
def forward_stop_to_trainer(stop: StopRequest | None):
    """While the body runs, relay a stop request into Ray's KV store for the train workers.

    Needs `ray.init` to have connected this process. Uses Ray's internal KV client, the same
    store the launcher's job state lives in.
    """
    if stop is None:
        yield
        return
    finished = threading.Event()

    def relay() -> None:
        while not finished.is_set():
            if stop.event.wait(0.5):
                from ray.experimental import internal_kv

                internal_kv._internal_kv_put(STOP, (stop.signal_name or "stop").encode(), namespace=NAMESPACE)
                return

    thread = threading.Thread(target=relay, name="smlaunch-stop-relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        finished.set()
        thread.join(timeout=5)
