"""Sample-id accounting without a cluster: counting, naming and flagging per epoch."""

import numpy as np

from smlaunch.trainers.accounting import Accountant, EpochIds, accounting_lines, ids_digest


def _epoch(books, epoch, ids, complete=True, partial=0):
    seen = EpochIds()
    seen.add(np.asarray(ids[: len(ids) - partial]))
    if partial:
        seen.add(np.asarray(ids[len(ids) - partial :]), partial=True)
    books.close_epoch(seen.take(), epoch, complete)


def test_each_id_once_is_reported_clean_with_a_digest_of_the_ids():
    books = Accountant("train", expected=10, world=1)
    _epoch(books, 1, list(range(9, -1, -1)), partial=3)
    report = books.report()
    [e] = report["epochs"]
    assert (e["rows"], e["distinct"], e["duplicated"], e["missing"], e["partial_batch_rows"]) == (10, 10, 0, 0, 3)
    assert e["ids_sha256"] == ids_digest(np.arange(10))
    assert report["duplicated"] == report["missing"] == 0
    assert accounting_lines(report) == ["sample accounting: channel 'train': epoch 1: 10/10 ids once each"]


def test_duplicates_and_missing_ids_are_counted_named_and_flagged():
    books = Accountant("train", expected=10, world=1)
    _epoch(books, 1, list(range(10)))
    _epoch(books, 2, [0, 1, 1, 2, 3, 3, 3, 4, 5, 6])  # 7, 8, 9 lost; 1 and 3 repeated
    _epoch(books, 3, [5, 5], complete=False)  # cut short by the step count: nothing is missing yet
    report = books.report()
    second, third = report["epochs"][1:]
    assert (second["rows"], second["distinct"], second["duplicated"], second["duplicate_ids"]) == (10, 7, 2, [1, 3])
    assert (second["missing"], second["missing_ids"]) == (3, [7, 8, 9])
    assert (third["missing"], third["duplicated"]) == (None, 1)
    assert report["duplicated"] == 3 and report["missing"] == 3
    lines = accounting_lines(report)
    assert lines[1] == (
        "WARNING: sample accounting: channel 'train' epoch 2: 2 sample ids seen more than once "
        "(e.g. 1, 3); 3 of 10 expected sample ids missing (e.g. 7, 8, 9)"
    )
    assert lines[2].startswith("WARNING: sample accounting: channel 'train' epoch 3: 1 sample id seen more")


def test_clean_epochs_fold_into_ranges_and_a_cut_short_epoch_says_so():
    books = Accountant("train", expected=3, world=1)
    for epoch in range(1, 14):
        _epoch(books, epoch, [0, 1, 2])
    _epoch(books, 14, [2, 0], complete=False)
    assert accounting_lines(books.report()) == [
        "sample accounting: channel 'train': epochs 1-13: 3/3 ids once each; epoch 14 (cut short) 2 rows, no id twice"
    ]


def test_without_an_expected_count_missing_ids_are_those_an_earlier_epoch_saw():
    books = Accountant("train", expected=None, world=1)
    _epoch(books, 1, [10, 20, 30])
    _epoch(books, 2, [10, 30])
    assert [(e["missing"], e["missing_ids"]) for e in books.report()["epochs"]] == [(0, []), (1, [20])]
