"""The train loop's side of a stop request: every rank stops at the same step.

The launcher writes the `stop` key in Ray's KV store on SIGTERM (`launcher.stopping`). Ranks
read it at most once a second, and with more than one rank the flags are combined with an
all-reduce every step, so all ranks leave at the same step boundary and the collective calls
that follow (checkpoint report, DDP) stay matched.
"""

from __future__ import annotations

import time

from smlaunch.cluster.job_state import NAMESPACE, STOP

POLL_S = 1.0


class StopPoll:
    def __init__(self, world: int, device):
        self.world = world
        self.device = device
        self._seen = False
        self._last = 0.0

    def _local(self) -> bool:
        now = time.monotonic()
        if not self._seen and now - self._last >= POLL_S:
            self._last = now
            from ray.experimental import internal_kv

            self._seen = internal_kv._internal_kv_get(STOP, namespace=NAMESPACE) is not None
        return self._seen

    def requested(self) -> bool:
        flag = self._local()
        if self.world == 1:
            return flag
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([1 if flag else 0], device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return bool(tensor.item())
