"""Which ops a cache may hold and when a run caches (`config.cache_rules`), and what its
fingerprint changes with (`pipelines.cache.fingerprint`): pure functions, checked at `plan`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from smlaunch.config import load_config
from smlaunch.config.cache_rules import cache_choice, prefix_length
from smlaunch.errors import ConfigError

CHAIN = [
    {"op": "decode_image"},
    {"op": "resize", "size": 12},
    {"op": "gaussian_blur", "kernel_size": 3},
    {"op": "random_resized_crop", "size": 10},
    {"op": "horizontal_flip"},
    {"op": "to_uint8_chw"},
]


TINY = str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")


def _cfg(ops=CHAIN, trainer=None, task=None, **pipeline):
    pipeline.setdefault("cache", "auto")
    sets = [f"pipeline.ops={json.dumps(ops)}"] + [f"pipeline.{k}={json.dumps(v)}" for k, v in pipeline.items()]
    sets += [f"trainer.{k}={json.dumps(v)}" for k, v in (trainer or {}).items()]
    sets += [f"task={json.dumps(task)}", "model.name=null", 'model.factory="mine:model"'] if task else []
    return load_config(TINY, sets)


def test_the_prefix_ends_at_the_first_op_that_draws_and_a_user_op_is_random_unless_it_says_otherwise():
    assert prefix_length(_cfg().pipeline.ops) == 3
    mapped = [CHAIN[0], {"op": "map", "function": "mine:f"}, *CHAIN[1:]]
    assert prefix_length(_cfg(mapped).pipeline.ops) == 1
    mapped[1] = {"op": "map", "function": "mine:f", "deterministic": True}
    assert prefix_length(_cfg(mapped).pipeline.ops) == 4
    flip_first = [CHAIN[0], {"op": "horizontal_flip"}, *CHAIN[1:4], CHAIN[5]]
    assert prefix_length(_cfg(flip_first).pipeline.ops) == 1


def test_auto_caches_a_decoding_prefix_from_two_epochs_and_says_why_otherwise():
    cfg = _cfg(trainer={"steps": None, "epochs": 3})
    on = cache_choice(cfg, 3, "/c")
    assert on.on and on.prefix == 3
    assert on.line() == (
        "cache: on (auto: 3 epochs; prefix: decode_image, resize, gaussian_blur runs once, not every epoch; in /c)"
    )
    assert cache_choice(cfg, 1, "/c").line() == "cache: off (auto: one epoch: a cache pays back only from the second)"
    assert "are not known before its channel is read" in cache_choice(cfg, None, "/c").why
    assert cache_choice(cfg, 3, None).why.startswith("auto: no folder every host sees: set pipeline.cache_dir")
    assert not cache_choice(_cfg(cache=False), 3, "/c").on
    assert cache_choice(_cfg(cache=True), 1, "/c").on  # asked for: even for one epoch
    with pytest.raises(ConfigError, match=r"pipeline.cache: true, but no folder every host sees"):
        cache_choice(_cfg(cache=True), 3, None)
    flip_first = [CHAIN[0], {"op": "horizontal_flip"}, *CHAIN[1:4], CHAIN[5]]
    assert cache_choice(_cfg(flip_first), 3, "/c").on  # decode alone pays
    random_first = [CHAIN[0], CHAIN[3], CHAIN[5]]
    assert prefix_length(_cfg(random_first).pipeline.ops) == 1
    no_decode = _cfg([{"op": "map", "function": "mine:f", "deterministic": True}], task={"loss": "mine:loss"})
    assert "neither decodes nor blurs" in cache_choice(no_decode, 3, "/c").why


def test_the_fingerprint_changes_with_a_file_an_op_s_parameter_and_user_code_and_with_nothing_else(tmp_path):
    from smlaunch.pipelines.cache.fingerprint import files_digest, fingerprint

    folder = tmp_path / "input" / "data" / "train"
    (folder / "a").mkdir(parents=True)
    for name in ("1.png", "2.png"):
        (folder / "a" / name).write_bytes(b"x" * 10)
    rels = ["a/1.png", "a/2.png"]
    source = files_digest(folder, rels)
    ops = _cfg().pipeline.ops[:3]
    key = fingerprint({"record_format": "image_folder"}, ops, source)
    assert key == fingerprint({"record_format": "image_folder"}, ops, files_digest(folder, rels))
    os.utime(folder / "a" / "2.png", ns=(1, 1))  # rewritten in place: same name, same size
    assert fingerprint({"record_format": "image_folder"}, ops, files_digest(folder, rels)) != key
    blurred = _cfg([*CHAIN[:2], {**CHAIN[2], "sigma": 2.0}, *CHAIN[3:]]).pipeline.ops[:3]
    assert fingerprint({"record_format": "image_folder"}, blurred, source) != key
    module = tmp_path / "cache_user_ops_mod.py"
    module.write_text("def f(batch, rng, train):\n    return batch\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        mapped = _cfg([CHAIN[0], {"op": "map", "function": "cache_user_ops_mod:f", "deterministic": True}, *CHAIN[1:]])
        before = fingerprint({}, mapped.pipeline.ops[:4], source)
        module.write_text("def f(batch, rng, train):\n    return dict(batch)\n")
        assert fingerprint({}, mapped.pipeline.ops[:4], source) != before
    finally:
        sys.path.remove(str(tmp_path))
