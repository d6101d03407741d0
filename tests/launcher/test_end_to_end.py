"""`sm-launch` on a real 3-node local Ray cluster: one train host, two data hosts.

Each job costs about a minute of the suite, so other jobs check more than their own subject: a
whole Pipe-mode run (both channels, sharded) is the resumed run of
`tests/reliability/test_data_host_loss.py`, and a corrupt record that fails a job is covered by
`inspect` (the reader's line, tests/reliability/test_bad_inputs.py), by the skipped record below
(the same line from inside a job) and by the undecodable image of test_bad_inputs_in_jobs.py
(a data error raised in a pipeline task ends the job with one line and the failure file).

The terminal job runs once for the module (`tiny_job`); each test below names one thing it must show."""

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from smlaunch.pipelines.sources.fastfile import read_view

CONFIG_SECRET = "hf_sentinel_config_4c1d7e"
SENTINELS = {
    "AWS_ACCESS_KEY_ID": "AKIASENTINEL0000KEYID",
    "AWS_SECRET_ACCESS_KEY": "sentinel-secret-0d4b2e8f9a",
    "AWS_SESSION_TOKEN": "sentinel-session-6f1c9e7a3b",
    "SMLAUNCH_RAY_TOKEN": "sentinel-ray-token-" + "7" * 32,
}


RAY_INTERNALS = (
    "(pid=",
    "TrainController",
    "RayTrainWorker",
    "SplitCoordinator",
    "raylet",
    "core_worker",
    "Execution plan",
    "Checkpoint successfully created",
    "Progress bars disabled",
)


ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class TerminalRun:
    code: int
    output: str
    lines: list[str]
    run: Path
    head: Path
    report: dict


@pytest.fixture(scope="module")
def tiny_job(tmp_path_factory) -> TerminalRun:
    """The job as a person runs it, once for the tests below: `sm-launch` typed into a terminal (a
    pseudo-terminal of 120x40), with sentinel credentials in its environment (issue 9) and a sentinel
    `HF_TOKEN` in its config's `sagemaker.environment` (issue 79).

    The train host has two GPUs here (`gpus: 2`), so two train workers (CPU stand-ins) share it:
    DDP on one host, each epoch split unevenly between the ranks, every sample once, the same
    weights on both ranks at the end. (Two GPU hosts, one rank each: test_sagemaker_hosts.py;
    three ranks: the S3 test below.)"""
    from support.terminal import run_in_terminal, screen_lines

    tmp_path = tmp_path_factory.mktemp("e2e")
    code, output = run_in_terminal(
        [
            sys.executable,
            "-m",
            "smlaunch",
            str(ROOT / "configs" / "tiny.yaml"),
            "--set",
            f"run.dir={tmp_path}",
            "--set",
            "run.name=e2e",
            "--set",
            "cluster.instance_groups.0.gpus=2",
            "--set",
            "trainer.steps=30",
            "--set",  # tracked in a SQLite MLflow store (issue 81)
            f"tracking.mlflow={{uri: {tmp_path / 'mlflow.db'}, experiment: e2e, tags: {{team: vision}}}}",
            "--set",  # a secret in the config's environment: masked in every file and line (issue 79)
            "sagemaker={image_uri: 'img:1', role_arn: 'arn:aws:iam::111122223333:role/R', bucket: my-bucket, "
            f"environment: {{HF_TOKEN: {CONFIG_SECRET}, NCCL_DEBUG: WARN}}}}",
        ],
        env={**os.environ, **SENTINELS},
        timeout_s=420,
    )
    assert code == 0, output[-3000:]
    head = tmp_path / "e2e" / "hosts" / "algo-1" / "opt" / "ml"
    report = json.loads((head / "output" / "data" / "report.json").read_text())
    return TerminalRun(code, output, screen_lines(output), tmp_path / "e2e", head, report)


@pytest.mark.ray
def test_the_terminal_shows_a_redrawn_bar_and_only_our_own_lines(tiny_job):
    assert "\rtrain:" in tiny_job.output and "| 30/30 [" in tiny_job.output and "images/s, data wait" in tiny_job.output
    lines = tiny_job.lines
    assert len(lines) <= 60, "\n".join(lines)
    assert not [line for line in lines if any(word in line for word in RAY_INTERNALS)], "\n".join(lines)
    assert lines[-1] == f"report: {tiny_job.head / 'output' / 'data' / 'report.json'}"


