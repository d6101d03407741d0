import pytest
import torch

from smlaunch.errors import ConfigError
from smlaunch.trainers.model import check_model_name, create_model


def test_unknown_model_suggests_close_names():
    with pytest.raises(ConfigError, match=r"model\.name: timm has no model 'resnet_18'; close matches: resnet18"):
        check_model_name("resnet_18")


@pytest.mark.parametrize("name", ["test_resnet", "test_vit"])
def test_models_take_classes_and_input_size(name):
    check_model_name(name)
    model = create_model(name, num_classes=10, image_size=16)
    assert model(torch.zeros(2, 3, 16, 16)).shape == (2, 10)
