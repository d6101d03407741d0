"""The ranks' control plane: one small collective per step, so every rank decides the same thing.

Several ranks must take every step together (DDP's gradient all-reduce and a checkpoint report
are collectives); a rank that went another way would leave the others waiting forever. With
uneven shards (no rows dropped to equalise them) one rank runs out of batches before another, and
a stop request reaches ranks at different moments. So before each step the ranks exchange, in one
all-reduce of twelve numbers on a gloo group (CPU tensors: no GPU synchronisation):

* how many ranks hold a full step's micro-batches, and how many hold any: all of them means a
  normal DDP step; some means a *drain* step (the ranks with data compute without DDP's sync, then
  sum gradients and micro-batch counts explicitly, so ranks without data still take the step and
  every rank ends it with the same weights); none means the epoch is over, on every rank at once;
* whether rank 0 saw the stop request (`launcher.job.stopping` writes it to Ray's KV store; rank 0
  reads it at most once a second) or a lost host (`LostHostGuard`, every 2 s): one watcher per
  job, whose verdict every rank has at the next step at no extra cost, where a poll per rank
  would cost the KV store and Ray's node table a request per rank per interval;
* whether rank 0 polled for a stop this step (at most once a second): then every rank asks Ray
  Train for a preemption notice (`ray.train.get_preemption_info()`, a barrier every rank must call
  equally often: a drained train node, as KubeRay and the autoscaler drain a spot node before it
  goes, or sm-launch's own drain on a stop, `cluster.drain`), and a notice stops the run like a stop
  request: a checkpoint at this step boundary, then the end;
* whether rank 0's clock says a timed checkpoint is due (`trainer.checkpoint_every_s`): only
  rank 0's clock counts, so every rank writes it after the same step;
* the previous step's numbers (loss, micro-batches, images, data wait, step time, chain seconds and
  the rows they cover), summed, so the
  step record rank 0 reports covers every rank, one step late and at no extra cost.

The all-reduce is recursive doubling on gloo's point-to-point sends (`_all_reduce`): log2(n)
rounds, 7 at 128 ranks, where gloo's own all-reduce is a ring of 2 (n - 1) sequential hops, 254 at
128 ranks. Twelve numbers are all latency, so the hop count is the cost: bench/long_run.py measures a
hop and puts the ring at about 19 % of a 300 ms step at 128 ranks, recursive doubling at about 1 %
(BENCHMARKS.md "control_exchange").

Objects (the resume state, accounting ids, parameter digests) travel on the same gloo group, as
NCCL cannot gather objects.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from smlaunch.cluster.job_state import NAMESPACE, STOP

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

POLL_S = 1.0


@dataclass
class StepNumbers:
    """One rank's numbers for a step it took part in."""

    loss_sum: float = 0.0
    micro_batches: int = 0
    images: int = 0
    wait_s: float = 0.0
    step_s: float = 0.0
    chain_s: float = 0.0
    """The chain's seconds for the step's rows whose chain time was measured (`chain_rows`): what
    one image costs a data host's slot, as the elastic data hosts' loop models capacity."""
    chain_rows: int = 0
    metric_sums: tuple[float, ...] = (0.0,) * 8
    """The numbers a user's loss returned beside it (`task.METRIC_SLOTS`, in `metric_names`' order),
    summed over this rank's micro-batches that returned them (`metric_micro`)."""
    metric_micro: int = 0
    lr: float = 0.0
    """The rate the step used, and the gradient norm before clipping: the same on every rank (DDP
    averaged the gradients), so their sum over ranks is divided by the ranks again (`record`)."""
    grad_norm: float = 0.0
    skipped: int = 0
    """fp16 steps skipped so far (the same count on every rank: the overflow is in the averaged gradients)."""
    tail_s: float = 0.0
    """With a cache, the part of `chain_s` the ops after the cached prefix took: the chain's clock
    for the epochs that read the cache (`cluster.autoscale.policy.Window`), known from the epoch
    that writes it. Last in `as_list`, so the numbers before it keep their places."""

    def as_list(self) -> list[float]:
        return [
            self.loss_sum,
            self.micro_batches,
            self.images,
            self.wait_s,
            self.step_s,
            self.chain_s,
            self.chain_rows,
            *self.metric_sums,
            self.metric_micro,
            self.lr,
            self.grad_norm,
            self.skipped,
            self.tail_s,
        ]


