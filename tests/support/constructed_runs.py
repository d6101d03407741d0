"""Reports of constructed runs, for the advisor and rendering tests: no cluster, no training."""

from __future__ import annotations

from smlaunch.cluster.plan import LocalEnvironment, build_plan
from smlaunch.config import load_config
from smlaunch.launcher.report.job_report import build_report
from smlaunch.series import Buckets, StepLog, merge_samples


def constructed_report(
    configs,
    tmp_path,
    *,
    compute_s: float,
    wait_s: float,
    chain_s_per_row: float,
    steps: int = 60,
    steps_per_epoch: int | None = None,
    epoch_stall_s: float = 0.0,
    sets: tuple = (),
    images: int = 32,
):
    """A report of `steps` steps of `images` (all ranks'): each `compute_s` of trainer work plus `wait_s` waiting
    for data; the chain took `chain_s_per_row` per image on each of the two 1-CPU data hosts. With
    `steps_per_epoch`, the first step of every epoch after the first also waits `epoch_stall_s`.
    `sets`: config overrides (more GPU hosts, more GPUs each)."""
    cfg = load_config(configs / "tiny.yaml", [f"run.dir={tmp_path}", *sets])
    plan = build_plan(cfg, LocalEnvironment(cpus=3, gpus=0, started="t"))
    step_time = compute_s + wait_s
    records, t = StepLog(), 1000.0  # as rank 0 keeps them (`trainers.loop`)
    for n in range(1, steps + 1):
        epoch = 1 + (n - 1) // steps_per_epoch if steps_per_epoch else 1
        stall = epoch_stall_s if steps_per_epoch and epoch > 1 and (n - 1) % steps_per_epoch == 0 else 0.0
        t += step_time + stall
        records.add(
            {
                "step": n,
                "t": t,
                "epoch": epoch,
                "loss": 1.0,
                "step_time_s": step_time + stall,
                "data_wait_s": wait_s + stall,
                "images_per_s": images / (step_time + stall),
            }
        )
    rows = steps * images // 2
    result = {
        "steps": list(records.recent),
        "step_series": records.to_dict(),
        "validation": [],
        "epochs": 1,
        "final_step": steps,
        "host_rows": {"algo-1": 0, "algo-2": rows, "algo-3": rows, "unknown": 0},
        "chain_by_host": {h: {"train_rows": rows, "chain_s": rows * chain_s_per_row} for h in ("algo-2", "algo-3")},
    }
    samples = {
        h.name: _sampled(
            [
                {
                    "t": 1000.0 + i * 0.5,
                    "cpu_pct": 95.0 if h.subcluster == "data" else 30.0,
                    "host_cpu_pct": 90.0,
                    "iowait_pct": 0.0,
                    "mem_pct": 20.0,
                    "net_sent_bps": 0,
                    "net_recv_bps": 0,
                }
                for i in range(int(steps * step_time * 2))
            ],
            h.name,
        )
        for h in plan.hosts
    }
    return build_report(plan, result, 32, {}, samples, cfg.monitor.model_dump(), epoch_images=1437), plan


def _sampled(samples: list[dict], host: str, interval_s: float = 0.5) -> dict:
    """A host's series as its sampler hands it over: bounded like `cluster.sampler.HostSampler`'s."""
    from smlaunch.cluster.sampler import MAX_SAMPLES

    kept = Buckets(MAX_SAMPLES, new=lambda x: {"n": 1, **x}, merge=merge_samples)
    for x in samples:
        kept.add(x)
    return {"host": host, "interval_s": interval_s * kept.width, "samples": kept.items}


def write_run(run_dir, name: str, config, report: dict, mtime: float, layout: str = "local"):
    """A finished run under `run_dir` as the launcher leaves it: `<name>/resolved_config.yaml` (the
    config as the run resolved it) and the report where the head wrote it (`local`: the simulated
    head's tree; `attached`: `<name>/output/data`), dated `mtime`. Returns the report's path."""
    import json
    import os
    from pathlib import Path

    import yaml

    run = Path(run_dir) / name
    data = run / ("hosts/algo-1/opt/ml/output/data" if layout == "local" else "output/data")
    data.mkdir(parents=True)
    (run / "resolved_config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    path = data / "report.json"
    path.write_text(json.dumps(report))
    os.utime(path, (mtime, mtime))
    return path
