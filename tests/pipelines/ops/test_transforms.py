import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from smlaunch.config import load_config
from smlaunch.errors import DataError
from smlaunch.pipelines.ops.chain import Chain


def _jpeg(h: int, w: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG")
    return buf.getvalue()


def _batch(n: int = 8) -> dict:
    return {
        "image": np.array([_jpeg(40 + i, 30 + 2 * i, i) for i in range(n)], dtype=object),
        "label": np.arange(n) % 10,
        "id": np.arange(100, 100 + n),
    }


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
    # a grey image for a model of the user's, which may take one channel (the built-in classification's is refused)
    user = ["task={loss: 'x:y'}", "model={factory: 'x:y'}"]
    out = Chain(_ops(configs, "pipeline.ops.0.mode=L", *user), [], seed=0)(_batch(2))
    assert out["image"].shape == (2, 1, 32, 32)


def test_undecodable_image_is_a_data_error(configs):
    batch = _batch(3)
    batch["image"][1] = b"not an image"
    sample = int(batch["id"][1])
    with pytest.raises(
        DataError,
        match=rf"^channel 'train': sample id {sample}: undecodable image \(cannot "
        r"identify image file; 12 bytes starting b'not an i'\)$",
    ):
        Chain(_ops(configs), [], seed=0, channel="train")(batch)


def test_undecodable_images_the_counter_lets_pass_leave_the_batch(configs, monkeypatch):
    """Skipped rows leave with their labels and ids; a batch of nothing but skipped images is an
    empty batch of the chain's output shape. (The counter itself: tests/reliability/test_bad_inputs_in_jobs.py.)"""
    from smlaunch.pipelines import corrupt

    asked = []
    monkeypatch.setattr(corrupt, "undecodable_sample", lambda *args: asked.append(args))
    batch = _batch(4)
    batch["image"][1] = batch["image"][3] = b"not an image"
    chain = Chain(_ops(configs), [], seed=0, channel="train", max_corrupted_records=2)
    out = chain(batch)
    assert [a[:3] for a in asked] == [("train", 2, int(batch["id"][1])), ("train", 2, int(batch["id"][3]))]
    assert (
        out["id"].tolist() == batch["id"][[0, 2]].tolist() and out["label"].tolist() == batch["label"][[0, 2]].tolist()
    )
    assert out["image"].shape == (2, 3, 32, 32) and len(out["host"]) == len(out["prep_s"]) == 2
    assert chain({"image": [b"x", b"y"], "label": np.array([1, 2]), "id": np.array([5, 6])})["image"].shape == (
        0,
        3,
        32,
        32,
    )


def test_random_resized_crop_with_validation_resize_evaluates_as_resize_then_center_crop():
    """ImageNet's evaluation transform, Resize(256) + CenterCrop(224), scaled down; training is unchanged."""
    from smlaunch.config import op_specs as specs
    from smlaunch.pipelines.ops.transforms import center_crop, random_resized_crop, resize

    rng = np.random.default_rng(0)
    images = [np.random.default_rng(1).integers(0, 255, (30, 45, 3), dtype=np.uint8)]
    spec = specs.RandomResizedCrop(op="random_resized_crop", size=14, validation_resize=16)
    expected = center_crop(
        resize(images, specs.Resize(op="resize", size=16), rng, False),
        specs.CenterCrop(op="center_crop", size=14),
        rng,
        False,
    )
    got = random_resized_crop(images, spec, rng, False)
    assert got[0].shape == (14, 14, 3) and np.array_equal(got[0], expected[0])
    plain = specs.RandomResizedCrop(op="random_resized_crop", size=14)
    assert np.array_equal(
        random_resized_crop(images, spec, np.random.default_rng(2), True)[0],
        random_resized_crop(images, plain, np.random.default_rng(2), True)[0],
    )
    with pytest.raises(ValueError, match="validation_resize"):
        specs.RandomResizedCrop(op="random_resized_crop", size=14, validation_resize=12)


def test_resize_center_crop_and_color_jitter(configs):
    from smlaunch.config import op_specs as specs
    from smlaunch.pipelines.ops.transforms import center_crop, color_jitter, resize

    rng = np.random.default_rng(0)
    images = [np.full((40, 60, 3), 100, np.uint8), np.full((10, 8, 3), 7, np.uint8)]
    resized = resize(images, specs.Resize(op="resize", size=20), rng, True)
    assert [i.shape for i in resized] == [(20, 30, 3), (25, 20, 3)]  # shorter side 20, aspect kept
    cropped = center_crop(images, specs.CenterCrop(op="center_crop", size=16), rng, True)
    assert [i.shape for i in cropped] == [(16, 16, 3), (16, 16, 3)]
    assert cropped[0].min() == 100 and cropped[1][0, 0, 0] == 0 and cropped[1][8, 8, 0] == 7  # small: padded
    jitter = specs.ColorJitter(op="color_jitter", brightness=0.4, contrast=0.4, saturation=0.4)
    varied = [np.arange(48, dtype=np.uint8).reshape(4, 4, 3) * 5]
    first = color_jitter(varied, jitter, np.random.default_rng(1), True)
    assert np.array_equal(first[0], color_jitter(varied, jitter, np.random.default_rng(1), True)[0])
    assert not np.array_equal(first[0], varied[0]) and first[0].dtype == np.uint8
    assert color_jitter(varied, jitter, rng, False)[0] is varied[0]  # validation: unchanged


def test_a_user_op_by_module_path_and_its_errors(configs, monkeypatch):
    from smlaunch.errors import ConfigError, DataError

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))  # sample_user_ops, also when run alone
    from smlaunch.pipelines.ops.transforms import resolve_user_op

    ops = _ops(configs, "pipeline.ops.3={op: user, function: 'sample_user_ops:invert', params: {amount: 200}}")
    assert ops[3].op == "user" and ops[3].params == {"amount": 200}
    plain = Chain(_ops(configs, "pipeline.ops.2.p=0", "pipeline.ops.3.repeat=0"), ["h"], seed=1)(_batch())
    ops = _ops(
        configs,
        "pipeline.ops.2.p=0",
        "pipeline.ops.3={op: user, function: 'sample_user_ops:invert', params: {amount: 200}}",
    )
    inverted = Chain(ops, ["h"], seed=1)(_batch())
    assert np.array_equal(inverted["image"], (200 - plain["image"].astype(np.int16)).clip(0, 255).astype(np.uint8))
    with pytest.raises(ConfigError, match="cannot import no_such_module"):
        resolve_user_op("no_such_module:f")
    with pytest.raises(ConfigError, match="sample_user_ops has no function nope"):
        resolve_user_op("sample_user_ops:nope")
    broken = _ops(configs, "pipeline.ops.3={op: user, function: 'sample_user_ops:broken'}")
    with pytest.raises(DataError, match="must return a list of HWC uint8 arrays"):
        Chain(broken, ["h"], seed=1)(_batch())


