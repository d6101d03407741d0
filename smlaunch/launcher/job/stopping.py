"""SIGTERM: stop at the next step boundary, checkpoint, and leave inside SageMaker's 120 s.

StopTrainingJob, MaxRuntimeInSeconds and (users assume) spot reclaims send SIGTERM and SIGKILL
120 s later; the training toolkit does not forward the signal (toolkit issue #125), so the
launcher, running as the entry point, handles it itself. The handler only records the request.
A relay thread then writes the `stop` key in Ray's KV store, which the train loop polls
(`trainers.control`): every rank stops at the same step, checkpoints and returns, and the
launcher shuts Ray down. If that has not happened after `trainer.stop_grace_s`, the launcher
gives up waiting and ends the job anyway (`overdue`, on every path; SageMaker's head also has a
hard deadline a little later, in `launcher.sagemaker.run`).

Under the training toolkit the signal never reaches the launcher: the toolkit's `train` gets it and
exits at once. `watch_supervisor` turns that exit into the same stop request.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from contextlib import contextmanager

from smlaunch.cluster.job_state import NAMESPACE, STOP
from smlaunch.config.schema import TrainerConfig

STOP_GRACE_S = TrainerConfig.model_fields["stop_grace_s"].default
"""The default of `trainer.stop_grace_s`, until the config is loaded (`StopRequest.grace_s`)."""


class StopRequest:
    """Records SIGTERM; `event` is set once, `signal_name` says which signal."""

    def __init__(self):
        self.event = threading.Event()
        self.signal_name: str | None = None
        self.at: float | None = None
        """`time.monotonic()` when the stop was requested."""
        self.grace_s = STOP_GRACE_S
        """`trainer.stop_grace_s`, set once the config is loaded."""

    def install(self, signals=(signal.SIGTERM,)) -> StopRequest:
        for sig in signals:
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if not self.event.is_set():
            # Not logged here: a signal handler may interrupt a thread that holds the logging lock.
            self.request(signal.Signals(signum).name, f"{signal.Signals(signum).name} received", in_thread=True)

    def request(self, name: str, why: str, in_thread: bool = False) -> None:
        """Stop at the next step boundary; `name` goes into the outcome, `why` into the log."""
        if self.event.is_set():
            return
        self.signal_name = name
        self.at = time.monotonic()
        self.event.set()
        line = f"{why}: stopping at the next step boundary (up to {self.grace_s:g} s)"
        if in_thread:
            threading.Thread(target=logging.getLogger("smlaunch").warning, daemon=True, args=(line,)).start()
        else:
            logging.getLogger("smlaunch").warning(line)

    def is_set(self) -> bool:
        return self.event.is_set()


def overdue(stop: StopRequest | None) -> dict | None:
    """A fatal event for `trainers.fit` once a requested stop is `grace_s` old and the trainer is
    still running: it never reached a step boundary (a step or its data took that long), and a
    billed cluster must not wait on it. The job then ends in one line, without the stop's
    checkpoint; the next run resumes from the last complete one."""
    if stop is None or stop.at is None or time.monotonic() - stop.at < stop.grace_s:
        return None
    return {
        "error": "UserError",
        "text": f"the trainer did not stop within {stop.grace_s:g} s of {stop.signal_name} (trainer.stop_grace_s): "
        "no step boundary was reached, so no checkpoint was written on the stop; the next run resumes "
        "from the last complete one",
    }


@contextmanager
def forward_stop_to_trainer(stop: StopRequest | None, drain: list[str] | None = None):
    """While the body runs, relay a stop request into Ray's KV store for the train workers, and
    with `drain` (your own loop's train hosts) as Ray's preemption signal (`cluster.drain`).

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
                from smlaunch._ray_compat import kv_put

                kv_put(STOP, (stop.signal_name or "stop").encode(), NAMESPACE)
                if drain:
                    from smlaunch.cluster.drain import drain_hosts

                    drain_hosts(drain, stop.grace_s, f"sm-launch: {stop.signal_name or 'stop'}")
                return

    thread = threading.Thread(target=relay, name="smlaunch-stop-relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        finished.set()
        thread.join(timeout=5)


def watch_supervisor(stop: StopRequest, watched: str | None, poll_s: float = 0.5) -> threading.Thread | None:
    """Request a stop once the process `watched` (`pid:start time`, from `supervisor.supervisor`) is gone.

    Under the training toolkit that process is its `train`, which a SIGTERM it receives ends without
    a word to its child. Output the toolkit piped to itself (stdout and stderr, with its
    `capture_error`) then has no reader, so such a pipe is pointed elsewhere first, or a write would
    fail mid-checkpoint: to the container's own stdout on a SageMaker host (so CloudWatch still gets
    the lines), else /dev/null (the log file keeps every line). A pipe someone still reads is left alone.
    The pipes have a thread of their own that wakes the moment a reader goes (`_watch_pipes`), not at
    the next poll; a console line written in the instant between does the same itself
    (`console.detach_dead_pipes`) and is written again.
    """
    if not watched:
        return None
    from smlaunch.cluster.process_tree import is_alive
    from smlaunch.console import detach_dead_pipes

    _watch_pipes()

    pid = watched.split(":", 1)[0]

    def watch() -> None:
        while not stop.event.wait(poll_s):
            if not is_alive(watched):
                detach_dead_pipes()
                stop.request(
                    "toolkit exit",
                    f"the training toolkit (pid {pid}) that started sm-launch exited, "
                    "as it does on SageMaker's SIGTERM, which it does not forward",
                )
                return

    thread = threading.Thread(target=watch, name="smlaunch-supervisor-watch", daemon=True)
    thread.start()
    return thread


def _watch_pipes() -> threading.Thread | None:
    """Point stdout and stderr elsewhere as soon as the process reading them (the toolkit, with its
    `capture_error`, pipes both) is gone: a poll for no event wakes only on POLLERR, which a pipe's
    write end reports once its last reader closed."""
    import os
    import select
    import stat

    from smlaunch.console import detach_dead_pipes

    pipes = [fd for fd in (1, 2) if _is_fifo(fd, os, stat)]
    if not pipes:
        return None

    def watch() -> None:
        poller = select.poll()
        for fd in pipes:
            poller.register(fd, 0)
        left = set(pipes)
        while left:
            events = poller.poll()
            detach_dead_pipes()
            for fd, _ in events:
                poller.unregister(fd)
                left.discard(fd)

    thread = threading.Thread(target=watch, name="smlaunch-pipe-watch", daemon=True)
    thread.start()
    return thread


def _is_fifo(fd: int, os, stat) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False
