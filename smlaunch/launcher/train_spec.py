"""The train workers' spec (`trainers.spec.TrainSpec`) from the config and the final plan.

Pure but for reading a builtin dataset's manifest (its class count and rows per epoch). The schema
guarantees a crop op and, for a non-builtin train channel, `model.num_classes`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from smlaunch.cluster.plan import LaunchPlan
from smlaunch.config.schema import LaunchConfig


def train_spec(cfg: LaunchConfig, plan: LaunchPlan, resume_from: str | None = None):
    from smlaunch.launcher.run import checkpoint_dir, host_opt_ml
    from smlaunch.pipelines.host_loss import fragile_channels
    from smlaunch.trainers.spec import TrainSpec

    crops = [op.size for op in cfg.pipeline.ops if op.op in ("random_resized_crop", "center_crop")]
    rows = builtin_rows(cfg, "train")
    t = cfg.trainer
    total = t.steps or (t.epochs * (rows // plan.global_batch) if rows else None)
    return TrainSpec(
        model=cfg.model.name, num_classes=cfg.model.num_classes or _builtin_classes(cfg), image_size=crops[-1],
        seed=cfg.seed, trainer=t, learning_rate=plan.learning_rate, total_steps=total, epoch_rows=rows,
        workers=plan.workers, host_names=tuple(h.name for h in plan.hosts),
        model_dir=str(Path(host_opt_ml(plan.head_host), "model").resolve()),
        checkpoint_dir=checkpoint_dir(cfg, plan), config_sha256=config_hash(cfg), normalize=_normalize(cfg),
        fragile_channels=tuple(fragile_channels(plan)), resume_from=resume_from)


def config_hash(cfg: LaunchConfig) -> str:
    return hashlib.sha256(json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def builtin_rows(cfg: LaunchConfig, channel: str) -> int | None:
    from smlaunch.pipelines.builtin import builtin_manifest, split_source

    source = cfg.channels[channel].source
    manifest = builtin_manifest(source)
    return None if manifest is None else manifest["splits"][split_source(source)[1]]["records"]


def resumed_step(resume_from: str | None) -> int:
    """The step a checkpoint holds (0 for none), for the progress bar's start."""
    if not resume_from:
        return 0
    try:
        return int(json.loads((Path(resume_from) / "meta.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return 0


def _builtin_classes(cfg: LaunchConfig) -> int:
    from smlaunch.pipelines.builtin import builtin_manifest

    return builtin_manifest(cfg.channels["train"].source)["classes"]


def _normalize(cfg: LaunchConfig) -> dict:
    """The chain's trailing `normalize` (mean and std per channel), else (x / 127.5 - 1)."""
    last = cfg.pipeline.ops[-1]
    if last.op == "normalize":
        return {"mean": list(last.mean), "std": list(last.std)}
    return {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}
