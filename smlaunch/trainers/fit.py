"""Driver side of training: a `TorchTrainer` sized to the plan, fed by the channel datasets."""

from __future__ import annotations

import os
import time

from smlaunch.cluster.plan import LaunchPlan
from smlaunch.config.schema import LaunchConfig


def fit(cfg: LaunchConfig, plan: LaunchPlan, datasets: dict, loop_config: dict) -> dict:
    """Train and return rank 0's result (per-step records, validation, rows per host)."""
    from ray.data import ExecutionOptions
    from ray.train import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from smlaunch.trainers.loop import train_loop

    selector_options = {name: ExecutionOptions(label_selector=plan.preprocess_selector) for name in datasets}
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=loop_config,
        scaling_config=ScalingConfig(num_workers=plan.train_workers, use_gpu=plan.use_gpu,
                                     label_selector=plan.train_selector),
        # A run name of its own per launch: Ray Train would otherwise resume silently from whatever
        # run of the same name it finds; resuming is ours (`resume_from`, complete checkpoints only).
        run_config=RunConfig(name=f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
                             storage_path=loop_config["checkpoint_dir"],
                             failure_config=FailureConfig(max_failures=cfg.trainer.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
        datasets=datasets,
        dataset_config=DataConfig(datasets_to_split="all", execution_options=selector_options),
    )
    return trainer.fit().return_value