@pytest.mark.ray
def test_the_report_and_the_console_say_where_the_runs_time_went(tiny_job):
    """Every phase of the run, as seconds after the command, in the order the run passed them: the
    driver's marks and rank 0's (another process) on one clock."""
    from smlaunch.launcher.report.phases import ORDER

    phases = tiny_job.report["summary"]["phases_s"]
    assert list(phases) == list(ORDER)
    assert list(phases.values()) == sorted(phases.values()) and phases["cluster_up"] > 0
    line = next(line for line in tiny_job.lines if line.startswith("phases (s after the command): "))
    assert "cluster up" in line and "first step" in line and "teardown" in line


@pytest.mark.ray
def test_the_console_gives_metric_validation_summary_and_verdict_lines(tiny_job):
    lines = tiny_job.lines
    metric = re.compile(
        r"^step=\d+ loss=[0-9.]+ images_per_sec=[0-9.]+ data_wait_pct=[0-9.]+ lr=[0-9.e-]+ grad_norm=[0-9.e-]+$"
    )
    assert [line for line in lines if metric.match(line)][-1].startswith("step=30 ")
    # accuracy and top-5 over the whole validation set (torchmetrics), the loss a mean over its rows
    assert any(
        re.match(r"^validation step=30 epoch=2 accuracy=[0-9.]+ top5=[0-9.]+ loss=[0-9.]+$", line) for line in lines
    )
    assert "steps=30 epochs=2 (epoch 2 cut short by the step count) train_workers=2" in lines
    assert any(line.startswith("ranks 0@algo-1, 1@algo-1: final weights identical on every rank") for line in lines)
    assert any(line.startswith("verdict: ") for line in lines) and any("advisor: recommend" in line for line in lines)


@pytest.mark.ray
def test_two_ranks_trained_in_step_and_learned(tiny_job):
    report, summary = tiny_job.report, tiny_job.report["summary"]
    assert summary["steps"] == 30 and len(report["steps"]) == 30
    assert (summary["epochs"], summary["epochs_complete"]) == (2, 1)  # one way of counting, everywhere
    assert [w["rank"] for w in report["workers"]] == [0, 1] and summary["ranks_in_sync"]
    assert len({w["param_sha256"] for w in report["workers"]}) == 1 and summary["global_batch"] == 64
    assert {"loss", "step_time_s", "data_wait_s", "images_per_s"} <= set(report["steps"][0])
    assert summary["validation_accuracy"] > 0.3  # chance is 0.1
    assert report["validation"][-1]["epoch"] == 2 and report["validation"][-1]["rows"] == 360


@pytest.mark.ray
def test_the_first_epoch_gave_every_sample_once_over_the_two_ranks(tiny_job):
    first = tiny_job.report["sample_accounting"]["epochs"][0]  # 1437 rows over two ranks: shards of 718 and 719
    assert (first["epoch"], first["complete"], first["distinct"], first["duplicated"], first["missing"]) == (
        1,
        True,
        1437,
        0,
        0,
    ), first


@pytest.mark.ray
def test_every_preprocessed_row_came_from_the_data_hosts(tiny_job):
    report = tiny_job.report
    assert report["summary"]["data_node_row_fraction"] == 1.0
    assert report["rows_by_host"]["algo-1"] == 0 and report["rows_by_host"]["unknown"] == 0
    assert report["rows_by_host"]["algo-2"] + report["rows_by_host"]["algo-3"] >= 30 * 64 + 2 * 360
    assert set(report["chain_by_host"]) <= {"algo-2", "algo-3"}


@pytest.mark.ray
def test_ray_s_logs_and_ours_are_kept_with_the_run(tiny_job):
    logs = tiny_job.run / "logs"
    assert "step=30 loss=" in (logs / "sm-launch.log").read_text()
    assert list((logs / "ray").glob("raylet*.out")) and list((logs / "ray").glob("python-core-worker-*.log"))


