"""A SageMaker job's hyperparameters as config overrides (issue 81): the same rule as `--set`,
read from hyperparameters.json as SDK v2 (JSON-encoded), v3 and a tuner (raw) write it."""

import json

import pytest

from smlaunch.cluster.sagemaker_env import _read_hyperparameters
from smlaunch.config import load_config
from smlaunch.config.hyperparameters import config_overrides, decoded
from smlaunch.errors import ConfigError


def test_dotted_keys_override_and_the_tools_own_keys_are_skipped():
    overrides, ignored = config_overrides(
        {
            "trainer.learning_rate": 0.01,
            "sagemaker_program": "sm_entry.py",
            "sagemaker_estimator_class_name": "PyTorch",
            "_tuning_objective_metric": "validation:accuracy",
            "config": "configs/tiny.yaml",
            "epochs": 3,
            "pipeline.ops.0.size": 64,
        }
    )
    assert overrides == {"trainer.learning_rate": 0.01, "pipeline.ops.0.size": 64}
    assert ignored == ["epochs"]


@pytest.mark.parametrize(
    ("written", "value"),
    [("0.0123", 0.0123), ('"adamw"', "adamw"), ("adamw", "adamw"), ("12", 12), ("[1, 2]", [1, 2]), ('"1e5"', "1e5")],
)
def test_values_are_json_decoded_once_as_the_file_holds_them(tmp_path, written, value):
    path = tmp_path / "hyperparameters.json"
    path.write_text(json.dumps({"trainer.x": written}))
    assert _read_hyperparameters(path, {})["trainer.x"] == value == decoded(written)


def test_they_reach_the_config_typed_and_a_set_on_the_command_line_comes_after(configs):
    cfg = load_config(
        configs / "tiny.yaml",
        ["trainer.steps=7"],
        {"trainer.learning_rate": 0.0123, "trainer.steps": 5, "trainer.batch_size": 6},
    )
    assert (cfg.trainer.learning_rate, cfg.trainer.steps, cfg.trainer.batch_size) == (0.0123, 7, 6)


def test_a_bad_one_is_one_line_naming_hyperparameters_json(configs):
    with pytest.raises(ConfigError) as err:
        load_config(configs / "tiny.yaml", hyperparameters={"trainer.colour": "red"})
    message = str(err.value)
    assert message.startswith(f"{configs / 'tiny.yaml'} with hyperparameters.json's trainer.colour: ")
    assert "trainer.colour: unknown key; valid keys: batch_size" in message and "\n" not in message
    with pytest.raises(ConfigError, match=r"^hyperparameters.json 'pipeline.ops.99.size': pipeline.ops is a list of"):
        load_config(configs / "tiny.yaml", hyperparameters={"pipeline.ops.99.size": 64})


def test_simulate_takes_them_as_a_job_s_strings_and_refuses_one_without_a_value():
    from types import SimpleNamespace

    from smlaunch.launcher.commands.job import given_hyperparameters

    given = given_hyperparameters(SimpleNamespace(hyperparameters=["trainer.steps=4", "x.y="]))
    assert given == {"trainer.steps": "4", "x.y": ""}
    with pytest.raises(ConfigError, match=r"^--hyperparameter 'trainer.steps': expected KEY=VALUE"):
        given_hyperparameters(SimpleNamespace(hyperparameters=["trainer.steps"]))
