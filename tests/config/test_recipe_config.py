"""The recipe's keys (issue 78) as a user writes them: validated at load and at `plan`, each refusal
one line naming the key; and the plan's recipe line, which says which precision the ranks will use
and why."""

from __future__ import annotations

import pytest
import yaml

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config import load_config
from smlaunch.config.loader import apply_override, validate_config
from smlaunch.errors import ConfigError
from smlaunch.launcher.job.plan_text import plan_lines, recipe_line
from smlaunch.launcher.job.preflight import recipe_problems

PROJECT = "support.byo_project.regression"
HERE = "config.test_recipe_config"


def test_the_keys_a_new_user_tries_load_and_the_plan_names_each_one(configs):
    cfg = load_config(
        configs / "tiny.yaml",
        [
            "trainer.clip_grad_norm=1.0",
            "trainer.precision=fp16",
            "trainer.compile=true",
            "trainer.ema.decay=0.99",
            "trainer.keep_best.metric=accuracy",
            "trainer.keep_best.mode=max",
            "trainer.early_stop.metric=loss",
            "trainer.early_stop.patience=2",
            f"optimizer.factory={PROJECT}:grouped_adamw",
            "optimizer.params.lr=0.01",
            "optimizer.params.head_lr=0.1",
            f"schedule.factory={PROJECT}:cliff",
            "schedule.params.drop_at=10",
            "schedule.params.factor=0.1",
            f"trainer.callbacks=[{PROJECT}:EventLog]",
        ],
    )
    assert recipe_problems(cfg) == []
    # The recipe's functions are the user's code: they ship with it (`run --address`, submit, KubeRay).
    from smlaunch.user_code import user_functions

    assert dict(user_functions(cfg)) == {
        "optimizer.factory": f"{PROJECT}:grouped_adamw",
        "schedule.factory": f"{PROJECT}:cliff",
        "trainer.callbacks.0": f"{PROJECT}:EventLog",
    }
    plan = build_plan(cfg, LocalEnvironment(cpus=4, gpus=0, started="t"))
    line = next(line for line in plan_lines(cfg, plan) if line.startswith("recipe: "))
    assert line == (
        f"recipe: optimizer {PROJECT}:grouped_adamw; schedule {PROJECT}:cliff; precision fp32 (fp16 asked, but "
        "the train workers are CPUs (fp32 there)); clip_grad_norm 1; compile; EMA decay 0.99; keep best accuracy "
        f"(max); early stop on loss (min, patience 2, min_delta 0); callbacks {PROJECT}:EventLog"
    )


@pytest.mark.parametrize(
    ("instance_type", "precision"),
    [
        ("ml.g4dn.xlarge", "precision fp16 (auto: compute capability 7.5 < 8.0 has no fast bf16"),
        ("ml.p3.2xlarge", "precision fp16 (auto: compute capability 7.0 < 8.0"),
        ("ml.g5.xlarge", "precision bf16 (auto: compute capability 8.6 >= 8.0)"),
        ("ml.p5.48xlarge", "precision bf16 (auto: compute capability 9.0 >= 8.0)"),
    ],
)
def test_the_plan_says_which_precision_auto_picks_on_the_train_instances_gpu(configs, instance_type, precision):
    cfg = load_config(configs / "tiny.yaml", [f"cluster.instance_groups.0.instance_type={instance_type}"])
    plan = build_plan(cfg, LocalEnvironment(cpus=4, gpus=8, started="t"))  # a machine with the GPUs: no stand-ins
    assert precision in recipe_line(cfg, plan)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trainer.loop=support.byo_project.ray_loop:train_func", "trainer.clip_grad_norm=1", "~model"],
            "trainer.clip_grad_norm: the built-in loop's recipe; your loop (trainer.loop) builds its own optimizer",
        ),
        (
            ["~channels.validation", "trainer.keep_best.metric=accuracy"],
            "trainer.keep_best: needs validation, and the job has no channel named 'validation'; add one",
        ),
        (
            ["~channels.validation", "trainer.early_stop.metric=loss"],
            "trainer.early_stop: needs validation, and the job has no channel named 'validation'",
        ),
        (["trainer.precision=fp8"], "trainer.precision: Input should be 'auto', 'bf16', 'fp16' or 'fp32'"),
        (["trainer.clip_grad_norm=0"], "trainer.clip_grad_norm: Input should be greater than 0"),
        (["trainer.ema.decay=1.0"], "trainer.ema.decay: Input should be less than 1"),
        (["trainer.callbacks=[not a name]"], "trainer.callbacks.0: 'not a name' is not package.module:Class"),
    ],
)
def test_a_recipe_key_the_config_cannot_honour_is_refused_at_load_in_one_line(configs, overrides, message):
    raw = yaml.safe_load((configs / "tiny.yaml").read_text())
    for item in overrides:
        if item.startswith("~"):  # a section or key removed
            section, _, name = item[1:].partition(".")
            if name:
                del raw[section][name]
            else:
                del raw[section]
        else:
            apply_override(raw, item)
    with pytest.raises(ConfigError) as caught:
        validate_config(raw)
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def wrong_signature(model):
    return None


class NotCalledBack:
    pass


def a_function_not_a_class():
    return None


def a_rate_function(optimizer, total_steps):
    return lambda step: 1.0  # what LambdaLR takes, not a scheduler


def test_plan_refuses_a_schedule_that_is_not_a_scheduler(configs):
    cfg = load_config(configs / "tiny.yaml", [f"schedule.factory={HERE}:a_rate_function"])
    assert recipe_problems(cfg) == [
        f"schedule.factory: {HERE}:a_rate_function returned function; return a "
        "torch.optim.lr_scheduler.LRScheduler of the optimizer it is given"
    ]


def test_plan_checks_the_recipe_s_functions_and_fp16_without_gpus_in_one_line_each(configs):
    cfg = load_config(
        configs / "tiny.yaml",
        [
            f"optimizer.factory={HERE}:wrong_signature",
            "optimizer.params.lr=0.1",
            f"schedule.factory={HERE}:no_such_schedule",
            f"trainer.callbacks=[{HERE}:NotCalledBack, {HERE}:a_function_not_a_class]",
            "trainer.precision=fp16",
            "cluster.train_group=cpu",
        ],
    )
    problems = recipe_problems(cfg)
    assert problems[0].startswith("optimizer.factory: wrong_signature(model) cannot take these arguments")
    assert problems[1].startswith(f"schedule.factory: {HERE} has no function no_such_schedule")
    assert (
        problems[2]
        == f"trainer.callbacks.1: {HERE}:a_function_not_a_class is not a class (a callback is package.module:Class)"
    )
    assert (
        problems[3]
        == "trainer.precision: fp16 needs a GPU, and the train instances (ml.c5.xlarge) have none; use auto or fp32"
    )
    assert len(problems) == 4
