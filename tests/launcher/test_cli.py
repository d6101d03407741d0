"""The CLI as a user meets it: a real `sm-launch` process, its output and exit status."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from smlaunch.launcher.cli import main

ROOT = Path(__file__).resolve().parents[2]


def sm_launch(*args, cwd=None, env_extra=None, module="smlaunch.launcher.cli"):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )


def test_help_imports_neither_torch_nor_ray():
    code = (
        "import sys\nfrom smlaunch.launcher.cli import main\ntry:\n    main(['--help'])\n"
        "except SystemExit:\n    pass\nprint(sorted(m for m in ('torch', 'ray', 'timm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "usage: sm-launch" in out.stdout and out.stdout.strip().endswith("[]")
    assert "-v, --verbose" in out.stdout and "-q, --quiet" in out.stdout


def test_version_and_python_dash_m():
    """`sm-launch --version` names what a bug report needs; `python -m smlaunch` is the same CLI."""
    from smlaunch import __version__

    out = sm_launch("--version", module="smlaunch")
    assert out.returncode == 0
    assert (
        out.stdout.startswith(f"sm-launch {__version__} (ray 2.")
        and "torch " in out.stdout
        and "Python 3." in out.stdout
    )
    plan = sm_launch("-q", "plan", "configs/hetero.yaml", module="smlaunch", cwd=ROOT)
    assert plan.returncode == 0 and "head: algo-1 (train_group, ml.g5.xlarge)" in plan.stdout


def test_plan_prints_hosts_labels_and_channels(configs, capsys):
    assert main(["plan", str(configs / "hetero.yaml"), "--set", "trainer.steps=5"]) == 0
    out = capsys.readouterr().out
    assert "steps: 5" in out  # the resolved config
    assert "head: algo-1 (train_group, ml.g5.xlarge)" in out
    assert "labels=ray-subcluster=data,sm-host=algo-2,sm-group=data_group" in out
    assert "train workers: 1" in out
    assert re.search(
        r"train: File tfrecord \(FullyReplicated, new order each epoch \(seed 0\), 2048 files open per pass, "
        r"1024-row shuffle buffer per train worker \(~\d+ MB\)\) from builtin:digits/train -> "
        r"/opt/ml/input/data/train on algo-2",
        out,
    )


def test_plan_json_lists_every_worker_on_the_gpu_hosts(configs):
    """2 x ml.g5.12xlarge beside one data host: 8 workers, ranks 0-7, 4 per GPU host (CPU stand-ins
    here, each naming the GPU it stands in for), none on the data host; one JSON object on stdout."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "smlaunch",
            "plan",
            "--json",
            str(configs / "hetero.yaml"),
            "--set",
            "cluster.instance_groups.0.instance_type=ml.g5.12xlarge",
            "--set",
            "cluster.instance_groups.0.instance_count=2",
            "--set",
            "trainer.lr_scaling=linear",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert [(w["rank"], w["host"], w["gpu"]) for w in plan["workers"]] == [
        (r, "algo-1" if r < 4 else "algo-2", r % 4) for r in range(8)
    ]
    assert all(w["stand_in"] for w in plan["workers"]) and plan["train_workers"] == 8 and not plan["use_gpu"]
    data = [h["name"] for h in plan["hosts"] if h["subcluster"] == "data"]
    assert data == ["algo-3"] and not {w["host"] for w in plan["workers"]} & set(data)
    assert (plan["global_batch"], plan["learning_rate"]) == (64 * 8, 0.003 * 8)
    assert plan["config"]["trainer"]["lr_scaling"] == "linear" and plan["head"] == "algo-1"
    assert any("8 CPU stand-ins share this machine's" in n for n in plan["notes"]) or os.cpu_count() >= 8


