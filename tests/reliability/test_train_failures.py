"""What a training run survives, through real `sm-launch` runs of the tiny job on a 3-node local
cluster (issue 9, items 2 and 3):

- a train worker killed mid-run: Ray Train restarts the group from the last checkpoint, so at most
  one checkpoint interval of steps is redone;
- SIGTERM (a spot interruption, `StopTrainingJob`): a complete checkpoint at a step boundary, exit
  143 within 30 s, the stop written to the console and the report; the next run resumes from that
  checkpoint, the loss curve goes on where it was, and the saved model reloads to the trainer's
  own final validation numbers.

Both happen to one run (a job costs about a minute of the suite).

The multi-host versions (SIGTERM to every host, the head host lost) are in `test_host_loss.py`.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from smlaunch.trainers.checkpoints import latest_complete


def launch(configs, tmp_path, name, *sets):
    args = [x for s in (f"run.dir={tmp_path}", f"run.name={name}", *sets) for x in ("--set", s)]
    return subprocess.Popen([sys.executable, "-m", "smlaunch.launcher.cli", str(configs / "tiny.yaml"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc, timeout=420) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


def head(tmp_path, name) -> Path:
    return tmp_path / name / "hosts" / "algo-1" / "opt" / "ml"


def report(tmp_path, name) -> dict:
    return json.loads((head(tmp_path, name) / "output" / "data" / "report.json").read_text())


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.removeprefix("step-"))


def wait_for_checkpoint(root: Path, proc, timeout=300, min_step=1) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = latest_complete(root)
        if found is not None and step_of(found) >= min_step:
            return found
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint under {root} within {timeout} s")


def kill_train_workers() -> None:
    import psutil

    workers = [p for p in psutil.process_iter(["cmdline"])
               if "RayTrainWorker" in " ".join(p.info["cmdline"] or []) and p.ppid() != os.getpid()]
    assert workers, "no RayTrainWorker process found"
    for worker in workers:
        worker.send_signal(signal.SIGKILL)


@pytest.mark.ray
def test_a_killed_worker_redoes_at_most_one_interval_then_sigterm_checkpoints_and_the_next_run_resumes(
        configs, tmp_path):
    """One run lives through both: the killed worker first, then SIGTERM (each job costs a minute)."""
    interval = 5
    sets = ("trainer.steps=400", f"trainer.checkpoint_interval={interval}", "trainer.max_failures=1",
            "trainer.grad_accum_steps=2")
    checkpoints = head(tmp_path, "run") / "checkpoints"
    proc = launch(configs, tmp_path, "run", *sets)
    try:
        found = wait_for_checkpoint(checkpoints, proc, min_step=2 * interval)
        # Ray Train hands a restarted group only checkpoints it has registered; it records them in
        # its snapshot file. Kill once there is one, so there is something to restart from.
        snapshot = found.parent / "checkpoint_manager_snapshot.json"
        deadline = time.monotonic() + 60
        while not snapshot.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        at_kill = latest_complete(checkpoints)
        kill_train_workers()
        # The restarted group resumes, then checkpoints again; SIGTERM once it has. Late enough
        # that the loss has clearly fallen, so the resumed curve can be told from a fresh model's.
        wait_for_checkpoint(checkpoints, proc, min_step=max(step_of(at_kill) + interval, 20))
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and took < 30, (took, out[-3000:])
    first = report(tmp_path, "run")
    summary = first["summary"]
    # The worker died between the checkpoint seen at the kill and the next one: restarting from
    # that checkpoint (or a later one) redoes fewer than `interval` steps.
    assert "this run" in summary["resumed_from"]
    assert summary["resumed_at_step"] >= step_of(at_kill) >= 2 * interval
    # Two micro-batches of 32 per optimizer step, before and after the restart.
    assert all(abs(s["images_per_s"] * s["step_time_s"] - 64) < 1 for s in first["steps"])
    stopped = summary["stopped_at_step"]
    assert stopped is not None and stopped >= 20 and f"stopped early at step {stopped} on request (SIGTERM)" in out
    assert latest_complete(checkpoints).name == f"step-{stopped:08d}"
    # The report's steps are the restarted group's: from the checkpoint it resumed at to the stop.
    assert [s["step"] for s in first["steps"]] == list(range(summary["resumed_at_step"] + 1, stopped + 1))

    # The next run with the same checkpoint directory picks up at the stop and goes on.
    target = stopped + 10
    out = finish(launch(configs, tmp_path, "run", *sets[1:], f"trainer.steps={target}"))
    second = report(tmp_path, "run")
    assert "resuming from checkpoint" in out and second["summary"]["resumed_at_step"] == stopped
    assert [s["step"] for s in second["steps"]] == list(range(stopped + 1, target + 1))
    # The loss curve continues where it was, well below a fresh 10-class model's ln(10) = 2.30.
    assert np.mean([s["loss"] for s in second["steps"][:5]]) < 0.6 * np.log(10), second["steps"][:5]
    card = json.loads((head(tmp_path, "run") / "model" / "model.json").read_text())
    assert card["steps"] == target
    assert_model_reloads_to_its_final_validation(configs, head(tmp_path, "run") / "model", card)


def assert_model_reloads_to_its_final_validation(configs, model_dir: Path, card: dict) -> None:
    """The saved model gives the trainer's final validation result, computed here independently."""
    import torch

    from smlaunch.config import load_config
    from smlaunch.pipelines.builtin import prepare_builtin
    from smlaunch.pipelines.chain import Chain
    from smlaunch.pipelines.formats import iter_records
    from smlaunch.pipelines.rows import _example_row
    from smlaunch.trainers.evaluate import normalise
    from smlaunch.trainers.model import create_model

    model = create_model(card["model"], card["num_classes"], card["input_size"][1])
    model.load_state_dict(torch.load(model_dir / "model.pt"))
    rows = [_example_row(r) for shard in sorted((prepare_builtin("digits") / "validation").iterdir())
            for r in iter_records(open(shard, "rb"), "tfrecord")]
    images, labels, ids = zip(*rows)
    batch = Chain(load_config(configs / "tiny.yaml").pipeline.ops, [], train=False)(
        {"image": np.array(images, dtype=object), "label": np.array(labels), "id": np.array(ids)})
    with torch.no_grad():
        logits = model.eval()(normalise(torch.from_numpy(np.asarray(batch["image"])), torch.device("cpu"),
                                        card["normalisation"]))
    target = torch.from_numpy(batch["label"])
    final = card["final_metrics"]["validation"]
    assert (logits.argmax(1) == target).double().mean().item() == pytest.approx(final["accuracy"], abs=1e-5)
    assert torch.nn.functional.cross_entropy(logits, target).item() == pytest.approx(final["loss"], abs=2e-4)
