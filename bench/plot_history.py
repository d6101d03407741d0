"""One metric's values over time from bench/results/history.jsonl, as a PNG.

    .venv/bin/python bench/plot_history.py elastic cost_ratio [--out elastic-cost_ratio.png]

One marker per record, the date on x (the records of one day spread over it in the file's order,
so several runs a day stay apart), one colour and marker shape per machine: a 2-core VM's figure
and a 16-CPU machine's are not one series. The goal is a dashed line where it gives a number for
this metric: a plain number (`goal=0.97`), or a clause naming the metric or its stem
(`first_step_extra_ratio<=1.5` for `first_step_extra_ratio_2cpu`). A goal of several unnamed parts
(`1.0/1.5/1.5`) does not say which part is whose, so it draws no line.

A tool for reading the history, not a benchmark: `make bench` does not run it (tests/test_bench.py
exempts it by name).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from collections import Counter
from pathlib import Path

from results_log import history_path  # bench/, this script's folder

HERE = Path(__file__).resolve().parent
_CLAUSE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|<|>|==)\s*([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*$")


def goal_line(metric: str, goal: str | None) -> tuple[str, float] | None:
    """(comparison, threshold) that `goal` sets for `metric`, or None where it sets none that can be told."""
    if not goal:
        return None
    try:
        return ("goal", float(goal))
    except ValueError:
        pass
    best = None
    for clause in goal.split(","):
        m = _CLAUSE.match(clause)
        if not m:
            continue
        name, op, value = m.groups()
        if metric == name or metric.startswith(name + "_"):
            if best is None or len(name) > len(best[0]):  # cost_ratio_slow<=0.9 over cost_ratio<=0.9
                best = (name, op, float(value))
    return (best[1], best[2]) if best else None


def load(path: Path, bench: str, metric: str, match: str | None) -> list[dict]:
    """The records of bench/metric whose value is a number (and whose command contains `match`)."""
    rows = []
    with path.open() as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            if record["bench"] != bench or record["metric"] != metric:
                continue
            if match and match not in (record.get("command") or ""):
                continue
            if isinstance(record["value"], (int, float)) and not isinstance(record["value"], bool):
                rows.append(record)
    return rows


def spread_over_days(rows: list[dict]) -> list[datetime.datetime]:
    """Each record's x: its date, the records of one day spread over it in the history's order (the
    order they were run or recorded), so a day of several runs shows each of them."""
    per_day = Counter(r["date"] for r in rows)
    seen: Counter[str] = Counter()
    when = []
    for r in rows:
        seen[r["date"]] += 1
        k = seen[r["date"]]
        day = datetime.datetime.fromisoformat(r["date"])
        when.append(day + datetime.timedelta(days=k / (per_day[r["date"]] + 1)))
    return when


def draw(rows: list[dict], bench: str, metric: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8))
    markers = "osD^vP*X"
    machines = list(dict.fromkeys(r["machine"] for r in rows))
    when = spread_over_days(rows)
    for i, machine in enumerate(machines):
        mine = [k for k, r in enumerate(rows) if r["machine"] == machine]
        ax.scatter(
            [when[k] for k in mine],
            [rows[k]["value"] for k in mine],
            marker=markers[i % len(markers)],
            s=36,
            alpha=0.75,
            label=f"{machine} ({len(mine)})",
        )
    goals = {}
    for r in rows:
        line = goal_line(metric, r["goal"])
        if line:
            goals[line[1]] = line[0]
    for value, op in goals.items():
        ax.axhline(value, linestyle="--", color="grey", linewidth=1)
        ax.annotate(
            f"goal {op} {value:g}" if op != "goal" else f"goal {value:g}",
            (0, value),
            xycoords=("axes fraction", "data"),
            xytext=(4, 3),
            textcoords="offset points",
            fontsize=8,
            color="grey",
        )
    ax.xaxis.set_major_locator(mdates.DayLocator())
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d"))
    days = sorted({r["date"] for r in rows})
    start, end = datetime.date.fromisoformat(days[0]), datetime.date.fromisoformat(days[-1])
    ax.set_xlim(start - datetime.timedelta(days=0.5), end + datetime.timedelta(days=1.5))
    ax.set_xlabel(f"date ({start.year})")
    ax.set_ylabel(metric)
    ax.set_title(f"{bench} {metric}: {len(rows)} records from bench/results/history.jsonl")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", help="the RESULT line's name, e.g. elastic, scale, pipe_ingest")
    parser.add_argument("metric", help="e.g. cost_ratio, listing_ratio")
    parser.add_argument("--out", type=Path, help="the PNG to write (default: <bench>-<metric>.png here)")
    parser.add_argument("--history", type=Path, help="the history file (default: bench/results/history.jsonl)")
    parser.add_argument("--match", help="only records whose command contains this text (e.g. --image-px)")
    args = parser.parse_args()
    path = args.history or history_path() or HERE / "results" / "history.jsonl"
    rows = load(path, args.bench, args.metric, args.match)
    if not rows:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        metrics = sorted({r["metric"] for r in records if r["bench"] == args.bench})
        known = ", ".join(metrics) or "none; benches: " + ", ".join(sorted({r["bench"] for r in records}))
        print(f"no numeric values of {args.bench} {args.metric} in {path}; its metrics: {known}", file=sys.stderr)
        return 2
    out = args.out or Path(f"{args.bench}-{args.metric}.png")
    draw(rows, args.bench, args.metric, out)
    print(f"wrote {out} ({len(rows)} records, {len({r['machine'] for r in rows})} machines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
