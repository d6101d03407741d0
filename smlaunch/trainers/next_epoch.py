"""The next epoch's data, started while the trainer closes the current one.

Ray Data runs one execution per epoch, and `streaming_split` starts it only once every rank has
asked for the new epoch. The loop used to ask at the first step of that epoch: after the ranks
had gathered the finished epoch's ids and run validation, so every boundary paid for the new
execution's start (read tasks scheduled, first blocks read and preprocessed) as data wait, on top
of validation. `NextEpoch` asks as soon as the epoch's accounting is closed, in a thread that
pulls the first batch, so that start overlaps with validation; the step that takes the batch
waits only for what is left (and that wait is still counted as data wait).

Every rank primes at the same point (right after the epoch's collective accounting), so they
reach Ray Data's barrier together, as they did before. Nothing here touches the accounting: the
first batch is handed to the loop like any other and counted when it is trained on, so a stop or
a failure before then leaves it undrawn, and a resumed run reads it again.
"""

from __future__ import annotations

import threading

_END = object()


class NextEpoch:
    """The batches of an epoch whose first batch is being fetched in the background."""

    def __init__(self, batches):
        self._batches = iter(batches)
        self._first = _END
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._pull, name="smlaunch-next-epoch", daemon=True)
        self._thread.start()

    def _pull(self) -> None:
        try:
            self._first = next(self._batches, _END)
        except BaseException as exc:  # raised where the loop draws the batch
            self._error = exc

    def __iter__(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._first is not _END:
            first, self._first = self._first, _END
            yield first
        yield from self._batches
