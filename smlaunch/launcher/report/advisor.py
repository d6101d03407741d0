"""The bottleneck verdict and the offload advisor: from one run's measurements, how many CPU
hosts of which type the next run should add, at what predicted speed and cost.

Three rates are measured in every run (pure arithmetic on the report here; nothing runs):

* **GPU-bound rate**: images per second of trainer compute alone (step time minus the time spent
  waiting for the batch), i.e. what the trainer would reach if data were free. A step record
  holds every rank's images over the mean rank's time, so this is the rate of all the run's train
  workers together; the report also gives it per worker (that rate x workers), and the
  recommendation per GPU host, so a run on more or fewer GPU hosts scales its data hosts with them.
* **Per-slot chain rate**: images per second one CPU slot of the preprocessing chain delivers
  (rows over chain seconds, summed per host by the trainer from each row's `prep_s`).
* **Measured rate**: images per second the run actually trained at.

A host's pipeline rate is its CPU slots times the per-slot rate (its vCPUs; scaled like the
simulated cluster on a local run). The prediction for k data hosts is FastFlow's model,
min(GPU-bound rate, pipeline rate), plus an overhead paid once per epoch: the trainer's time for
an epoch beyond what the model gives for its images (Ray Data starts a new execution per epoch,
and its first and last blocks do not overlap with training). A run that shows no whole epoch
uses instead the efficiency it showed against the model (measured over model rate) as a factor.
With no data hosts (k = 0) the pipeline gets the GPU host's own CPUs less one per train worker.
FastFlow's rule says offloading pays when the GPU-bound rate exceeds 1.3x the GPU host's own
pipeline rate.
"""

from __future__ import annotations

import math
import statistics

from smlaunch.text import plural

INPUT_BOUND_WAIT_PCT = 15.0
COMPUTE_BOUND_WAIT_PCT = 5.0
OFFLOAD_RATIO = 1.3
"""FastFlow (Um et al., VLDB 2023): offload when the GPU-bound rate over the local pipeline's exceeds this."""
GOOD_ENOUGH = 0.9
"""The recommendation is the cheapest option per epoch among those within this fraction of the fastest."""


def verdict(summary: dict, utilisation: dict, advisor: dict | None = None) -> dict:
    """input-bound / compute-bound / balanced, with the numbers that decided it.

    The data wait decides; the advisor's capacity figures are added as evidence, and flag a run
    whose pipeline could not keep up but never showed it because its head start (blocks made
    while the trainer started) lasted the whole run."""
    wait = summary.get("data_wait_pct", 0.0)
    data_cpu = utilisation.get("data_cpu_pct")
    train_gpu = utilisation.get("train_gpu_pct")
    evidence = [f"the trainer waited for data {wait:.1f} % of its step time"]
    if data_cpu is not None:
        evidence.append(f"data hosts' CPUs averaged {data_cpu:.0f} % busy")
    if train_gpu is not None:
        evidence.append(f"train hosts' GPUs averaged {train_gpu:.0f} % busy")
    capacity, gpu_bound = (
        (advisor or {}).get("pipeline_images_per_s"),
        (advisor or {}).get("rates", {}).get("gpu_bound_images_per_s"),
    )
    if capacity and gpu_bound:
        evidence.append(f"the pipeline can make {capacity:.0f} images/s, the trainer take {gpu_bound:.0f}")
    if wait >= INPUT_BOUND_WAIT_PCT:
        kind, advice = "input-bound", "add CPU hosts or make the chain cheaper (see the advisor's table)"
    elif wait <= COMPUTE_BOUND_WAIT_PCT:
        kind, advice = "compute-bound", "the trainer is the limit: more CPU hosts will not speed this run up"
        if capacity and gpu_bound and capacity < GOOD_ENOUGH * gpu_bound:
            advice = (
                "the trainer never waited, but only because the run ended before the pipeline's head "
                "start ran out: a longer run will be input-bound (see the advisor's table)"
            )
    else:
        kind, advice = "balanced", "the pipeline just keeps up: one more CPU host buys headroom, not speed"
        if capacity and gpu_bound and capacity >= 1.5 * gpu_bound:
            advice = (
                "the pipeline has capacity to spare, so the waits are start-up (each epoch's first "
                "batches), not its rate: more CPU hosts will not help"
            )
    return {
        "verdict": kind,
        "evidence": evidence,
        "advice": advice,
        "thresholds": {"input_bound_wait_pct": INPUT_BOUND_WAIT_PCT, "compute_bound_wait_pct": COMPUTE_BOUND_WAIT_PCT},
    }