@dataclass(frozen=True)
class Decision:
    all_full: bool
    any_data: bool
    stop: bool
    checkpoint: bool
    """Rank 0 found a timed checkpoint due: every rank saves after this step."""
    end: bool
    """A callback on some rank asked the run to end (`RunView.request_stop`): every rank finishes now."""
    previous: list[float] | None
    """The previous step's numbers summed over ranks (as `StepNumbers.as_list`), or None."""


def record(step: int, epoch: int, numbers: list[float], world: int, metric_names: tuple[str, ...] = ()) -> dict:
    """A step's record over all ranks: mean loss per micro-batch, images/s of all ranks over the
    mean step time, the mean rank's data wait; and, when the loss returns numbers (`metric_names`),
    each one's mean over the micro-batches of all ranks."""
    loss_sum, micro, images, wait, step_s = numbers[:5]
    chain_s, chain_rows = (list(numbers[5:7]) + [0.0, 0.0])[:2]
    mean_step = step_s / world
    entry: dict[str, Any] = {
        "step": step,
        "t": round(time.time(), 3),
        "epoch": epoch,
        "loss": round(loss_sum / max(micro, 1), 5),
        "step_time_s": round(mean_step, 5),
        "data_wait_s": round(wait / world, 5),
        "images_per_s": round(images / mean_step, 2) if mean_step > 0 else 0.0,
        "chain_s": round(chain_s, 5),
        "chain_rows": int(chain_rows),
    }
    if metric_names and len(numbers) > 15 and numbers[15]:
        entry["metrics"] = {name: round(numbers[7 + i] / numbers[15], 6) for i, name in enumerate(metric_names)}
    if len(numbers) > 18:
        norm = numbers[17] / world
        entry["lr"] = float(f"{numbers[16] / world:.6g}")
        entry["grad_norm"] = round(norm, 6) if math.isfinite(norm) else None  # an fp16 overflow: skipped
        entry["skipped_steps"] = round(numbers[18] / world)
    if len(numbers) > 19 and numbers[19] > 0:
        entry["tail_s"] = round(numbers[19], 5)
    return entry


