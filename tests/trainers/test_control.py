"""The ranks' control plane without Ray: real gloo process groups of 2 and 3 processes.

A drain step (some ranks out of data) must leave every rank with the same weights, and those must
be what one process would get from the mean gradient over every micro-batch of every rank; the
step records must sum every rank's numbers; a resumed epoch must drop exactly the consumed ids.
"""

import os

import pytest
import torch
import torch.multiprocessing as mp

from smlaunch.trainers.control import Control, StepNumbers, record, sum_gradients
from smlaunch.trainers.resume import without_consumed
from support.ports import free_port


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3)


def _batches(rank: int, counts: list[int]):
    """Rank r's micro-batches: `counts[r]` of them, each 2 rows, different on every rank."""
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(2, 4, generator=g), torch.randint(0, 3, (2,), generator=g)) for _ in range(counts[rank])]


def _rank_main(rank: int, world: int, port: int, counts: list[int], out: dict) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    control = Control(world)
    control._stop_locally = lambda: (rank == 1, False)  # rank 1 saw a stop request; every rank must learn it
    asked = []  # Ray Train's preemption notice is a barrier: every rank asks at the step rank 0 polled, and only then
    control._preemption_notice = lambda: asked.append(control) or "a notice"
    model = torch.nn.parallel.DistributedDataParallel(_model())
    micro = _batches(rank, counts)
    # a timed checkpoint is rank 0's call: the others' clocks are not counted
    decision = control.exchange(
        len(micro) == 2, bool(micro), StepNumbers(1.0 + rank, 1, 2, 0.5, 1.0, 0.25, 2), checkpoint_due=rank != 0
    )
    control._stop_locally = lambda: (False, rank == 0)
    timed = control.exchange(True, True, None, checkpoint_due=rank == 0)
    with model.no_sync():
        for x, y in micro:
            torch.nn.functional.cross_entropy(model(x), y).backward()
    sum_gradients(model, len(micro), world)
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    out[rank] = {
        "decision": decision,
        "timed": timed.checkpoint,
        "noticed": (timed.stop, len(asked)),
        "weights": [p.detach().clone() for p in model.parameters()],
        "gathered": control.gather(rank * 10, rank),
        "broadcast": control.broadcast(f"from {rank}"),
    }
    dist.destroy_process_group()


@pytest.mark.parametrize("counts", [[2, 1], [2, 0, 1]])
def test_a_drain_step_gives_every_rank_the_mean_gradient_of_all_micro_batches(counts):
    world = len(counts)
    out = mp.Manager().dict()
    mp.spawn(_rank_main, args=(world, free_port(), counts, out), nprocs=world, join=True)
    # One process, every micro-batch of every rank, their mean gradient: the reference.
    reference = _model()
    everything = [b for rank in range(world) for b in _batches(rank, counts)]
    for x, y in everything:
        (torch.nn.functional.cross_entropy(reference(x), y) / len(everything)).backward()
    torch.optim.SGD(reference.parameters(), lr=0.5).step()
    for rank in range(world):
        for got, want in zip(out[rank]["weights"], reference.parameters(), strict=False):
            assert torch.allclose(got, want, atol=1e-6), (rank, got, want)
        decision = out[rank]["decision"]
        assert not decision.all_full and decision.any_data and decision.stop  # rank 1's stop reached all
        assert not decision.checkpoint and out[rank]["timed"]  # rank 0's timer reached all, no one else's
        assert out[rank]["noticed"] == (True, 1)  # asked once, at rank 0's poll, and the notice stops every rank
        assert decision.previous == [
            sum(1.0 + r for r in range(world)),
            world,
            2 * world,
            0.5 * world,
            1.0 * world,
            0.25 * world,
            2 * world,
            *[0.0] * 8,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
        ]  # no loss metrics (classification); the rate, norm, skipped count and the rest's time (none here)
        assert not decision.end
        assert out[rank]["broadcast"] == "from 0"
    assert out[0]["gathered"] == [r * 10 for r in range(world)]


def test_a_step_record_covers_every_rank():
    entry = record(7, 2, [3.0, 4, 256, 0.2, 2.0, 5.12, 256], world=2)  # 2 ranks, 4 micro-batches, 1 s mean step
    assert (
        entry["step"],
        entry["epoch"],
        entry["loss"],
        entry["step_time_s"],
        entry["data_wait_s"],
        entry["images_per_s"],
        entry["chain_s"],
        entry["chain_rows"],
    ) == (7, 2, 0.75, 1.0, 0.1, 256.0, 5.12, 256)
    assert record(7, 2, [3.0, 4, 256, 0.2, 2.0], world=2)["chain_rows"] == 0  # a record without the chain's time
    cached = StepNumbers(3.0, 4, 256, 0.2, 2.0, 5.12, 256, tail_s=1.28).as_list()  # with a cache: the rest's share
    assert record(7, 2, cached, world=2)["tail_s"] == 1.28 and "tail_s" not in entry


