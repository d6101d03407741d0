"""Validation across ranks whose shards differ in size, in real gloo process groups of 3.

Whole-set metrics (torchmetrics, issue 78) are computed over every rank's rows once, an empty
rank included: an AUROC over 3 ranks equals scikit-learn's over all rows.

Ray Data can hand one rank several blocks of the validation set and another none (a few large
blocks over many ranks). No rank may then wait in a collective the others never reach: with the
DDP-wrapped model's forward (a buffer broadcast per call) the ranks with more batches waited for
ever (seen in a job: 3 ranks, validation in Pipe mode). Every rank must return the totals over
all ranks' rows, computed with rank 0's BatchNorm statistics.
"""

import contextlib
import multiprocessing
import os

import torch

from smlaunch.trainers.control import Control
from smlaunch.trainers.evaluate import validate
from smlaunch.trainers.task import Classification
from support.ports import free_port

NORM = {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}
DEADLINE_S = 90


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    )


def _batches(rank: int, counts: list[int]):
    g = torch.Generator().manual_seed(100 + rank)
    return [
        {
            "image": torch.randint(0, 256, (5, 3, 8, 8), generator=g, dtype=torch.uint8),
            "label": torch.randint(0, 3, (5,), generator=g),
            "host": torch.full((5,), rank),
            "id": torch.arange(5) + 5 * i + 100 * rank,
        }
        for i in range(counts[rank])
    ]


class LabelMean:
    """A user's task as `trainers.task` calls one: its own metric names, a mean per batch."""

    def inputs(self, batch, device):
        return {"label": batch["label"].to(device)}

    def measure(self, model, inputs):
        return {"label_mean": inputs["label"].double().mean(), "one": 1.0}, None

    def metrics(self):
        return {}


class Scored(Classification):
    """A user's whole-set metrics (`task.metrics`, `task.predict`): AUROC and F1 of "label is not 0"
    from the first logit's complement, as torchmetrics computes them."""

    def measure(self, model, inputs):
        logits = model(inputs["image"]).float()
        return {}, (1 - logits.softmax(1)[:, 0], (inputs["label"] > 0).long())

    def metrics(self):
        from torchmetrics.classification import BinaryAUROC, BinaryF1Score

        return {"auroc": BinaryAUROC(), "f1": BinaryF1Score()}


def _rank_main(rank: int, world: int, port: int, counts: list[int], out) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(_model())
    with torch.no_grad():  # each rank's own BatchNorm statistics, as after its last train step
        model.module[1].running_mean.fill_(float(rank))
    host_rows = torch.zeros(world + 1, dtype=torch.long)
    control = Control(world, rank)
    result = validate(
        model,
        _batches(rank, counts),
        Classification(NORM, 3),
        torch.device("cpu"),
        host_rows,
        7,
        1,
        control,
        contextlib.nullcontext,
    )
    users = validate(
        model,
        _batches(rank, counts),
        LabelMean(),
        torch.device("cpu"),
        torch.zeros_like(host_rows),
        7,
        1,
        control,
        contextlib.nullcontext,
    )
    scored = validate(
        model,
        _batches(rank, counts),
        Scored(NORM, 3),
        torch.device("cpu"),
        torch.zeros_like(host_rows),
        7,
        1,
        control,
        contextlib.nullcontext,
    )
    out.put((rank, result, host_rows.tolist(), model.module.training, users, scored))
    dist.destroy_process_group()


def test_ranks_with_uneven_validation_shards_all_return_the_totals_over_every_rank():
    counts = [3, 0, 1]
    world = len(counts)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, counts, out)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        results = {}
        for _ in range(world):
            rank, result, host_rows, training, users, scored = out.get(timeout=DEADLINE_S)  # a hang fails here
            results[rank] = (result, host_rows, training, users, scored)
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    # What one process computes over every rank's batches with rank 0's statistics.
    model = _model().eval()
    with torch.no_grad():
        model[1].running_mean.fill_(0.0)
        from smlaunch.trainers.evaluate import normalise

        batches = [b for r in range(world) for b in _batches(r, counts)]
        logits = torch.cat([model(normalise(b["image"], torch.device("cpu"), NORM)) for b in batches])
        labels = torch.cat([b["label"] for b in batches])
    expected = {
        "step": 7,
        "epoch": 1,
        "rows": 20,
        "accuracy": round((logits.argmax(1) == labels).double().mean().item(), 5),
        "loss": round(torch.nn.functional.cross_entropy(logits, labels).item(), 5),
    }
    from sklearn.metrics import f1_score, roc_auc_score

    score, positive = (1 - logits.softmax(1)[:, 0]).numpy(), (labels > 0).numpy()
    for rank in range(world):
        result, host_rows, training, users, scored = results[rank]
        # Whole-set metrics over every rank's rows once (rank 1's empty shard included): scikit-learn's.
        assert scored["rows"] == 20 and set(scored) == {"step", "epoch", "rows", "auroc", "f1"}, scored
        assert abs(scored["auroc"] - roc_auc_score(positive, score)) < 1e-5, scored
        assert abs(scored["f1"] - f1_score(positive, score > 0.5)) < 1e-5, scored
        assert result["rows"] == expected["rows"] and result["step"] == 7 and result["epoch"] == 1, result
        assert abs(result["accuracy"] - expected["accuracy"]) < 1e-5 and abs(result["loss"] - expected["loss"]) < 1e-4
        assert host_rows[rank] == 5 * counts[rank] and sum(host_rows) == 5 * counts[rank]  # this rank's rows
        assert training  # back in train mode for the next step
        # A user's metrics, by the names it returns, each weighed by its batch's rows over all ranks
        # (rank 1 has no batch and so knows no names: they come from the others).
        assert users == {
            "step": 7,
            "epoch": 1,
            "label_mean": round(labels.double().mean().item(), 5),
            "one": 1.0,
            "rows": 20,
        }, users
