"""What a training run with several ranks survives, through real `sm-launch` runs of the tiny job
with two train hosts (two ranks: CPU stand-ins for their GPUs) and two data hosts (issue 9, items 2
and 3; issue 20, items 5 and 6):

- one train worker killed mid-run: Ray Train restarts the group from the last checkpoint, so at most
  one checkpoint interval of steps is redone, and the resumed epoch still draws each sample once;
- SIGTERM (a spot interruption, `StopTrainingJob`): a complete checkpoint at a step boundary on every
  rank, exit 143 within 30 s, the stop written to the console and the report;
- the next run resumes from that checkpoint on *one* rank (a job resubmitted on fewer GPUs), and the
  one after that on two again, each continuing the epoch from its position with the new split: the
  loss curve goes on, every complete epoch has each sample id once, the two ranks end with the same
  weights, and the saved model reloads to the trainer's own final validation numbers.

Three jobs (each costs about a minute of the suite). A checkpoint at an epoch's last full batch
(issue 53) is resumed in test_data_host_loss.py, after its one-epoch run. The multi-host versions
(SIGTERM to every host, the head host lost) are in `test_host_loss.py`.
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
    return subprocess.Popen(
        [sys.executable, "-m", "smlaunch.launcher.cli", str(configs / "tiny.yaml"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


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


def kill_one_train_worker() -> None:
    import psutil

    workers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "RayTrainWorker" in " ".join(p.info["cmdline"] or []) and p.ppid() != os.getpid()
    ]
    assert len(workers) == 2, f"expected two RayTrainWorker processes, found {len(workers)}"
    workers[-1].send_signal(signal.SIGKILL)


def assert_each_complete_epoch_once(rep: dict) -> None:
    """By position (a resumed epoch included: what was drawn before the checkpoint is in its
    position), and by id for what this run drew."""
    epochs = [e for e in rep["sample_accounting"]["epochs"] if e["complete"]]
    assert epochs, rep["sample_accounting"]
    for e in epochs:
        p = e["positions"]
        assert (p["rows"], p["duplicates"], p["units_incomplete"], p["units_open"]) == (1437, 0, 0, 0), e
        assert (e["distinct"] + e["skipped_rows"], e["duplicated"], e["missing"]) == (1437, 0, 0), e


def assert_ranks_in_sync(rep: dict, hosts: list[str]) -> None:
    assert [w["host"] for w in rep["workers"]] == hosts and rep["summary"]["ranks_in_sync"], rep["workers"]


def mlflow_runs(tmp_path) -> list[tuple[str, int]]:
    """Each MLflow run's status and last logged step; its loss history must hold each step once, in order."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    out = []
    for run in client.search_runs([client.get_experiment_by_name("smlaunch").experiment_id]):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
        assert steps == sorted(set(steps)), steps
        out.append((run.info.status, steps[-1]))
    return out


TWO_RANKS = "cluster.instance_groups.0.instance_count=2"  # tiny.yaml's gpu group: 2 x ml.g5.xlarge