def measured_rates(steady: dict, chain_by_host: dict) -> dict:
    """The three rates of the module docstring, from the steady steps' totals (`series.StepLog.steady`:
    sums, so a day-long run costs what a short one does), and the length of an epoch as the trainer
    saw it (the median over epochs seen whole)."""
    images, step_s = steady["images"], steady["step_time_s"]
    compute_s = step_s - steady["data_wait_s"]
    rows = sum(v["train_rows"] for v in chain_by_host.values())
    chain_s = sum(v["chain_s"] for v in chain_by_host.values())
    epochs = steady["epochs"]
    whole = [epochs[e] for e in sorted(epochs)[1:-1]]  # whole ones: not the first (warm-up cut), not the last
    return {
        "measured_images_per_s": images / step_s if step_s else 0.0,
        "gpu_bound_images_per_s": images / compute_s if compute_s > 1e-9 else math.inf,
        "per_slot_images_per_s": rows / chain_s if chain_s > 0 else None,
        "epoch_s": statistics.median(e["step_time_s"] for e in whole) if whole else None,
        "images_per_epoch": statistics.median(e["images"] for e in whole) if whole else None,
    }


def advise(report: dict, monitor: dict, prices: dict, epoch_images: int | None, dated: str) -> dict:
    """Predicted images/s and cost per epoch for k = 0..N data hosts, and the recommendation."""
    from smlaunch.cluster.prices import CPU_CANDIDATES
    from smlaunch.config.instance_types import SPECS

    hosts = report["plan"]["hosts"]
    train = [h for h in hosts if h["subcluster"] == "train"]
    data = [h for h in hosts if h["subcluster"] == "data"]
    rates = report["rates"]
    per_slot, gpu_bound = rates["per_slot_images_per_s"], rates["gpu_bound_images_per_s"]
    if not per_slot:
        return {"error": "no chain timings in this run (no train rows were counted)"}
    scale = _slot_scale(data or train)
    plan_vcpus = {h["instance_type"]: h.get("vcpus") for h in hosts}
    workers = report["plan"]["train_workers"]
    local_rate = max(sum(h["num_cpus"] for h in train) - workers, 1) * per_slot
    now_rate = sum(h["num_cpus"] for h in data) * per_slot if data else local_rate
    modelled = min(gpu_bound, now_rate)
    per_epoch = rates["images_per_epoch"]
    if per_epoch and rates["epoch_s"]:  # the epoch's time beyond making (or training on) its images
        overhead, efficiency = max(0.0, rates["epoch_s"] - per_epoch / modelled), 1.0
    else:
        overhead, efficiency = 0.0, min(1.0, max(0.3, rates["measured_images_per_s"] / modelled)) if modelled else 1.0
    gpu_price = sum(prices.get(h["instance_type"], math.nan) for h in train)
    gpu_hosts = max(len(train), 1)
    images = epoch_images or 100_000

    def option(cpu_type: str | None, k: int) -> dict:
        vcpus = SPECS[cpu_type].vcpus if cpu_type in SPECS else plan_vcpus.get(cpu_type) or 0
        pipeline = local_rate if k == 0 else k * vcpus * scale * per_slot
        rate = efficiency * min(gpu_bound, pipeline)
        if overhead:  # each epoch pays its overhead once, whatever k is
            rate = per_epoch / (per_epoch / rate + overhead)
        hourly = gpu_price + (k * prices.get(cpu_type, math.nan) if k else 0.0)
        return {
            "instance_type": cpu_type if k else None,
            "hosts": k,
            "hosts_per_gpu_host": round(k / gpu_hosts, 2),
            "images_per_s": round(rate, 2),
            "bound": "trainer" if gpu_bound <= pipeline else "pipeline",
            "cost_per_hour": _money(hourly),
            "cost_per_epoch": _money(hourly * images / rate / 3600),
        }

    current = data[0]["instance_type"] if data else None
    table_type = current or CPU_CANDIDATES[2]
    n = monitor.get("max_data_hosts", 8)
    table = [option(table_type, k) for k in range(n + 1)]
    candidates = list(dict.fromkeys([*(monitor.get("cpu_instance_types") or CPU_CANDIDATES), table_type]))
    # k = 0 competes too: when the GPU host's own CPUs keep up, the cheapest answer is no CPU host.
    options = [table[0]] + [option(t, k) for t in candidates for k in range(1, n + 1)]
    best = _pick(options)
    same_type = _pick([o for o in table if o["hosts"] > 0])
    return {
        "rates": {k: round(v, 2) if v is not None and math.isfinite(v) else v for k, v in rates.items()},
        "train_workers": workers,
        "per_worker_images_per_s": round(gpu_bound / workers, 2) if math.isfinite(gpu_bound) else gpu_bound,
        "local_pipeline_images_per_s": round(local_rate, 2),
        "pipeline_images_per_s": round(now_rate, 2),
        "efficiency": round(efficiency, 3),
        "epoch_overhead_s": round(overhead, 2),
        "offload_pays": gpu_bound > OFFLOAD_RATIO * local_rate,
        "epoch_images": images,
        "epoch_images_assumed": epoch_images is None,
        "table_instance_type": table_type,
        "table": table,
        "gpu_hosts": len(train),
        "recommended": best,
        "recommended_same_type": same_type,
        "prices_dated": dated,
        "unpriced": sorted({t for t in [*candidates, *(h["instance_type"] for h in train)] if t not in prices}),
    }


