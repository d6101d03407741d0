"""Elastic data hosts against fixed sizes (issues 42, 57, 80): `sm-launch run --address` with
`autoscale:` on a Ray cluster whose autoscaler starts real raylets (`bench/elastic_jobs.py`), and
the loop replayed against the rates those jobs measured (`bench/elastic_replay.py`), whose median
and spread are the verdict.

Each pass first measures the trainer's rate with free data (a fixed job of one host at 0 ms an
image, `--probe-s`; its rate over the steps' compute time in the last 25 s, once the chain has
filled Ray Data's budget), then sets two phases of `--phase-s` each from it:

1. **heavy**: one host makes 0.6x what the trainer takes (`--heavy-share`);
2. **light**: one host makes 3x (`--light-share`).

Then, on fresh clusters: **elastic** (from 1 data host, `autoscale:` from 1 to `--max-hosts`),
**fixed 1** (what one host delivers in the heavy phase: the replay's rate), and the fixed size
the replay finds cheapest among those holding the wait (if not 1): the real ratios of this run.
The pass runs twice: as is, and beside a busy loop on one core (a slower trainer, measured again).

The **cached** arm runs the chain's cost in a prefix declared `deterministic: true`, with
`pipeline.cache: true` and `autoscale.min_data_hosts: 0`, for `--cached-epochs` epochs from the
2 hosts epoch 1 needs: once rank 0 seals the cache the loop gives the hosts back, and epochs 2 on
read the cache and run the crop on the train host's spare CPUs. It is judged against fixed 2
running the whole chain every epoch (the normal pass's real fixed 2 where it ran; the replayed one
always); the arithmetic for 4 epochs, 2 hosts in the first then none, is 0.83x.

Every job's cost per image counts the GPU host (the train host over the run and the data hosts
up, sampled every second, at `cluster.prices`' ml.g5.xlarge and ml.c5.xlarge, over the images
trained); the trainer ratio is elastic's images/s once fed (from the time the wait first held the
target) over the fixed size's.

    python bench/elastic.py [--phase-s 120] [--probe-s 60] [--max-hosts 4] [--copies 12]
                            [--cached-copies 3] [--cached-epochs 4] [--only normal|slow|cached]
                            [--resume DIR --budget-s S]

`--resume DIR` keeps each finished job's results in DIR and reuses them on the next run, and
`--budget-s` starts no job that would end past that many seconds (exit 3: run again to go on).

Ends with `RESULT elastic wait_pct_after=<the worse pass's median> time_to_target_s=<the later
median> cost_ratio=<median> cost_ratio_p10=... cost_ratio_p90=... cost_ratio_run=<this run's real
jobs> trainer_ratio=... (the same four) and the same for _slow and _cached, goal=...`, and draws
`bench/results/elastic.png`, `elastic-slow.png`, `elastic-cached.png` (the real jobs) and
`elastic-replay.png` (every ratio's spread against its goal).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cpu_roles import cores_between, describe, queued_by_thread
from elastic_jobs import (  # bench/, this script's folder
    DATA_TYPE,
    ROOT,
    SLOTS,
    TARGET,
    TRAIN_TYPE,
    WINDOW,
    BusyCore,
    JobKind,
    best_cost_ratio,
    buckets,
    host_seconds,
    images_per_s,
    job_seconds,
    run_job,
    usd_per_million_images,
    wait_pct,
    windows,
    write_images,
)
from elastic_plots import draw, draw_replay
from elastic_replay import Measured, percentiles, replay, replay_cached, replay_pass, spread
from results_log import report_result

PROBE_TAIL_S = 25.0
"""The free-data job's trainer rate is read over its last this many seconds."""
GOAL = (
    "wait_pct_after<=5,time_to_target_s<=120,cost_ratio<=0.97,trainer_ratio>=0.97,cost_ratio_slow<=0.97,"
    "trainer_ratio_slow>=0.97,cost_ratio_cached<=0.85,trainer_ratio_cached>=0.97"
)


def autoscale_cfg(max_hosts: int, min_hosts: int = 1):
    from elastic_jobs import COOLDOWN_S

    from smlaunch.config.autoscale import AutoscaleConfig

    return AutoscaleConfig(
        min_data_hosts=min_hosts,
        max_data_hosts=max_hosts,
        target_data_wait_pct=TARGET,
        cooldown_s=COOLDOWN_S,
        window_steps=WINDOW,
    )


