"""What a train worker is told: one frozen, typed value, built from the config and the *final* plan.

On a SageMaker job the worker count is known only once every host has joined and reported its
GPUs (`cluster.sagemaker.plan.with_joined_resources`); the learning-rate schedule's length, the global
batch and the scaled learning rate all depend on it, so the spec is built after that, never from
the plan each host made before joining. It travels to every worker (pickled by Ray).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from smlaunch.cluster.topology import WorkerPlan
from smlaunch.config.recipe import FactoryConfig
from smlaunch.config.schema import TrainerConfig


@dataclass(frozen=True)
class TrainSpec:
    model: str
    """A timm model's name, or the factory's `package.module:function` (`model_factory`)."""
    num_classes: int | None
    """The classes of the built-in classification task; None for a user's task without them."""
    image_size: int | None
    """The last crop's size (None: the chain has no image ops)."""
    seed: int
    trainer: TrainerConfig
    learning_rate: float
    """The peak rate the optimizer uses (scaled by the workers with `trainer.lr_scaling: linear`)."""
    total_steps: int | None
    """The run's optimizer steps (`trainer.steps`, or epochs x steps per epoch for a channel whose
    size is known); the schedule's length. None: unknown (constant rate after warmup)."""
    epoch_rows: int | None
    """Rows of the train channel per epoch, where known (builtin datasets)."""
    workers: tuple[WorkerPlan, ...]
    host_names: tuple[str, ...]
    model_dir: str
    checkpoint_dir: str
    config_sha256: str
    normalize: dict
    fragile_channels: tuple[dict, ...]
    """Channels a lost host cannot be recovered from (see `pipelines.host_loss`)."""
    worker_selectors: tuple[dict, ...]
    """Rank i's Ray label selector: the train group on the host `workers[i]` names
    (`LaunchPlan.worker_selectors`); Ray Train places each worker by it."""
    preprocess_selector: dict
    """Where the datasets' preprocessing runs (the CPU hosts' label; `LaunchPlan.preprocess_selector`)."""
    worker_env: dict
    """Variables for the train workers' processes (NCCL's, on SageMaker)."""
    resume_from: str | None = None
    """A complete checkpoint of an earlier run to start from (found by the driver)."""
    pretrained: str | None = None
    """A weights file to fine-tune from (`model.pretrained`: an absolute local path, or `s3://`), loaded
    by rank 0 only when no checkpoint is resumed (`trainers.loop`); None: from scratch."""
    class_names: tuple[str, ...] | None = None
    """The train data's class names, label i being `class_names[i]` (image folders), where known;
    saved next to the model (`trainers.export`)."""
    shuffle_buffer_rows: int = 0
    """Rows of each train worker's shuffle buffer (the train channel's `shuffle.buffer_rows`; 0: none)."""
    train_units: int | None = None
    """Units (files or Parquet row groups) of a File or FastFile train channel: what a complete
    epoch's positions must cover (`pipelines.position`); None for a Pipe channel."""
    cache: Any = None
    """The run's `pipelines.cache.store.CacheSpec` (None: no cache): rank 0 seals it between epochs."""
    files_outlive_cache: bool = True
    """A host can still read the train channel's files, so a cache lost mid-run is read from them
    again: always, but with `autoscale.min_data_hosts: 0`, where the hosts that received the files
    may be gone, only where the train hosts have a view of them too (`node_trees.fallback_readers`)."""
    cached_train_selector: dict | None = None
    """With a cache: the bucket Ray Data budgets the cached epochs' dataset by
    (`pipelines.dataset.cached_train_selector`); None: one train dataset."""
    ingest_buffer_bytes: int | None = None
    """Ray Data's object store budget for the train channel's executions, cached ones included
    (None: Ray's, a share of the store); set with elastic data hosts
    (`pipelines.dataset.elastic_buffer_bytes`)."""
    checkpoint_every_s: float = 0.0
    """Seconds between timed checkpoints (0: none): the plan's, `cluster.plan.stop_protection`."""
    model_factory: str | None = None
    """`model.factory`: the model is `model_factory(**model_params)` (`trainers.model.build_model`)."""
    model_params: dict | None = None
    task_loss: str | None = None
    """`task.loss` (and `task.evaluate`): the user's task (`trainers.task`); None: classification."""
    task_evaluate: str | None = None
    task_metrics: str | None = None
    """`task.metrics` and `task.predict`: whole-set validation metrics (`trainers.metrics`)."""
    task_predict: str | None = None
    optimizer: FactoryConfig | None = None
    """The top-level `optimizer` (your factory); None: `trainer.optimizer` (`trainers.optim`)."""
    schedule: FactoryConfig | None = None
    """The top-level `schedule` (your factory); None: warmup-cosine."""
    normalize_in_chain: bool = True
    """The chain ends in `normalize`: a user's task gets `image` normalised (always, for classification)."""
    validation: bool = True
    """Whether the job has a validation channel to validate on (`LaunchConfig.validates`;
    `trainers.validation`)."""
    id_check_rows: int = 2_000_000
    """Epochs of up to this many rows also get the id-based check (`trainers.accounting`), which
    gathers every id drawn to rank 0 (8 bytes a row); larger ones are checked by positions alone."""

    @property
    def world_size(self) -> int:
        return len(self.workers)

    @property
    def use_gpu(self) -> bool:
        return any(w.on_gpu for w in self.workers)

    @property
    def train_hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(w.host for w in self.workers))

    def user_functions(self) -> dict[str, str]:
        """Config field -> `module:function` of the user's functions the built-in loop calls (for the
        line an error in them ends the job with: `trainers.failures`)."""
        named = {
            "model.factory": self.model_factory,
            "task.loss": self.task_loss,
            "task.evaluate": self.task_evaluate,
            "task.metrics": self.task_metrics,
            "task.predict": self.task_predict,
            "optimizer.factory": self.optimizer.factory if self.optimizer else None,
            "schedule.factory": self.schedule.factory if self.schedule else None,
        }
        named.update({f"trainer.callbacks.{i}": name for i, name in enumerate(self.trainer.callbacks)})
        return {field: path for field, path in named.items() if path}

    def card(self) -> dict:
        """What the saved model's card needs."""
        return {
            "model": self.model,
            "model_params": self.model_params,
            "task": self.task_loss,
            "num_classes": self.num_classes,
            "image_size": self.image_size,
            "normalize": self.normalize,
            "config_sha256": self.config_sha256,
            "model_dir": self.model_dir,
            "class_names": list(self.class_names) if self.class_names is not None else None,
            "pretrained": self.pretrained,
        }
