"""A config is data, and bounded (issue 79, item 4): an alias bomb, a key written twice, an infinite
rate, `true` for a step count, a seed NumPy cannot take and an oversized file are each refused in one
line naming where, before anything is built; nothing is read past the bound."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from smlaunch.config import load_config
from smlaunch.config.loader import MAX_CONFIG_BYTES
from smlaunch.errors import ConfigError


def _bomb(levels: int = 9) -> str:
    """The billion-laughs shape: level i is a list of 9 aliases of level i - 1 (9**9 nodes at the top)."""
    names = [f"l{i}" for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"{n}: &{n} [{', '.join(['*' + p] * 9)}]" for p, n in zip(names, names[1:], strict=False)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_an_op_s_params_is_refused_in_a_line_within_a_second_in_bounded_memory(configs, tmp_path):
    text = (
        (configs / "tiny.yaml").read_text().replace("    - op: to_uint8_chw", "    - op: to_uint8_chw\n      params:")
    )
    path = tmp_path / "bomb.yaml"
    path.write_text(text + "\nbomb:\n" + "".join("  " + line + "\n" for line in _bomb().splitlines()))
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    took, (_, peak) = time.perf_counter() - started, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert took < 1.0 and peak < 50 << 20, (took, peak)
    message = str(caught.value)
    assert message.startswith(f"config file {path} line ") and "aliases expand past 10000 nodes" in message
    assert "\n" not in message


def test_a_few_aliases_as_configs_use_them_still_load(configs, tmp_path):
    text = (configs / "tiny.yaml").read_text().replace("  train:\n    source:", "  train: &train\n    source:")
    path = tmp_path / "aliases.yaml"
    path.write_text(text)
    assert load_config(path).channels["train"].source == "builtin:digits/train"


def test_a_key_written_twice_names_the_key_and_both_lines(configs, tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text((configs / "tiny.yaml").read_text().replace("  steps: 40\n", "  steps: 40\n  steps: 400\n"))
    lines = path.read_text().splitlines()
    first = lines.index("  steps: 40") + 1
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert f"key 'steps' appears twice in one mapping (lines {first} and {first + 1}); keep one" in str(caught.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.learning_rate=.inf", "trainer.learning_rate: Input should be a finite number (got inf)"),
        ("trainer.weight_decay=.nan", "trainer.weight_decay: Input should be a finite number"),
        ("trainer.steps=true", "trainer.steps: a number, not true"),
        ("trainer.clip_grad_norm=false", "trainer.clip_grad_norm: a number, not false"),
        ("seed=-1", "seed: Input should be greater than or equal to 0 (got -1)"),
        ("seed=4294967296", "seed: Input should be less than or equal to 4294967295"),
    ],
)
def test_numbers_are_finite_not_booleans_and_seeds_fit_numpy(configs, override, message):
    with pytest.raises(ConfigError) as caught:
        load_config(configs / "tiny.yaml", [override])
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_booleans_where_a_boolean_goes_still_load(configs):
    cfg = load_config(configs / "tiny.yaml", ["trainer.resume=false", "trainer.compile=true", "model.pretrained=false"])
    assert cfg.trainer.resume is False and cfg.trainer.compile is True and cfg.model.pretrained is False


def test_a_file_past_the_size_bound_is_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match=r"huge\.yaml: \d+ bytes, more than a config's 1048576"):
        load_config(path)
