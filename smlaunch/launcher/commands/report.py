"""`sm-launch report RUN_DIR`: draw a run's report again from its `report.json`.

RUN_DIR may be a local run's directory (the head's `hosts/<head>/opt/ml/output/data` is found
under it), a job's downloaded `output/data` folder, or the `report.json` itself. The verdict and
the advisor are computed again, with `--price TYPE=USD` on top of the prices the run used.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from smlaunch.errors import UserError
from smlaunch.console import RESULT

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="a run directory, an output/data folder, or a report.json")
    parser.add_argument("--price", action="append", default=[], metavar="TYPE=USD",
                        help="USD per instance-hour for an ml.* type, over the run's prices (repeatable)")


def main(args, failure) -> int:
    from smlaunch.launcher.report import log_summary

    path, report = rerender(args.run_dir, args.price)
    log_summary(report, log)
    log.log(RESULT, f"report: {path} (summary.md, throughput.png, data_wait.png, utilisation.png, tensorboard/ "
                    "beside it)")
    return 0


def find_report(path: str) -> Path:
    given = Path(path)
    if given.is_file():
        return given
    if not given.is_dir():
        raise UserError(f"{path}: no such file or directory")
    found = [given / "report.json"] if (given / "report.json").is_file() else sorted(given.glob("**/report.json"))
    if not found:
        raise UserError(f"{path}: no report.json under it (a run writes one in the head's output/data)")
    if len(found) > 1:
        raise UserError(f"{path}: {len(found)} report.json files under it; name one: "
                        + ", ".join(str(f) for f in found[:5]))
    return found[0]


def rerender(path: str, prices: list[str]) -> tuple[Path, dict]:
    from smlaunch.config.instance_types import check_training_type
    from smlaunch.launcher.report import add_analysis, write_report

    report_path = find_report(path)
    try:
        report = json.loads(report_path.read_text())
        monitor = dict(report.get("monitor") or {})
        epoch_images = monitor.pop("epoch_images", None)
        overrides = dict(monitor.get("prices") or {})
        for item in prices:
            name, _, value = item.partition("=")
            try:
                overrides[name] = float(value)
            except ValueError:
                raise UserError(f"--price {item}: expected TYPE=USD_PER_HOUR, e.g. ml.c5.4xlarge=0.816") from None
            try:
                check_training_type(name)
            except ValueError as exc:
                raise UserError(f"--price {item}: {exc}") from None
        add_analysis(report, {**monitor, "prices": overrides}, epoch_images)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, UserError):
            raise
        raise UserError(f"{report_path}: not a report this version can read ({type(exc).__name__}: {exc})") from None
    write_report(report, report_path.parent)
    return report_path, report
