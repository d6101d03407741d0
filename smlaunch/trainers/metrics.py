"""Validation metrics over the whole validation set, across every rank, each row once: torchmetrics
`Metric`s updated batch by batch on each rank and synced once, in `compute` (AUROC, F1 or mAP are not
a mean of per-batch values; `../shared/notes/recipe.md` section 3).

Each row is counted once by construction: the validation channel is split between the ranks with
`streaming_split(equal=False)` (`trainers.fit.UnevenSplit`), which pads nothing, unlike a
`DistributedSampler`; the ranks' shares differ by up to a block, and a rank's may be empty. Each
state meets the others' through `all_gather_object` (`gather_state`, set as every metric's
`dist_sync_fn`), which takes any shape: torchmetrics' own tensor gather, given an empty rank's
state beside full ones under gloo, ended that rank's process (torchmetrics 1.9, torch 2.14). Then
torchmetrics reduces the gathered states as it always does. `compute` is a collective: every rank
calls it, for every metric, in the same order, after its last batch.
"""

from __future__ import annotations

from smlaunch.errors import UserError


def classification_metrics(num_classes: int | None) -> dict:
    """The built-in classification's: top-1 accuracy, and top-5 where there are more than 5 classes."""
    from torchmetrics.classification import MulticlassAccuracy

    if not num_classes:
        return {}
    metrics = {"accuracy": MulticlassAccuracy(num_classes, top_k=1, average="micro")}
    if num_classes > 5:
        metrics["top5"] = MulticlassAccuracy(num_classes, top_k=5, average="micro")
    return metrics


def user_metrics(path: str) -> dict:
    """`task.metrics()`: a dict of torchmetrics `Metric`s, checked."""
    from torchmetrics import Metric

    from smlaunch.user_code import resolve

    made = resolve(path, "task.metrics")()
    if not isinstance(made, dict) or not made:
        raise UserError(f"task.metrics {path} returned {type(made).__name__}; return {{name: torchmetrics.Metric}}")
    for name, metric in made.items():
        if not isinstance(name, str) or not isinstance(metric, Metric):
            raise UserError(
                f"task.metrics {path}: {name!r} is a {type(metric).__name__}, not a torchmetrics.Metric "
                "(a mean of batches is task.evaluate's)"
            )
    return made


def gather_state(tensor, group=None) -> list:
    """One metric state from every rank, in rank order (a `dist_sync_fn`): pickled, so shapes may differ."""
    import torch.distributed as dist

    found: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(found, tensor.detach().cpu(), group=group)
    return [t.to(tensor.device) for t in found]


def compute_all(metrics: dict, where: str) -> dict[str, float]:
    """Every metric's value over all ranks (the sync is in `compute`), as a Python number; reset."""
    import warnings

    out = {}
    for name, metric in metrics.items():
        metric.dist_sync_fn = gather_state
        with warnings.catch_warnings():  # a rank with no rows: "compute called before update", rightly
            warnings.filterwarnings("ignore", message=".*was called before the ..update.. method")
            value = metric.compute()
        if getattr(value, "numel", lambda: 1)() != 1:
            raise UserError(
                f"{where}: metric {name!r} computed a tensor of shape {tuple(value.shape)}; give it a "
                "single number (e.g. average='macro')"
            )
        out[name] = float(value)
        metric.reset()
    return out
