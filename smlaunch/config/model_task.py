"""The config's `model` and `task` sections: what trains, and what it minimises and measures.

A timm model by name with the built-in classification, or the user's own `nn.Module` factory,
loss and metrics, named as `package.module:function` (imported, never evaluated:
`smlaunch.user_code`). Kept apart from `schema.py`, which holds the rest of the tree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from smlaunch.config.base import StrictModel
from smlaunch.config.op_specs import FunctionPath


class ModelConfig(StrictModel):
    """The model: a timm architecture by `name`, built with the classes and input size the data
    has, or any `torch.nn.Module` your `factory` returns."""

    name: str | None = None
    """A timm model (`timm.list_models()`), e.g. `resnet10t`, `vit_small_patch16_224`. Checked at `plan`
    against timm's registry (its names are cached per timm version, so `plan` need not import torch);
    an unknown name gets close matches. Exactly one of `name` and `factory`."""
    factory: FunctionPath | None = None
    """Your model: `package.module:function`, imported from the folder sm-launch runs in and called on
    every rank as `function(**params)`; it returns a `torch.nn.Module`. Checked at `plan` (the module
    imports, the function exists, `params` bind) without building the model. Exactly one of `name` and
    `factory`."""
    params: dict = {}
    """Keyword arguments of `factory` (checked against its signature at `plan`)."""
    num_classes: int | None = Field(default=None, gt=1)
    """Default: what the train channel's data says: a builtin dataset's classes (digits: 10), an
    image folder's class folders, or a Parquet label column's largest value + 1 (from the files'
    statistics). Required for `tfrecord`, `recordio` and `webdataset` train channels. A label outside
    `0..num_classes-1` is a bad sample (it fails, or is skipped under the channel's
    `max_corrupted_records`); with a `task`, so is a decoded mask holding another value (but
    `task.ignore_index`)."""
    pretrained: Literal[False] | str = False
    """`false`: train from scratch. A weights file (`.safetensors`, `.pth`, `.pt`, `.bin`; local, or
    `s3://` on SageMaker, where `submit` uploads a local one) loaded through timm on rank 0 before
    training: fine-tuning. The classifier is re-sized to `num_classes` (its weights are dropped when the
    class count differs). `true` is refused: nothing is downloaded from a model hub at run time. With a
    `factory`, every tensor must match the model by key and shape (one line naming the first mismatch
    otherwise)."""

    @model_validator(mode="after")
    def _one_model(self):
        if (self.name is None) == (self.factory is None):
            raise ValueError(
                "set exactly one of model.name (a timm model) or model.factory (package.module:function "
                "returning a torch.nn.Module)"
            )
        if self.params and self.factory is None:
            raise ValueError("model.params are the factory's arguments; set model.factory or remove them")
        return self

    @property
    def label(self) -> str:
        """What the console, the plan and the model card call the model."""
        label = self.name or self.factory
        if label is None:  # the validator requires one of them
            raise ValueError("model: neither model.name nor model.factory is set")
        return label

    @field_validator("pretrained", mode="before")
    @classmethod
    def _weights_file(cls, value):
        if value is True:
            raise ValueError(
                "pretrained: true would download weights at run time; name a weights file "
                "(a local path, or s3://bucket/key on SageMaker) or use false"
            )
        if isinstance(value, str) and not value.strip():
            raise ValueError("pretrained: an empty path; name a weights file or use false")
        if isinstance(value, str) and value.startswith("s3://"):
            bucket, _, key = value.removeprefix("s3://").partition("/")
            if not bucket or not key or key.endswith("/"):  # else refused only on rank 0, on the cluster
                raise ValueError(f"pretrained: {value} names no object (expected s3://bucket/key of a weights file)")
        return value


class TaskConfig(StrictModel):
    """What training minimises and validation measures, as your functions; without a `task`, the
    built-in classification (cross-entropy on `image` and `label`, accuracy and loss)."""

    loss: FunctionPath
    """`package.module:function` called as `loss(model, batch)` on every micro-batch, under DDP,
    autocast and accumulation as the built-in loss is; `batch` is a dict of tensors on the rank's
    device, one per field of the chain's output. It returns a scalar tensor, or `(tensor, {name:
    float})` whose numbers (at most 8, the same names each call) join the step lines and TensorBoard,
    averaged over ranks."""
    evaluate: FunctionPath | None = None
    """`package.module:function` called as `evaluate(model, batch)` on each validation batch (the
    model in eval mode, no grad), returning `{metric: float}` for that batch; each metric is
    averaged over all validation rows of all ranks (a batch's value weighed by its rows), printed as
    `validation step=N epoch=E <metric>=<value> ...` and put in report.json. Default: the mean `loss`."""
    metrics: FunctionPath | None = None
    """`package.module:function` returning `{name: torchmetrics.Metric}`: metrics over the whole
    validation set, across all ranks, each row once (AUROC, F1, mAP are not means of batches). Each
    metric's `update` gets what `predict` returns; its `compute` is on the validation line as
    `name=value`. Needs `predict`."""
    predict: FunctionPath | None = None
    """`package.module:function` called as `predict(model, batch)` on each validation batch, returning
    `(preds, target)` for every metric of `metrics`."""
    ignore_index: int | None = Field(default=None, ge=0, le=255)
    """A mask value that marks pixels of no class (255 for VOC's object borders): allowed in a decoded
    mask beside the classes `0..model.num_classes-1`, which are checked as each mask is decoded (a
    value outside both is one error line naming the file). Your loss must skip it
    (`cross_entropy(..., ignore_index=255)`)."""

    @model_validator(mode="after")
    def _metrics_and_predict(self):
        if (self.metrics is None) != (self.predict is None):
            missing = "task.predict" if self.predict is None else "task.metrics"
            raise ValueError(f"{missing}: task.metrics and task.predict go together (predict feeds each metric)")
        return self
