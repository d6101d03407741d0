"""How far the train channel's current epoch has got, on one rank: what the loop checkpoints as the
data position, what a resumed epoch skips, and what the epoch's exactly-once check reads.

Each rank records what it draws (`record`): the sample ids (`accounting.EpochIds`) and, for a File
or FastFile channel, the rows' positions in the epoch's order (`pipelines.position.DrawnPositions`).
At a checkpoint and at the epoch's end rank 0 merges every rank's positions into the epoch's
`EpochPosition` (`merge`, a collective). A checkpoint stores that position, or, for a Pipe channel
whose rows have no position, the ids the group has drawn (`checkpoint_fields`). A resumed epoch
(`resume`) starts its reader from the position, or drops the rows whose ids were drawn before
(`full_batches`), whatever the number of ranks before and now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from smlaunch.pipelines.position import EpochPosition


class EpochProgress:
    def __init__(self, id_check_rows: int, rank: int, world: int):
        from smlaunch.pipelines.position import DrawnPositions, EpochPosition
        from smlaunch.trainers.accounting import EpochIds

        self.rank = rank
        self.ids = EpochIds(id_check_rows // world)
        """The ids this rank drew in the epoch (for the id check, and a Pipe channel's checkpoint)."""
        self.positions = DrawnPositions()
        """The positions this rank drew since the last merge."""
        self.merged: EpochPosition | None = EpochPosition(1) if rank == 0 else None
        """The epoch's position, every rank's draws merged (rank 0 only)."""
        self.consumed_ids: torch.Tensor | None = None
        """A resumed Pipe epoch's ids drawn before the checkpoint (dropped from its batches)."""
        self.resumed_by_position = 0
        """Rows the resumed epoch had drawn before the checkpoint, known by their positions alone."""
        self.drawn_before: int | None = None
        """Rows the resumed epoch had drawn before the checkpoint (for the "resumed" note)."""
        self.space: str | None = None
        """What the current epoch's positions count in: the sealed cache's fingerprint (its shards),
        or None (the channel's files); posted and checkpointed with them, so a resume reads the
        epoch from what its positions count (`file_reader`, `pipelines.cache`)."""

    def record(self, batch: dict) -> None:
        """A batch this rank drew (trained on, or counted as the epoch's final partial one)."""
        self.ids.add(batch["id"])
        if "pos" in batch:
            self.positions.add(batch["pos"], batch.get("seek"))

    def resume(self, state) -> None:
        """Where a checkpoint's epoch stood (`checkpoints.TrainState`)."""
        import torch

        if state.position is not None:
            from smlaunch.pipelines.position import EpochPosition

            restored = EpochPosition.from_state(state.position)
            self.space = state.position.get("space")  # the resumed epoch's positions count in this
            self.drawn_before = restored.delivered
            if self.rank == 0:
                self.merged = restored
                self.ids.skipped = self.resumed_by_position = restored.delivered  # counted once, in this epoch
        elif state.consumed_ids is not None:
            self.consumed_ids = torch.as_tensor(state.consumed_ids, dtype=torch.long)
            self.drawn_before = len(self.consumed_ids)
            if self.rank == 0:  # the resumed epoch's accounting covers what it skips, once
                self.ids.add(self.consumed_ids.numpy(), skipped=True)

    def post_order(self, control, epochs_done: int) -> None:
        """Rank 0 tells the train channel's reader which epoch this group starts in, and where to
        resume it (`cluster.run_relay.set_order`); every rank waits for that before its first batch,
        so the first pass is planned with it."""
        if self.rank == 0:
            from smlaunch.cluster.run_relay import set_order

            merged = self._rank0_position()
            if merged.epoch != epochs_done + 1:  # resumed from a checkpoint without positions
                merged = self.merged = type(merged)(epochs_done + 1)
            set_order("train", epochs_done, {**merged.state(), "space": self.space} if merged.delivered else None)
        control.broadcast(None)

    def post_pass(self, epochs_done: int, passes: int) -> None:
        """Rank 0, before each later pass of this group over the dataset that `passes` counts
        (its passes so far in this group): the reader numbers a pass by the epochs posted plus its
        Dataset's own executions (`file_reader._epoch`), and the cached epochs read a Dataset of
        their own (`pipelines.dataset.CACHED_TRAIN`), whose first pass is not the run's first. Posted
        once a group, the cached Dataset's first pass was numbered epoch 1: in a run resumed in
        epoch 1 it took that epoch's resume position and read 29 rows (tests/reliability/
        test_data_host_loss.py), and its epochs' orders were not the ones a resume reads again."""
        if self.rank == 0:
            from smlaunch.cluster.run_relay import set_order

            set_order("train", epochs_done - passes, None)

    def full_batches(self, batches, batch_size: int):
        """The epoch's full batches: a resumed Pipe epoch's drawn rows left out, a final partial
        batch recorded (delivered) but not trained on. The source is drawn to its end, so the epoch
        ends for Ray Data as it did with `drop_last`."""
        if self.consumed_ids is not None:
            from smlaunch.trainers.resume import without_consumed

            batches, self.consumed_ids = without_consumed(batches, self.consumed_ids, batch_size), None
        for batch in batches:
            if len(batch["id"]) < batch_size:
                self.ids.add(batch["id"], partial=True)
                if "pos" in batch:
                    self.positions.add(batch["pos"], batch.get("seek"))
                continue
            yield batch

    def merge(self, control) -> bool:
        """Every rank's positions drawn since the last merge, merged on rank 0 (a collective); False
        when the train channel has none (a Pipe channel)."""
        drawn = control.gather((self.positions.used, self.positions.take()), self.rank)
        positional = None
        if self.rank == 0:
            merged = self._rank0_position()
            positional = any(used for used, _ in drawn) or merged.delivered > 0
            if positional:
                merged.merge([part for _, part in drawn])
        return control.broadcast(positional)

    def checkpoint_fields(self, control) -> dict:
        """The data position a checkpoint stores (`TrainState.position` or `.consumed_ids`), merged
        from every rank (a collective); on rank 0 only, the others' is empty."""
        import numpy as np
        import torch

        if self.merge(control):  # the epoch's position: a few KiB, whatever its size
            return {"position": {**self._rank0_position().state(), "space": self.space}} if self.rank == 0 else {}
        drawn = control.gather(self.ids.snapshot(), self.rank)  # a Pipe channel's rows: the ids drawn
        if self.rank != 0:
            return {}
        ids = np.unique(np.concatenate(drawn)) if drawn else np.zeros(0, np.int64)
        return {"consumed_ids": torch.from_numpy(ids)}  # a tensor: what a weights-only load reads back

    def _rank0_position(self) -> EpochPosition:
        """The epoch's merged position, which only rank 0 keeps."""
        if self.merged is None:
            raise RuntimeError(f"rank {self.rank} keeps no merged epoch position: only rank 0 does")
        return self.merged

    def next_epoch(self, epochs_done: int) -> None:
        """The epoch after `epochs_done` begins: rank 0's merged position starts over."""
        if self.rank == 0:
            from smlaunch.pipelines.position import EpochPosition

            self.merged = EpochPosition(epochs_done + 1)
