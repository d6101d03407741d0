"""The final model in the model directory (`/opt/ml/model` on SageMaker, which it uploads as
model.tar.gz): the timm state dict, loadable with timm + torch alone, and a small JSON card.

Where the train data named its classes (image folders: the class folders), they are saved too,
as `classes.json` (a list: label i is entry i) and in the card: a model's outputs are indices, and
without the names it was trained with nobody can tell which index means what."""

from __future__ import annotations

import json
import os

CLASSES = "classes.json"


def save_model(model, config: dict, step: int, final: dict, state: dict | None = None) -> None:
    """Into `config["model_dir"]`; an `s3://` one gets the files through a temporary directory.
    `state`: the weights to save instead of `model`'s own (`trainer.keep_best`'s best validation's)."""
    if config["model_dir"].startswith("s3://"):
        import tempfile

        from smlaunch.trainers.s3_store import upload_dir

        with tempfile.TemporaryDirectory(prefix="smlaunch-model-") as tmp:
            _save(model, {**config, "model_dir": tmp}, step, final, state)
            upload_dir(tmp, config["model_dir"])
        return
    _save(model, config, step, final, state)


def cpu_state_dict(model) -> dict:
    """The model's `state_dict` with its tensors on the CPU: a GPU run's tensors saved as they are
    load only where CUDA is (`torch.load` puts them back on the device they were saved from), and
    models are often served on CPUs. Its `_metadata` (module versions `load_state_dict` reads) stays."""
    import torch

    state = model.state_dict()
    out = type(state)((k, v.detach().cpu() if torch.is_tensor(v) else v) for k, v in state.items())
    if hasattr(state, "_metadata"):
        out._metadata = state._metadata
    return out


def _save(model, config: dict, step: int, final: dict, state: dict | None = None) -> None:
    import torch

    model_dir = config["model_dir"]
    os.makedirs(model_dir, exist_ok=True)
    torch.save(state if state is not None else cpu_state_dict(model), os.path.join(model_dir, "model.pt"))
    names = config.get("class_names")
    card = {
        "model": config["model"],
        "num_classes": config["num_classes"],
        "steps": step,
        "final_metrics": {k: v for k, v in final.items() if k != "best"},
        "config_sha256": config["config_sha256"],
    }
    if config["image_size"]:
        card["input_size"] = [3, config["image_size"], config["image_size"]]
        card["normalisation"] = {"input": "uint8 CHW", "x": "(x / 255 - mean) / std", **config["normalize"]}
    if config.get("model_params") is not None:  # the user's factory
        card["model_params"] = config["model_params"]
        card["task"] = config.get("task")
        card["load"] = (
            f"model = {config['model']}(**model_params) (your factory); "
            "model.load_state_dict(torch.load('model.pt', weights_only=True))"
        )
    else:
        card["load"] = (
            f"smlaunch.trainers.model.create_model({config['model']!r}, {config['num_classes']}, "
            f"{config['image_size']}) (timm.create_model with num_classes, and img_size where the "
            "model takes one); model.load_state_dict(torch.load('model.pt', weights_only=True))"
        )
    if final.get("best"):
        card["best"] = final["best"]  # model.pt holds this validation's weights (`trainer.keep_best`)
    if names is not None:
        card["classes"] = list(names)
    if config.get("pretrained"):
        card["fine_tuned_from"] = config["pretrained"]
    classes = os.path.join(model_dir, CLASSES)
    if names is not None:
        with open(classes, "w") as f:
            json.dump(list(names), f, indent=1)
    elif os.path.exists(classes):  # an earlier model's names in a reused directory would mislabel this one
        os.remove(classes)
    with open(os.path.join(model_dir, "model.json"), "w") as f:
        json.dump(card, f, indent=2)