def test_plan_starts_no_ray_and_imports_no_torch(configs, dataset_cache):
    """Once timm's model names are cached (the first check builds the list), `plan` imports neither."""
    from smlaunch.trainers.model import timm_model_names

    timm_model_names()
    code = (
        "import sys\nfrom smlaunch.launcher.cli import main\n"
        f"assert main(['plan', {str(configs / 'hetero.yaml')!r}]) == 0\n"
        "print(sorted(m for m in ('torch', 'ray', 'timm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip().endswith("[]"), out.stderr


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["--set", "trainer.colour=red"], "trainer.colour: unknown key; valid keys: batch_size"),
        (["--set", "trainer.batch_size=big"], "trainer.batch_size: Input should be a valid integer"),
        (["--set", "trainer.batch_size=-1"], "trainer.batch_size: Input should be greater than 0"),
        (["--set", "pipeline.ops.1.op=warp"], "pipeline.ops.1.op: unknown op 'warp'; ops: decode_image, resize"),
        (["--set", "pipeline.ops.3.op=gausian_blur"], "unknown op 'gausian_blur' (did you mean 'gaussian_blur'?)"),
        (["--set", "nonsense"], "--set 'nonsense': expected KEY=VALUE"),
        (
            ["--set", "channels.train.attribute_names=[source-ref, class]"],
            "channels.train: attribute_names (an augmented manifest) needs input_mode: Pipe",
        ),
        (
            ["--set", "channels.train.input_mode=Tape"],
            "channels.train.input_mode: Input should be 'File', 'FastFile' or",
        ),
        (["--set", "channels.train.max_corrupted_records=-1"], "channels.train.max_corrupted_records: Input should be"),
        (
            ["--set", "run.s3_endpoint=aws", "--set", "run.s3_seed={s3://b/p/: data}"],
            "run: s3_seed fills the local S3 server; it needs s3_endpoint unset",
        ),
        (["--set", "run.s3_endpoint=ftp://x"], "run: s3_endpoint 'ftp://x': expected aws or an http(s) URL"),
        (["--set", "model.name=resnet5O"], "model.name: timm has no model 'resnet5O'; did you mean resnet50"),
        (
            ["--set", "channels.train.source=hf://datasets/mnist"],
            "channels.train.source: hf:// sources are not supported",
        ),
        (
            ["--set", "channels.validation.source=/nowhere/at/all", "--set", "model.num_classes=10"],
            "channels.validation.source: /nowhere/at/all is not a directory (it does not exist)",
        ),
        (
            ["--set", "cluster.instance_groups.1.instance_type=ml.c5.large"],
            "'ml.c5.large' is not a SageMaker training instance type (botocore's TrainingInstanceType list); did you "
            "mean",
        ),
    ],
)
def test_bad_config_is_one_line_and_exit_2(configs, overrides, expected):
    result = sm_launch("plan", str(configs / "hetero.yaml"), *overrides)
    assert result.returncode == 2
    assert result.stderr.startswith("sm-launch: error: ") and expected in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_unknown_model_fails_before_any_cluster(configs, tmp_path):
    result = sm_launch(
        str(configs / "tiny.yaml"),
        "--set",
        "model.name=resnet_18",
        "--set",
        f"run.dir={tmp_path}",
        "--set",
        "run.name=r",
    )
    assert result.returncode == 2
    assert result.stderr == (
        "sm-launch: error: model.name: timm has no model 'resnet_18'; did you mean "
        "resnet18, resnetv2_18, resnet18d, resnetv2_18d, skresnet18?\n"
    )
    failure = tmp_path / "r" / "hosts" / "algo-1" / "opt" / "ml" / "output" / "failure"
    assert failure.read_text().startswith("model.name: timm has no model")
    assert not (tmp_path / "r" / "ray_results").exists() and not (tmp_path / "r" / "logs").exists()


def test_channel_folders_are_checked_before_anything_starts(configs, tmp_path):
    """A missing, an empty and a mis-declared folder each fail `run` at once, naming the field; all
    problems come in the one line."""
    from PIL import Image

    (tmp_path / "empty").mkdir()
    (tmp_path / "pngs" / "cat").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(tmp_path / "pngs" / "cat" / "0.png")
    result = sm_launch(
        str(configs / "tiny.yaml"),
        "--set",
        f"channels.train.source={tmp_path}/pngs",
        "--set",
        f"channels.validation.source={tmp_path}/empty",
        "--set",
        "model.num_classes=10",
        "--set",
        f"run.dir={tmp_path}",
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert (
        f"channels.train.source: {tmp_path}/pngs/cat/0.png is a PNG image, not a tfrecord file "
        "(channel record_format: tfrecord)"
    ) in result.stderr
    assert f"channels.validation.source: {tmp_path}/empty holds no files" in result.stderr


def test_quiet_prints_only_the_result(configs):
    out = sm_launch("-q", "plan", str(configs / "hetero.yaml"))
    assert out.returncode == 0 and "# plan" in out.stdout and out.stderr == ""
    out = sm_launch("plan", "-q", str(configs / "hetero.yaml"), "--set", "trainer.steps=-1")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("sm-launch: error: ") and "trainer.steps: Input should be greater than 0" in out.stderr


def test_inspect_counts_records_and_names_the_corrupt_offset(tmp_path):
    from smlaunch.pipelines.formats import recordio

    path = tmp_path / "part.rec"
    recordio.write_records(path, [b"a" * 10, b"b" * 3, b"c"])
    out = subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", "inspect", str(path), "--format", "recordio"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert f"{path}: 3 recordio records, 14 payload bytes" in out.stdout
    assert "first record sizes: 10, 3, 1" in out.stdout
    path.write_bytes(path.read_bytes()[:-3])
    out = subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", "inspect", str(path), "--format", "recordio"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert (
        out.stderr.strip()
        == f"sm-launch: error: {path}: record at byte 32 claims 1 bytes (4 with padding), more than the 1 left"
    )