def per_step_cv(steps: list[dict], rate_of) -> float:
    """A step's coefficient of variation, from the report's buckets of `n` steps each: the buckets'
    own (of `rate_of(bucket)`) times the square root of their mean size."""
    values = [rate_of(b) for b in steps if b["n"]]
    if len(values) < 3:
        return 0.1
    mean_n = statistics.mean(b["n"] for b in steps if b["n"])
    return statistics.pstdev(values) / statistics.mean(values) * math.sqrt(mean_n)


def changes(r: dict) -> list[dict]:
    return [e for e in r["report"].get("autoscale", {}).get("timeline", []) if e["change"]]


def join_and_leave_s(r: dict) -> tuple[float | None, float | None]:
    """From the elastic job: seconds from a host asked for to its node up, and from a host given
    back to its node gone (the medians over its changes; None where it made none)."""
    joins, leaves = [], []
    for e in changes(r):
        after = [(t, n) for t, n in r["hosts"] if t >= e["t"]]
        if e["change"] > 0:
            up = next((t for t, n in after if n >= e["wanted"]), None)
            joins += [up - e["t"]] if up else []
        else:
            gone = next((t for t, n in after if n <= e["wanted"]), None)
            leaves += [gone - e["t"]] if gone else []
    return (statistics.median(joins) if joins else None, statistics.median(leaves) if leaves else None)


def feeds_after_s(r: dict, one_host: float, trainer: float) -> float:
    """From the first added host up to when it feeds, in the elastic job: the middle of the first
    `WINDOW`-step window, begun once it is up and before the light phase, whose rate is halfway
    from what one host delivers (`one_host`) to what two would (at most `trainer`): the loop's own
    rule for an added host feeding (`ElasticDataHosts._fed_rate`). It was what the time to the
    target left once the host was up (its first window counted off), until the slow pass of
    2026-12-07 went to a third host (the probe read its trainer at 33 images/s, the heavy phase ran
    it at 50-60): that time held the third host's ask and join too, and the replay had the second
    host feed 68 s after it was up, where its rate showed it 45 s after (the normal pass: 19.3 s
    the old way, 18.7 s this way). 5 s where nothing was added."""
    add = next((e for e in changes(r) if e["change"] > 0), None)
    up = next((t for t, n in r["hosts"] if add and t >= add["t"] and n >= add["wanted"]), None)
    if up is None:
        return 5.0
    halfway = (one_host + min(2 * one_host, trainer)) / 2
    steps = [b for b in r["steps"] if up <= b["t"] < r["light_at"]]
    for i in range(len(steps)):
        window, n = [], 0
        for b in steps[i:]:
            window.append(b)
            n += b["n"]
            if n >= WINDOW:
                break
        if n < WINDOW:
            break
        time_s = sum(b["time"] for b in window)
        if sum(b["images"] for b in window) / time_s >= halfway:
            return max(0.0, window[-1]["t"] - time_s / 2 - up)
    return r["light_at"] - up


