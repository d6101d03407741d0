"""The run report for people: a Markdown summary, PNG plots and TensorBoard scalars.

Everything here is derived from `report.json` alone, so `sm-launch report RUN_DIR` can draw it
again (after a crash, with other prices, or on a laptop from a job's downloaded output). Plots:

* `throughput.png`: images/s per step over wall time (its min-max band where a point stands for a
  bucket of steps), with the data wait % on a second axis;
* `data_wait.png`: the share of each step (or bucket of steps) spent waiting for the batch;
* `autoscale.png` (elastic data hosts only): the data hosts over time against the data wait;
* `utilisation.png`: a heat map of CPU % (and GPU % where there are GPUs) per host over time,
  SageMaker Debugger's view: a GPU row going pale while the data rows glow is an input-bound run.

Plots and TensorBoard read the report's bounded "step_series" (`smlaunch.series`), so a day-long
run draws as fast as an hour-long one; a short run's buckets are its steps.
"""

from __future__ import annotations

from pathlib import Path

PLOTS = ("throughput.png", "data_wait.png", "utilisation.png")


def render_outputs(report: dict, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    written = [_write_markdown(report, out_dir / "summary.md")]
    written += _plots(report, out_dir)
    written.append(_tensorboard(report, out_dir / "tensorboard"))
    return written


def _write_markdown(report: dict, path: Path) -> Path:
    from smlaunch.launcher.report.advisor import advice_lines

    s = report["summary"]
    lines = [
        f"# Run report: {report['job']}",
        "",
        f"- steps: {s['steps']} ({s['steps_this_run']} this run), epochs: {epochs_text(s)}, "
        f"train workers: {s['train_workers']}",
        f"- throughput: **{s['images_per_s']} images/s**, data wait **{s['data_wait_pct']} %** of step time",
        f"- validation accuracy: {s['validation_accuracy']}, final loss: {s['final_loss']}",
        f"- rows produced on data hosts: {100 * s['data_node_row_fraction']:.1f} %",
        "",
    ]
    if "verdict" in report:
        v = report["verdict"]
        lines += [f"## Verdict: {v['verdict']}", "", *[f"- {e}" for e in v["evidence"]], f"- {v['advice']}", ""]
    util = report.get("utilisation", {}).get("hosts", {})
    if util:
        lines += [
            "## Utilisation (mean over training)",
            "",
            "| host | role | CPU % of its slots | machine CPU % | IO wait % | GPU % |",
            "|---|---|---|---|---|---|",
        ]
        roles = {h["name"]: h["subcluster"] for h in report["plan"]["hosts"]}
        for host, u in util.items():
            lines.append(
                f"| {host} | {roles.get(host, '?')} | {u['cpu_pct']} | {u['host_cpu_pct']} | "
                f"{u['iowait_pct']} | {u['gpu_pct'] if u['gpu_pct'] is not None else '-'} |"
            )
        lines.append("")
    advisor = report.get("advisor")
    if advisor:
        lines += ["## Advisor", "", *[f"- {line.removeprefix('advisor: ')}" for line in advice_lines(advisor)], ""]
        if "table" in advisor:
            lines += [
                f"Predicted for k hosts of {advisor['table_instance_type']} (k = 0: the GPU host's own CPUs):",
                "",
                "| k | images/s | bound by | $/hour | $/epoch |",
                "|---|---|---|---|---|",
            ]
            lines += [
                f"| {o['hosts']} | {o['images_per_s']} | {o['bound']} | {_cost(o['cost_per_hour'])} | "
                f"{_cost(o['cost_per_epoch'])} |"
                for o in advisor["table"]
            ]
            if advisor.get("unpriced"):
                lines += ["", f"No price for: {', '.join(advisor['unpriced'])} (set monitor.prices)."]
            lines.append("")
    autoscale = report.get("autoscale")
    plots = PLOTS + (("autoscale.png",) if autoscale else ())
    if autoscale:
        per_m = autoscale.get("usd_per_million_images")
        lines += [
            "## Elastic data hosts",
            "",
            f"- sizes: {' -> '.join(map(str, autoscale['sizes']))}; "
            f"{autoscale['data_host_seconds']:g} data-host-seconds; "
            + (
                f"${per_m:.2f} per million images, train and data hosts"
                if per_m is not None
                else "cost per image unknown (no price for the train or data hosts: monitor.prices)"
            ),
            "",
            "| s | hosts | wanted | data wait % | images/s | data hosts $/h | $ per million images | why |",
            "|---|---|---|---|---|---|---|---|",
        ]
        t0 = autoscale["timeline"][0]["t"] if autoscale["timeline"] else 0
        lines += [
            f"| {e['t'] - t0:.0f} | {e['hosts']} | {e['wanted']} | {e['data_wait_pct']} | {e['images_per_s']} | "
            f"{_cost(e['usd_per_h'])} | {_cost(e.get('usd_per_million_images'), 2)} | {e['reason']} |"
            for e in autoscale["timeline"]
        ]
        lines.append("")
    lines += [
        "Plots: " + ", ".join(f"[{p}]({p})" for p in plots) + "; TensorBoard: `tensorboard --logdir tensorboard`",
        "",
    ]
    path.write_text("\n".join(lines))
    return path


def _cost(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _plots(report: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from smlaunch.series import StepLog, bucket_mean

    buckets = StepLog.from_report(report).buckets.items
    steps = [bucket_mean(b) for b in buckets]
    timed = bool(steps) and steps[0].get("t") is not None
    t0 = _t0(report)
    written = []
    fig, ax = plt.subplots(figsize=(9, 4))
    xs = [s["t"] - t0 for s in steps] if timed else [s["step"] for s in steps]
    ax.plot(xs, [s["images_per_s"] for s in steps], color="tab:blue", lw=1, label="images/s")
    if any(b["n"] > 1 for b in buckets):
        ax.fill_between(
            xs,
            [b["min"]["images_per_s"] for b in buckets],
            [b["max"]["images_per_s"] for b in buckets],
            color="tab:blue",
            alpha=0.2,
            lw=0,
            label="min-max of the steps in a point",
        )
    ax.set_xlabel("seconds since the first step began" if timed else "step")
    ax.set_ylabel("images/s", color="tab:blue")
    twin = ax.twinx()
    twin.plot(xs, [_bucket_wait_pct(b) for b in buckets], color="tab:red", lw=0.8, alpha=0.6)
    twin.set_ylabel("data wait % of step", color="tab:red")
    twin.set_ylim(0, 100)
    ax.set_title(f"{report['job']}: throughput ({report['summary']['images_per_s']} images/s steady)")
    written.append(_save(fig, out_dir / "throughput.png"))

    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.bar(
        [b["first_step"] - 0.5 for b in buckets],
        [_bucket_wait_pct(b) for b in buckets],
        width=[b["n"] for b in buckets],
        align="edge",
        color="tab:red",
    )
    ax.set_xlabel("step")
    ax.set_ylabel("data wait % of step time")
    ax.set_ylim(0, 100)
    ax.set_title(f"data wait per step (steady mean {report['summary']['data_wait_pct']} %)")
    written.append(_save(fig, out_dir / "data_wait.png"))
    written.append(_heat_map(report, out_dir / "utilisation.png", t0, plt))
    if report.get("autoscale", {}).get("timeline") and timed:
        written.append(_autoscale_plot(report, out_dir / "autoscale.png", t0, xs, buckets, plt))
    return written


def _autoscale_plot(report: dict, path: Path, t0: float, xs: list, buckets: list, plt) -> Path:
    """Elastic data hosts: the hosts joined and wanted at each decision kept (a step line), the
    data wait per step (right axis) with the target, and a marker per change; below, where prices
    are known, what the job paid per million images trained (train and data hosts: what the policy
    judges by), per point of the step series."""
    a = report["autoscale"]
    timeline = a["timeline"]
    times = [e["t"] - t0 for e in timeline]
    priced = a.get("train_price_h") is not None and a.get("price_per_host_h") is not None
    fig, axes = plt.subplots(2 if priced else 1, 1, figsize=(9, 6 if priced else 4), sharex=True, squeeze=False)
    ax = axes[0][0]
    if priced:
        _cost_panel(axes[1][0], a, times, xs, buckets)
    ax.step(times, [e["hosts"] for e in timeline], where="post", color="tab:green", lw=2, label="data hosts joined")
    ax.step(
        times,
        [e["wanted"] for e in timeline],
        where="post",
        color="tab:green",
        lw=1,
        ls="--",
        label="data hosts wanted",
    )
    for e, t in zip(timeline, times, strict=False):
        if e["change"]:
            ax.annotate(
                f"{e['change']:+d}" + (f"\n${e['usd_per_h']}/h" if e["usd_per_h"] else ""),
                (t, e["wanted"]),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=7,
            )
    axes[-1][0].set_xlabel("seconds since the first step began")
    ax.set_ylabel("data hosts", color="tab:green")
    ax.set_ylim(0, max(e["wanted"] for e in timeline) + 1)
    twin = ax.twinx()
    twin.plot(xs, [_bucket_wait_pct(b) for b in buckets], color="tab:red", lw=0.8, alpha=0.6, label="data wait %")
    twin.axhline(a["target_data_wait_pct"], color="tab:red", ls=":", lw=1, label="target")
    twin.set_ylabel("data wait % of step", color="tab:red")
    twin.set_ylim(0, 100)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"elastic data hosts: {' -> '.join(map(str, a['sizes']))}, {a['data_host_seconds']:g} host-seconds")
    return _save(fig, path)


def _cost_panel(ax, a: dict, times: list, xs: list, buckets: list) -> None:
    """USD per million images per point: the train hosts' and the data hosts' price over the point's
    images/s, the data hosts those of the latest decision kept at or before it."""
    import bisect

    from smlaunch.cluster.autoscale.policy import Prices

    prices, usd = Prices(a["train_price_h"], a["price_per_host_h"]), []
    for x, b in zip(xs, buckets, strict=False):
        rate = b["sum"]["images"] / b["sum"]["step_time_s"] if b["sum"]["step_time_s"] else 0.0
        hosts = a["timeline"][max(bisect.bisect_right(times, x) - 1, 0)]["hosts"]
        usd.append(prices.per_million_images(hosts, rate))
    ax.plot(xs, [u if u is not None else float("nan") for u in usd], color="tab:purple", lw=1)
    ax.set_ylabel("$ per million images", color="tab:purple")
    ax.set_ylim(bottom=0)
    whole = a.get("usd_per_million_images")
    ax.set_title(
        f"cost per image, train and data hosts (${whole:.2f} per million over the run)"
        if whole is not None
        else "cost per image, train and data hosts",
        fontsize=9,
    )


def _heat_map(report: dict, path: Path, t0: float, plt) -> Path:
    """One row per host (CPU %) and per GPU (GPU %), one column per sampling interval."""
    import numpy as np

    samples = report.get("samples", {})
    roles = {h["name"]: h["subcluster"] for h in report["plan"]["hosts"]}
    rows, labels = [], []
    end = max((x["t"] for s in samples.values() for x in s.get("samples", [])), default=t0 + 1)
    width = max(max((s.get("interval_s") or 0.5) for s in samples.values()) if samples else 0.5, 1e-3)
    bins = max(1, min(600, int((end - t0) / width) + 1))
    for host, series in samples.items():
        data = series.get("samples", [])
        rows.append(_binned(data, "cpu_pct", t0, end, bins))
        labels.append(f"{host} ({roles.get(host, '?')}) CPU")
        gpus = max((len(x.get("gpu_pct", [])) for x in data), default=0)
        for g in range(gpus):
            rows.append(
                _binned(
                    [
                        {**x, "g": x["gpu_pct"][g]}
                        for x in data
                        if len(x.get("gpu_pct", [])) > g and x["gpu_pct"][g] is not None
                    ],
                    "g",
                    t0,
                    end,
                    bins,
                )
            )
            labels.append(f"{host} GPU{g}")
    fig, ax = plt.subplots(figsize=(10, 1 + 0.45 * max(len(rows), 1)))
    grid = np.array(rows, dtype=float) if rows else np.full((1, bins), np.nan)
    image = ax.imshow(
        grid,
        aspect="auto",
        cmap="inferno",
        vmin=0,
        vmax=100,
        interpolation="nearest",
        extent=(0, end - t0, len(rows) - 0.5 if rows else 0.5, -0.5),
    )
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("seconds since the first step began")
    ax.set_title("utilisation per host (%)" + ("" if rows else ": no samples"))
    fig.colorbar(image, ax=ax, label="%")
    return _save(fig, path)


def _bucket_wait_pct(bucket: dict) -> float:
    """The bucket's data wait as a share of its steps' time (`wait_pct` of a single step)."""
    step_s = bucket["sum"]["step_time_s"]
    return 100 * bucket["sum"]["data_wait_s"] / step_s if step_s else 0.0


def _binned(data: list[dict], key: str, t0: float, end: float, bins: int) -> list[float]:
    import math

    sums, counts = [0.0] * bins, [0] * bins
    span = max(end - t0, 1e-9)
    for x in data:
        i = min(bins - 1, max(0, int((x["t"] - t0) / span * bins)))
        sums[i] += x[key]
        counts[i] += 1
    return [s / c if c else math.nan for s, c in zip(sums, counts, strict=False)]


def _t0(report: dict) -> float:
    series = report.get("step_series")
    first = (series["head"] if series else report["steps"])[:1]
    if first and first[0].get("t") is not None:
        return first[0]["t"] - first[0]["step_time_s"]
    starts = [x["t"] for s in report.get("samples", {}).values() for x in s.get("samples", [])[:1]]
    return min(starts, default=0.0)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _tensorboard(report: dict, directory: Path) -> Path:
    """Scalars per step (loss, images/s, data wait %) and per sample (CPU/GPU % per host).

    Where the job wrote its steps live (`live_events`, a `.live` file), only the host samples are
    added; otherwise (a report rendered again elsewhere) everything is written. Either way the
    earlier non-live files go first, so rendering twice never doubles a scalar."""
    from smlaunch.launcher.report.live_events import LIVE_SUFFIX, LiveEvents

    directory.mkdir(parents=True, exist_ok=True)
    live = any(p.name.endswith(LIVE_SUFFIX) for p in directory.iterdir())
    for old in directory.iterdir():
        if old.is_file() and not old.name.endswith(LIVE_SUFFIX):
            old.unlink()
    t0 = _t0(report)
    events = LiveEvents(directory, suffix="")
    try:
        if not live:
            for s in _tensorboard_steps(report):
                events.step(s)
            for v in report.get("validation", []):
                events.validation(v)
        for host, series in report.get("samples", {}).items():
            for x in series.get("samples", []):
                tick = int(round((x["t"] - t0) * 10))  # tenths of a second since the first step
                events.scalar(f"hosts/{host}/cpu_pct", x["cpu_pct"], tick, walltime=x["t"])
                for g, value in enumerate(x.get("gpu_pct", [])):
                    if value is not None:
                        events.scalar(f"hosts/{host}/gpu{g}_pct", value, tick, walltime=x["t"])
    finally:
        events.close()
    return directory


def _tensorboard_steps(report: dict) -> list[dict]:
    """A record per bucket up to where the exact latest steps begin, then those steps: a bounded
    number of points, and the end of the run at full resolution."""
    from smlaunch.series import StepLog, bucket_mean

    exact = report["steps"]
    first = exact[0]["step"] if exact else float("inf")
    return [bucket_mean(b) for b in StepLog.from_report(report).buckets.items if b["step"] < first] + list(exact)


def epochs_text(summary: dict) -> str:
    """`14`, or `14 (epoch 14 cut short by the step count)` when the run ended inside an epoch."""
    if summary.get("epochs_complete", summary["epochs"]) >= summary["epochs"]:
        return str(summary["epochs"])
    why = "a stop" if summary.get("stopped_at_step") is not None else "the step count"
    return f"{summary['epochs']} (epoch {summary['epochs']} cut short by {why})"
