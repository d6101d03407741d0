"""The run report: what the job measured, summarised so a person can see if the GPU starved.

Its size does not grow with the run's length: "steps" holds the latest `series.TAIL` step records
exactly and "step_series" every step of the run in at most `series.CAPACITY` buckets (count, sum,
min, max per field), from which the summary's throughput and the advisor's rates are computed
exactly; host samples are bounded the same way by the sampler (`cluster.sampler.MAX_SAMPLES`).
"""

from __future__ import annotations

import json
from pathlib import Path

from smlaunch.cluster.plan import LaunchPlan
from smlaunch.series import StepLog


def build_report(
    plan: LaunchPlan,
    result: dict,
    batch_size: int,
    timings: dict,
    samples: dict | None = None,
    monitor: dict | None = None,
    epoch_images: int | None = None,
) -> dict:
    steps = result["steps"]
    series = StepLog.from_report(result)
    steady = series.steady()
    step_time, images = steady["step_time_s"], steady["images"]  # images: all micro-batches, all ranks
    rows = result["host_rows"]
    data_hosts = {h.name for h in plan.hosts if h.subcluster == "data"} | ({"unknown"} if plan.elastic else set())
    """Hosts an elastic group added while training are not in the plan: their rows count as "unknown"."""
    total_rows = sum(rows.values())
    data_rows = sum(n for host, n in rows.items() if host in data_hosts)
    final = result["validation"][-1] if result["validation"] else {}
    accounting = result.get("sample_accounting") or {}
    workers = result.get("workers") or []
    report = {
        "job": plan.job,
        "summary": {
            "steps": result.get("final_step", series.count),
            "steps_this_run": series.count,
            "resumed_at_step": result.get("resumed_at_step"),
            "resumed_from": result.get("resumed_from"),
            "epochs": result["epochs"],
            "epochs_complete": result.get("epochs_complete", result["epochs"]),
            "images_per_s": round(images / step_time, 2) if step_time else 0.0,
            "data_wait_pct": round(100 * steady["data_wait_s"] / step_time, 2) if step_time else 0.0,
            "final_loss": series.last["loss"] if series.last else None,
            "validation_accuracy": final.get("accuracy"),
            "data_node_row_fraction": round(data_rows / total_rows, 5) if total_rows else 0.0,
            "train_workers": plan.train_workers,
            "global_batch": plan.global_batch,
            "ranks_in_sync": len({w["param_sha256"] for w in workers}) == 1 if workers else None,
            "stopped_at_step": result.get("stopped_at_step"),
            "stopped_by": (result.get("stopped_by") or "request (SIGTERM)")
            if result.get("stopped_at_step") is not None
            else None,
            "stopped_early": bool(result.get("stopped_early")),
            "best": result.get("best"),
            "skipped_steps": result.get("skipped_steps", 0),
            "corrupt_records_skipped": sum(c["skipped"] for c in result.get("corrupt_records", {}).values()),
            "samples_duplicated": accounting.get("duplicated"),
            "samples_missing": accounting.get("missing"),
            **checkpoint_cost(result, plan.checkpoint_every_s),
            **timings,
        },
        "classes": result.get("classes"),
        "workers": workers,
        "rows_by_host": rows,
        "chain_by_host": result.get("chain_by_host", {}),
        "corrupt_records": result.get("corrupt_records", {}),
        "sample_accounting": accounting,
        "validation": result["validation"],
        "steps": steps,
        "step_series": series.to_dict(),
        "plan": plan.to_dict(),
        "utilisation": utilisation_summary(plan.to_dict(), samples or {}, series),
        "samples": samples or {},
    }
    if result.get("loop"):  # your own loop (`trainer.loop`): its reports, checkpoints and return value
        report["loop"] = result["loop"]
    if result.get("autoscale"):
        report["autoscale"] = result["autoscale"]
        report["summary"]["data_host_seconds"] = result["autoscale"]["data_host_seconds"]
    add_analysis(report, monitor or {}, epoch_images)
    return report


def checkpoint_cost(result: dict, every_s: float) -> dict:
    """What this run's checkpoints cost: how many (by why: interval, timer, stop, end) and their
    seconds; and the seconds of those written between steps (interval, timer) as a share of the time
    between the first and the last step, which they lengthened."""
    by_why = (result.get("checkpoints") or {}).get("by_why", {})
    spent = sum(t["s"] for t in by_why.values())
    between = sum(t["s"] for why, t in by_why.items() if why in ("interval", "timer"))
    span = result.get("steps_span_s") or 0
    return {
        "checkpoint_every_s": every_s,
        "checkpoints_written": {why: t["n"] for why, t in by_why.items()},
        "checkpoint_s": round(spent, 3),
        "checkpoint_pct": round(100 * between / span, 2) if span > 0 else None,
    }