def test_one_rank_needs_no_collective():
    control = Control(world=1)
    control._stop_locally = lambda: (False, False)
    decision = control.exchange(True, True, None)
    assert decision.all_full and decision.any_data and not decision.stop and decision.previous is None
    flushed = control.flush(StepNumbers(1.0, 1, 2, 0.1, 0.2))
    assert flushed == [1.0, 1, 2, 0.1, 0.2, 0.0, 0, *[0.0] * 8, 0, 0.0, 0.0, 0, 0.0]
    model = _model()
    model(torch.ones(1, 4)).sum().backward()
    before = model.weight.grad.clone()
    sum_gradients(model, 2, world=1)  # two micro-batches' summed gradient becomes their mean
    assert torch.allclose(model.weight.grad, before / 2)


def test_a_resumed_epoch_drops_exactly_the_consumed_ids_and_regroups_full_batches():
    batches = [{"id": torch.arange(i, i + 4), "image": torch.arange(i, i + 4) * 10} for i in range(0, 20, 4)]
    consumed = torch.tensor([0, 1, 5, 9, 10, 11, 19])
    out = list(without_consumed(iter(batches), consumed, batch_size=4))
    ids = torch.cat([b["id"] for b in out]).tolist()
    assert ids == [i for i in range(20) if i not in consumed.tolist()]
    assert [len(b["id"]) for b in out] == [4, 4, 4, 1]  # full batches, then what is left
    assert all(torch.equal(b["image"], b["id"] * 10) for b in out)  # columns stay aligned


class _Guard:
    """A `LostHostGuard` stand-in that finds algo-3 lost; it records how each rank asked."""

    def __init__(self, rank: int, asked: list):
        self.rank, self.asked = rank, asked

    def error(self, force: bool = False):
        from smlaunch.pipelines.sources.host_loss import HostLost

        self.asked.append(force)
        return HostLost(f"host algo-3 was lost (seen by rank {self.rank})")


def _lost_main(rank: int, world: int, port: int, out: dict) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    asked: list = []
    control = Control(world, rank, _Guard(rank, asked))
    if rank == 0:
        control._stop_locally = lambda: (False, False)  # rank 0 would read Ray's KV store; the others never do
    try:
        control.exchange(True, True, None)
        out[rank] = ("no error", asked)
    except Exception as exc:
        out[rank] = (f"{type(exc).__name__}: {exc}", asked)
    dist.destroy_process_group()


def test_a_host_lost_that_rank_0_sees_stops_every_rank_at_the_same_step():
    world = 3
    out = mp.Manager().dict()
    mp.spawn(_lost_main, args=(world, free_port(), out), nprocs=world, join=True)
    assert out[0] == ("HostLost: host algo-3 was lost (seen by rank 0)", [False])  # one watcher: rank 0
    for rank in (1, 2):  # told by the exchange, they look once, for the exact message
        assert out[rank] == (f"HostLost: host algo-3 was lost (seen by rank {rank})", [True])


def _sum_main(rank: int, world: int, port: int, out: dict) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out[rank] = Control(world)._all_reduce([0.1 * (rank + 1), 1.0, 1e-17 * rank, 3.3**rank])
    dist.destroy_process_group()


def test_every_rank_gets_the_same_sum_to_the_bit_with_a_world_not_a_power_of_two():
    world = 5  # ranks 0-3 double recursively; rank 4 hands its numbers to rank 0 and gets the sum back
    out = mp.Manager().dict()
    mp.spawn(_sum_main, args=(world, free_port(), out), nprocs=world, join=True)
    assert all(out[r] == out[0] for r in range(world))  # identical bits: the ranks' decisions agree
    assert out[0] == pytest.approx([0.1 * 15, 5.0, 1e-17 * 10, sum(3.3**r for r in range(world))])


def test_a_step_record_carries_the_numbers_a_user_s_loss_returns_averaged_over_its_micro_batches():
    from smlaunch.launcher.job.train_progress import metric_line
    from smlaunch.trainers.control import record

    summed = StepNumbers(2.0, 2, 64, 0.1, 0.4, metric_sums=(3.0, 1.0, *[0.0] * 6), metric_micro=2).as_list()
    entry = record(5, 1, summed, 1, ("mae", "r2"))
    assert entry["metrics"] == {"mae": 1.5, "r2": 0.5} and entry["loss"] == 1.0
    assert metric_line(entry).endswith(" mae=1.5 r2=0.5") and metric_line(entry).startswith("step=5 loss=1.0000 ")
    assert "metrics" not in record(5, 1, summed, 1)  # the built-in task returns none
