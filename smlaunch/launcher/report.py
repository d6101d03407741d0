"""The run report: what the job measured, summarised so a person can see if the GPU starved."""

from __future__ import annotations

import json
from pathlib import Path

from smlaunch.cluster.plan import LaunchPlan

WARMUP_STEPS = 5
"""Steps left out of throughput figures: the first ones pay for pipeline start-up."""


def build_report(plan: LaunchPlan, result: dict, batch_size: int, timings: dict) -> dict:
    steps = result["steps"]
    steady = steps[WARMUP_STEPS:] if len(steps) > 2 * WARMUP_STEPS else steps
    step_time = sum(s["step_time_s"] for s in steady)
    images = sum(s["images_per_s"] * s["step_time_s"] for s in steady)  # all micro-batches, all ranks
    rows = result["host_rows"]
    data_hosts = {h.name for h in plan.hosts if h.subcluster == "data"}
    total_rows = sum(rows.values())
    data_rows = sum(n for host, n in rows.items() if host in data_hosts)
    final = result["validation"][-1] if result["validation"] else {}
    return {
        "job": plan.job,
        "summary": {
            "steps": result.get("final_step", len(steps)),
            "steps_this_run": len(steps),
            "resumed_at_step": result.get("resumed_at_step"),
            "resumed_from": result.get("resumed_from"),
            "epochs": result["epochs"],
            "images_per_s": round(images / step_time, 2) if step_time else 0.0,
            "data_wait_pct": round(100 * sum(s["data_wait_s"] for s in steady) / step_time, 2) if step_time else 0.0,
            "final_loss": steps[-1]["loss"] if steps else None,
            "validation_accuracy": final.get("accuracy"),
            "data_node_row_fraction": round(data_rows / total_rows, 5) if total_rows else 0.0,
            "train_workers": plan.train_workers,
            "stopped_at_step": result.get("stopped_at_step"),
            "corrupt_records_skipped": sum(c["skipped"] for c in result.get("corrupt_records", {}).values()),
            **timings,
        },
        "rows_by_host": rows,
        "corrupt_records": result.get("corrupt_records", {}),
        "validation": result["validation"],
        "steps": steps,
        "plan": plan.to_dict(),
    }


def write_report(report: dict, output_dir: str | Path) -> Path:
    path = Path(output_dir) / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    return path


def summary_lines(report: dict) -> list[str]:
    s = report["summary"]
    acc = s["validation_accuracy"]
    lines = [f"stopped early at step {s['stopped_at_step']} on request (SIGTERM); the last checkpoint "
             "holds the state"] if s.get("stopped_at_step") is not None else []
    if s.get("resumed_at_step") is not None:
        lines.append(f"resumed at step {s['resumed_at_step']} from {s['resumed_from']}")
    return lines + [
        f"steps={s['steps']} epochs={s['epochs']} train_workers={s['train_workers']}",
        f"images_per_s={s['images_per_s']} data_wait_pct={s['data_wait_pct']}",
        f"validation_accuracy={acc if acc is not None else 'n/a'} final_loss={s['final_loss']}",
        f"data_node_row_fraction={s['data_node_row_fraction']} rows_by_host={report['rows_by_host']}",
    ] + [f"corrupt_records_skipped={c['skipped']} channel={name} (max_corrupted_records={c['limit']})"
         for name, c in report.get("corrupt_records", {}).items()]
