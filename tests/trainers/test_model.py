from pathlib import Path

import pytest
import torch

from smlaunch.errors import ConfigError
from smlaunch.trainers.model import check_model_name, create_model


def test_unknown_model_suggests_close_names():
    with pytest.raises(ConfigError, match=r"model\.name: timm has no model 'resnet_18'; did you mean resnet18, "):
        check_model_name("resnet_18")
    with pytest.raises(ConfigError, match=r"timm has no model 'resnet5O'; did you mean resnet50"):
        check_model_name("resnet5O")
    check_model_name("resnet50.a1_in1k")  # a pretrained tag names the same architecture


def test_model_names_are_cached_per_timm_version(dataset_cache):
    """`plan` checks names without importing timm (and torch) once the list is cached."""
    import json
    from importlib.metadata import version

    from smlaunch.trainers.model import timm_model_names

    names = timm_model_names()
    cache = dataset_cache / f"timm-{version('timm')}-models.json"
    assert "resnet18" in names and set(json.loads(cache.read_text())) == names


@pytest.mark.parametrize("name", ["test_resnet", "test_vit"])
def test_models_take_classes_and_input_size(name):
    check_model_name(name)
    model = create_model(name, num_classes=10, image_size=16)
    assert model(torch.zeros(2, 3, 16, 16)).shape == (2, 10)


# --- fine-tuning from a weights file (model.pretrained) -------------------------------------------


def _tiny(name: str, classes: int, seed: int, image_size: int = 16):
    torch.manual_seed(seed)
    return create_model(name, num_classes=classes, image_size=image_size)


def _assert_fine_tuned(model, source, fresh, path) -> None:
    """Every backbone tensor is the file's; the classifier (fc) is the 10-class model's own init."""
    from smlaunch.trainers.model import load_pretrained

    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = load_pretrained(model, str(path))
    after = model.state_dict()
    assert result.describe() == f"fine-tuning from {path}: classifier fc re-initialised for 10 classes"
    assert result.reinitialised == ("fc",) and result.loaded == len(after) - 2
    for key, value in after.items():
        expected = before[key] if key.startswith("fc.") else source[key]
        assert torch.equal(value, expected), key
    assert after["fc.weight"].shape == (10, fresh.fc.in_features)


def test_fine_tunes_from_safetensors_with_a_new_classifier(tmp_path):
    from safetensors.torch import save_file

    source = _tiny("test_resnet", 5, seed=1)
    save_file(source.state_dict(), tmp_path / "backbone.safetensors")
    model = _tiny("test_resnet", 10, seed=2)
    _assert_fine_tuned(model, source.state_dict(), model, tmp_path / "backbone.safetensors")
    assert model(torch.zeros(2, 3, 16, 16)).shape == (2, 10)


def test_fine_tunes_from_a_ddp_training_checkpoint(tmp_path):
    """A .pth as a training script saves it: nested under "state_dict", keys of the DDP wrapper."""
    source = _tiny("test_resnet", 5, seed=1)
    wrapped = {f"module.{k}": v for k, v in source.state_dict().items()}
    torch.save({"state_dict": wrapped, "epoch": 7, "arch": "test_resnet"}, tmp_path / "checkpoint.pth")
    model = _tiny("test_resnet", 10, seed=2)
    _assert_fine_tuned(model, source.state_dict(), model, tmp_path / "checkpoint.pth")


def test_same_class_count_loads_the_classifier_too(tmp_path):
    from smlaunch.trainers.model import load_pretrained

    source = _tiny("test_resnet", 10, seed=1)
    torch.save(source.state_dict(), tmp_path / "model.pt")
    model = _tiny("test_resnet", 10, seed=2)
    result = load_pretrained(model, str(tmp_path / "model.pt"))
    assert result.reinitialised == () and "all weights loaded" in result.describe()
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())


def test_a_vit_fine_tunes_at_another_image_size(tmp_path):
    """timm's own conversion runs on the file: the position embedding is resampled to the new grid."""
    from safetensors.torch import save_file

    from smlaunch.trainers.model import load_pretrained

    source = _tiny("test_vit", 5, seed=1, image_size=16)
    save_file(source.state_dict(), tmp_path / "vit.safetensors")
    model = _tiny("test_vit", 10, seed=2, image_size=32)
    result = load_pretrained(model, str(tmp_path / "vit.safetensors"))
    assert result.reinitialised == ("head",)
    assert torch.equal(model.state_dict()["blocks.0.attn.qkv.weight"], source.state_dict()["blocks.0.attn.qkv.weight"])
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 10)