def add_analysis(report: dict, monitor: dict, epoch_images: int | None) -> None:
    """The rates, the verdict and the advisor, from what the report already holds (also used by
    `sm-launch report` to recompute them, e.g. with other prices)."""
    from smlaunch.cluster.prices import PRICES_DATED, price_table
    from smlaunch.launcher.report.advisor import advise, measured_rates, verdict

    report["rates"] = measured_rates(StepLog.from_report(report).steady(), report.get("chain_by_host", {}))
    report["advisor"] = advise(report, monitor, price_table(monitor.get("prices")), epoch_images, PRICES_DATED)
    report["verdict"] = verdict(report["summary"], report["utilisation"], report["advisor"])
    report["monitor"] = {**monitor, "epoch_images": epoch_images}


def utilisation_summary(plan: dict, samples: dict, series) -> dict:
    """Mean utilisation per host over the training window, and per role (data CPUs, train GPUs).
    A sample that stands for several (`n`, after the sampler merged them) weighs as many."""
    first, last = (series.head[0], series.last) if series.head else (None, None)
    start = first["t"] - first["step_time_s"] if first and "t" in first else None
    end = last["t"] if last and "t" in last else None
    roles = {h["name"]: h["subcluster"] for h in plan["hosts"]}
    per_host: dict[str, dict] = {}
    for host, series in samples.items():
        window = [x for x in series.get("samples", []) if start is None or start <= x["t"] <= end] or series.get(
            "samples", []
        )
        if not window:
            continue
        gpu = [(g, x.get("n", 1)) for x in window for g in x.get("gpu_pct", []) if g is not None]
        per_host[host] = {
            "cpu_pct": _mean((x["cpu_pct"], x.get("n", 1)) for x in window),
            "host_cpu_pct": _mean((x["host_cpu_pct"], x.get("n", 1)) for x in window),
            "iowait_pct": _mean((x["iowait_pct"], x.get("n", 1)) for x in window),
            "gpu_pct": _mean(gpu) if gpu else None,
            "samples": sum(x.get("n", 1) for x in window),
        }

    def role_mean(role: str, key: str):
        values = [(v[key], 1) for h, v in per_host.items() if roles.get(h) == role and v[key] is not None]
        return _mean(values) if values else None

    return {
        "hosts": per_host,
        "data_cpu_pct": role_mean("data", "cpu_pct"),
        "train_cpu_pct": role_mean("train", "cpu_pct"),
        "train_gpu_pct": role_mean("train", "gpu_pct"),
    }


def _mean(pairs) -> float:
    """The weighted mean of (value, weight) pairs."""
    pairs = list(pairs)
    weight = sum(w for _, w in pairs)
    return round(sum(v * w for v, w in pairs) / weight, 1) if weight else 0.0


def write_report(report: dict, output_dir: str | Path, render: bool = True) -> Path:
    """report.json, and (with `render`) summary.md, the PNG plots and TensorBoard scalars, in `output_dir`."""
    from smlaunch.launcher.report.render import render_outputs

    path = Path(output_dir) / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: v for k, v in report.items() if k != "path"}, indent=2))
    if render:
        render_outputs(report, path.parent)
    return path


class Rendering:
    """summary.md, the plots and the TensorBoard file of a written report.json, drawn in a thread
    while the job's cluster goes down (about 1 s of the exit on the 2-core VM; 14 s for a day on 80
    hosts, BENCHMARKS.md `long_run`). They are drawn from the file, not from the live report, which
    the job body still amends. `wait` returns when they are on disk, and raises the drawing's error."""

    DEADLINE_S = 600.0

    def __init__(self, path: Path):
        import threading

        self.path = Path(path)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._draw, name="report-render", daemon=True)
        self._thread.start()

    def _draw(self) -> None:
        from smlaunch.launcher.report.render import render_outputs

        try:
            render_outputs(json.loads(self.path.read_text()), self.path.parent)
        except BaseException as exc:  # raised where the job waits for the drawing
            self._error = exc

    def wait(self) -> None:
        self._thread.join(self.DEADLINE_S)
        if self._thread.is_alive():
            raise RuntimeError(
                f"the report's plots in {self.path.parent} were not drawn within {self.DEADLINE_S:.0f} s"
            )
        if self._error is not None:
            raise self._error


def _recipe_lines(s: dict) -> list[str]:
    """What the recipe decided: the weights model.pt holds (`trainer.keep_best`), an early stop, and
    fp16 steps the GradScaler skipped."""
    lines = []
    if s.get("best"):
        b = s["best"]
        lines.append(f"model.pt: the best validation, {b['metric']}={b['value']:.6g} at step {b['step']}")
    if s.get("stopped_early"):
        lines.append(f"stopped early after {s['steps']} steps (a callback asked: trainer.early_stop, or yours)")
    if s.get("skipped_steps"):
        lines.append(f"skipped_steps={s['skipped_steps']} (fp16 overflow: the GradScaler lowered its scale)")
    return lines