def advise_plan(hosts: list[dict], workers: int, measured: dict, monitor: dict, prices: dict, dated: str) -> dict:
    """The advisor's prediction for a planned cluster, before it runs, from a measured run's rates
    (`measured`: that run's report, of the same model, chain and data, on any cluster).

    What carries over: the GPU-bound rate per train worker, one chain slot's rate, the efficiency
    that run showed against the model, and its epoch's image count. `hosts` are the plan's
    (`subcluster`, `instance_type`, `vcpus`); each vCPU is a chain slot, as on SageMaker, however
    this machine would simulate them. The per-epoch overhead is not carried over (it depends on
    the cluster); the prediction is for the steady rate."""
    source = measured.get("advisor") or {}
    if "error" in source or not source:
        return {"error": f"the measured run has no advisor figures ({source.get('error', 'none in its report')})"}
    rates = measured["rates"]
    per_worker = source.get("per_worker_images_per_s") or (
        rates["gpu_bound_images_per_s"] / max(measured["plan"].get("train_workers", 1), 1)
    )
    sized = [
        {
            "subcluster": h["subcluster"],
            "instance_type": h["instance_type"],
            "num_cpus": h["vcpus"],
            "vcpus": h["vcpus"],
        }
        for h in hosts
    ]
    gpu_bound, per_slot = per_worker * workers, rates["per_slot_images_per_s"]
    train = [h for h in sized if h["subcluster"] == "train"]
    data = [h for h in sized if h["subcluster"] == "data"]
    local = max(sum(h["num_cpus"] for h in train) - workers, 1) * per_slot
    modelled = min(gpu_bound, sum(h["num_cpus"] for h in data) * per_slot if data else local)
    planned = {
        "plan": {"hosts": sized, "train_workers": workers},
        "rates": {
            "per_slot_images_per_s": per_slot,
            "gpu_bound_images_per_s": gpu_bound,
            "measured_images_per_s": source.get("efficiency", 1.0) * modelled,
            "epoch_s": None,
            "images_per_epoch": None,
        },
    }
    epoch_images = None if source.get("epoch_images_assumed", True) else source.get("epoch_images")
    advisor = advise(planned, monitor, prices, epoch_images, dated)
    advisor["planned"] = next((o for o in advisor["table"] if o["hosts"] == len(data)), None)
    return advisor


