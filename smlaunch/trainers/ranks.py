"""Each rank's account of itself for the report: where it ran and what weights it ended with.

DDP promises every rank the same weights after every step; a rank that drifted (a missed
gradient sync, a step taken by some ranks only) would still train and still report a loss, so
nothing else would show it. The SHA-256 of a rank's final parameters, computed on that rank,
does: equal digests on every rank are the proof.

Buffers (BatchNorm's running statistics) are not gradients: DDP copies rank 0's to every rank at
the start of each training forward, then each rank updates them from its own batch. So after the
last step they differ by one batch's update whatever the parameters do; `adopt_rank0_buffers`
gives every rank rank 0's (the ones the saved model has) before the digests are taken.
"""

from __future__ import annotations

import hashlib


def param_sha256(model) -> str:
    """SHA-256 of the parameters' bytes (float32, in `state_dict` order), wherever they live."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu").contiguous().float().numpy().tobytes())
    return digest.hexdigest()


def adopt_rank0_buffers(model, world: int) -> None:
    if world == 1:
        return
    import torch.distributed as dist

    for buffer in model.buffers():
        dist.broadcast(buffer.data, src=0)


def rank_digest(model, rank: int) -> dict:
    from smlaunch.cluster.labels import this_host

    host = this_host()
    return {"rank": rank, "host": host, "param_sha256": param_sha256(model)}
