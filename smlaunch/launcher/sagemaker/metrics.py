"""The MetricDefinitions a submitted job carries: one for every metric the job prints (issue 81).

SageMaker reads a job's metrics from its log lines, by the regexes the request names (40 at most,
500 characters each, one capture group), for the console's graphs, CloudWatch and automatic model
tuning's objective. sm-launch prints them on the head, from the driver (`launcher.job.train_progress`):

    step=20 loss=0.6931 images_per_sec=812.4 data_wait_pct=3.1 lr=0.000125 grad_norm=3.25 [name=value ...]
    validation step=200 epoch=2 accuracy=0.9100 top5=0.9900 loss=0.3100 [name=value ...]

Each regex reads one `name=value` of one kind of line:

* it starts where a line starts (`(?<![^\\n])`, the lookbehind form of `^`, which needs no
  multi-line flag): a worker's own print arrives with Ray's `(RayTrainWorker pid=..., ip=...) `
  before it, and a rank's copy of a line is never read as the job's (Hyperband and early stopping
  misjudge a trial whose metric comes twice);
* the name follows a space, so `loss=` is not `val_loss=` nor `grad_norm=` a `norm=`;
* the value is any number Python prints: `0.000125`, `1e-05`, `-3.5E+02`, `nan`, `inf`, `-inf`.

The names: the built-in loop's step numbers; the validation's (the built-in classification's
accuracy and top-5, `task.metrics`' names, called here as the job will, and the mean loss); and what
`sagemaker.metrics` declares for names only the job learns (a loss's own numbers, `task.evaluate`'s
keys, a `trainer.loop`'s reports).
"""

from __future__ import annotations

import re

from smlaunch.errors import ConfigError

MAX_DEFINITIONS = 40
"""CreateTrainingJob's limit (`AlgorithmSpecification.MetricDefinitions`)."""
MAX_REGEX = 500
NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)"
"""One capture group: every number `f"{x:.6g}"` and `f"{x:.4f}"` print, nan and inf included."""
LINE_START = r"(?<![^\n])"
STEP_LINE = LINE_START + r"step=\d+ (?:\S+ )*?"
VALIDATION_LINE = LINE_START + r"validation step=\d+ epoch=\d+ (?:\S+ )*?"
BUILT_IN_STEP = ("loss", "images_per_sec", "data_wait_pct", "lr", "grad_norm")
LOOP_STEP = ("images_per_sec", "data_wait_pct")
"""A `trainer.loop`'s line: `step=N`, what it reported, then the measured rate and wait."""


def definition(kind: str, name: str) -> dict[str, str]:
    """`{"Name": "train:loss", "Regex": ...}` for `name=` on the `kind` (train or validation) line."""
    line = STEP_LINE if kind == "train" else VALIDATION_LINE
    return {"Name": f"{kind}:{name}", "Regex": line + re.escape(name) + "=" + NUMBER}


def metric_names(cfg) -> list[str]:
    """`train:NAME` and `validation:NAME` for every metric the job prints, in the order sent."""
    names = ["train:step"]
    names += [f"train:{n}" for n in (LOOP_STEP if cfg.trainer.loop else BUILT_IN_STEP)]
    if not cfg.trainer.loop and cfg.validates:
        task = cfg.task
        if task is not None and task.metrics:
            from smlaunch.trainers.metrics import user_metrics

            names += [f"validation:{n}" for n in user_metrics(task.metrics)] + ["validation:loss"]
        elif task is None or not task.evaluate:
            from smlaunch.config.recipe import BUILTIN_METRICS

            names += [f"validation:{n}" for n in BUILTIN_METRICS]
    names += cfg.sagemaker.metrics if cfg.sagemaker is not None else []
    return list(dict.fromkeys(names))


def metric_definitions(cfg) -> list[dict[str, str]]:
    """The request's MetricDefinitions; more than SageMaker takes is a one-line error naming them."""
    names = metric_names(cfg)
    if len(names) > MAX_DEFINITIONS:
        raise ConfigError(
            f"sagemaker.metrics: the job would print {len(names)} metrics, over the {MAX_DEFINITIONS} "
            f"MetricDefinitions SageMaker takes; left out would be {', '.join(names[MAX_DEFINITIONS:])}"
        )
    out = []
    for name in names:
        kind, _, metric = name.partition(":")
        made = (
            {"Name": name, "Regex": LINE_START + r"step=(\d+) "} if name == "train:step" else definition(kind, metric)
        )
        if len(made["Regex"]) > MAX_REGEX:
            raise ConfigError(f"sagemaker.metrics: {name}: its regex is over SageMaker's {MAX_REGEX} characters")
        out.append(made)
    return out
