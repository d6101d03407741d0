"""The final model in the model directory (`/opt/ml/model` on SageMaker, which it uploads as
model.tar.gz): the timm state dict, loadable with timm + torch alone, and a small JSON card."""

from __future__ import annotations

import json
import os


def save_model(model, config: dict, step: int, final: dict) -> None:
    import torch

    model_dir = config["model_dir"]
    os.makedirs(model_dir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(model_dir, "model.pt"))
    card = {"model": config["model"], "num_classes": config["num_classes"],
            "input_size": [3, config["image_size"], config["image_size"]],
            "normalisation": {"input": "uint8 CHW", "x": "(x / 255 - mean) / std", **config["normalize"]},
            "steps": step, "final_metrics": final, "config_sha256": config["config_sha256"],
            "load": f"smlaunch.trainers.model.create_model({config['model']!r}, {config['num_classes']}, "
                    f"{config['image_size']}) (timm.create_model with num_classes, and img_size where the "
                    "model takes one); model.load_state_dict(torch.load('model.pt'))"}
    with open(os.path.join(model_dir, "model.json"), "w") as f:
        json.dump(card, f, indent=2)
