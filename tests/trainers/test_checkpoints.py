"""Checkpoint files: complete ones are found by step across runs, cut-short ones never are."""

import json
import logging
from pathlib import Path

import torch

from smlaunch.trainers.checkpoints import is_complete, latest_complete, load_state, write_state
from smlaunch.trainers.optim import warmup_cosine
from support.hostile import plant_checkpoint


def _write(root, run, step):
    directory = root / run / f"step-{step:08d}"
    directory.mkdir(parents=True)
    write_state(str(directory), {"step": step, "epoch": 1, "weights": torch.arange(1000.0) * step})
    return directory


def test_the_highest_complete_step_wins_across_runs(tmp_path):
    _write(tmp_path, "run-a", 10)
    best = _write(tmp_path, "run-b", 30)
    _write(tmp_path, "run-a", 20)
    assert latest_complete(tmp_path) == best and is_complete(best)
    assert load_state(best)["step"] == 30
    assert latest_complete(tmp_path / "missing") is None


def test_a_checkpoint_cut_short_is_skipped(tmp_path, caplog):
    good = _write(tmp_path, "run-a", 10)
    truncated = _write(tmp_path, "run-b", 40)
    data = (truncated / "state.pt").read_bytes()
    (truncated / "state.pt").write_bytes(data[: len(data) // 2])  # the host went away mid-copy
    no_meta = _write(tmp_path, "run-b", 50)
    (no_meta / "meta.json").unlink()  # meta.json is written last: not there, not vouched for
    flipped = _write(tmp_path, "run-c", 60)
    raw = bytearray((flipped / "state.pt").read_bytes())
    raw[-20] ^= 0xFF  # same size, different bytes
    (flipped / "state.pt").write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="smlaunch"):
        assert latest_complete(tmp_path) == good
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == 3 and all("incomplete" in line for line in skipped)
    assert json.loads((good / "meta.json").read_text())["step"] == 10


def test_warmup_then_cosine_to_zero():
    factor = warmup_cosine(total=100, warmup=10)
    assert factor(0) == 0.1 and abs(factor(9) - 1.0) < 0.03
    assert factor(50) < factor(20) and factor(100) < 1e-9
    assert warmup_cosine(None, 5)(1000) == 1.0  # length unknown: constant after warmup


def test_the_checkpoint_log_times_each_checkpoint_and_knows_the_state_it_holds(monkeypatch):
    import time

    from smlaunch.trainers.checkpoints import CheckpointLog

    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    log = CheckpointLog(every_s=30)
    assert not log.due() and not log.holds(0)
    now[0] = 130.0
    assert log.due()  # 30 s since training began
    log.written(12, 3, "timer", started=129.5)
    assert not log.due() and log.holds(12) and not log.holds(13)
    assert log.holds(12, 3) and not log.holds(12, 4)  # an epoch closed at step 12 since: a stop writes again
    now[0] = 159.0
    assert not log.due()  # counted from the checkpoint, not from the start
    assert log.summary() == {
        "by_why": {"timer": {"n": 1, "s": 0.5}},
        "recent": [{"step": 12, "why": "timer", "s": 0.5}],
    }
    for step in range(13, 10_013):  # a checkpoint every step of a long run: the log stays bounded
        log.written(step, 3, "interval", started=now[0])
    assert log.summary()["by_why"]["interval"]["n"] == 10_000 and len(log.summary()["recent"]) == log.RECENT
    assert not CheckpointLog(every_s=0).due()


def test_the_loop_s_state_round_trips_and_an_older_format_is_refused_in_one_line(tmp_path):
    """One format (`TrainState`) is written and resumed; a checkpoint of another format (an older
    smlaunch's, whose position was a count of one rank's batches) is refused naming the file."""
    import numpy as np
    import pytest

    from smlaunch.errors import UserError
    from smlaunch.trainers.checkpoints import TrainState, load_train_state, save_train_state

    state = TrainState(
        model={"w": torch.ones(3)},
        optimizer={},
        scheduler={},
        step=7,
        epochs_done=1,
        world_size=2,
        config_sha256="abc",
        consumed_ids=np.arange(5),
    )
    (tmp_path / "new").mkdir()
    save_train_state(str(tmp_path / "new"), state)
    back = load_train_state(tmp_path / "new")
    assert (back.step, back.epoch, back.position, back.consumed_ids.tolist()) == (7, 2, None, [0, 1, 2, 3, 4])
    assert json.loads((tmp_path / "new" / "meta.json").read_text())["epoch"] == 2
    old = {k: v for k, v in state.to_dict().items() if k not in ("position", "consumed_ids")}
    (tmp_path / "old").mkdir()
    write_state(str(tmp_path / "old"), {**old, "position": 3})
    with pytest.raises(UserError) as refused:
        load_train_state(tmp_path / "old")
    assert str(refused.value) == (
        f"checkpoint {tmp_path / 'old'}: not a checkpoint this smlaunch resumes from (its position is a count "
        "of batches, an older format); set trainer.resume: false or another trainer.checkpoint_dir to start afresh"
    )
    (tmp_path / "other").mkdir()
    write_state(str(tmp_path / "other"), {"step": 1, "epoch": 1, "weights": 1})
    with pytest.raises(UserError, match=r"\(no config_sha256, epochs_done, model, optimizer, scheduler, world_size\)"):
        load_train_state(tmp_path / "other")


def test_a_planted_pickle_with_a_matching_hash_is_refused_in_one_line_and_runs_nothing(tmp_path):
    """The hash vouches for a whole file, not for who wrote it: the newest, complete checkpoint is
    found, and reading it (weights only) refuses the object it would have built."""
    import pytest

    from smlaunch.errors import UserError
    from smlaunch.trainers.checkpoints import latest_complete, load_train_state

    marker = tmp_path / "ran"
    planted = tmp_path / "checkpoints" / "run-2" / "step-00000009"
    plant_checkpoint(planted, marker)
    assert latest_complete(tmp_path / "checkpoints") == planted
    with pytest.raises(UserError) as refused:
        load_train_state(planted)
    assert str(refused.value) == (
        f"checkpoint {planted}/state.pt: holds more than tensors and numbers (posix.system), and a checkpoint is "
        "read as data only (torch.load weights_only): not resuming from it; delete that step- folder if you "
        "did not write it, or set trainer.resume: false"
    )
    assert not marker.exists()


def test_what_a_checkpoint_holds_is_data_numpy_converted_and_an_object_named_at_write(tmp_path):
    """NumPy values (ids, a callback's best score) are written as tensors and numbers, so the
    weights-only read takes them back; a callback whose state holds an object is named when the
    checkpoint is written, not at a resume that could not read it."""
    import collections

    import numpy as np
    import pytest

    from smlaunch.errors import UserError
    from smlaunch.trainers.checkpoints import load_state, write_state

    state = {
        "step": 3,
        "epoch": 1,
        "ids": np.arange(4, dtype=np.int64),
        "recipe": {
            "callbacks": {"Mine": {"best": np.float32(0.5), "seen": (1, 2), "order": collections.OrderedDict(a=1)}}
        },
    }
    write_state(str(tmp_path), state)
    back = load_state(tmp_path)
    assert back["ids"].tolist() == [0, 1, 2, 3] and back["recipe"]["callbacks"]["Mine"]["best"] == 0.5
    assert back["recipe"]["callbacks"]["Mine"]["seen"] == (1, 2)
    state["recipe"]["callbacks"]["Mine"]["when"] = Path("/tmp")
    with pytest.raises(UserError) as refused:
        write_state(str(tmp_path / "x"), state)
    assert str(refused.value).startswith(
        "checkpoint: state.recipe.callbacks.Mine.when is a pathlib.PosixPath; a checkpoint holds tensors, numbers, "
    )


def test_a_step_folder_linked_out_of_the_checkpoint_folder_is_not_read(tmp_path):
    from smlaunch.trainers.checkpoints import latest_complete, write_state

    outside = tmp_path / "elsewhere" / "step-00000050"
    outside.mkdir(parents=True)
    write_state(str(outside), {"step": 50, "epoch": 1})
    (tmp_path / "checkpoints" / "run-1").mkdir(parents=True)
    (tmp_path / "checkpoints" / "run-1" / "step-00000050").symlink_to(outside)
    inside = tmp_path / "checkpoints" / "run-1" / "step-00000010"
    inside.mkdir()
    write_state(str(inside), {"step": 10, "epoch": 1})
    assert latest_complete(tmp_path / "checkpoints") == inside