def test_weights_of_another_architecture_fail_in_one_line_naming_the_file(tmp_path):
    from safetensors.torch import save_file

    from smlaunch.trainers.model import load_pretrained

    save_file(_tiny("test_vit", 5, seed=1).state_dict(), tmp_path / "vit.safetensors")
    model = _tiny("test_resnet", 10, seed=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ConfigError) as raised:
        load_pretrained(model, str(tmp_path / "vit.safetensors"))
    message = str(raised.value)
    assert message.startswith(
        f"model.pretrained: {tmp_path / 'vit.safetensors'} does not fit test_resnet "
        "(weights of another architecture?): "
    )
    assert "of the model's tensors not in the file (e.g. conv1.0.weight)" in message and "\n" not in message
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # nothing half-loaded


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "does not exist"),
        (b"not weights at all", "is not a weights file timm can read"),
        ("numpy", "holds more than tensors"),
    ],
)
def test_unreadable_weights_fail_in_one_line(tmp_path, content, expected):
    import numpy as np

    from smlaunch.trainers.model import load_pretrained

    path = tmp_path / "weights.pth"
    if content == "numpy":  # a training checkpoint with more than tensors (smlaunch's state.pt holds ids)
        torch.save({"model": _tiny("test_resnet", 10, seed=1).state_dict(), "ids": np.arange(3)}, path)
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"^model\.pretrained: {path} {expected}") as raised:
        load_pretrained(_tiny("test_resnet", 10, seed=2), str(path))
    assert "\n" not in str(raised.value)


@pytest.fixture(scope="module")
def s3_weights():
    """A local S3 server (moto, as the pipeline tests use) with the throwaway credentials in the environment."""
    from smlaunch.pipelines.sources.local_s3 import LocalS3
    from support.s3 import aws_environment

    with LocalS3() as server, pytest.MonkeyPatch.context() as env:
        aws_environment(env, server.endpoint_url)
        server.client().create_bucket(Bucket="weights")
        yield server


def test_fine_tunes_from_an_s3_object(s3_weights, tmp_path):
    from safetensors.torch import save_file

    from smlaunch.trainers.model import load_pretrained

    source = _tiny("test_resnet", 5, seed=1)
    save_file(source.state_dict(), tmp_path / "backbone.safetensors")
    s3_weights.client().upload_file(str(tmp_path / "backbone.safetensors"), "weights", "runs/a/backbone.safetensors")
    model = _tiny("test_resnet", 10, seed=2)
    result = load_pretrained(model, "s3://weights/runs/a/backbone.safetensors")
    assert result.describe() == (
        "fine-tuning from s3://weights/runs/a/backbone.safetensors: classifier fc re-initialised for 10 classes"
    )
    assert torch.equal(model.state_dict()["conv1.0.weight"], source.state_dict()["conv1.0.weight"])
    with pytest.raises(ConfigError, match=r"^model\.pretrained: s3://weights/runs/b\.pth: no such object$"):
        load_pretrained(model, "s3://weights/runs/b.pth")


# --- the classes: from the config or the data, saved with the model ------------------------------


def _image_folder_spec(configs, overrides=(), data_classes=None):
    from smlaunch.cluster.plan import LocalEnvironment, build_plan
    from smlaunch.config import load_config
    from smlaunch.launcher.job.train_spec import train_spec

    cfg = load_config(
        configs / "tiny.yaml",
        ["channels.train.source=/data/pets", "channels.train.record_format=image_folder", *overrides],
    )
    return train_spec(cfg, build_plan(cfg, LocalEnvironment(cpus=2, gpus=0, started="t")), data_classes=data_classes)


def test_classes_come_from_the_config_else_the_data(configs):
    spec = _image_folder_spec(configs, data_classes=["cat", "dog", "eel"])
    assert (spec.num_classes, spec.class_names) == (3, ("cat", "dog", "eel"))
    assert _image_folder_spec(configs, data_classes=7).num_classes == 7  # a count (Parquet labels)
    spec = _image_folder_spec(configs, ["model.num_classes=3"], data_classes=["cat", "dog", "eel"])
    assert (spec.num_classes, spec.class_names) == (3, ("cat", "dog", "eel"))
    spec = _image_folder_spec(configs, ["model.pretrained=weights/backbone.safetensors"], data_classes=2)
    assert spec.pretrained == str((Path.cwd() / "weights/backbone.safetensors").resolve())