@pytest.mark.ray
def test_two_ranks_survive_a_killed_worker_and_sigterm_then_resume_on_one_rank_and_again_on_two(configs, tmp_path):
    interval = 5
    sets = (
        TWO_RANKS,
        "trainer.steps=400",
        f"trainer.checkpoint_interval={interval}",
        "trainer.max_failures=1",
        "trainer.grad_accum_steps=2",
        f"tracking.mlflow.uri={tmp_path / 'mlflow.db'}",  # one MLflow run through all of it (issue 81)
    )
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
        # Kill once the first epoch's end has sealed the cache (`pipeline.cache: auto`), and mostly
        # before a checkpoint of the second: the restarted group then resumes inside the first epoch,
        # reading its rest from the files though the cache is sealed, and counts it in the files.
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("cache/*/FINAL")) and time.monotonic() < deadline:
            time.sleep(0.05)
        kill_one_train_worker()
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
    # SageMaker kills 120 s after its SIGTERM: the exit must come well before (typically 15-30 s here; a
    # tighter bound failed CI at 30.4 s on a busy 2-core machine, which is not what this claim is about)
    assert proc.returncode == 143 and took < 100, (took, out[-3000:])
    first = report(tmp_path, "run")
    summary = first["summary"]
    # The worker died between the checkpoint seen at the kill and the next one: restarting from
    # that checkpoint (or a later one) redoes fewer than `interval` steps.
    assert "this run" in summary["resumed_from"]
    assert summary["resumed_at_step"] >= step_of(at_kill) >= 2 * interval
    # Two ranks x two micro-batches of 32 per optimizer step, but for a shard's last steps
    # (drain steps: one rank was out of data). A record's step time is the ranks' mean.
    images = [round(s["images_per_s"] * s["step_time_s"]) for s in first["steps"]]
    assert all(n % 32 == 0 and 0 < n <= 128 for n in images) and images.count(128) >= 0.8 * len(images), images
    stopped = summary["stopped_at_step"]
    assert stopped is not None and stopped >= 20 and f"stopped early at step {stopped} on request (SIGTERM)" in out
    assert summary["stopped_by"] == "request (SIGTERM)"
    assert latest_complete(checkpoints).name == f"step-{stopped:08d}"
    assert mlflow_runs(tmp_path) == [("KILLED", stopped)]  # the stop, and each step once across the restart
    # The report's steps are the restarted group's: from the checkpoint it resumed at to the stop.
    assert [s["step"] for s in first["steps"]] == list(range(summary["resumed_at_step"] + 1, stopped + 1))
    assert_ranks_in_sync(first, ["algo-1", "algo-2"])
    assert_each_complete_epoch_once(first)

    # Resubmitted on one GPU: the epoch goes on from its position, and the loss where it was.
    # Ten steps into the next epoch: the rest of the stopped epoch in batches of 64 on one rank first.
    # (A stop that came just as an epoch ended leaves nothing of it to finish.)
    cut = [e["rows"] for e in first["sample_accounting"]["epochs"] if not e["complete"]]
    middle = stopped + (1437 - (cut[-1] if cut else 0)) // 64 + 10
    out = finish(launch(configs, tmp_path, "run", *sets, f"trainer.steps={middle}", "trainer.max_workers=1"))
    second = report(tmp_path, "run")
    assert "resuming from checkpoint" in out and second["summary"]["resumed_at_step"] == stopped
    assert second["summary"]["train_workers"] == 1
    assert [s["step"] for s in second["steps"]] == list(range(stopped + 1, middle + 1))
    assert np.mean([s["loss"] for s in second["steps"][:5]]) < 0.6 * np.log(10), second["steps"][:5]
    assert_each_complete_epoch_once(second)
    assert not second["sample_accounting"]["epochs"][-1]["complete"], second["sample_accounting"]

    # And on two again, from the middle of an epoch: that epoch still has each sample once.
    target = middle + 16
    finish(launch(configs, tmp_path, "run", *sets, f"trainer.steps={target}"))
    third = report(tmp_path, "run")
    assert third["summary"]["resumed_at_step"] == middle and third["summary"]["train_workers"] == 2
    assert third["sample_accounting"]["epochs"][0]["skipped_rows"] > 0  # it began mid-epoch
    assert_each_complete_epoch_once(third)
    assert_ranks_in_sync(third, ["algo-1", "algo-2"])
    card = json.loads((head(tmp_path, "run") / "model" / "model.json").read_text())
    assert card["steps"] == target
    assert mlflow_runs(tmp_path) == [("FINISHED", target)]  # three jobs, one run, reopened by its kept id
    assert_model_reloads_to_its_final_validation(configs, head(tmp_path, "run") / "model", card)


