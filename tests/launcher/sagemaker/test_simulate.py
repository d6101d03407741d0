"""`sm-launch simulate CONFIG`: the config's SageMaker path on this machine, one real `sm-launch`
process per host of its instance groups, as a user runs it before paying for a job."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.ray
def test_simulate_runs_each_host_of_the_config_as_its_own_sm_launch_and_the_head_trains(tmp_path, configs):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "SAGEMAKER_BASE_DIR")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "smlaunch.launcher.cli",
            "simulate",
            str(configs / "tiny.yaml"),
            "--set",
            f"run.dir={tmp_path}",
            "--set",
            "run.name=sim",
            "--hyperparameter",  # as a tuner's trial gets it: each host reads its hyperparameters.json
            "trainer.steps=4",
            "--hyperparameter",
            "_tuning_objective_metric=validation:accuracy",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    run = tmp_path / "sim"
    logs = {h: (run / f"{h}.log").read_text() for h in ("algo-1", "algo-2", "algo-3")}
    assert done.returncode == 0, (done.stderr[-2000:], {h: text[-1500:] for h, text in logs.items()})
    assert "simulated SageMaker job: every host exited 0" in done.stderr + done.stdout
    # The GPU group's host is the head; each CPU host is a worker host that joined it by name.
    assert "hosts_joined=3 " in logs["algo-1"]
    for worker in ("algo-2", "algo-3"):
        assert "joining head algo-1" in logs[worker] and "head algo-1 finished the job" in logs[worker]
    # Every host read its own tree, as SageMaker writes it; the data went to the CPU hosts only.
    for host in logs:
        config = json.loads((run / "hosts" / host / "opt/ml/input/config/resourceconfig.json").read_text())
        assert config["current_host"] == host
    assert not any((run / "hosts/algo-1/opt/ml/input/data").iterdir())
    assert any((run / "hosts/algo-2/opt/ml/input/data/train").iterdir())
    report = json.loads((run / "hosts/algo-1/opt/ml/output/data/report.json").read_text())
    # the driver ships the config as written (tiny.yaml: 40 steps); the hosts' own overrides made it 4
    assert all("hyperparameters: trainer.steps=4 (as --set" in text for text in logs.values())
    assert report["summary"]["steps"] == 4 and report["summary"]["data_node_row_fraction"] == 1.0
    assert report["summary"]["wall_s"] > report["summary"]["cluster_start_s"] > 0  # the same timings as a local run
    assert (run / "hosts/algo-1/opt/ml/model/model.pt").exists()


def test_simulate_refuses_on_a_sagemaker_host(tmp_path, configs):
    tree = tmp_path / "opt_ml"
    (tree / "input" / "config").mkdir(parents=True)
    (tree / "input" / "config" / "resourceconfig.json").write_text("{}")
    env = {**os.environ, "SAGEMAKER_BASE_DIR": str(tree)}
    done = subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", "simulate", str(configs / "tiny.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode != 0
    assert "simulate: this is a SageMaker host already" in done.stderr
    assert not Path(tmp_path / "runs").exists()
