"""The Python API takes what a notebook has at hand (issue 79, item 4): NumPy scalars and 0-d arrays
as their Python numbers, a `Path` as its string, a tuple as a list, in a dict config and in the
overrides alike; from there YAML's rules hold (`np.bool_` is refused where a number goes, as `true`
is; NaN is refused as `.nan` is). Anything else is refused in one line naming the dotted key."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from smlaunch.api import _flow_yaml, _yaml_text, plain_values, plan
from smlaunch.config.loader import safe_load_bounded
from smlaunch.errors import ConfigError
from smlaunch.pipelines.formats import tfrecord

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())


def tiny(**sections) -> dict:
    """tiny.yaml's tree with `section={key: value}` set (a section of None removes the key)."""
    cfg = copy.deepcopy(TINY)
    for name, values in sections.items():
        for key, value in values.items():
            cfg[name][key] = value
    return cfg


def refusal(config, overrides=None) -> str:
    with pytest.raises(ConfigError) as caught:
        plan(config, overrides)
    message = str(caught.value)
    assert message and "\n" not in message
    return message


def test_numpy_scalars_are_their_python_numbers():
    steps, rate = np.int64(25), np.float32(0.01)
    tree = plain_values(tiny(trainer={"steps": steps, "learning_rate": rate}), "config")
    assert tree["trainer"]["steps"] == 25 and type(tree["trainer"]["steps"]) is int
    assert tree["trainer"]["learning_rate"] == 0.01  # the decimal written, not float32's 0.0099999997...
    assert plan(tiny(trainer={"steps": steps, "learning_rate": rate})).learning_rate == 0.01


def test_a_path_channel_source_and_a_tuple_for_a_list_are_accepted(tmp_path):
    (tmp_path / "shard-0.tfrecord").write_bytes(tfrecord.encode_record(b"x"))
    config = tiny(channels={"train": {"source": tmp_path}}, model={"num_classes": 10})
    config["pipeline"]["ops"][1]["scale"] = (0.5, 1.0)
    assert plain_values(config, "config")["pipeline"]["ops"][1]["scale"] == [0.5, 1.0]
    channels = {c.name: c for c in plan(config).channels}
    assert channels["train"].source == str(tmp_path)


def test_overrides_take_the_same_values():
    overrides = {"trainer.steps": np.int32(9), "trainer.learning_rate": np.float64(0.5), "run.dir": Path("runs")}
    overrides["pipeline.ops.1.scale"] = (np.float32(0.25), 1)
    assert plan(TINY, overrides).learning_rate == 0.5


@pytest.mark.parametrize(
    ("config", "overrides", "message"),
    [
        (
            tiny(trainer={"steps": np.bool_(True)}),
            None,
            "config (a dict): trainer.steps: a number, not true",
        ),
        (TINY, {"trainer.steps": np.bool_(False)}, "config (a dict): trainer.steps: a number, not false"),
        (
            TINY,
            {"pipeline.ops.1.scale": (np.bool_(True), 1.0)},
            "config (a dict): pipeline.ops.1.scale.0: a number, not true",
        ),
        (
            tiny(trainer={"learning_rate": np.nan}),
            None,
            "config (a dict): trainer.learning_rate: Input should be a finite number (got nan)",
        ),
        (
            TINY,
            {"trainer.learning_rate": np.float32("inf")},
            "config (a dict): trainer.learning_rate: Input should be a finite number (got inf)",
        ),
        (
            tiny(trainer={"callbacks": {"a:B"}}),
            None,
            "config (a dict): trainer.callbacks: a set is not a config value (a str, number, bool, None, list or "
            "dict); pass a list",
        ),
        (
            TINY,
            {"pipeline.ops.1.scale": frozenset([0.5])},
            "overrides: pipeline.ops.1.scale: a frozenset is not a config value (a str, number, bool, None, list "
            "or dict); pass a list",
        ),
        (
            tiny(trainer={"steps": np.array([1, 2])}),
            None,
            "config (a dict): trainer.steps: a numpy.ndarray of shape (2,) is not a config value (a str, number, "
            "bool, None, list or dict); pass a list (.tolist()) where the config takes one",
        ),
        (
            tiny(trainer={"steps": len}),
            None,
            "config (a dict): trainer.steps: a builtin_function_or_method is not a config value (a str, number, "
            "bool, None, list or dict)",
        ),
        (
            tiny(trainer={1: 2}),
            None,
            "config (a dict): trainer: key 1 (an int) is not a string; config keys are names",
        ),
        (
            TINY,
            {("trainer", "steps"): 3},
            "overrides: key ('trainer', 'steps') (a tuple) is not a string; config keys are names",
        ),
        (
            TINY,
            [("trainer.steps", 3)],
            "overrides: expected a dict of dotted keys to values, e.g. {'trainer.steps': 50}, got a list",
        ),
        (
            TINY,
            {"trainer.steps=3": 3},
            "overrides: key 'trainer.steps=3': a dotted key has no '=' (e.g. 'trainer.steps')",
        ),
        ([TINY], None, "config: expected a YAML file's path or a dict, got a list"),
    ],
)
def test_values_yaml_would_not_write_as_the_same_data_are_refused_in_one_line(config, overrides, message):
    assert refusal(config, overrides) == message


def test_a_0d_array_is_its_scalar_and_a_cycle_or_a_deep_tree_is_refused():
    assert plain_values({"steps": np.array(7)}, "config") == {"steps": 7}
    cyclic = tiny()
    cyclic["model"]["params"] = {"again": cyclic}
    assert refusal(cyclic) == "config (a dict): model.params.again: a dict that contains itself (a cycle)"
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert refusal(tiny(model={"params": deep})).endswith(": nested more than 100 deep")


def test_a_key_with_a_line_break_is_shown_quoted_on_one_line():
    assert refusal(TINY, {"model.params": {"a\nb": {1, 2}}}).startswith("overrides: model.params.'a\\nb': a set ")


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.sampled_from(["a\x85\u2028b", "x " * 60]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def _same(a, b) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(value=values)
def test_a_value_reads_back_as_the_same_value(value):
    """The overrides travel as `--set` text, a dict config as a YAML file: what the loader reads
    back is what was given, NaN, line breaks and unicode included (JSON would have turned NaN into
    the string 'NaN'; PyYAML's `allow_unicode` writes a raw U+2028, which reads as a line break)."""
    assert _same(safe_load_bounded(_flow_yaml(value)), value)
    assert _same(safe_load_bounded(_yaml_text({"key": value})), {"key": value})