def test_a_user_op_or_map_op_that_raises_is_one_line_naming_the_op_and_the_user_s_line(configs, monkeypatch):
    """A `UserCodeError`: the job ends at its first occurrence (`trainers.failures`), with this line
    rather than Ray's nested traceback of the data task. The host is the one the task runs on (the
    node's label; here pinned, since the suite may or may not have Ray connected)."""
    from smlaunch.cluster import labels
    from smlaunch.errors import UserCodeError
    from smlaunch.pipelines.ops import chain

    for module in (labels, chain):
        monkeypatch.setattr(module, "this_host", lambda: "algo-2")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))  # sample_user_ops, also when run alone
    monkeypatch.setenv("SM_LAUNCH_CODE_DIR", str(Path(__file__).parents[1]))
    raising = _ops(configs, "pipeline.ops.3={op: user, function: 'sample_user_ops:raising'}")
    with pytest.raises(UserCodeError) as caught:
        Chain(raising, ["h"], seed=1)(_batch())
    assert str(caught.value) == (
        "pipeline user op sample_user_ops:raising failed on algo-2, at "
        "sample_user_ops.py:19 in _check: ValueError: an image of 32 rows"
    )
    mapped = _ops(configs, "pipeline.ops.3={op: map, function: 'sample_user_ops:raising_map'}")
    with pytest.raises(UserCodeError) as caught:
        Chain(mapped, ["h"], seed=1)(_batch())
    assert str(caught.value) == (
        "pipeline.ops.3 map op sample_user_ops:raising_map failed on algo-2, at "
        "sample_user_ops.py:23 in raising_map: KeyError: 'x1'"
    )


def test_unknown_op_and_misplaced_normalize_list_what_is_valid(configs):
    from smlaunch.errors import ConfigError

    with pytest.raises(
        ConfigError, match="unknown op 'warp'; ops: decode_image, resize, random_resized_crop, center_crop"
    ):
        _ops(configs, "pipeline.ops.1.op=warp")
    with pytest.raises(ConfigError, match="normalize may only come last"):
        _ops(configs, "pipeline.ops.2={op: normalize}")
    import yaml

    from smlaunch.config.loader import validate_config

    raw = yaml.safe_load((configs / "hetero.yaml").read_text())
    raw["pipeline"]["ops"].append({"op": "normalize", "mean": [0.4, 0.4, 0.4], "std": [0.2, 0.2, 0.2]})
    ops = validate_config(raw).pipeline.ops
    assert ops[-1].op == "normalize" and ops[-1].std == (0.2, 0.2, 0.2)
    assert Chain(ops, ["h"], seed=1)(_batch())["image"].dtype == np.uint8  # left to the trainer


