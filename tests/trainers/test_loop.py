"""The train loop through real `sm-launch` runs of the tiny job on a 3-node local cluster:
resuming from a finished run's checkpoint, reloading the saved model, recovering from a killed
train worker, and stopping on SIGTERM with a complete checkpoint."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

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


def wait_for_checkpoint(root: Path, proc, timeout=300) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = latest_complete(root, log=lambda line: None)
        if found is not None:
            return found
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint under {root} within {timeout} s")


@pytest.mark.ray
def test_resume_continues_steps_and_loss_and_the_model_reloads(configs, tmp_path):
    finish(launch(configs, tmp_path, "run", "trainer.steps=20", "trainer.checkpoint_interval=10"))
    first = report(tmp_path, "run")
    ckpt = latest_complete(head(tmp_path, "run") / "checkpoints")
    assert ckpt.name == "step-00000020"

    # The saved model gives the trainer's final validation result, computed here independently.
    from smlaunch.config import load_config
    from smlaunch.pipelines.builtin import prepare_builtin
    from smlaunch.pipelines.chain import Chain
    from smlaunch.pipelines.formats import iter_records
    from smlaunch.pipelines.rows import _example_row
    from smlaunch.trainers.evaluate import normalise
    from smlaunch.trainers.model import create_model

    card = json.loads((head(tmp_path, "run") / "model" / "model.json").read_text())
    model = create_model(card["model"], card["num_classes"], card["input_size"][1])
    model.load_state_dict(torch.load(head(tmp_path, "run") / "model" / "model.pt"))
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
    assert (logits.argmax(1) == target).double().mean().item() == pytest.approx(final["accuracy"], abs=1e-5)  # one row = 0.003
    assert torch.nn.functional.cross_entropy(logits, target).item() == pytest.approx(final["loss"], abs=2e-4)

    # A new run with the same checkpoint directory picks up at step 20 and goes on to 40.
    out = finish(launch(configs, tmp_path, "run", "trainer.steps=40", "trainer.checkpoint_interval=10"))
    second = report(tmp_path, "run")
    assert "resuming from checkpoint" in out and second["summary"]["resumed_at_step"] == 20
    assert [s["step"] for s in second["steps"]] == list(range(21, 41))
    first_losses = [s["loss"] for s in first["steps"]]
    # The loss curve continues where it was, not from a fresh model's loss.
    assert np.mean([s["loss"] for s in second["steps"][:5]]) < 0.8 * np.mean(first_losses[:5])
    assert json.loads((head(tmp_path, "run") / "model" / "model.json").read_text())["steps"] == 40


@pytest.mark.ray
def test_a_killed_train_worker_restarts_from_the_last_checkpoint(configs, tmp_path):
    import psutil

    proc = launch(configs, tmp_path, "kill", "trainer.steps=60", "trainer.checkpoint_interval=10",
                  "trainer.max_failures=1", "trainer.grad_accum_steps=2")
    try:
        found = wait_for_checkpoint(head(tmp_path, "kill") / "checkpoints", proc)
        # Ray Train hands a restarted group only checkpoints it has registered; it records them in
        # its snapshot file. Kill once there is one, so there is something to restart from.
        snapshot = found.parent / "checkpoint_manager_snapshot.json"
        deadline = time.monotonic() + 60
        while not snapshot.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = [p for p in psutil.process_iter(["cmdline"])
                   if "RayTrainWorker" in " ".join(p.info["cmdline"] or []) and p.ppid() != os.getpid()]
        assert workers, "no RayTrainWorker process found"
        for worker in workers:
            worker.send_signal(signal.SIGKILL)
        finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    run = report(tmp_path, "kill")
    summary = run["summary"]
    assert summary["steps"] == 60 and summary["resumed_at_step"] >= 10
    # Two micro-batches of 32 per optimizer step.
    assert all(abs(s["images_per_s"] * s["step_time_s"] - 64) < 1 for s in run["steps"])
    assert "this run" in summary["resumed_from"]


@pytest.mark.ray
def test_sigterm_leaves_a_complete_checkpoint_and_exits_within_30s(configs, tmp_path):
    proc = launch(configs, tmp_path, "term", "trainer.steps=400", "trainer.checkpoint_interval=5")
    try:
        wait_for_checkpoint(head(tmp_path, "term") / "checkpoints", proc)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and took < 30, took
    stopped = report(tmp_path, "term")["summary"]["stopped_at_step"]
    latest = latest_complete(head(tmp_path, "term") / "checkpoints")
    assert stopped is not None and latest.name == f"step-{stopped:08d}"
