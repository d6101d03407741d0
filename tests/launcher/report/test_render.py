"""The report's Markdown, PNG plots and TensorBoard events, and `sm-launch report` re-rendering them."""

from __future__ import annotations

import json

import matplotlib.image
import pytest

from smlaunch.launcher.cli import main
from smlaunch.launcher.report.job_report import write_report
from smlaunch.pipelines.formats import iter_records
from support.constructed_runs import constructed_report as _run


def test_report_renders_markdown_pngs_and_tensorboard(configs, tmp_path):
    report, _ = _run(configs, tmp_path, compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    out = tmp_path / "output" / "data"
    write_report(report, out)
    for name in ("throughput.png", "data_wait.png", "utilisation.png"):
        pixels = matplotlib.image.imread(out / name)
        assert pixels.shape[0] > 200 and pixels.shape[1] > 600, name
        assert pixels[..., :3].std() > 0.05, f"{name} is blank"
    summary = (out / "summary.md").read_text()
    assert "## Verdict: input-bound" in summary and "| algo-2 | data | 95.0 |" in summary
    assert "| 2 | 200.0 | pipeline |" in summary  # the advisor's table row for two hosts
    # TensorBoard event files are TFRecord-framed Event protos: one per scalar, plus a header.
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    with open(events[0], "rb") as f:
        records = sum(1 for _ in iter_records(f, "tfrecord", str(events[0])))
    samples = sum(len(s["samples"]) for s in report["samples"].values())
    assert records >= 3 * len(report["steps"]) + samples


def test_report_command_rerenders_with_other_prices(configs, tmp_path, capsys):
    report, _ = _run(configs, tmp_path, compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    out = tmp_path / "run" / "hosts" / "algo-1" / "opt" / "ml" / "output" / "data"
    write_report(report, out)
    (out / "utilisation.png").unlink()
    before = json.loads((out / "report.json").read_text())["advisor"]["table"][1]["cost_per_hour"]

    assert main(["report", str(tmp_path / "run"), "--price", "ml.c5.xlarge=5"]) == 0
    text = capsys.readouterr().out
    assert "verdict: input-bound" in text and "advisor: recommend" in text
    assert (out / "utilisation.png").exists()
    after = json.loads((out / "report.json").read_text())["advisor"]["table"][1]["cost_per_hour"]
    assert after == round(before - 0.204 + 5, 4)

    assert main(["report", str(tmp_path / "nowhere")]) == 1
    assert main(["report", str(out), "--price", "ml.c5.xlarge=cheap"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        err[-1] == "sm-launch: error: --price ml.c5.xlarge=cheap: expected TYPE=USD_PER_HOUR, e.g. ml.c5.4xlarge=0.816"
    )


def test_a_long_run_stays_bounded_and_its_summary_still_covers_every_step(configs, tmp_path):
    from smlaunch.series import CAPACITY, TAIL

    steps = 3 * TAIL
    report, _ = _run(configs, tmp_path, compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01, steps=steps)
    assert [s["step"] for s in report["steps"]] == list(range(steps - TAIL + 1, steps + 1))
    series = report["step_series"]
    assert len(series["buckets"]) <= CAPACITY and sum(b["n"] for b in series["buckets"]) == steps
    assert report["summary"]["steps_this_run"] == steps and report["summary"]["images_per_s"] == 200.0
    assert report["rates"]["measured_images_per_s"] == pytest.approx(200.0)
    out = tmp_path / "output" / "data"
    write_report(report, out)
    for name in ("throughput.png", "data_wait.png", "utilisation.png"):
        assert matplotlib.image.imread(out / name)[..., :3].std() > 0.05, f"{name} is blank"
    [events] = list((out / "tensorboard").glob("events.out.tfevents.*"))
    with open(events, "rb") as f:
        records = sum(1 for _ in iter_records(f, "tfrecord", str(events)))
    samples = sum(len(s["samples"]) for s in report["samples"].values())
    # every bucket before the exact tail, then the tail: 3 scalars each, a few validation ones, a header
    assert 3 * TAIL + samples <= records <= 3 * (len(series["buckets"]) + TAIL) + samples + 10
    assert sum(e["n"] for e in series["epochs"]) == steps


def test_a_report_drawn_in_the_background_raises_its_drawing_error_where_the_job_waits(tmp_path):
    from smlaunch.launcher.report.job_report import Rendering

    path = tmp_path / "report.json"
    path.write_text('{"job": "broken"}')  # no summary: the drawing fails in its thread
    drawing = Rendering(path)
    with pytest.raises(KeyError):
        drawing.wait()


def test_elastic_runs_show_the_cost_per_image_in_the_table_and_under_the_hosts_plot(configs, tmp_path):
    """Issue 57: the elastic section's timeline and autoscale.png carry the job's cost per image,
    the train hosts counted; with no price known the plot keeps one panel and the line says why."""
    report, _ = _run(configs, tmp_path, compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    t0 = report["steps"][0]["t"]
    entry = {
        "hosts": 1,
        "wanted": 2,
        "data_wait_pct": 41.0,
        "images_per_s": 78.0,
        "usd_per_h": 0.408,
        "usd_per_million_images": 5.74,
        "change": 1,
        "reason": "over the 5 % target",
    }
    autoscale = {
        "sizes": [1, 2],
        "changes": 1,
        "added": 1,
        "released": 0,
        "data_host_seconds": 12.5,
        "price_per_host_h": 0.204,
        "train_price_h": 1.408,
        "usd_per_million_images": 6.12,
        "target_data_wait_pct": 5.0,
        "epoch_start_steps_left_out": 1,
        "timeline": [dict(entry, t=t0 + 0.5), dict(entry, t=t0 + 2.0, hosts=2, change=0, reason="within")],
    }
    heights = {}
    for name, section in {
        "priced": autoscale,
        "unpriced": dict(autoscale, train_price_h=None, usd_per_million_images=None),
    }.items():
        out = tmp_path / name
        write_report(dict(report, autoscale=section), out)
        summary = (out / "summary.md").read_text()
        heights[name] = matplotlib.image.imread(out / "autoscale.png").shape[0]
        if name == "priced":
            assert "12.5 data-host-seconds; $6.12 per million images, train and data hosts" in summary
            assert "| data hosts $/h | $ per million images | why |" in summary and "| 0.408 | 5.74 | over" in summary
        else:
            assert "cost per image unknown (no price for the train or data hosts: monitor.prices)" in summary
    assert heights["priced"] > heights["unpriced"] * 1.3, heights