def test_blur_then_center_crop_is_fused_and_gives_the_same_bytes():
    from smlaunch.config import op_specs as specs
    from smlaunch.pipelines.ops.chain import plan_steps
    from smlaunch.pipelines.ops.transforms import OPS

    blurs = [
        specs.GaussianBlur(op="gaussian_blur", kernel_size=11, sigma=2.0, repeat=3),
        specs.GaussianBlur(op="gaussian_blur", kernel_size=5, sigma=1.0, repeat=2),
    ]
    rng = np.random.default_rng(7)
    # off-centre crops, crops touching one edge, images smaller than the crop (padded), tiny crops
    shapes = [(64, 48), (41, 40), (40, 40), (30, 50), (120, 37), (20, 20)]
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in shapes]
    for size in (36, 4):
        crop = specs.CenterCrop(op="center_crop", size=size)
        fused = plan_steps([*blurs, crop])
        assert len(fused) == 1  # one step: crop with a margin, blur, trim
        plain = images
        for spec in [*blurs, crop]:
            plain = OPS[spec.op](plain, spec, None, True)
        out = fused[0]({"image": images}, None, True)["image"]
        for a, b in zip(out, plain, strict=False):
            assert a.shape == b.shape and np.array_equal(a, b)
    assert len(plan_steps([blurs[0], specs.HorizontalFlip(op="horizontal_flip"), crop])) == 3  # not adjacent


def test_fused_blur_crop_is_cheaper():
    """Work, not time: the fused step blurs only the crop plus its margin."""
    from smlaunch.config import op_specs as specs
    from smlaunch.pipelines.ops import chain

    seen = []
    original = chain.blur_image
    chain.blur_image = lambda img, spec: (seen.append(img.shape[:2]), original(img, spec))[1]
    try:
        blur = specs.GaussianBlur(op="gaussian_blur", kernel_size=5, sigma=1.0, repeat=2)
        chain.plan_steps([blur, specs.CenterCrop(op="center_crop", size=32)])[0](
            {"image": [np.zeros((256, 256, 3), np.uint8)]}, None, True
        )
    finally:
        chain.blur_image = original
    assert seen == [(40, 40)]  # 32 + 2 x (2 passes x radius 2)


def test_torchvision_decode_matches_pil_and_falls_back_for_other_formats():
    from smlaunch.config import op_specs as specs
    from smlaunch.pipelines.ops.transforms import _decode_pil, decode_image

    jpeg = _jpeg(37, 53, 4)
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (9, 7, 3), dtype=np.uint8)).save(buf, format="BMP")
    for mode, channels in (("RGB", 3), ("L", 1)):
        spec = specs.DecodeImage(op="decode_image", mode=mode)
        out = decode_image([jpeg, buf.getvalue()], spec, None, True)
        assert out[0].shape == (37, 53, channels) and out[0].dtype == np.uint8
        difference = np.abs(out[0].astype(int) - _decode_pil(jpeg, mode, 0))
        # RGB: the same libjpeg-turbo; L: libjpeg's luma plane vs PIL's convert("L") of the RGB
        assert difference.max() <= 1 if mode == "RGB" else difference.mean() < 2
        assert np.array_equal(out[1], _decode_pil(buf.getvalue(), mode, 1))  # BMP: PIL's path


def _png(array: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def test_masks_move_with_their_image_through_crops_resizes_and_flips_and_keep_class_ids():
    """Each image's mask is the image thresholded (lossless PNGs of a left-right asymmetric
    pattern): after the chain, the mask must still be the image thresholded, pixel for pixel but
    at the resampled edges, and hold class ids only (nearest-neighbour). The same chain with the
    flip not moving the mask breaks that, so the check can fail."""
    from smlaunch.config.op_specs import CenterCrop, DecodeImage, HorizontalFlip, RandomResizedCrop, Resize, ToUint8CHW

    images, masks = [], []
    for i in range(16):
        h, w = 40 + i, 56 - i
        yy, xx = np.mgrid[0:h, 0:w]
        inside = (xx < w * 0.3 + i) & (yy > h * 0.2)  # asymmetric: a flip moves it
        image = np.where(inside[..., None], 220, 30).astype(np.uint8).repeat(3, axis=2)
        images.append(_png(image))
        masks.append(_png(inside.astype(np.uint8) * 3))  # class 3 inside, 0 outside
    batch = {"image": np.array(images, dtype=object), "mask": np.array(masks, dtype=object), "id": np.arange(16)}

    def agreement(flip_masks: tuple) -> float:
        ops = [
            DecodeImage(op="decode_image"),
            DecodeImage(op="decode_image", field="mask", mode="L"),
            Resize(op="resize", size=36, masks=("mask",)),
            RandomResizedCrop(op="random_resized_crop", size=24, scale=(0.4, 1.0), masks=("mask",)),
            HorizontalFlip(op="horizontal_flip", p=0.5, masks=flip_masks),
            CenterCrop(op="center_crop", size=20, masks=("mask",)),
            ToUint8CHW(op="to_uint8_chw"),
            ToUint8CHW(op="to_uint8_chw", field="mask"),
        ]
        out = Chain(ops, ["h"], seed=5)(dict(batch))
        assert out["image"].shape == (16, 3, 20, 20) and out["mask"].shape == (16, 1, 20, 20)
        assert set(np.unique(out["mask"]).tolist()) <= {0, 3}  # never a blend of two classes
        return float(((out["image"][:, 0] > 125) == (out["mask"][:, 0] == 3)).mean())

    assert agreement(("mask",)) > 0.97
    assert agreement(()) < 0.9  # the image flipped, its mask not
