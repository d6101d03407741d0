"""MetricDefinitions for every metric the job prints (issue 81): each regex reads its number from the
line the launcher prints, as printed, and from no other line."""

import re
from pathlib import Path

import pytest
import yaml

from smlaunch.config import load_config
from smlaunch.config.loader import validate_config
from smlaunch.errors import ConfigError
from smlaunch.launcher.job.train_progress import metric_line, validation_line
from smlaunch.launcher.sagemaker.metrics import MAX_DEFINITIONS, metric_definitions

BYO = Path(__file__).resolve().parents[2] / "support" / "byo_project"
STEP = {"step": 20, "loss": 12.3456789, "images_per_s": 12.3456789, "data_wait_s": 0.5, "step_time_s": 2.0}


def regexes(cfg) -> dict[str, re.Pattern]:
    definitions = metric_definitions(cfg)
    assert len(definitions) <= MAX_DEFINITIONS and all(len(d["Regex"]) <= 500 for d in definitions)
    compiled = {d["Name"]: re.compile(d["Regex"]) for d in definitions}
    assert all(r.groups == 1 for r in compiled.values())
    return compiled


def read(regex: re.Pattern, text: str) -> str | None:
    match = regex.search(text)
    return match.group(1) if match else None


def test_the_built_in_jobs_metrics_read_the_printed_lines_nan_inf_and_exponents_too(configs):
    found = regexes(load_config(configs / "hetero.yaml"))
    assert list(found) == [
        "train:step",
        "train:loss",
        "train:images_per_sec",
        "train:data_wait_pct",
        "train:lr",
        "train:grad_norm",
        "validation:loss",
        "validation:accuracy",
        "validation:top5",
    ]
    step = metric_line({**STEP, "lr": 1e-05, "grad_norm": None, "lrs": {"head": 0.0005}, "skipped_steps": 1})
    assert step == (
        "step=20 loss=12.3457 images_per_sec=12.3 data_wait_pct=25.0 lr=1e-05 grad_norm=inf lr_head=0.0005 skipped=1"
    )
    val = validation_line({"step": 20, "epoch": 3, "accuracy": 0.5, "top5": float("nan"), "loss": -1.5e-7})
    log = f"epoch 3 of 10\n{step}\n{val}\n"
    assert [read(found[f"train:{n}"], log) for n in ("step", "loss", "images_per_sec", "data_wait_pct", "lr")] == [
        "20",
        "12.3457",
        "12.3",
        "25.0",
        "1e-05",
    ]
    assert read(found["train:grad_norm"], log) == "inf"
    assert [read(found[f"validation:{n}"], log) for n in ("accuracy", "top5", "loss")] == ["0.5000", "nan", "-0.0000"]
    for value in ("-3.5E+02", "nan", "-inf", ".5"):
        assert read(found["validation:accuracy"], f"validation step=1 epoch=0 accuracy={value}\n") == value
    # a validation line is no step line, a step line no validation line
    assert read(found["train:loss"], val) is None and read(found["train:step"], val) is None
    assert read(found["validation:loss"], step) is None
    # a rank's own print, as Ray forwards it, is not the job's line
    worker = f"(RayTrainWorker pid=4242, ip=10.0.0.2) {step}\n(RayTrainWorker pid=4243, ip=10.0.0.3) {val}"
    assert all(read(r, worker) is None for r in found.values())
    # a name is matched whole: `val_loss=` is not `loss=`, `grad_norm=` no `norm=`
    users = validation_line({"step": 20, "epoch": 3, "val_loss": 9.0, "loss": 1.5})
    assert read(found["validation:loss"], users) == "1.5000"


def test_a_users_torchmetrics_and_declared_names_get_definitions_and_over_40_is_one_line(configs, monkeypatch):
    monkeypatch.setenv("SM_LAUNCH_CODE_DIR", str(BYO))
    monkeypatch.syspath_prepend(str(BYO))
    cfg = load_config(
        configs / "hetero.yaml",
        [
            "task={loss: 'regression:mse', metrics: 'regression:auroc_metrics', predict: 'regression:predict_above'}",
            "sagemaker.metrics=[train:mae, validation:mae]",
        ],
    )
    found = regexes(cfg)
    assert [n for n in found if n not in ("train:step",) and not n.startswith("train:")] == [
        "validation:auroc",
        "validation:loss",
        "validation:mae",
    ]
    step = metric_line({**STEP, "metrics": {"mae": 0.25}, "lr": 0.1, "grad_norm": 1.0})
    assert read(found["train:mae"], step) == "0.25"
    val = validation_line({"step": 20, "epoch": 3, "auroc": 0.75, "mae": 0.125, "loss": 0.5})
    assert (read(found["validation:auroc"], val), read(found["validation:mae"], val)) == ("0.7500", "0.1250")
    # a trainer.loop's line: step, what it reported, then the measured rate and wait
    raw = yaml.safe_load((configs / "hetero.yaml").read_text())
    raw["trainer"] = {"loop": "support.byo_project.ray_loop:train_func", "steps": 10}
    raw.pop("model", None)
    raw["sagemaker"]["metrics"] = ["train:acc"]
    found = regexes(validate_config(raw))
    assert list(found) == ["train:step", "train:images_per_sec", "train:data_wait_pct", "train:acc"]
    line = metric_line({**STEP, "loop": True, "metrics": {"acc": 0.875, "epoch": 1}})
    assert (read(found["train:acc"], line), read(found["train:step"], line)) == ("0.875", "20")
    many = [f"train:m{i}" for i in range(MAX_DEFINITIONS - 2)]
    with pytest.raises(
        ConfigError,
        match=r"^sagemaker\.metrics: the job would print 47 metrics, over the 40 .*left out would be train:m31, .*m37$",
    ):
        metric_definitions(load_config(configs / "hetero.yaml", [f"sagemaker.metrics=[{', '.join(many)}]"]))
    with pytest.raises(ConfigError, match=r"sagemaker\.metrics: .loss.: expected train:NAME or validation:NAME"):
        load_config(configs / "hetero.yaml", ["sagemaker.metrics=[loss]"])