def test_class_count_disagreeing_with_the_class_folders_fails_in_one_line(configs):
    with pytest.raises(
        ConfigError,
        match=r"^model\.num_classes: 10, but the train channel \(/data/pets\) has 3 "
        r"class folders \(cat, dog, eel\); make them agree",
    ):
        _image_folder_spec(configs, ["model.num_classes=10"], data_classes=["cat", "dog", "eel"])
    with pytest.raises(ConfigError, match=r"holds labels up to 11; set model\.num_classes to at least 12"):
        _image_folder_spec(configs, ["model.num_classes=10"], data_classes=12)


def test_class_names_are_saved_next_to_the_model(tmp_path):
    import json

    import torch

    from smlaunch.trainers.export import save_model

    card = {
        "model": "test_resnet",
        "num_classes": 3,
        "image_size": 16,
        "normalize": {"mean": [0.5] * 3, "std": [0.5] * 3},
        "config_sha256": "0" * 64,
        "model_dir": str(tmp_path / "model"),
        "class_names": ["cat", "dog", "eel"],
        "pretrained": "s3://weights/backbone.safetensors",
    }
    model = _tiny("test_resnet", 3, seed=1)
    save_model(model, card, step=5, final={"loss": 1.0})
    # model.pt is the state dict itself, module versions included, with its tensors on the CPU
    # (a GPU run's must load where there is no CUDA; checked on a GPU machine, see BENCHMARKS.md)
    saved_state = torch.load(tmp_path / "model" / "model.pt", weights_only=True)
    assert list(saved_state) == list(model.state_dict()) and saved_state._metadata == model.state_dict()._metadata
    assert all(v.device.type == "cpu" and torch.equal(v, model.state_dict()[k]) for k, v in saved_state.items())
    assert json.loads((tmp_path / "model" / "classes.json").read_text()) == ["cat", "dog", "eel"]
    saved = json.loads((tmp_path / "model" / "model.json").read_text())
    assert saved["classes"] == ["cat", "dog", "eel"]
    assert saved["fine_tuned_from"] == "s3://weights/backbone.safetensors"
    save_model(model, {**card, "class_names": None, "pretrained": None}, step=6, final={"loss": 1.0})
    assert not (tmp_path / "model" / "classes.json").exists()  # no stale names for a model without them
    assert "classes" not in json.loads((tmp_path / "model" / "model.json").read_text())


def test_a_factory_s_model_fine_tunes_from_a_file_with_every_tensor_checked(tmp_path, monkeypatch):
    """`model.pretrained` into the user's factory model: no classifier is known, so every tensor
    must match by key and shape; a file of another model fails in one line naming it."""
    import torch

    from smlaunch.errors import ConfigError
    from smlaunch.trainers.model import create_from_factory, load_pretrained
    from support.byo import PROJECT

    monkeypatch.setenv("SM_LAUNCH_CODE_DIR", str(PROJECT))
    trained = create_from_factory("regression:mlp", {"inputs": 4, "hidden": 8})
    torch.save(trained.state_dict(), tmp_path / "mlp.pt")
    fresh = create_from_factory("regression:mlp", {"inputs": 4, "hidden": 8})
    assert (
        load_pretrained(fresh, str(tmp_path / "mlp.pt")).describe()
        == f"fine-tuning from {tmp_path}/mlp.pt: all 4 tensors loaded"
    )
    assert all(
        torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), trained.state_dict().values(), strict=False)
    )
    wider = create_from_factory("regression:mlp", {"inputs": 4, "hidden": 16})
    with pytest.raises(
        ConfigError,
        match=r"model.pretrained: .*mlp.pt does not fit Sequential \(weights of another "
        r"architecture\?\): 3 of another shape \(e.g. 0.bias: 8 in the file, 16 in",
    ):
        load_pretrained(wider, str(tmp_path / "mlp.pt"))
    with pytest.raises(
        ConfigError, match="model.factory: regression:make_frame returned DataFrame, not a torch.nn.Module"
    ):
        create_from_factory("regression:make_frame", {"rows": 2, "seed": 0})