@pytest.mark.ray
def test_every_host_was_sampled_and_the_report_rendered_for_people(tiny_job):
    report = tiny_job.report
    assert sorted(report["samples"]) == ["algo-1", "algo-2", "algo-3"]
    assert all(len(s["samples"]) >= 4 for s in report["samples"].values())
    assert report["verdict"]["verdict"] in ("input-bound", "compute-bound", "balanced")
    assert report["advisor"]["rates"]["per_slot_images_per_s"] > 0
    out = tiny_job.head / "output" / "data"
    for name in ("summary.md", "throughput.png", "data_wait.png", "utilisation.png"):
        assert (out / name).stat().st_size > 1000, name
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.ray
def test_no_credential_shows_in_output_report_config_trees_or_logs(tiny_job):
    texts = {"terminal": tiny_job.output}
    texts.update({str(p): p.read_bytes().decode("latin-1") for p in tiny_job.run.rglob("*") if p.is_file()})
    assert len(texts) > 20
    sentinels = {**SENTINELS, "HF_TOKEN in the config": CONFIG_SECRET}
    assert not [
        f"{name} in {where}" for where, text in texts.items() for name, value in sentinels.items() if value in text
    ]
    saved = yaml.safe_load((tiny_job.run / "resolved_config.yaml").read_text())  # the name stays, its value not
    assert saved["sagemaker"]["environment"] == {"HF_TOKEN": "***", "NCCL_DEBUG": "WARN"}