def test_agent_command_feeds_fifos_any_reader_can_use(tmp_path):
    from smlaunch.pipelines.formats import iter_records, tfrecord
    from smlaunch.pipelines.sources.fifo import PipeEpochs

    (tmp_path / "src").mkdir()
    for n in range(3):
        tfrecord.write_records(tmp_path / "src" / f"part-{n}", [b"%d-%d" % (n, i) for i in range(4)])
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "smlaunch.launcher.cli",
            "agent",
            "--channel",
            "train",
            "--source",
            str(tmp_path / "src"),
            "--data-dir",
            str(tmp_path / "data"),
            "--epochs",
            "2",
            "--shard",
            "1/2",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    reader = PipeEpochs(tmp_path / "data", "train", timeout_s=60)
    for _ in range(2):
        with reader.next() as stream:
            assert list(iter_records(stream, "tfrecord")) == [b"1-%d" % i for i in range(4)]  # host 1 of 2: part-1
    assert agent.wait(30) == 0
    assert "agent: 1 object for channel 'train', 2 epochs" in agent.stdout.read()


def test_agent_streams_an_augmented_manifest_as_one_recordio_record_per_attribute(tmp_path):
    from smlaunch.pipelines.formats import iter_records
    from smlaunch.pipelines.sources.fifo import PipeEpochs

    (tmp_path / "img").mkdir()
    lines = []
    for i in range(3):
        (tmp_path / "img" / f"{i}.jpg").write_bytes(b"jpeg-%d" % i)
        lines.append(json.dumps({"source-ref": f"img/{i}.jpg", "class": i, "note": "not delivered"}))
    (tmp_path / "train.manifest").write_text("\n".join(lines) + "\n")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "smlaunch.launcher.cli",
            "agent",
            "--channel",
            "train",
            "--source",
            str(tmp_path / "train.manifest"),
            "--data-dir",
            str(tmp_path / "data"),
            "--attribute-names",
            "source-ref,class",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    with PipeEpochs(tmp_path / "data", "train", timeout_s=60).next() as stream:
        assert list(iter_records(stream, "recordio")) == [b"jpeg-0", b"0", b"jpeg-1", b"1", b"jpeg-2", b"2"]
    assert agent.wait(30) == 0


def test_pretrained_weights_file_is_checked_at_plan_time(configs, tmp_path):
    """A local `model.pretrained` must be a file before anything starts; an `s3://` one is left to
    the run (`plan` works offline), as is whether the weights fit the model (that needs torch)."""
    missing = tmp_path / "nowhere" / "backbone.safetensors"
    result = sm_launch("plan", str(configs / "tiny.yaml"), "--set", f"model.pretrained={missing}")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr == f"sm-launch: error: model.pretrained: {missing} does not exist\n"
    result = sm_launch("plan", str(configs / "tiny.yaml"), "--set", f"model.pretrained={tmp_path}")
    assert result.returncode == 2 and f"model.pretrained: {tmp_path} is not a file" in result.stderr
    (tmp_path / "backbone.safetensors").write_bytes(b"weights")
    for weights in (tmp_path / "backbone.safetensors", "s3://no-such-bucket/backbone.safetensors"):
        result = sm_launch("plan", str(configs / "tiny.yaml"), "--set", f"model.pretrained={weights}")
        assert result.returncode == 0, result.stderr
