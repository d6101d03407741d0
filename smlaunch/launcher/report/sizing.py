"""Sizing a SageMaker job's data group before it starts, from the advisor of the last report of
the same config (issue 42).

A training job's instance groups are fixed for its life, so on SageMaker elasticity means choosing
the data group's host count at submit: `submit --data-hosts auto` (or `sagemaker.data_hosts: auto`)
takes the newest report under `run.dir` whose run had the same config, in the parts that set the
rates the advisor works from (`RATE_FIELDS`), and asks the advisor (`advisor.advise_plan`) what
this config's cluster needs: its train hosts as configured, the data group's instance type only
(another CPU-only group, if the config has one, is left out of the prediction).
`submit --data-hosts N` forces N. With an `autoscale:` section the group is the one it scales
(`cluster.autoscale.rules.scaled_group`) and the count stays within [min_data_hosts,
max_data_hosts]; without one it is the config's single CPU-only group besides the train group.
A SageMaker instance group has at least one host, so "no CPU host" (the GPU hosts' own CPUs keep
up) becomes one.

`size_from_report` is the rule, a pure function of the config and one report; `size_data_group`
finds the report (the only part that reads files) and applies it.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import NamedTuple

from smlaunch.errors import ConfigError, UserError

RATE_FIELDS = (
    "job",
    "model.name",
    "pipeline.ops",
    "pipeline.batch_size",
    "trainer.batch_size",
    "trainer.precision",
    "channels.train.record_format",
    "channels.train.input_mode",
)
"""What makes two configs "the same" for sizing: the job name and what sets the trainer's and the
chain's rates; plus every group's instance type (`rate_fingerprint`). Not the host counts (what is
sized), the steps or epochs (a brief run is the point), the sources or the run directory."""
REPORT_PATHS = ("output/data/report.json", "hosts/*/opt/ml/output/data/report.json")
"""Where a run under `run.dir` keeps its report: a run on a running Ray cluster (`run --address`),
and a local simulation (the head's tree). Its `resolved_config.yaml` is beside them, in the run's
directory."""


class Sizing(NamedTuple):
    """The data group's host count for the job, and why."""

    count: int  # type: ignore[assignment]  # the field is meant to hide tuple.count, which nothing calls
    why: str
    report: Path | None
    """The report it was sized from; None for a forced count."""
    group: str
    instance_type: str
    was: int
    """The config's `instance_count` for the group."""

    def line(self) -> str:
        was = "" if self.was == self.count else f" (its instance_count: {self.was})"
        return f"data hosts: {self.count} x {self.instance_type} for {self.group}{was} {self.why}"


def data_group(cfg):
    """The group sizing changes: the one `autoscale:` scales, else the one CPU-only group besides the
    train group; ConfigError (one line) when there is none or more than one."""
    from smlaunch.cluster.autoscale.rules import scaled_group

    if cfg.autoscale is not None:
        return scaled_group(cfg)
    from smlaunch.cluster.topology import config_train_group

    train, _ = config_train_group(cfg)
    cpu = [g for g in cfg.cluster.instance_groups if g.name != train and not g.spec.gpus]
    if len(cpu) != 1:
        raise ConfigError(
            f"sagemaker.data_hosts: sizing needs one CPU-only group besides the train group {train}, "
            f"and this config has {', '.join(g.name for g in cpu) or 'none'}"
            + ("; name the one to size in an autoscale: section (autoscale.group)" if cpu else "")
        )
    return cpu[0]


def bounds(cfg) -> tuple[int, int]:
    """[low, high] for the count: the `autoscale:` section's, else 1 (a SageMaker group has at least
    one host, so `min_data_hosts: 0` counts as 1 here) and the advisor's range (`monitor.max_data_hosts`)."""
    a = cfg.autoscale
    return (max(1, a.min_data_hosts), a.max_data_hosts) if a is not None else (1, cfg.monitor.max_data_hosts)


def rate_fingerprint(config: dict) -> dict:
    """The `RATE_FIELDS` of a config (as `model_dump(mode="json")` or a run's resolved_config.yaml
    has it), and `instance_types` by group; a missing field is None."""

    def at(path: str):
        value: object = config
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    groups = (config.get("cluster") or {}).get("instance_groups") or []
    return {
        **{path: at(path) for path in RATE_FIELDS},
        "instance_types": {g.get("name"): g.get("instance_type") for g in groups},
    }


def differences(a: dict, b: dict) -> list[str]:
    """The fingerprint fields in which `a` and `b` differ."""
    return [key for key in a if a[key] != b.get(key)]


def forced(cfg, count: int) -> Sizing:
    """`--data-hosts N`: N hosts, within the autoscale section's bounds if there is one."""
    group = data_group(cfg)
    if cfg.autoscale is not None:
        low, high = bounds(cfg)
        if not low <= count <= high:
            raise ConfigError(
                f"--data-hosts {count}: outside autoscale.min_data_hosts..max_data_hosts ({low}..{high}) "
                f"for {group.name}; change the bounds or the count"
            )
    return Sizing(
        count,
        "as --data-hosts or sagemaker.data_hosts says",
        None,
        group.name,
        group.instance_type,
        group.instance_count,
    )


def size_from_report(
    cfg, report: dict, path: str | Path, when: float | None, prices: dict, dated: str, note: str = ""
) -> Sizing:
    """The rule: the data group's count for `cfg` from a measured run's `report` (at `path`, written
    at `when`): the advisor's recommendation for this config's train hosts and the data group's
    instance type, at least 1, clamped to `bounds`. `note` is added to the why."""
    from smlaunch.cluster.topology import place_workers
    from smlaunch.launcher.report.advisor import advise_plan

    group = data_group(cfg)
    low, high = bounds(cfg)
    from smlaunch.cluster.topology import config_train_group

    train = next(g for g in cfg.cluster.instance_groups if g.name == config_train_group(cfg)[0])
    hosts = [
        {"subcluster": "train", "instance_type": train.instance_type, "vcpus": train.spec.vcpus}
    ] * train.instance_count + [
        {"subcluster": "data", "instance_type": group.instance_type, "vcpus": group.spec.vcpus}
    ] * group.instance_count
    workers = len(
        place_workers([(f"h{i}", train.spec.gpus) for i in range(train.instance_count)], cfg.trainer.max_workers)
    )
    monitor = {
        **cfg.monitor.model_dump(mode="json"),
        "cpu_instance_types": [group.instance_type],
        "max_data_hosts": max(cfg.monitor.max_data_hosts, high),
    }
    advisor = advise_plan(hosts, workers, report, monitor, prices, dated)
    if "error" in advisor:
        raise UserError(f"data hosts: {path}: {advisor['error']}")
    wanted = advisor["recommended"]["hosts"]
    count = min(max(wanted, low), high)
    predicted = next(o for o in advisor["table"] if o["hosts"] == count)
    gpu_bound = advisor["rates"]["gpu_bound_images_per_s"]
    stamp = f" ({time.strftime('%Y-%m-%d %H:%M', time.localtime(when))})" if when is not None else ""
    why = f"from the advisor of {path}{stamp}: predicted {predicted['images_per_s']:g} images/s"
    if gpu_bound and math.isfinite(gpu_bound):
        why += f", data wait {max(0.0, 100 * (1 - predicted['images_per_s'] / gpu_bound)):.0f} %"
    why += f", bound by the {predicted['bound']}"
    if predicted["cost_per_epoch"] is not None:
        why += f", ${predicted['cost_per_epoch']:g}/epoch"
    if wanted != count:
        limit = (
            ("autoscale.min_data_hosts" if wanted < low else "autoscale.max_data_hosts")
            if cfg.autoscale is not None and (wanted >= low or cfg.autoscale.min_data_hosts)
            else ("a SageMaker group's minimum" if wanted < low else "monitor.max_data_hosts")
        )
        wish = "no CPU host (the GPU hosts' own CPUs keep up)" if wanted == 0 else str(wanted)
        why += f"; the advisor recommends {wish}, {limit} makes it {count}"
    return Sizing(
        count, why + (f"; {note}" if note else ""), Path(path), group.name, group.instance_type, group.instance_count
    )


def candidate_reports(run_dir: Path) -> list[tuple[Path, Path]]:
    """(report.json, its run's resolved_config.yaml) of every run directly under `run_dir`."""
    found = []
    for run in sorted(p for p in run_dir.iterdir() if p.is_dir()) if run_dir.is_dir() else []:
        for pattern in REPORT_PATHS:
            found += [(path, run / "resolved_config.yaml") for path in sorted(run.glob(pattern)) if path.is_file()]
    return found


def find_report(cfg, config_name: str = "CONFIG") -> tuple[Path, dict, float]:
    """The newest report under `run.dir` (by its file's time) whose run's resolved config has this
    config's fingerprint and whose advisor has figures; UserError (one line: where it looked, how
    to get one) when there is none."""
    import yaml

    run_dir = cfg.run.dir
    how = (
        f"run the config briefly first (sm-launch {config_name} --set trainer.steps=300), or name a report with "
        "--from-report PATH (e.g. a job's output fetched by sm-launch report --job NAME)"
    )
    if run_dir.startswith("s3://"):
        raise UserError(f"data hosts auto: run.dir {run_dir} is in S3, where submit does not look for reports; {how}")
    mine = rate_fingerprint(cfg.model_dump(mode="json"))
    others, unusable, best = [], 0, None
    for path, resolved in candidate_reports(Path(run_dir)):
        try:
            theirs = rate_fingerprint(_normalised(yaml.safe_load(resolved.read_text()) or {}))
        except (OSError, ValueError, yaml.YAMLError):
            continue  # a run without its resolved config (or an unreadable one) matches nothing
        if theirs != mine:
            others.append((path.stat().st_mtime, str(path), differences(mine, theirs)))
            continue
        when = path.stat().st_mtime
        if best is not None and when <= best[2]:
            continue
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            unusable += 1
            continue
        if "error" in (report.get("advisor") or {"error": ""}) or "rates" not in report:
            unusable += 1
            continue
        best = (path, report, when)
    if best is not None:
        return best
    seen = ""
    if others:
        _, newest, fields = max(others)
        seen = (
            f"; {len(others)} report(s) of other configs ignored (the newest, {newest}: its run's config differs in "
            f"{', '.join(fields)})"
        )
    if unusable:
        seen += f"; {unusable} report(s) of this config without advisor figures"
    raise UserError(
        f"data hosts auto: no report of this config (job {cfg.job}, model {mine['model.name']}, "
        f"{', '.join(f'{k} {v}' for k, v in mine['instance_types'].items())}) in the runs under "
        f"{run_dir}/ (each run's {' or '.join(REPORT_PATHS)}, beside its resolved_config.yaml){seen}; {how}"
    )


def _normalised(raw: dict) -> dict:
    """A resolved config with today's defaults filled in, so a field added since compares equal; as
    written when it no longer validates."""
    from pydantic import ValidationError

    from smlaunch.config.schema import LaunchConfig

    try:
        return LaunchConfig.model_validate(raw).model_dump(mode="json")
    except (ValidationError, ValueError, TypeError):
        return raw


def size_data_group(cfg, data_hosts, from_report: str | None = None, config_name: str = "CONFIG") -> Sizing | None:
    """What `submit` applies: None when nothing asks for sizing (`data_hosts` None: the flag or
    `sagemaker.data_hosts`), a forced count for an int, else the rule on `from_report` (used as
    given, with a note when its run's config differs) or on the newest matching report."""
    from smlaunch.cluster.prices import PRICES_DATED, price_table

    if from_report is not None and data_hosts not in (None, "auto"):
        raise ConfigError(
            f"--from-report sizes the data group from a report; it does not go with --data-hosts "
            f"{data_hosts} (a fixed count)"
        )
    if data_hosts is None and from_report is None:
        return None
    if data_hosts not in (None, "auto"):
        return forced(cfg, int(data_hosts))
    data_group(cfg)  # the config's problem first, before any report is looked for
    note = ""
    if from_report is not None:
        from smlaunch.launcher.report.job_report import report_file

        path = report_file(from_report)
        try:
            report = json.loads(path.read_text())
        except ValueError as exc:
            raise UserError(f"--from-report {path}: not a report ({exc})") from None
        when = path.stat().st_mtime
        note = _named_note(cfg, path)
    else:
        path, report, when = find_report(cfg, config_name)
    return size_from_report(cfg, report, path, when, price_table(cfg.monitor.prices), PRICES_DATED, note)


def _named_note(cfg, path: Path) -> str:
    """For a report named by --from-report: whether its run's resolved config (if found above it)
    is this config's, in the fields that matter."""
    import yaml

    resolved = next(
        (p / "resolved_config.yaml" for p in path.resolve().parents if (p / "resolved_config.yaml").is_file()), None
    )
    if resolved is None:
        return "named by --from-report (its run's config not found beside it, so not compared)"
    try:
        theirs = rate_fingerprint(_normalised(yaml.safe_load(resolved.read_text()) or {}))
    except (OSError, yaml.YAMLError):
        return "named by --from-report"
    fields = differences(rate_fingerprint(cfg.model_dump(mode="json")), theirs)
    return (
        f"named by --from-report; WARNING: its run's config differs from this one in {', '.join(fields)}"
        if fields
        else "named by --from-report"
    )


def sized_config(cfg, sizing: Sizing):
    """`cfg` with the data group at `sizing.count` hosts and `sagemaker.data_hosts` at that number,
    so the request and the shipped config say the same."""
    groups = [
        g.model_copy(update={"instance_count": sizing.count}) if g.name == sizing.group else g
        for g in cfg.cluster.instance_groups
    ]
    update = {"cluster": cfg.cluster.model_copy(update={"instance_groups": groups})}
    if cfg.sagemaker is not None:
        update["sagemaker"] = cfg.sagemaker.model_copy(update={"data_hosts": sizing.count})
    return cfg.model_copy(update=update)