def summary_lines(report: dict) -> list[str]:
    from smlaunch.launcher.report.render import epochs_text

    s = report["summary"]
    acc = s["validation_accuracy"]
    lines = (
        [
            f"stopped early at step {s['stopped_at_step']} on {s.get('stopped_by') or 'request (SIGTERM)'}; "
            "the last checkpoint holds the state"
        ]
        if s.get("stopped_at_step") is not None
        else []
    )
    if s.get("resumed_at_step") is not None:
        lines.append(f"resumed at step {s['resumed_at_step']} from {s['resumed_from']}")
    return (
        lines
        + [
            f"steps={s['steps']} epochs={epochs_text(s)} train_workers={s['train_workers']}",
            f"images_per_s={s['images_per_s']} data_wait_pct={s['data_wait_pct']}",
            (
                f"validation_accuracy={acc if acc is not None else 'n/a'}"
                if report.get("validation")
                else "validation=none"
            )
            + f" final_loss={s['final_loss']}",
            *_recipe_lines(s),
            f"data_node_row_fraction={s['data_node_row_fraction']} rows_by_host={report['rows_by_host']}",
        ]
        + _checkpoint_lines(s)
        + _autoscale_lines(report)
        + _rank_lines(report)
        + [
            f"corrupt_records_skipped={c['skipped']} channel={name} (max_corrupted_records={c['limit']})"
            for name, c in report.get("corrupt_records", {}).items()
        ]
        + _accounting_lines(report)
        + _analysis_lines(report)
        + _phase_lines(s)
    )


def _checkpoint_lines(summary: dict) -> list[str]:
    written = summary.get("checkpoints_written")
    if not written:
        return []
    kinds = ",".join(f"{why}:{n}" for why, n in written.items())
    pct = summary.get("checkpoint_pct")
    return [
        f"checkpoints={sum(written.values())} ({kinds}) checkpoint_s={summary['checkpoint_s']} "
        f"checkpoint_pct={pct if pct is not None else 'n/a'} checkpoint_every_s={summary['checkpoint_every_s']:g}"
    ]


def _autoscale_lines(report: dict) -> list[str]:
    a = report.get("autoscale")
    if not a:
        return []
    return [
        f"autoscale: data hosts {' -> '.join(map(str, a['sizes']))}, {a['added']} added, {a['released']} "
        f"released, data_host_seconds={a['data_host_seconds']}"
        + (
            f" usd_per_million_images={a['usd_per_million_images']}"
            if a.get("usd_per_million_images") is not None
            else ""
        )
    ]


def _phase_lines(summary: dict) -> list[str]:
    from smlaunch.launcher.report.phases import phase_line

    return [phase_line(summary["phases_s"])] if summary.get("phases_s") else []


def log_summary(report: dict, log) -> None:
    """The summary lines on the console: problems as warnings, the rest as plain lines."""
    for line in summary_lines(report):
        if line.startswith("WARNING: "):
            log.warning(line.removeprefix("WARNING: "))
        else:
            log.info(line)


def _rank_lines(report: dict) -> list[str]:
    """With several ranks: where they ran, and whether DDP kept their weights identical."""
    workers = report.get("workers") or []
    if len(workers) < 2:
        return []
    digests = {w["param_sha256"] for w in workers}
    where = ", ".join(f"{w['rank']}@{w['host']}" for w in workers)
    if len(digests) == 1:
        return [f"ranks {where}: final weights identical on every rank (sha256 {next(iter(digests))[:12]})"]
    return [
        f"WARNING: ranks {where}: final weights differ between ranks ({len(digests)} different digests): "
        "the ranks did not stay in sync"
    ]


def _accounting_lines(report: dict) -> list[str]:
    from smlaunch.trainers.accounting import accounting_lines

    return accounting_lines(report.get("sample_accounting"))


def _analysis_lines(report: dict) -> list[str]:
    from smlaunch.launcher.report.advisor import advice_lines

    if "verdict" not in report:
        return []
    v = report["verdict"]
    return [f"verdict: {v['verdict']} ({'; '.join(v['evidence'])}): {v['advice']}"] + advice_lines(report["advisor"])


def report_file(path: str) -> Path:
    """The report `path` names: the file itself, or the one report.json under the folder; UserError otherwise."""
    from smlaunch.errors import UserError

    given = Path(path)
    if given.is_file():
        return given
    if not given.is_dir():
        raise UserError(f"{path}: no such file or directory")
    found = [given / "report.json"] if (given / "report.json").is_file() else sorted(given.glob("**/report.json"))
    if not found:
        raise UserError(f"{path}: no report.json under it (a run writes one in the head's output/data)")
    if len(found) > 1:
        raise UserError(
            f"{path}: {len(found)} report.json files under it; name one: " + ", ".join(str(f) for f in found[:5])
        )
    return found[0]
