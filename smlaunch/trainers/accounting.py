"""Per-epoch sample-id accounting: did every sample of the train channel arrive, and only once?

Ray Data recovers from a lost data host by retrying tasks and reconstructing lost blocks from
their lineage. That is meant to deliver each row once, but a replayed read or a block half
consumed before its host died could deliver rows twice, or not at all; nothing else in a run
would notice. So every train worker keeps the `id` column of each batch it draws, and at the end
of each epoch the ids of all workers are gathered on rank 0 and counted there.

Cheap by design: ids are kept as int64 NumPy arrays (8 bytes a row; 8 MB per million rows per
epoch) and counted with one `np.unique` per epoch, never as Python sets. Rank 0 keeps the sorted
distinct ids of the run (`reference`) so a later epoch can name the ids it lacks.

What an epoch record says (`summarise`):
* `rows`: rows the pipeline delivered to the trainer in that epoch, on all workers, including
  those of a final partial batch (not trained on) and those skipped to resume mid-epoch.
* `distinct`, `duplicated` (ids seen more than once) and `duplicate_ids` (the first few).
* `expected`: the channel's record count where it is known (a builtin dataset); `missing`:
  expected minus distinct for a complete epoch; `missing_ids`: ids seen earlier in the run but not
  in this epoch (the first few), the only ones that can be named without reading the channel.
* `ids_sha256`: SHA-256 of the sorted distinct ids as little-endian int64, so a test (or a user)
  can compare an epoch against the ids of the channel's files.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

SHOWN_IDS = 20
"""Ids named per problem in the report and on the console; the counts are always whole."""


class EpochIds:
    """The ids this worker drew in the current epoch; past `cap` of them, only their count (the
    epoch is then checked by positions alone: `pipelines.position`)."""

    def __init__(self, cap: int | None = None):
        self.parts: list[np.ndarray] = []
        self.skipped = 0
        self.partial = 0
        self.cap = cap
        self.held = 0
        self.over = False  # more than `cap` ids this epoch: none kept
        self.rows = 0

    def add(self, ids, skipped: bool = False, partial: bool = False) -> None:
        array = np.asarray(ids.cpu().numpy() if hasattr(ids, "cpu") else ids, dtype=np.int64).ravel()
        self.rows += len(array)
        self.skipped += len(array) if skipped else 0
        self.partial += len(array) if partial else 0
        if self.over:
            return
        self.parts.append(array)
        self.held += len(array)
        if self.cap is not None and self.held > self.cap:
            self.parts, self.held, self.over = [], 0, True

    def snapshot(self) -> np.ndarray:
        """Every id drawn so far this epoch, without resetting (a checkpoint's consumed ids)."""
        return np.concatenate(self.parts) if self.parts else np.zeros(0, np.int64)

    def take(self) -> tuple[np.ndarray | None, int, int]:
        """This epoch's ids (None when over the cap), and the rows skipped on resume and in a final
        partial batch; resets."""
        ids = None if self.over else np.concatenate(self.parts) if self.parts else np.zeros(0, np.int64)
        out = (ids, self.skipped, self.partial)
        self.parts, self.skipped, self.partial, self.held, self.over, self.rows = [], 0, 0, 0, False, 0
        return out


def gather(ids: np.ndarray | None, skipped: int, partial: int, control, rank: int):
    """Every worker's ids on rank 0 (a collective: all ranks call it at the same point); None
    elsewhere. The ids are None when any worker was over its cap."""
    everyone = control.gather((ids, skipped, partial), rank)
    if everyone is None:
        return None
    ids = None if any(e[0] is None for e in everyone) else np.concatenate([e[0] for e in everyone])
    return ids, sum(e[1] for e in everyone), sum(e[2] for e in everyone)


class Accountant:
    """Rank 0's accounting: one record per epoch, and the distinct ids seen so far in the run."""

    def __init__(self, channel: str, expected: int | None, world: int):
        self.channel, self.expected, self.world = channel, expected, world
        self.reference = np.zeros(0, np.int64)
        self.epochs: list[dict] = []

    def close_epoch(
        self,
        gathered,
        epoch: int,
        complete: bool,
        resumed_at_batch: int = 0,
        positions=None,
        units: int | None = None,
        resumed_by_position: int = 0,
    ) -> None:
        """`gathered`: every rank's ids (`gather`; None on other ranks, and on a stop); `positions`:
        the epoch's merged `EpochPosition` (rank 0, File channels), checked against `units`."""
        if gathered is None and positions is None:  # not rank 0 (or nothing to say)
            return
        ids, skipped, partial = gathered if gathered is not None else (None, 0, 0)
        if ids is not None:
            record = summarise(
                ids,
                epoch,
                complete,
                self.expected,
                self.reference,
                skipped,
                partial,
                resumed_at_batch,
                resumed_by_position,
            )
            if complete:
                self.reference = np.union1d(self.reference, ids)
        else:  # too many ids to gather, or a stop: the positions say it
            record = {
                "epoch": epoch,
                "complete": complete,
                "rows": positions.delivered if positions else None,
                "distinct": None,
                "duplicated": positions.duplicates if positions else 0,
                "duplicate_ids": [],
                "expected": self.expected,
                "missing": None,
                "missing_ids": [],
                "partial_batch_rows": partial,
                "skipped_rows": skipped,
                "resumed_at_batch": resumed_at_batch,
                "ids_sha256": None,
            }
        if positions is not None:
            record["positions"] = position_summary(positions, units, complete)
            if ids is None and complete and units is not None:
                record["missing"] = record["positions"]["units_incomplete"]
        self.epochs.append(record)

    def report(self) -> dict:
        complete = [e for e in self.epochs if e["complete"]]
        return {
            "channel": self.channel,
            "expected": self.expected,
            "train_workers": self.world,
            "epochs": self.epochs,
            "duplicated": sum(e["duplicated"] for e in self.epochs),
            "missing": sum(e["missing"] or 0 for e in complete),
        }


def summarise(
    ids: np.ndarray,
    epoch: int,
    complete: bool,
    expected: int | None,
    reference: np.ndarray,
    skipped: int = 0,
    partial: int = 0,
    resumed_at_batch: int = 0,
    resumed_by_position: int = 0,
) -> dict:
    """`resumed_by_position`: rows drawn before a resume by position, whose ids the epoch's ids lack."""
    distinct, counts = np.unique(ids, return_counts=True)
    repeated = distinct[counts > 1]
    record = {
        "epoch": epoch,
        "complete": complete,
        "rows": int(len(ids)),
        "distinct": int(len(distinct)),
        "duplicated": int(len(repeated)),
        "duplicate_ids": repeated[:SHOWN_IDS].tolist(),
        "expected": expected,
        "missing": None,
        "missing_ids": [],
        "partial_batch_rows": partial,
        "skipped_rows": skipped,
        "resumed_at_batch": resumed_at_batch,
        "ids_sha256": ids_digest(distinct),
    }
    if complete:
        absent = np.setdiff1d(reference, distinct, assume_unique=True)
        record["missing_ids"] = absent[:SHOWN_IDS].tolist()
        record["missing"] = (
            max(expected - len(distinct) - resumed_by_position, len(absent)) if expected is not None else len(absent)
        )
    return record


def position_summary(position, units: int | None, complete: bool) -> dict:
    """The positions' check of an epoch: rows drawn, positions drawn twice, units drawn whole (and,
    for a complete epoch, the units of the channel that were not: a unit whose records were all
    skipped as corrupt counts here too, and in the corrupt-record count)."""
    done = position.units_done
    return {
        "rows": position.delivered,
        "duplicates": position.duplicates,
        "units": units,
        "units_done": done,
        "units_open": len(position.partial),
        "units_incomplete": (units - done) if complete and units is not None else None,
    }


def ids_digest(distinct_sorted_ids) -> str:
    return hashlib.sha256(np.asarray(distinct_sorted_ids, dtype="<i8").tobytes()).hexdigest()


def accounting_lines(accounting: dict | None) -> list[str]:
    """Console lines: one per epoch with a problem (flagged), and one for the epochs that were fine,
    consecutive ones with the same counts folded into a range (`epochs 1-13: 1437/1437 ids once each`)."""
    if not accounting or not accounting.get("epochs"):
        return []
    channel = accounting["channel"]
    lines: list[str] = []
    fine: list[list[Any]] = []  # [first epoch, last epoch, text]
    for e in accounting["epochs"]:
        problems = []
        if e["duplicated"]:
            problems.append(
                f"{_count(e['duplicated'], 'sample id')} seen more than once (e.g. {_ids(e['duplicate_ids'])})"
            )
        if e["missing"]:
            named = f" (e.g. {_ids(e['missing_ids'])})" if e["missing_ids"] else ""
            ids = "sample id" if e["missing"] == 1 else "sample ids"
            of = f" of {e['expected']} expected {ids}" if e["expected"] else f" {ids}"
            problems.append(f"{e['missing']}{of} missing{named}")
        if problems:
            lines.append(f"WARNING: sample accounting: channel '{channel}' epoch {e['epoch']}: " + "; ".join(problems))
        elif e["complete"]:
            text = f"{e['distinct']}" + (f"/{e['expected']}" if e["expected"] else "") + " ids once each"
            if fine and fine[-1][2] == text and fine[-1][1] == e["epoch"] - 1:
                fine[-1][1] = e["epoch"]
            else:
                fine.append([e["epoch"], e["epoch"], text])
        else:
            fine.append([e["epoch"], e["epoch"], f"(cut short) {_count(e['rows'], 'row')}, no id twice"])
    if fine:
        parts = [
            (f"epoch {a}" if a == b else f"epochs {a}-{b}") + (" " if text.startswith("(") else ": ") + text
            for a, b, text in fine
        ]
        lines.insert(0, f"sample accounting: channel '{channel}': " + "; ".join(parts))
    return lines + _position_lines(channel, accounting["epochs"]) + mix_lines(channel, accounting["epochs"])


def _position_lines(channel: str, epochs: list[dict]) -> list[str]:
    """Warnings of the positions' check, for epochs too large for the ids' check."""
    lines = []
    for e in epochs:
        p = e.get("positions")
        if p is None or e.get("ids_sha256") is not None:
            continue  # the ids' check spoke for this epoch
        if p["duplicates"]:
            lines.append(
                f"WARNING: sample accounting: channel '{channel}' epoch {e['epoch']}: "
                f"{_count(p['duplicates'], 'row')} drawn twice (by position)"
            )
        if p["units_incomplete"]:
            lines.append(
                f"WARNING: sample accounting: channel '{channel}' epoch {e['epoch']}: "
                f"{_count(p['units_incomplete'], 'file or row group')} of {p['units']} not drawn in full"
            )
    return lines


MIXED_ENOUGH = 0.9
"""Below this ratio of distinct labels per batch to a uniform random order's, the run warns."""


def mix_lines(channel: str, epochs: list[dict]) -> list[str]:
    """One line of the batches' mix per run (epochs folded), and a warning for a poorly mixed epoch."""
    mixes = [(e["epoch"], e["label_mix"]) for e in epochs if e.get("label_mix") and e["label_mix"]["ratio"]]
    if not mixes:
        return []
    shown = ", ".join(
        f"epoch {epoch} {mix['labels_per_batch']:g}/{mix['uniform_labels_per_batch']:g}" for epoch, mix in mixes[:3]
    ) + (", ..." if len(mixes) > 3 else "")
    lines = [f"batch mix: channel '{channel}': distinct labels per batch / a uniform random order's: {shown}"]
    for epoch, mix in mixes:
        if mix["ratio"] < MIXED_ENOUGH:
            lines.append(
                f"WARNING: batch mix: channel '{channel}' epoch {epoch}: {mix['labels_per_batch']:g} distinct "
                f"labels per batch where a uniform random order gives {mix['uniform_labels_per_batch']:g} "
                f"(ratio {mix['ratio']:g}): the data order is not mixed; raise channels.{channel}.shuffle."
                "open_units or buffer_rows, or shuffle the files"
            )
            break
    return lines


def _count(n: int, word: str) -> str:
    from smlaunch.text import plural

    return plural(n, word)


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
