"""`make bench` runs every benchmark as written on a fresh clone: each script is in the Makefile's
bench target, and none reaches into tests/ (code outside tests/ never imports from it). Each
RESULT line a bench prints is also kept as data in bench/results/history.jsonl (bench/results_log.py),
and BENCHMARKS.md stays a page of current results that a newcomer can read, not a log."""

import datetime
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_BENCHMARKS = {"plot_history.py"}
"""Scripts in bench/ that measure nothing: plot_history.py draws the history the benchmarks append
to, so `make bench` must not run it (it would fail on a fresh clone without its arguments)."""


def _load_results_log():
    """bench/results_log.py by its path: bench/ is a folder of scripts, not a package on sys.path."""
    spec = importlib.util.spec_from_file_location("results_log", ROOT / "bench" / "results_log.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


results_log = _load_results_log()


def _scripts() -> list[Path]:
    """Bench scripts proper (helper modules such as advisor_ops.py have no `__main__` block)."""
    return [
        p
        for p in sorted((ROOT / "bench").glob("*.py"))
        if '__name__ == "__main__"' in p.read_text() and p.name not in NOT_BENCHMARKS
    ]


def test_make_bench_runs_every_script():
    target = re.search(r"^bench:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert [p.name for p in _scripts() if f"bench/{p.name}" not in target] == []


def test_no_code_outside_tests_imports_from_tests():
    pattern = re.compile(
        r"^\s*(from|import)\s+(tests\b|support\b|sagemaker_job|constructed_runs|terminal\b|conftest)|"
        r"sys\.path\.insert\(.*tests",
        re.M,
    )
    outside = [*(ROOT / "bench").glob("*.py"), *(ROOT / "smlaunch").rglob("*.py")]
    assert [str(p.relative_to(ROOT)) for p in outside if pattern.search(p.read_text())] == []


def test_every_result_line_goes_through_the_history():
    """A bare print of a RESULT line would leave that bench's runs out of the history."""
    bare = re.compile(r"print\(\s*f?\"RESULT ")
    assert [p.name for p in (ROOT / "bench").glob("*.py") if bare.search(p.read_text())] == []


def test_history_records_parse_and_have_every_key():
    lines = results_log.HISTORY.read_text().splitlines()
    assert lines
    for number, line in enumerate(lines, start=1):
        record = json.loads(line)
        assert set(results_log.KEYS) <= record.keys(), f"line {number}: {sorted(record)}"
        assert record["bench"] and record["metric"] and record["machine"] and record["command"], f"line {number}"
        assert isinstance(record["value"], (int, float, str)), f"line {number}"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["date"]), f"line {number}"
        datetime.date.fromisoformat(record["date"])
        assert record["commit"] is None or re.fullmatch(r"[0-9a-f]{7,40}", record["commit"]), f"line {number}"


@pytest.mark.parametrize(
    ("line", "name", "metrics", "goal"),
    [
        ("RESULT bringup ratio=0.88 goal=1.2", "bringup", {"ratio": 0.88}, "1.2"),
        (
            "RESULT byo factory_ratio=1.024 mask_ops_ratio=0.698 tv2_ratio=2.09 goal=0.98",
            "byo",
            {"factory_ratio": 1.024, "mask_ops_ratio": 0.698, "tv2_ratio": 2.09},
            "0.98",
        ),
        (
            "RESULT long_run report_mb=10.10 render_s=14.4 goal=report_mb<=50,render_s<=30",
            "long_run",
            {"report_mb": 10.1, "render_s": 14.4},
            "report_mb<=50,render_s<=30",
        ),
        ("RESULT small_records records_per_s=648260 goal=500000", "small_records", {"records_per_s": 648260}, "500000"),
        ("RESULT local_default images_per_s=None goal=none", "local_default", {"images_per_s": "None"}, "none"),
        (
            "RESULT epoch_boundary data_wait_pct=0.1 boundary_wait_ratio=-0.2 goal=2/-",
            "epoch_boundary",
            {"data_wait_pct": 0.1, "boundary_wait_ratio": -0.2},
            "2/-",
        ),
        (
            "RESULT startup first_step_s=34.5 ratio_vs_ray=1.50",
            "startup",
            {"first_step_s": 34.5, "ratio_vs_ray": 1.5},
            None,
        ),
    ],
)
def test_parse_result(line, name, metrics, goal):
    parsed = results_log.parse_result(line)
    assert parsed == (name, metrics, goal)
    assert [type(v) for v in parsed[1].values()] == [type(v) for v in metrics.values()]


@pytest.mark.parametrize("line", ["images_per_s=1 goal=none", "RESULT local_default", "RESULT x ratio goal=1"])
def test_parse_result_refuses_other_lines(line):
    with pytest.raises(ValueError):
        results_log.parse_result(line)


def test_report_result_prints_the_line_unchanged_and_appends_its_metrics(tmp_path, monkeypatch, capsys):
    history = tmp_path / "results" / "history.jsonl"
    monkeypatch.setenv(results_log.HISTORY_ENV, str(history))
    monkeypatch.delenv(results_log.NO_HISTORY_ENV, raising=False)
    lines = [
        "RESULT pipe_ingest ratio_vs_raw=0.65 goal=0.7",
        "RESULT scale_listing listing_ratio=0.456 listing_rss_mb=220 goal=listing_ratio<=1.5,listing_rss_mb<=1500",
        "RESULT local_default images_per_s=None goal=none",
    ]
    for line in lines:
        results_log.report_result(line)
    captured = capsys.readouterr()
    assert captured.out == "".join(line + "\n" for line in lines)
    assert captured.err == ""
    records = [json.loads(r) for r in history.read_text().splitlines()]
    assert [(r["bench"], r["metric"], r["value"], r["goal"]) for r in records] == [
        ("pipe_ingest", "ratio_vs_raw", 0.65, "0.7"),
        ("scale_listing", "listing_ratio", 0.456, "listing_ratio<=1.5,listing_rss_mb<=1500"),
        ("scale_listing", "listing_rss_mb", 220, "listing_ratio<=1.5,listing_rss_mb<=1500"),
        ("local_default", "images_per_s", "None", "none"),
    ]
    today = datetime.date.today().isoformat()
    for record in records:
        assert set(results_log.KEYS) <= record.keys()
        assert record["date"] == today
        assert "CPUs" in record["machine"]
        assert record["command"]


def test_report_result_keeps_nothing_when_turned_off(tmp_path, monkeypatch, capsys):
    history = tmp_path / "history.jsonl"
    monkeypatch.setenv(results_log.HISTORY_ENV, str(history))
    monkeypatch.setenv(results_log.NO_HISTORY_ENV, "1")
    results_log.report_result("RESULT bringup ratio=0.88 goal=1.2")
    assert capsys.readouterr().out == "RESULT bringup ratio=0.88 goal=1.2\n"
    assert not history.exists()


def test_a_malformed_line_is_printed_and_only_warns(tmp_path, capsys):
    history = tmp_path / "history.jsonl"
    results_log.report_result("RESULT broken", history=history)
    captured = capsys.readouterr()
    assert captured.out == "RESULT broken\n"
    assert "not kept" in captured.err
    assert not history.exists()


def test_benchmarks_md_stays_short():
    assert len((ROOT / "BENCHMARKS.md").read_text().splitlines()) <= 400