def measure(probe: dict, fixed1: dict, elastic: dict, heavy_ms: float, light_ms: float, phase_s: float) -> Measured:
    """The replay's inputs from this pass's real jobs."""
    tail = [b for b in probe["steps"] if probe["end"] - PROBE_TAIL_S <= b["t"] < probe["end"]]
    trainer = images_per_s(tail, 0, math.inf, compute_only=True)
    step_cv = per_step_cv(tail, lambda b: (b["time"] - b["wait"]) / b["n"])
    nominal = (SLOTS * 1000 / heavy_ms, SLOTS * 1000 / light_ms)
    heavy = [b for b in fixed1["steps"] if fixed1["first"] + 20 <= b["t"] < fixed1["light_at"]]
    delivered = images_per_s(heavy, 0, math.inf)
    # one host is the limit in the heavy phase (0.6x the trainer): what it delivers, against its clock
    efficiency = min(1.0, delivered / nominal[0]) if wait_pct(heavy, 0, math.inf) > TARGET else 1.0
    supply_cv = per_step_cv(heavy, lambda b: b["images"] / b["time"])
    join_s, leave_s = join_and_leave_s(elastic)
    join_s = join_s if join_s is not None else 8.0
    warm_s = feeds_after_s(elastic, nominal[0] * efficiency, trainer)
    return Measured(
        trainer=trainer,
        host_rates=(nominal[0] * efficiency, nominal[1] * efficiency),
        clocks=nominal,
        phase_s=phase_s,
        join_s=join_s,
        warm_s=warm_s,
        leave_s=leave_s if leave_s is not None else 8.0,
        step_cv=step_cv,
        supply_cv=supply_cv,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase-s", type=float, default=120.0, help="seconds of each phase (heavy, then light)")
    parser.add_argument("--probe-s", type=float, default=50.0, help="seconds of the free-data job timing the trainer")
    parser.add_argument("--heavy-share", type=float, default=0.6, help="one host makes this times the trainer's rate")
    parser.add_argument("--light-share", type=float, default=3.0)
    parser.add_argument("--max-hosts", type=int, default=4)
    parser.add_argument(
        "--copies", type=int, default=12, help="each digit this many times: epochs longer than a phase, as a channel's"
    )
    parser.add_argument("--cached-copies", type=int, default=2, help="the cached arm's epoch: each digit so many times")
    parser.add_argument("--cached-epochs", type=int, default=4)
    parser.add_argument("--crop", type=int, default=128, help="the chain's crop size: the trainer's speed")
    parser.add_argument("--only", choices=("normal", "slow", "cached"), help="one pass only (cached runs normal's too)")
    parser.add_argument("--resume", type=Path, help="keep finished jobs here and reuse them (split runs)")
    parser.add_argument("--budget-s", type=float, help="start no job that would end past this many seconds")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the clusters and the busy loop stop with the bench
    from smlaunch.cluster.prices import price_table

    prices = price_table()
    began = time.monotonic()
    if args.resume:
        args.resume.mkdir(parents=True, exist_ok=True)
    work_root = Path(tempfile.mkdtemp(prefix="smlaunch-elastic-bench-"))
    try:
        images = write_images(work_root / "train", copies=args.copies)
        cached_images = write_images(work_root / "train-cached", copies=args.cached_copies)
        print(
            f"{images} images (scikit-learn's digits x{args.copies}, PNG class folders; the cached arm's epoch: "
            f"{cached_images}); each job: {args.phase_s:g} s heavy, then {args.phase_s:g} s light; {TRAIN_TYPE} "
            f"${prices[TRAIN_TYPE]}/h, {DATA_TYPE} ${prices[DATA_TYPE]}/h",
            flush=True,
        )

        def job(name: str, kind: JobKind, phases: list[tuple[float, float]], expected_s: float | None = None) -> dict:
            kept = args.resume / f"{name}.json" if args.resume else None
            if kept is not None and kept.exists():
                print(f"{name}: kept from {kept}", flush=True)
                r = json.loads(kept.read_text())
            else:
                seconds = expected_s if expected_s is not None else sum(x for x, _ in phases)
                if args.budget_s and time.monotonic() - began + job_seconds(seconds) > args.budget_s:
                    raise OutOfBudget(name)
                work = work_root / name
                work.mkdir()
                (work / "train").symlink_to(work_root / ("train-cached" if kind.cached else "train"))
                r = run_job(work, kind, phases)
                if kept is not None:
                    kept.write_text(json.dumps(r))
            r["steps"] = buckets(r["report"])
            r["host_s"] = host_seconds(r["hosts"])
            r["usd_per_m"] = usd_per_million_images(r, prices)
            return r

        passes = {}
        for tag in ("normal", "slow"):
            if args.only in (None, tag) or (args.only == "cached" and tag == "normal"):
                with BusyCore() if tag == "slow" else contextlib.nullcontext():
                    passes[tag] = run_pass(tag, job, args, prices)
        if args.only in (None, "cached"):
            passes["cached"] = run_cached(job, args, prices, passes["normal"], cached_images)
        return finish(passes)
    except OutOfBudget as e:
        print(f"stopped before job {e} (--budget-s {args.budget_s:g}); run the same command again to go on")
        return 3
    finally:
        shutil.rmtree(work_root, ignore_errors=True)


def finish(passes: dict) -> int:
    """The verdict's RESULT line, every ratio's spread drawn against its goal."""
    for tag, out in passes.items():
        print(f"{tag}: {out['line']}")
    phased = [o for tag, o in passes.items() if tag != "cached"]
    metrics = []
    if phased:
        metrics.append(f"wait_pct_after={max(o['replay']['wait_pct_after'][0] for o in phased):.2f}")
        metrics.append(f"time_to_target_s={max(o['replay']['time_to_target_s'][0] for o in phased):.1f}")
    for tag, o in passes.items():
        suffix = "" if tag == "normal" else f"_{tag}"
        for ratio in ("cost_ratio", "trainer_ratio"):
            metrics.append(spread(f"{ratio}{suffix}", o["replay"][ratio]))
            metrics.append(f"{ratio}{suffix}_run={o['run'][ratio]:.3f}")
    draw_replay(passes, ROOT / "bench" / "results" / "elastic-replay.png", GOAL)
    report_result(f"RESULT elastic {' '.join(metrics)} goal={GOAL}")
    return 0


def run_pass(tag: str, job, args, prices: dict) -> dict:
    """The trainer timed with free data, the phases set from it, elastic and fixed 1 run, the loop
    replayed against what they measured, and the fixed size the replay finds cheapest run too."""
    prefix = "" if tag == "normal" else "slow-"
    probe = job(f"{prefix}probe", JobKind(1, False, 1, args.crop), [(args.probe_s, 0.0)])
    # its last `PROBE_TAIL_S` only: until the chain has filled Ray Data's budget, it runs flat out on
    # the same cores and halves the trainer (2 cores: 30 images/s over 10-28 s, 55-68 after)
    trainer = images_per_s(probe["steps"], probe["end"] - PROBE_TAIL_S, probe["end"], compute_only=True)
    heavy = SLOTS * 1000 / (args.heavy_share * trainer)
    light = SLOTS * 1000 / (args.light_share * trainer)
    print(
        f"{tag}: the trainer takes {trainer:.1f} images/s with free data; heavy {heavy:.1f} ms an image (one "
        f"host makes {args.heavy_share:g}x), light {light:.1f} ms ({args.light_share:g}x)",
        flush=True,
    )
    phases = [(args.phase_s, heavy), (args.phase_s, light)]
    elastic = job(f"{prefix}elastic", JobKind(1, True, args.max_hosts, args.crop), phases)
    under = [(t, w) for t, w in windows(elastic["steps"]) if t < elastic["light_at"] and w <= TARGET]
    elastic["time_to_target_s"] = (under[0][0] - elastic["first"]) if under else float("inf")
    settle = min(elastic["time_to_target_s"], args.phase_s)
    for line in elastic["autoscale_lines"]:
        print("  " + line.split("INFO smlaunch: ")[-1][:220])
    for t, node, activity in elastic.get("draining", []):
        print(f"  draining {node[-6:]} at {t - elastic['first']:.0f} s: {'; '.join(activity) or 'idle'}")
    results = {"elastic": elastic, "fixed-1": job(f"{prefix}fixed-1", JobKind(1, False, 1, args.crop), phases)}
    m = measure(probe, results["fixed-1"], elastic, heavy, light, args.phase_s)
    price = (prices[TRAIN_TYPE], prices[DATA_TYPE])
    replayed = replay_pass(m, autoscale_cfg(args.max_hosts), price, TARGET, args.max_hosts)
    cheapest = fixed_size(m, args.max_hosts)
    if cheapest > 1:
        kind = JobKind(cheapest, False, cheapest, args.crop)
        results[f"fixed-{cheapest}"] = job(f"{prefix}fixed-{cheapest}", kind, phases)
    fixed = results[f"fixed-{cheapest}"]
    for name, r in results.items():
        r["wait_heavy"] = wait_pct(r["steps"], r["first"] + settle, r["light_at"])
        r["wait_light"] = wait_pct(r["steps"], r["light_at"], r["end"])
        print(
            f"{tag} {name}: data wait {r['wait_heavy']:.1f} % heavy (after {settle:.0f} s), {r['wait_light']:.1f} % "
            f"light; {r['host_s']:.0f} data-host-seconds; ${r['usd_per_m']:.2f} per million images; "
            f"{images_per_s(r['steps'], r['first'] + settle, r['end']):.1f} images/s once fed",
            flush=True,
        )
    fed = lambda r: images_per_s(r["steps"], r["first"] + settle, r["end"])  # noqa: E731
    run = {"cost_ratio": elastic["usd_per_m"] / fixed["usd_per_m"], "trainer_ratio": fed(elastic) / fed(fixed)}
    own = [replay(m, 1, seed, autoscale_cfg(args.max_hosts), price) for seed in range(50)]
    own_usd = percentiles([1e6 * r.usd_per_image(*price) for r in own])
    draw(results, args, ROOT / "bench" / "results" / f"elastic{'' if tag == 'normal' else '-slow'}.png")
    bound = best_cost_ratio(prices, cheapest, light_hosts=1)
    line = (
        f"trainer {trainer:.1f} images/s free; replayed with one host delivering {m.host_rates[0]:.1f} images/s "
        f"heavy, a host up {m.join_s:.0f} s after the ask and feeding {m.warm_s:.0f} s later, gone {m.leave_s:.0f} s "
        f"after its release, step cv {m.step_cv:.2f}, supply cv {m.supply_cv:.2f}: cheapest fixed size holding "
        f"{TARGET:g} %: {cheapest}; cost_ratio {fmt(replayed['cost_ratio'])} (this run {run['cost_ratio']:.3f}; an "
        f"oracle: {bound:.3f}), trainer_ratio {fmt(replayed['trainer_ratio'])} (this run {run['trainer_ratio']:.3f}); "
        f"wait after {fmt(replayed['wait_pct_after'], 1)} % (this run {elastic['wait_heavy']:.1f}) reached in "
        f"{fmt(replayed['time_to_target_s'], 0)} s (this run {elastic['time_to_target_s']:.0f}); elastic's own cost: "
        f"${elastic['usd_per_m']:.2f} per million images, replayed {fmt(own_usd, 2)}"
        + ("" if own_usd[1] <= elastic["usd_per_m"] <= own_usd[2] else " (outside the replay: the model misses a cost)")
    )
    return {"replay": replayed, "run": run, "line": line, "measured": m, "fixed": fixed, "cheapest": cheapest}


def fixed_size(m: Measured, max_hosts: int) -> int:
    """The smallest fixed size the replay holds at the target over the heavy phase in most replays."""
    for n in range(1, max_hosts + 1):
        waits = [replay(m, n, seed).wait_pct(20, m.phase_s) for seed in range(20)]
        if statistics.median(waits) <= TARGET:
            return n
    return max_hosts


def run_cached(job, args, prices: dict, normal: dict, rows: int) -> dict:
    """The cached arm: the hosts epoch 1 needs, the loop down to none over the sealed cache; against
    as many fixed hosts running the whole chain every epoch, uncached (run, and replayed)."""
    m0: Measured = normal["measured"]
    hosts = normal["cheapest"]
    heavy = SLOTS * 1000 / m0.clocks[0]
    expected = args.cached_epochs * rows / m0.trainer * 1.2
    r = job(
        "cached",
        JobKind(hosts, True, hosts, args.crop, cached=True, epochs=args.cached_epochs),
        [(1e9, heavy)],
        expected,
    )
    fixed = job(
        "cached-fixed",
        JobKind(hosts, False, hosts, args.crop, cached=True, epochs=args.cached_epochs),
        [(1e9, heavy)],
        expected,
    )
    released = next((e for e in changes(r) if e["change"] < 0 and e["wanted"] == 0), None)
    zero_from = released["t"] + 10 if released else r["end"]
    at_zero = [b for b in r["steps"] if b["t"] >= zero_from]
    cores_at_zero = cores_between(r.get("cpu", []), zero_from, r["end"])  # who takes the trainer's cores
    cores_fixed = cores_between(fixed.get("cpu", []), fixed["first"] + zero_from - r["first"], fixed["end"])
    said = [_number(line, r"spare CPUs alone make ([\d.]+) images/s") for line in r["autoscale_lines"]]
    clock = next((float(x) for x in said if x), 0.0)
    spare = 4 - 1  # the 4-CPU train host less its one train worker (`cache_setup.without_data_hosts`)
    trainer_at_zero = images_per_s(at_zero, 0, math.inf, compute_only=True) if at_zero else m0.trainer
    sealed = [t for t, x in r["cache_lines"] if "cache: sealed" in x]
    m = Measured(
        **{
            **m0.__dict__,
            "host_rates": (m0.host_rates[0], 10 * m0.trainer),  # epochs 2 on: only the crop runs on the hosts
            "clocks": (m0.clocks[0], 20 * m0.trainer),
            "epochs": args.cached_epochs,
            "epoch_rows": rows,
            "seal_s": 1.0,
            "spare_slots": spare,
            "zero_rate": clock or 10 * m0.trainer,
            "zero_clock": (clock or 10 * m0.trainer) / spare / SLOTS,
            "trainer_at_zero": trainer_at_zero,
            "epoch_start_s": epoch_start_s(r),
        }
    )
    alone = Measured(
        **{
            **m.__dict__,
            "trainer": images_per_s(fixed["steps"], fixed["first"], fixed["end"], compute_only=True),
            "epoch_start_s": epoch_start_s(fixed),
            "seal_s": math.inf,  # never sealed: the whole chain every epoch
        }
    )
    price = (prices[TRAIN_TYPE], prices[DATA_TYPE])
    replayed = replay_cached(m, alone, autoscale_cfg(hosts, min_hosts=0), price, hosts)
    run = {
        "cost_ratio": r["usd_per_m"] / fixed["usd_per_m"],
        "trainer_ratio": images_per_s(r["steps"], r["first"], r["end"])
        / images_per_s(fixed["steps"], fixed["first"], fixed["end"]),
    }
    draw(
        {"cached elastic": r, f"fixed {hosts}, uncached": fixed},
        args,
        ROOT / "bench" / "results" / "elastic-cached.png",
        phases=False,
    )
    epochs = args.cached_epochs
    arithmetic = (epochs * price[0] + hosts * price[1]) / (epochs * (price[0] + hosts * price[1]))
    line = (
        (
            f"{epochs} epochs of {rows} images from {hosts} hosts: sizes {r['report']['autoscale']['sizes']}, "
            f"{r['host_s']:.0f} data-host-seconds, sealed {sealed[0] - r['first']:.0f} s after the first step"
            if sealed
            else "never sealed"
        )
        + (f", all given back {released['t'] - r['first']:.0f} s in" if released else ", never down to none")
        + (
            f"; trainer {trainer_at_zero:.1f} images/s with none, {alone.trainer:.1f} beside fixed "
            f"{hosts}; wait at none {wait_pct(at_zero, 0, math.inf):.1f} %, an epoch's first step waits "
            f"{m.epoch_start_s:.1f} s (fixed: {alone.epoch_start_s:.1f}); ${r['usd_per_m']:.2f} per million images "
            f"against ${fixed['usd_per_m']:.2f}; "
            f"cost_ratio {fmt(replayed['cost_ratio'])} (this run {run['cost_ratio']:.3f}; the arithmetic: "
            f"{arithmetic:.3f}), trainer_ratio {fmt(replayed['trainer_ratio'])} (this run {run['trainer_ratio']:.3f}); "
            f"cores used at none: {describe(cores_at_zero)}; by fixed {hosts} from as far in: {describe(cores_fixed)}; "
            f"the trainer's threads queued most at none: "
            f"{queued_by_thread(r.get('cpu_threads', []), zero_from, r['end'])}, beside fixed {hosts}: "
            f"{queued_by_thread(fixed.get('cpu_threads', []), fixed['first'] + zero_from - r['first'], fixed['end'])}"
        )
    )
    return {"replay": replayed, "run": run, "line": line}


def epoch_start_s(r: dict) -> float:
    """The median wait of the first step of the job's epochs 2 on (the report's step records)."""
    firsts: dict[int, float] = {}
    for step in r["report"]["steps"]:
        firsts.setdefault(step["epoch"], step["data_wait_s"])
    return statistics.median([w for e, w in firsts.items() if e > 1] or [0.0])


def _number(line: str, pattern: str) -> str | None:
    found = re.search(pattern, line)
    return found.group(1) if found else None


def fmt(p: tuple[float, float, float], digits: int = 3) -> str:
    """A replayed ratio: its median and its 10th-90th percentiles."""
    return f"{p[0]:.{digits}f} [{p[1]:.{digits}f}-{p[2]:.{digits}f}]"


class OutOfBudget(Exception):
    """The next job would end past `--budget-s`."""


if __name__ == "__main__":
    sys.exit(main())
