"""The job's shared state in Ray's GCS key-value store: heartbeat, stop request, outcome, leavers.

A SageMaker job ends only when every host's container exits, so worker hosts must learn
explicitly that the job is over (the toolkit's MPI runner added a status file for the same reason,
sagemaker-training-toolkit PR #145); Ray's own reconnect timeout is 60 s and does not say whether
the job succeeded. The head publishes here:

- `heartbeat`: a counter the head's launcher advances every second; a worker that sees it stall
  (or the GCS vanish) for `HEAD_LOST_S` knows the head is gone even if Ray daemons linger;
- `stop`: set on SIGTERM; the train loop polls it and stops at the next step boundary;
- `outcome`: `ok`, `stopped: ...` or `failed: ...` when the driver is done;
and each worker writes `left/<host>` before it stops its node, so the head can wait for them.

Ray's internal `GcsClient` (`_ray_compat.gcs_client`) is the only way to read the store without
connecting a driver (a driver per worker host would cost memory and its own 60 s reconnect
rules). Its constructor blocks ~35 s on an unreachable GCS, so every call runs with a deadline.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from smlaunch.errors import UserError

NAMESPACE = b"smlaunch"
HEARTBEAT, STOP, OUTCOME = b"heartbeat", b"stop", b"outcome"
CALL_TIMEOUT_S = 3.0
HEAD_LOST_S = 12.0


class StoreUnavailable(Exception):
    """The GCS did not answer within the deadline."""


class JobState:
    """Bounded reads and writes of the job's keys in the GCS at `address` (host:port)."""

    def __init__(self, address: str):
        self.address = address
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="smlaunch-gcs")
        self._client = None
        self._client_lock = threading.Lock()

    def _call(self, fn, timeout_s: float = CALL_TIMEOUT_S):
        def run():
            with self._client_lock:  # both pool threads may ask first; build one client
                if self._client is None:
                    from smlaunch._ray_compat import gcs_client

                    self._client = gcs_client(self.address)
            return fn(self._client)

        future = self._pool.submit(run)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            raise StoreUnavailable(f"GCS at {self.address} did not answer within {timeout_s:.0f} s") from None
        except Exception as exc:  # RpcError and friends: the GCS is gone or refuses us
            if type(exc).__name__ == "AuthenticationError":
                raise UserError(
                    f"the Ray head at {self.address} refused this host's token: every host of the "
                    "job needs the same SMLAUNCH_RAY_TOKEN"
                ) from None
            raise StoreUnavailable(f"GCS at {self.address}: {exc}") from None

    def put(self, key: bytes, value: bytes, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._call(lambda c: c.internal_kv_put(key, value, True, NAMESPACE, timeout=timeout_s), timeout_s + 1)

    def get(self, key: bytes, timeout_s: float = CALL_TIMEOUT_S) -> bytes | None:
        return self._call(lambda c: c.internal_kv_get(key, NAMESPACE, timeout=timeout_s), timeout_s + 1)

    def keys(self, prefix: bytes, timeout_s: float = CALL_TIMEOUT_S) -> list[bytes]:
        return self._call(lambda c: c.internal_kv_keys(prefix, NAMESPACE, timeout=timeout_s), timeout_s + 1)

    def alive_nodes(self, timeout_s: float = CALL_TIMEOUT_S) -> list[dict]:
        """Alive nodes as {labels, resources}; state 0 is ALIVE in Ray's GcsNodeInfo."""

        def read(c):
            return [
                {"labels": dict(n.labels), "resources": dict(n.resources_total)}
                for n in c.get_all_node_info(timeout=timeout_s).values()
                if n.state == 0
            ]

        return self._call(read, timeout_s + 1)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Heartbeat:
    """Advances the heartbeat key every `interval_s` from a daemon thread until stopped."""

    def __init__(self, state: JobState, interval_s: float = 1.0):
        self.state = state
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="smlaunch-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _run(self) -> None:
        beat = 0
        while not self._stop.is_set():
            beat += 1
            try:
                self.state.put(HEARTBEAT, str(beat).encode())
            except StoreUnavailable:
                pass
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
