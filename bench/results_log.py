"""Each bench's RESULT line, printed as before and kept in bench/results/history.jsonl.

Every script in bench/ ends with one or more lines `RESULT <name> <metric>=<value> ... goal=<goal>`.
A line on a terminal is gone once the terminal is; the history keeps the values as data, so a
metric's course over dates, commits and machines can be read or drawn (bench/plot_history.py)
without searching prose. Benches call `report_result(line)` where they used to `print(line)`.

The history holds one JSON object per line and one line per metric value (a RESULT line with three
metrics gives three lines), so a metric's values can be selected without knowing which other
metrics shared its run:

    {"bench": "elastic", "metric": "cost_ratio", "value": 1.023, "goal": "<the line's goal>",
     "commit": "29bfea9", "date": "2026-11-28", "machine": "...", "command": "bench/elastic.py ...",
     "note": null}

`bench` is the RESULT line's name (a script may print several names: record_readers.py prints
pipe_ingest, tfrecord_reader and small_records); `value` is a number, or the text as printed when it
is not one; `goal` is the line's whole goal field as printed (null when it has none), since a goal
such as `1.0/1.5/1.5` or `0.8` does not say on its own which metric each part is for; `commit` is
`git rev-parse --short HEAD` of the checkout that ran it (null outside a git checkout), and `note`
says when that checkout had uncommitted changes. Records taken from BENCHMARKS.md's older prose
also carry `commit_note` (how the commit was attributed) and `source` (where the value was found).

`SMLAUNCH_BENCH_NO_HISTORY=1` prints the lines and keeps nothing (a trial run);
`SMLAUNCH_BENCH_HISTORY=<path>` appends to another file (the tests use a temporary one).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "bench" / "results" / "history.jsonl"
HISTORY_ENV = "SMLAUNCH_BENCH_HISTORY"
"""Names a file to append to instead of HISTORY."""
NO_HISTORY_ENV = "SMLAUNCH_BENCH_NO_HISTORY"
"""Set (to anything but 0) to print the RESULT lines only."""
KEYS = ("bench", "metric", "value", "goal", "commit", "date", "machine", "command", "note")
"""Every record has these keys; older records may add `commit_note` and `source`."""
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def as_number(text: str) -> int | float | str:
    """`text` as an int or float when it is written as one, else unchanged (`None`, `nan`, `2/5` stay text)."""
    if not _NUMBER.fullmatch(text):
        return text
    if text.lstrip("+-").isdigit():
        return int(text)
    value = float(text)
    return value if math.isfinite(value) else text  # 1e999: JSON has no infinity


def parse_result(line: str) -> tuple[str, dict[str, int | float | str], str | None]:
    """(name, {metric: value}, goal) of `RESULT <name> <metric>=<value> ... goal=<goal>`.

    The goal is the rest of the line after `goal=`, whatever it holds (`report_mb<=50,render_s<=30`,
    `2/-`, `none`); a line without one gives None. Raises ValueError on anything else.
    """
    words = line.split()
    if len(words) < 3 or words[0] != "RESULT":
        raise ValueError(f"not a RESULT line with a metric: {line!r}")
    metrics: dict[str, int | float | str] = {}
    goal = None
    for index, word in enumerate(words[2:], start=2):
        key, equals, value = word.partition("=")
        if key == "goal" and equals:
            goal = " ".join(words[index:])[len("goal=") :]
            break
        if not (key and equals):
            raise ValueError(f"{word!r} is not <metric>=<value> in {line!r}")
        metrics[key] = as_number(value)
    if not metrics:
        raise ValueError(f"no metric in {line!r}")
    return words[1], metrics, goal


def _git(*args: str) -> str | None:
    """git's answer in this checkout, None where there is no git or no checkout (a copied tree)."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _gpus() -> str | None:
    """The GPUs' names by nvidia-smi (`2 x NVIDIA H100 80GB HBM3`), None where there is none."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [n.strip() for n in done.stdout.splitlines() if n.strip()] if done.returncode == 0 else []
    if not names:
        return None
    return names[0] if len(names) == 1 else ", ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))


def machine() -> str:
    """What the figures depend on: CPUs, memory, GPU, architecture (`16 CPUs, 125 GiB, NVIDIA H100 ..., x86_64`)."""
    parts = [f"{os.cpu_count()} CPUs"]
    try:
        parts.append(f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB")
    except (AttributeError, OSError, ValueError):
        pass
    parts += [_gpus() or "no GPU", platform.machine()]
    return ", ".join(parts)


@functools.lru_cache(maxsize=1)
def run_context() -> dict[str, str | None]:
    """The fields every record of this process shares (worked out once: a script may report several lines)."""
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = commit is not None and bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "command": shlex.join(sys.argv),
        "note": "the checkout had uncommitted changes" if dirty else None,
    }


def records(line: str) -> list[dict]:
    """The history records of one RESULT line: one per metric, with this run's context."""
    name, metrics, goal = parse_result(line)
    context = run_context()
    return [
        {"bench": name, "metric": metric, "value": value, "goal": goal, **context} for metric, value in metrics.items()
    ]


def history_path() -> Path | None:
    """Where report_result appends: HISTORY, or the file SMLAUNCH_BENCH_HISTORY names; None when it is off."""
    if os.environ.get(NO_HISTORY_ENV, "") not in ("", "0"):
        return None
    return Path(os.environ.get(HISTORY_ENV) or HISTORY)


def report_result(line: str, history: Path | None = None) -> None:
    """Print `line` unchanged, then append its metrics to `history` (default: history_path()).

    The line is printed first and a failure to keep it only warns: a bench that ran for 45 minutes
    must not lose its result, nor its exit status, to a read-only checkout or a malformed line.
    """
    print(line, flush=True)
    path = history or history_path()
    if path is None:
        return
    try:
        text = "".join(json.dumps(record) + "\n" for record in records(line))
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(text)
    except (OSError, ValueError) as e:
        print(f"warning: RESULT not kept in {path}: {e}", file=sys.stderr, flush=True)