def assert_model_reloads_to_its_final_validation(configs, model_dir: Path, card: dict) -> None:
    """The saved model gives the trainer's final validation result, computed here independently."""
    import torch

    from smlaunch.config import load_config
    from smlaunch.pipelines.builtin import prepare_builtin
    from smlaunch.pipelines.formats import iter_records
    from smlaunch.pipelines.ops.chain import Chain
    from smlaunch.pipelines.rows import example_row
    from smlaunch.trainers.evaluate import normalise
    from smlaunch.trainers.model import create_model

    model = create_model(card["model"], card["num_classes"], card["input_size"][1])
    model.load_state_dict(torch.load(model_dir / "model.pt", weights_only=True))
    rows = [
        example_row(r)
        for shard in sorted((prepare_builtin("digits") / "validation").iterdir())
        for r in iter_records(open(shard, "rb"), "tfrecord")
    ]
    images, labels, ids = zip(*rows, strict=False)
    batch = Chain(load_config(configs / "tiny.yaml").pipeline.ops, [], train=False)(
        {"image": np.array(images, dtype=object), "label": np.array(labels), "id": np.array(ids)}
    )
    with torch.no_grad():
        logits = model.eval()(
            normalise(torch.from_numpy(np.asarray(batch["image"])), torch.device("cpu"), card["normalisation"])
        )
    target = torch.from_numpy(batch["label"])
    final = card["final_metrics"]["validation"]
    assert (logits.argmax(1) == target).double().mean().item() == pytest.approx(final["accuracy"], abs=1e-5)
    assert torch.nn.functional.cross_entropy(logits, target).item() == pytest.approx(final["loss"], abs=2e-4)


@pytest.mark.ray
def test_losing_one_of_two_gpu_hosts_ends_the_job_in_one_line_naming_it(tmp_path):
    """algo-2 (the second GPU host, rank 1) is killed, Ray node and all, once training runs: rank 0
    fails in its next collective, Ray Train's restarts (the default `max_failures: 2`) cannot place
    rank 1 anywhere, and the driver's watch aborts the run: one line naming the host, not Ray's
    error, well within a minute, never a wait for the lost rank."""
    import re

    from test_data_host_loss import kill_host, output, start

    job, _ = start(tmp_path, "lost", TWO_RANKS, "trainer.steps=400")
    try:
        deadline = time.monotonic() + 300
        while "step=1 loss=" not in output(tmp_path, "lost") and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert job.poll() is None, output(tmp_path, "lost")[-3000:]
        killed = kill_host(job, "algo-2")
        killed_at = time.monotonic()
        job.wait(timeout=120)
        took = time.monotonic() - killed_at
    finally:
        job.kill()
    text = output(tmp_path, "lost")
    assert "raylet" in killed and job.returncode == 1, text[-3000:]
    line = "train host algo-2 was lost, and with it its train workers"
    assert re.search(rf"^sm-launch: error: {line}", text, re.M), text[-3000:]
    assert (head(tmp_path, "lost") / "output" / "failure").read_text().startswith(line)
    assert took < 60, took


@pytest.mark.ray
def test_a_stop_the_trainer_cannot_reach_ends_the_job_after_the_grace_in_one_line(tmp_path):
    """SIGTERM while the trainer waits for data that takes far longer than `trainer.stop_grace_s`
    (a chain op sleeping 1 s per image): no step boundary comes, so the launcher must not wait for
    one; the job ends after the grace in one line, exit 1, and the cluster is torn down."""
    import psutil
    from test_data_host_loss import output, start

    slow = "pipeline.ops.2={op: user, function: 'host_loss_ops:slow', params: {seconds: 1.0}}"
    job, _ = start(tmp_path, "stuck", slow, "trainer.stop_grace_s=3", "trainer.steps=40")
    try:
        deadline = time.monotonic() + 120
        while "hosts up after" not in output(tmp_path, "stuck") and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert job.poll() is None, output(tmp_path, "stuck")[-3000:]
        children = psutil.Process(job.pid).children(recursive=True)
        time.sleep(5)  # the trainer is starting or waiting for its first batch
        job.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        job.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if job.poll() is None:
            job.kill()
    text = output(tmp_path, "stuck")
    assert job.returncode == 1 and 3 <= took < 60, (job.returncode, took, text[-3000:])  # grace 3 s, then the teardown
    assert "SIGTERM received: stopping at the next step boundary (up to 3 s)" in text
    last = (tmp_path / "stuck.err").read_text().strip().splitlines()[-1]
    assert last == (
        "sm-launch: error: the trainer did not stop within 3 s of SIGTERM (trainer.stop_grace_s): no step "
        "boundary was reached, so no checkpoint was written on the stop; the next run resumes from the "
        "last complete one"
    ), last
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]  # nothing left behind