@pytest.mark.ray
def test_the_job_is_one_finished_mlflow_run_with_its_config_steps_validation_and_report(tiny_job):
    """Read back with MLflow's own client: one run, named after the run, FINISHED; the config as
    dotted params; the loss at steps 1, 10, 20, 30 (`trainer.log_every`) with both ranks' images/s;
    the validation's accuracy; report.json and its plots; the system facts; no secret."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tiny_job.run.parent / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("e2e").experiment_id])
    assert len(runs) == 1, runs
    run = runs[0]
    assert (run.info.status, run.info.run_name) == ("FINISHED", "e2e")
    assert run.data.params["trainer.steps"] == "30" and run.data.params["cluster.instance_groups.0.gpus"] == "2"
    assert run.data.params["sagemaker.environment.HF_TOKEN"] == "***"
    assert run.data.tags["team"] == "vision" and run.data.tags["system.world_size"] == "2"
    assert run.data.tags["system.instance_groups"].startswith("gpu: 1 x ml.g5.xlarge")
    losses = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in losses] == [1, 10, 20, 30]
    assert [m.value for m in losses] == pytest.approx(
        [s["loss"] for s in tiny_job.report["steps"] if s["step"] in (1, 10, 20, 30)], abs=1e-4
    )
    assert client.get_metric_history(run.info.run_id, "images_per_sec")[-1].value > 0
    accuracy = client.get_metric_history(run.info.run_id, "validation_accuracy")
    assert [m.value for m in accuracy] == pytest.approx([v["accuracy"] for v in tiny_job.report["validation"]])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.json", "throughput.png"} <= artifacts and "model" not in artifacts, artifacts
    assert CONFIG_SECRET.encode() not in (tiny_job.run.parent / "mlflow.db").read_bytes()


def test_the_hosts_got_sagemaker_shaped_trees_and_only_data_hosts_the_channels(tiny_job):
    config = json.loads((tiny_job.run / "hosts/algo-2/opt/ml/input/config/resourceconfig.json").read_text())
    assert config["current_host"] == "algo-2" and config["current_group_name"] == "cpu"
    assert not (tiny_job.head / "input" / "data" / "train").exists()
    assert len(list((tiny_job.run / "hosts/algo-3/opt/ml/input/data/train").iterdir())) == 4


@pytest.mark.ray
def test_the_final_model_reloads_with_timm_and_its_card_describes_it(tiny_job):
    import timm

    head = tiny_job.head
    card = json.loads((head / "model" / "model.json").read_text())
    assert card["model"] == "test_resnet" and card["num_classes"] == 10 and card["input_size"] == [3, 16, 16]
    model = timm.create_model(card["model"], num_classes=card["num_classes"])
    model.load_state_dict(torch.load(head / "model" / "model.pt", weights_only=True))
    assert model.eval()(torch.zeros(1, 3, 16, 16)).shape == (1, 10)
    assert not (head / "output" / "failure").exists()


@pytest.mark.ray
def test_s3_channels_fastfile_sharded_with_a_corrupt_record_skipped(configs, tmp_path, dataset_cache):
    """configs/s3-fastfile.yaml: a local S3 server started by the run and seeded from folders; train
    is FastFile (views, nothing downloaded) sharded over the data hosts, with one damaged record
    that `max_corrupted_records: 1` skips and the report counts; validation streams through Pipe.
    Three train workers (the GPU host has `gpus: 3`) split the 1436 good rows unevenly (1436 is no
    multiple of 3, nor are the blocks the same size) and still draw each one once."""
    from smlaunch.pipelines.builtin.digits import prepare_digits

    bad = tmp_path / "bad-train"
    bad.mkdir()
    shard = prepare_digits() / "train" / "part-00002.tfrecord"
    damaged = bytearray(shard.read_bytes())
    damaged[5000] ^= 0xFF  # inside the data of the record that starts at byte 4422
    (bad / shard.name).write_bytes(bytes(damaged))
    seeds = f"{{s3://smlaunch-digits/: builtin:digits, s3://smlaunch-digits/train/: {bad}}}"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "smlaunch.launcher.cli",
            str(configs / "s3-fastfile.yaml"),
            "--set",
            f"run.dir={tmp_path}",
            "--set",
            "run.name=s3",
            "--set",
            "trainer.steps=16",
            "--set",
            "cluster.instance_groups.0.gpus=3",
            "--set",
            "channels.train.max_corrupted_records=1",
            "--set",
            f"run.s3_seed={seeds}",
            "--set",  # a tracking server nothing answers at: one warning, the job unharmed (issue 81)
            f"tracking.mlflow.uri=http://127.0.0.1:{closed_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "local S3 server at http://127.0.0.1:" in result.stdout
    # Piped, the console has no escape codes, no Ray lines, and the data task's warning reached it.
    assert "\x1b" not in result.stdout + result.stderr and "\r" not in result.stdout
    assert not [line for line in result.stdout.splitlines() if any(word in line for word in RAY_INTERNALS)]
    assert "WARNING: channel 'train': skipped a corrupt record: " in result.stdout
    # the submitted job's MetricDefinitions read this job's own lines, each value once (issue 81)
    from smlaunch.config import load_config
    from smlaunch.launcher.sagemaker.metrics import metric_definitions

    definitions = {m["Name"]: m["Regex"] for m in metric_definitions(load_config(configs / "s3-fastfile.yaml"))}
    assert len(re.findall(definitions["train:loss"], result.stdout)) == 2  # steps 1 and 10 (log_every 10)
    accuracy = re.findall(definitions["validation:accuracy"], result.stdout)
    written = json.loads((tmp_path / "s3/hosts/algo-1/opt/ml/output/data/report.json").read_text())
    assert accuracy and float(accuracy[-1]) == pytest.approx(written["validation"][-1]["accuracy"], abs=1e-4)
    untracked = [line for line in result.stdout.splitlines() if line.startswith("WARNING: tracking:")]
    assert len(untracked) == 1 and "training goes on untracked" in untracked[0], untracked
    # what the run tracked is in its folder, and reaches a store afterwards
    store = tmp_path / "later.db"
    sent = subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", "track", "--replay", str(tmp_path / "s3"), "--uri", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sent.returncode == 0 and "status FINISHED" in sent.stdout + sent.stderr, sent.stdout + sent.stderr
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    (run,) = client.search_runs([client.get_experiment_by_name("smlaunch").experiment_id])
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [1, 10, 16]  # and the last
    assert run.data.params["trainer.steps"] == "16" and run.info.status == "FINISHED"
    assert re.search(
        r"^step=10 loss=[0-9.]+ images_per_sec=[0-9.]+ data_wait_pct=[0-9.]+ lr=\S+ grad_norm=[0-9.e-]+$",
        result.stdout,
        re.M,
    )
    hosts = tmp_path / "s3" / "hosts"
    report = json.loads((hosts / "algo-1/opt/ml/output/data/report.json").read_text())
    assert report["summary"]["corrupt_records_skipped"] == 1
    assert "part-00002.tfrecord: bad data CRC in record at byte 4422" in report["corrupt_records"]["train"]["first"][0]
    assert report["validation"][-1]["rows"] == 360
    assert [w["rank"] for w in report["workers"]] == [0, 1, 2] and report["summary"]["ranks_in_sync"]
    first = report["sample_accounting"]["epochs"][0]
    assert (first["complete"], first["distinct"], first["duplicated"], first["missing"]) == (True, 1436, 0, 0), first
    for host, shards in (
        ("algo-2", ["part-00000.tfrecord", "part-00002.tfrecord"]),
        ("algo-3", ["part-00001.tfrecord", "part-00003.tfrecord"]),
    ):
        view = hosts / host / "opt/ml/input/data/train" / ".smlaunch-fastfile.json"
        assert [name for name, _ in read_view(view.parent)[1]] == shards
        assert [p.name for p in view.parent.iterdir()] == [view.name]  # nothing was downloaded
