"""Where a worker group starts: a checkpoint's state, read on rank 0 and sent to every rank, and
the epoch's position as the ids already consumed.

Checkpoints are written by rank 0 on its host (the head on SageMaker); another GPU host cannot
read them, so rank 0 alone reads one and broadcasts it. It chooses, in order: the checkpoint Ray
Train hands a worker group restarted after a crash, or a newer complete one of the same run that
Ray Train had not registered yet; else the newest complete checkpoint of an earlier run, found by
the driver (`TrainSpec.resume_from`).

The data position of a resumed epoch is where the epoch stands in its order
(`pipelines.position`), or, for a Pipe channel, the set of sample ids the whole group had drawn in
it (`consumed_ids`). With several ranks the split of an epoch between them is dynamic, and the
group may even have another size than before, so "skip the first N batches" would repeat or lose
samples; dropping the rows whose ids were consumed does neither, whatever the world size.
"""

from __future__ import annotations

from pathlib import Path


def initial_state(spec, rank: int, control):
    """(`checkpoints.TrainState`, where it came from) on every rank, or (None, None) for a fresh start."""
    found = _choose(spec) if rank == 0 else None
    path, source = control.broadcast(found) or (None, None)
    if path is None:
        return None, None
    from smlaunch.errors import UserError
    from smlaunch.trainers.checkpoints import load_train_state

    state = failure = None
    if rank == 0:
        try:
            state = load_train_state(path)
        except UserError as exc:  # every rank fails with rank 0's line, none waits for it
            failure = str(exc)
    failure = control.broadcast(failure)
    if failure:
        raise UserError(failure)
    return control.broadcast(state), source


def _choose(spec) -> tuple[str, str] | None:
    """(checkpoint directory, how to name it) on rank 0."""
    import ray.train

    restarted = ray.train.get_checkpoint()  # this fit restarted after a worker failed
    if restarted is not None and type(restarted.filesystem).__name__ == "S3FileSystem":
        path = f"s3://{restarted.path}"  # fetched and hash-checked by load_train_state
        return path, f"the last checkpoint of this run ({path})"
    if restarted is not None:
        path = _newer_complete(restarted.path) or restarted.path
        return path, f"the last checkpoint of this run ({path})"
    return (spec.resume_from, spec.resume_from) if spec.resume_from else None


def _newer_complete(registered: str) -> str | None:
    """A complete checkpoint of this run newer than the one Ray Train registered, if any.

    Ray Train registers a reported checkpoint after the report returns; a worker killed in
    between left a complete `step-N` (meta.json and hash checked) that the restarted group is not
    handed. Resuming from the registered one would redo two intervals instead of at most one
    (seen in tests/reliability/test_train_failures.py: killed after step 20, handed step 10)."""
    from smlaunch.trainers.checkpoints import is_complete

    registered_path = Path(registered)
    if not registered_path.parent.is_dir():
        return None
    for candidate in sorted(registered_path.parent.glob("step-*"), reverse=True):
        if candidate.name <= registered_path.name:
            return None
        if is_complete(candidate):
            return str(candidate)
    return None


def without_consumed(batches, consumed, batch_size: int):
    """`batches` (dicts of tensors) without the rows whose `id` is in `consumed`, regrouped into
    full batches of `batch_size` (a smaller last one)."""
    import torch

    pending: list[dict] = []
    held = 0
    for batch in batches:
        keep = ~torch.isin(batch["id"], consumed.to(batch["id"].device))
        if not bool(keep.all()):
            batch = {k: v[keep] for k, v in batch.items()}
        if len(batch["id"]) == 0:
            continue
        pending.append(batch)
        held += len(batch["id"])
        while held >= batch_size:
            joined = {k: torch.cat([b[k] for b in pending]) for k in pending[0]}
            yield {k: v[:batch_size] for k, v in joined.items()}
            rest = {k: v[batch_size:] for k, v in joined.items()}
            pending, held = ([rest], len(rest["id"])) if len(rest["id"]) else ([], 0)
    if held:
        yield {k: torch.cat([b[k] for b in pending]) for k in pending[0]}