class Control:
    def __init__(self, world: int, rank: int | None = None, guard=None):
        self.world = world
        self.rank: int = 0
        self.guard = guard
        """A `LostHostGuard`, polled by rank 0 between steps; the others use it when told to."""
        self.group: ProcessGroup | None = None
        self._stop_seen, self._last_poll = False, 0.0
        self.preempted = None
        """Ray Train's `PreemptionInfo` once a notice stopped the run, else None."""
        if world > 1:
            import torch.distributed as dist

            self.rank = dist.get_rank() if rank is None else rank

            # all ranks create it, in the same order; the default group already is gloo on CPU. Every
            # rank is a member, so it is a group (never `GroupMember.NON_GROUP_MEMBER`, an int).
            if dist.get_backend() != "gloo":
                self.group = cast("ProcessGroup", dist.new_group(backend="gloo"))

    def _stop_locally(self) -> tuple[bool, bool]:
        """(rank 0 saw the stop request, rank 0 polled this step)."""
        now = time.monotonic()
        polled = self.rank == 0 and not self._stop_seen and now - self._last_poll >= POLL_S
        if polled:
            self._last_poll = now
            from smlaunch._ray_compat import kv_get

            self._stop_seen = kv_get(STOP, NAMESPACE) is not None
        return self._stop_seen, polled

    def _preemption_notice(self):
        """Ray Train's preemption notice, asked on every rank at the same step; None outside a train worker."""
        try:
            import ray.train

            self.preempted = self.preempted or ray.train.get_preemption_info()
        except Exception:  # a Control used outside Ray Train, as the tests do
            return None
        return self.preempted

    def notice(self, wait_s: float = 0.0):
        """Ray Train's preemption notice now, asked on every rank (each must call this equally often:
        rank 0's answer is every rank's); with `wait_s`, asked again every half second until one comes
        or the time is up (Ray Train's watcher learns of a drain within `cluster.drain.POLL_INTERVAL_S`).
        The rounds are counted, not timed: every rank takes the same number, so none is left in the barrier."""
        for _ in range(int(wait_s / 0.5)):
            if self._preemption_notice() is not None:
                break
            time.sleep(0.5)
        return self._preemption_notice()

    def exchange(
        self,
        full: bool,
        any_data: bool,
        previous: StepNumbers | None,
        checkpoint_due: bool = False,
        end: bool = False,
    ) -> Decision:
        """The step's decision; raises on every rank (`HostLost`) when rank 0's guard found a host lost.
        `checkpoint_due` counts on rank 0 only."""
        stop, polled = self._stop_locally()
        lost = self.guard.error() if self.guard is not None and self.rank == 0 else None
        values = [
            float(full),
            float(any_data),
            float(stop),
            float(lost is not None),
            float(checkpoint_due and self.rank == 0),
            float(polled),
            float(end),
        ] + (previous or StepNumbers()).as_list()
        if self.world > 1:
            values = self._all_reduce(values)
        if values[3] > 0:
            raise lost or self._lost_elsewhere()
        preempted = values[5] > 0 and self._preemption_notice() is not None
        return Decision(
            all_full=values[0] == self.world,
            any_data=values[1] > 0,
            stop=values[2] > 0 or preempted,
            checkpoint=values[4] > 0,
            end=values[6] > 0,
            previous=values[7:] if previous is not None else None,
        )

    def _lost_elsewhere(self) -> Exception:
        """Rank 0's verdict, looked up again here (once, on the way out) for its exact message."""
        from smlaunch.pipelines.sources.host_loss import HostLost

        return self.guard.error(force=True) or HostLost("rank 0 found a host of a fragile channel lost")

    def flush(self, previous: StepNumbers) -> list[float]:
        """The last step's numbers over all ranks (every rank calls it once, after its last step)."""
        values = previous.as_list()
        return self._all_reduce(values) if self.world > 1 else values

    def _all_reduce(self, values: list[float]) -> list[float]:
        """The sum over ranks, by recursive doubling: in round k rank r swaps its partial sum with
        rank r ^ 2^k and adds. Both sides add the same two operands, and float addition commutes,
        so every rank ends with the very same bits (the ranks' decisions must agree). With a world
        that is not a power of two, ranks p.. (p the largest power of two below) first hand their
        numbers to rank r - p and get the result back from it at the end."""
        import torch
        import torch.distributed as dist

        tensor, other = torch.tensor(values, dtype=torch.float64), torch.empty(len(values), dtype=torch.float64)
        rank, p = self.rank, 1 << (self.world.bit_length() - 1)
        if rank >= p:
            dist.send(tensor, rank - p, group=self.group)
            dist.recv(tensor, rank - p, group=self.group)
            return tensor.tolist()
        if rank + p < self.world:
            dist.recv(other, rank + p, group=self.group)
            tensor = tensor + other
        mask = 1
        while mask < p:
            sent = dist.isend(tensor, rank ^ mask, group=self.group)
            if sent is None:  # torch's answer for a rank outside the group; every rank is in it
                raise RuntimeError(f"rank {rank} is not in the control group")
            dist.recv(other, rank ^ mask, group=self.group)
            sent.wait()
            tensor, mask = tensor + other, mask << 1
        if rank + p < self.world:
            dist.send(tensor, rank + p, group=self.group)
        return tensor.tolist()

    def broadcast(self, value, src: int = 0):
        """Rank `src`'s value on every rank."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]

    def gather(self, value, rank: int) -> list | None:
        """Every rank's value, in rank order, on rank 0 (None elsewhere)."""
        if self.world == 1:
            return [value]
        import torch.distributed as dist

        out = [None] * self.world if rank == 0 else None
        dist.gather_object(value, out, dst=0, group=self.group)
        return out


def sum_gradients(model, micro_batches: int, world: int) -> None:
    """A drain step's gradient: every rank's summed micro-batch gradients, summed over ranks and
    divided by all ranks' micro-batches, the mean DDP's normal step gives. Ranks without data
    contribute zeros (and no count), so they end the step with the same weights as the others."""
    import torch
    import torch.distributed as dist

    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat(
        [g.reshape(-1).float() for g in grads] + [torch.tensor([float(micro_batches)], device=grads[0].device)]
    )
    if world > 1:
        dist.all_reduce(flat)
    count = max(flat[-1].item(), 1.0)
    offset = 0
    for p, g in zip(params, grads, strict=False):
        n = g.numel()
        p.grad = (flat[offset : offset + n] / count).view_as(p).to(p.dtype)
        offset += n
