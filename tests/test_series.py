"""Bounded series: the size stays under its cap however many records go in, and every bucket's
count, sum, min, max and mean match a brute-force pass over the records it stands for."""

from __future__ import annotations

import json
import random

import pytest

from smlaunch.series import HEAD, Buckets, StepLog, bucket_mean, merge_samples


def _records(n: int, seed: int = 0, steps_per_epoch: int = 997) -> list[dict]:
    rng = random.Random(seed)
    out, t = [], 1000.0
    for step in range(1, n + 1):
        step_s = rng.uniform(0.05, 0.5)
        t += step_s
        out.append(
            {
                "step": step,
                "t": round(t, 3),
                "epoch": 1 + (step - 1) // steps_per_epoch,
                "loss": rng.uniform(0, 3),
                "step_time_s": step_s,
                "data_wait_s": rng.uniform(0, step_s),
                "images_per_s": rng.uniform(100, 2000),
            }
        )
    return out


def test_buckets_stay_under_capacity_and_cover_every_record_once():
    buckets = Buckets(
        16,
        new=lambda r: {"n": 1, "lo": r, "hi": r},
        merge=lambda a, b: {"n": a["n"] + b["n"], "lo": a["lo"], "hi": b["hi"]},
    )
    for i in range(100_000):
        buckets.add(i)
        assert len(buckets.items) <= 16
    assert sum(b["n"] for b in buckets.items) == 100_000
    assert all(b["n"] == buckets.width for b in buckets.items[:-1])  # only the newest is still filling
    assert [b["lo"] for b in buckets.items[1:]] == [b["hi"] + 1 for b in buckets.items[:-1]]  # contiguous
    assert buckets.items[0]["lo"] == 0 and buckets.items[-1]["hi"] == 99_999


def test_step_buckets_match_brute_force_and_the_size_stays_bounded():
    records = _records(20_000)
    log = StepLog(tail=50, capacity=32)
    sizes = []
    for i, r in enumerate(records, 1):
        log.add(r)
        if i in (2_000, 20_000):
            sizes.append(len(json.dumps(log.to_dict())))
    assert sizes[1] < 1.2 * sizes[0]  # ten times the records, about the same bytes
    assert len(log.buckets.items) <= 32 and log.count == 20_000
    assert [r["step"] for r in log.recent] == list(range(19_951, 20_001)) and log.last == records[-1]
    by_step = {r["step"]: r for r in records}
    for b in log.buckets.items:
        inside = [by_step[s] for s in range(b["first_step"], b["step"] + 1)]
        assert b["n"] == len(inside)
        for f in ("loss", "step_time_s", "data_wait_s", "images_per_s"):
            values = [r[f] for r in inside]
            assert b["sum"][f] == pytest.approx(sum(values))
            assert (b["min"][f], b["max"][f]) == (min(values), max(values))
            assert bucket_mean(b)[f] == pytest.approx(sum(values) / len(values))
        assert b["sum"]["images"] == pytest.approx(sum(r["images_per_s"] * r["step_time_s"] for r in inside))
        assert (b["first_t"], b["t"]) == (inside[0]["t"], inside[-1]["t"])


def test_steady_totals_leave_out_the_warm_up_exactly():
    records = _records(5_000, seed=1, steps_per_epoch=700)
    log = StepLog(tail=10, capacity=8)
    for r in records:
        log.add(r)
    steady = log.steady()
    rest = records[HEAD:]
    assert steady["n"] == len(rest)
    assert steady["step_time_s"] == pytest.approx(sum(r["step_time_s"] for r in rest))
    assert steady["data_wait_s"] == pytest.approx(sum(r["data_wait_s"] for r in rest))
    assert steady["images"] == pytest.approx(sum(r["images_per_s"] * r["step_time_s"] for r in rest))
    for epoch, totals in steady["epochs"].items():
        mine = [r for r in rest if r["epoch"] == epoch]
        assert totals["n"] == len(mine)
        assert totals["step_time_s"] == pytest.approx(sum(r["step_time_s"] for r in mine))
    # a report keeps what `to_dict` wrote and the exact tail beside it; reading it back changes nothing
    again = StepLog.from_dict(json.loads(json.dumps(log.to_dict())), list(log.recent))
    assert again.to_dict() == json.loads(json.dumps(log.to_dict())) and again.last == log.last
    assert again.steady()["images"] == pytest.approx(steady["images"])


def test_a_short_run_keeps_every_step_as_its_own_bucket():
    records = _records(8)
    log = StepLog.from_steps(records)
    assert [bucket_mean(b)["images_per_s"] for b in log.buckets.items] == [r["images_per_s"] for r in records]
    assert log.steady()["n"] == 8  # too short to leave a warm-up out


def test_merged_host_samples_are_the_weighted_means_of_what_they_stand_for():
    rng = random.Random(2)
    samples = [
        {
            "t": float(i),
            "cpu_pct": rng.uniform(0, 100),
            "mem_pct": rng.uniform(0, 100),
            "gpu_pct": [rng.uniform(0, 100), None if i % 3 == 0 else rng.uniform(0, 100)],
        }
        for i in range(1000)
    ]
    buckets = Buckets(10, new=lambda x: {"n": 1, **x}, merge=merge_samples)
    for x in samples:
        buckets.add(x)
    assert len(buckets.items) <= 10 and sum(b["n"] for b in buckets.items) == 1000
    start = 0
    for b in buckets.items:
        inside = samples[start : start + b["n"]]
        start += b["n"]
        for key in ("t", "cpu_pct", "mem_pct"):
            assert b[key] == pytest.approx(sum(x[key] for x in inside) / len(inside), abs=0.01)
        assert b["gpu_pct"][0] == pytest.approx(sum(x["gpu_pct"][0] for x in inside) / len(inside), abs=0.01)
        readable = [x["gpu_pct"][1] for x in inside if x["gpu_pct"][1] is not None]
        assert min(readable) <= b["gpu_pct"][1] <= max(readable)  # a None leaves the mean to the others
