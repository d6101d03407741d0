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
