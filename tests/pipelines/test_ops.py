import io

import numpy as np
import pytest
from PIL import Image

from smlaunch.config import load_config
from smlaunch.errors import DataError
from smlaunch.pipelines.ops import Chain


def _jpeg(h: int, w: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG")
    return buf.getvalue()


def _batch(n: int = 8) -> dict:
    return {"image": np.array([_jpeg(40 + i, 30 + 2 * i, i) for i in range(n)], dtype=object),
            "label": np.arange(n) % 10, "id": np.arange(100, 100 + n)}


def _ops(configs, *overrides):
    return load_config(configs / "hetero.yaml", list(overrides)).pipeline.ops


def test_chain_outputs_uint8_chw_of_the_crop_size(configs):
    out = Chain(_ops(configs), ["not-this-host"], seed=3)(_batch())
    assert out["image"].shape == (8, 3, 32, 32) and out["image"].dtype == np.uint8
    assert out["label"].dtype == np.int64 and out["id"].tolist() == list(range(100, 108))
    assert (out["host"] == -1).all()  # not a host of the plan (or no Ray at all): unknown, not guessed


def test_seeded_chain_is_deterministic_and_seed_matters(configs):
    ops = _ops(configs)
    a = Chain(ops, [], seed=1)(_batch())["image"]
    assert np.array_equal(a, Chain(ops, [], seed=1)(_batch())["image"])
    assert not np.array_equal(a, Chain(ops, [], seed=2)(_batch())["image"])


def test_eval_mode_has_no_randomness(configs):
    ops = _ops(configs)
    a = Chain(ops, [], train=False, seed=1)(_batch())["image"]
    b = Chain(ops, [], train=False, seed=99)(_batch())["image"]
    assert np.array_equal(a, b)


def test_blur_repeat_smooths_more(configs):
    batch = _batch(2)
    sharp = Chain(_ops(configs, "pipeline.ops.3.repeat=0"), [], train=False)(batch)["image"].astype(float)
    blurred = Chain(_ops(configs, "pipeline.ops.3.repeat=5"), [], train=False)(batch)["image"].astype(float)
    assert np.abs(np.diff(blurred, axis=-1)).mean() < 0.8 * np.abs(np.diff(sharp, axis=-1)).mean()


def test_grayscale_decode_gives_one_channel(configs):
    out = Chain(_ops(configs, "pipeline.ops.0.mode=L"), [], seed=0)(_batch(2))
    assert out["image"].shape == (2, 1, 32, 32)


def test_undecodable_image_is_a_data_error(configs):
    batch = _batch(3)
    batch["image"][1] = b"not an image"
    with pytest.raises(DataError, match="row 1 of the batch: undecodable image"):
        Chain(_ops(configs), [], seed=0)(batch)
