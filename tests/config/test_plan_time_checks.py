"""Config that is valid field by field but cannot train: refused as it loads (or at `plan`), one line
naming the field, instead of on a running cluster at the first step, data task or validation.

Each case is one an audit of the run-time checks found passing `plan` (issue 79, item 4)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from smlaunch.config import load_config
from smlaunch.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
HETERO = str(ROOT / "configs" / "hetero.yaml")


def refused(*sets: str) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config(TINY, list(sets))
    message = str(raised.value)
    assert "\n" not in message
    return message.removeprefix(f"{TINY}: ")


def test_keep_best_and_early_stop_take_their_mode_from_the_metric_s_name_and_refuse_one_against_it():
    cfg = load_config(TINY, ["trainer.keep_best={metric: accuracy}", "trainer.early_stop={metric: loss}"])
    assert (cfg.trainer.keep_best.mode, cfg.trainer.early_stop.mode) == ("max", "min")
    assert refused("trainer.keep_best={metric: accuracy, mode: min}") == (
        "trainer.keep_best: mode: min would keep the lowest accuracy, and a higher one is better: set mode: max "
        "(or leave mode out)"
    )
    assert refused("trainer.keep_best={metric: acc}") == (
        "trainer.keep_best.metric: the built-in classification's validation gives loss, accuracy, top5 (top5 with "
        "more than 5 classes), not 'acc'"
    )
    weird = ["task={loss: 'x:y'}", "model={factory: 'x:y'}", "trainer.keep_best={metric: wobble}"]
    assert refused(*weird).startswith(
        "trainer.keep_best: mode: the name 'wobble' does not say whether lower or higher is better; set mode:"
    )


@pytest.mark.parametrize(
    "sets, expected",
    [
        (
            ["trainer.warmup_steps=40"],
            "trainer.warmup_steps: 40 is not below trainer.steps (40): the rate would never reach",
        ),
        (
            ["cluster.object_store_mb=65536"],
            "cluster.object_store_mb: 65536 MiB is over 80% of ml.g5.xlarge's 16 GiB (group gpu)",
        ),
        (
            ["channels.validation.shuffle.buffer_rows=64"],
            "channels.validation.shuffle.buffer_rows: only the train channel's batches pass a shuffle buffer",
        ),
        (
            ["pipeline.ops.0.mode=L"],
            "pipeline.ops.0.mode: L decodes the image to one channel, and the built-in classification normalises "
            "three channels; use mode: RGB",
        ),
        (
            [
                "channels.train={source: ./t, record_format: parquet, fields: {image: img, weight: w}}",
                "model.num_classes=10",
            ],
            "channels.train.fields: the built-in classification reads image and label, and these fields have no "
            "label; name it (e.g. label: <column>), or set task.loss to your function",
        ),
        (
            ["trainer={loop: 'ray_loop:train_func', steps: 40, learning_rate: 0.1}", "model=null"],
            "trainer.learning_rate: only the built-in loop reads it; your loop (trainer.loop) is given "
            "trainer.loop_config alone",
        ),
    ],
)
def test_sections_that_cannot_train_together_are_refused_at_load(sets, expected):
    assert refused(*sets).startswith(expected)


def test_an_op_on_a_field_no_channel_gives_is_refused_at_load():
    ops = yaml.safe_load(Path(TINY).read_text())["pipeline"]["ops"]
    ops = [ops[0], {"op": "decode_image", "field": "mask", "mode": "L"}, {**ops[1], "masks": ["mask"]}, *ops[2:]]
    ops.append({"op": "to_uint8_chw", "field": "mask"})
    chain = "pipeline.ops=" + yaml.safe_dump(ops, default_flow_style=True, width=10_000).strip()
    assert refused(chain).startswith(
        "pipeline.ops.1.field: channel 'train' gives no field 'mask' (it gives image, label); name it in "
        "channels.train.fields, or fix the op's field"
    )
    # one channel-less chain of the user's, on one channel: accepted (a map op could make any field)
    user = [
        "task={loss: 'x:y'}",
        "model={factory: 'x:y'}",
        "pipeline.ops.0.mode=L",
        "pipeline.ops=[{op: map, function: 'x:y'}]",
    ]
    assert load_config(TINY, user).pipeline.ops[0].op == "map"


def sm_launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_plan_refuses_what_a_builtin_dataset_s_manifest_contradicts_and_submit_runs_the_recipe_checks():
    """The class count and batch a builtin dataset cannot fill: known from its manifest at `plan`.
    `submit` runs every check `plan` runs (it skipped the recipe's: fp16 on CPU hosts reached the
    billed hosts)."""
    classes = sm_launch("plan", TINY, "--set", "model.num_classes=5")
    assert classes.returncode == 2 and classes.stderr == (
        "sm-launch: error: model.num_classes: 5, and builtin:digits/train has 10 classes (labels 0..9); leave it "
        "out to take the dataset's, or set it to 10 or more\n"
    )
    batch = sm_launch("plan", TINY, "--set", "cluster.instance_groups.0.gpus=8", "--set", "trainer.batch_size=256")
    assert batch.returncode == 2 and batch.stderr == (
        "sm-launch: error: trainer.batch_size: 256, and builtin:digits/train's 1437 rows an epoch over 8 train "
        "workers are 179 each: no full batch, so no step; use a batch of at most 179\n"
    )
    fp16 = sm_launch(
        "submit", HETERO, "--dry-run", "--set", "trainer.precision=fp16", "--set", "cluster.train_group=data_group"
    )
    assert fp16.returncode == 2 and "trainer.precision: fp16 needs a GPU" in fp16.stderr and not fp16.stdout


def test_a_pretrained_s3_uri_without_an_object_is_refused_at_load():
    """Before, only rank 0 said so, on the cluster (`plan` looks nothing up on S3)."""
    assert refused("model.pretrained=s3://bucket/") == (
        "model.pretrained: s3://bucket/ names no object (expected s3://bucket/key of a weights file) (got 's3://bucket/')"
    )