def plan_advice_lines(advisor: dict, source: str) -> list[str]:
    """The prediction for a plan in a few lines: the rates it starts from (`source` names the
    measured run), what the planned data hosts give, and the recommendation (`advice_lines`)."""
    if "error" in advisor:
        return [f"advisor: {advisor['error']}"]
    r = advisor["rates"]
    workers = advisor["train_workers"]
    lines = [
        f"advisor: rates of {source}: GPU-bound {advisor['per_worker_images_per_s']} images/s per train "
        f"worker (x {workers} here = {r['gpu_bound_images_per_s']}), one chain slot {r['per_slot_images_per_s']} "
        f"images/s, efficiency {advisor['efficiency']}"
    ]
    planned = advisor.get("planned")
    if planned is not None:
        cost = f"${planned['cost_per_epoch']}/epoch" if planned["cost_per_epoch"] is not None else "cost unknown"
        what = (
            f"{planned['hosts']} x {planned['instance_type']}"
            if planned["hosts"]
            else "no CPU hosts (the GPU hosts alone)"
        )
        lines.append(
            f"advisor: this plan, {what}: predicted {planned['images_per_s']} images/s, bound by the "
            f"{planned['bound']}, {cost}"
        )
    return lines + advice_lines(advisor)[1:]


def _slot_scale(hosts: list[dict]) -> float:
    """CPU slots per vCPU: 1 on SageMaker, the simulation's scaling on a local run."""
    from smlaunch.config.instance_types import SPECS

    host = hosts[0]
    vcpus = host.get("vcpus") or SPECS[host["instance_type"]].vcpus  # reports before vcpus was recorded
    return host["num_cpus"] / vcpus


def _pick(options: list[dict]) -> dict:
    fastest = max(o["images_per_s"] for o in options)
    good = [o for o in options if o["images_per_s"] >= GOOD_ENOUGH * fastest]
    return min(
        good,
        key=lambda o: (
            o["cost_per_epoch"] if o["cost_per_epoch"] is not None else math.inf,
            o["hosts"],
            -o["images_per_s"],
        ),
    )


def _money(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else round(value, 4)


def advice_lines(advisor: dict) -> list[str]:
    """The advisor's answer in a few sentences, for the console and the Markdown summary."""
    if "error" in advisor:
        return [f"advisor: {advisor['error']}"]
    r, best, same = advisor["rates"], advisor["recommended"], advisor["recommended_same_type"]
    workers = advisor.get("train_workers", 1)
    each = f" ({workers} train workers x {advisor['per_worker_images_per_s']})" if workers > 1 else ""
    lines = [
        f"advisor: GPU-bound {r['gpu_bound_images_per_s']} images/s{each}, one chain slot "
        f"{r['per_slot_images_per_s']} images/s, GPU host alone {advisor['local_pipeline_images_per_s']} "
        f"images/s, measured {r['measured_images_per_s']} images/s (efficiency {advisor['efficiency']})"
    ]
    if not advisor["offload_pays"]:
        lines.append(
            "advisor: the GPU host's own CPUs nearly keep up (GPU-bound rate < 1.3x theirs): CPU hosts add little"
        )
    cost = f"${best['cost_per_epoch']}/epoch" if best["cost_per_epoch"] is not None else "cost unknown (no price)"
    per_host = (
        f" ({best['hosts_per_gpu_host']:g} per GPU host)" if best["hosts"] and advisor.get("gpu_hosts", 1) > 1 else ""
    )
    what = (
        f"{best['hosts']} x {best['instance_type']}{per_host}"
        if best["hosts"]
        else f"no CPU hosts (the GPU {'host' if advisor.get('gpu_hosts', 1) == 1 else 'hosts'} alone)"
    )
    lines.append(
        f"advisor: recommend {what}: predicted {best['images_per_s']} images/s, {cost} "
        f"({advisor['epoch_images']} images{', assumed' if advisor['epoch_images_assumed'] else ''}; "
        f"prices {advisor['prices_dated']})"
    )
    if best["hosts"] and same["instance_type"] != best["instance_type"]:
        per_host = f" ({same['hosts_per_gpu_host']:g} per GPU host)" if advisor.get("gpu_hosts", 1) > 1 else ""
        lines.append(
            f"advisor: with {same['instance_type']} (this run's type): {plural(same['hosts'], 'host')}{per_host}, "
            f"predicted {same['images_per_s']} images/s"
        )
    return lines
