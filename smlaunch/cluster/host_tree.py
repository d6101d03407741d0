"""`/opt/ml` trees laid out and filled as SageMaker fills a real host's.

A local run gets one tree per simulated host under the run directory, and tests and benchmarks
of the multi-host path get one per fake host of a job layout (`simulate_job`), each with the
files SageMaker writes (`resourceconfig.json`, `inputdataconfig.json`, `hyperparameters.json`),
so the code that reads a real host's tree reads these the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from smlaunch.cluster.plan import LaunchPlan

SUBDIRS = ("input/config", "input/data", "model", "output/data", "checkpoints", "code")


def write_host_tree(
    opt_ml: str | Path,
    current_host: str,
    groups: list[dict],
    channels: dict[str, str],
    interface: str = "lo",
    hyperparameters: dict | None = None,
    distributions: dict[str, str] | None = None,
    wrappers: dict[str, str] | None = None,
) -> Path:
    """One host's tree. `groups` are resourceconfig `instance_groups` entries (hosts as listed,
    unsorted if you like); `channels` maps the channels this host receives to their input mode,
    `distributions` to their S3DistributionType (default FullyReplicated), `wrappers` to their
    RecordWrapperType (default None)."""
    root = Path(opt_ml)
    for sub in SUBDIRS:
        (root / sub).mkdir(parents=True, exist_ok=True)
    mine = next(g for g in groups if current_host in g["hosts"])
    hosts = sorted(h for g in groups for h in g["hosts"])  # SageMaker sorts `hosts` as strings
    resource = {
        "current_host": current_host,
        "current_instance_type": mine["instance_type"],
        "current_group_name": mine["instance_group_name"],
        "hosts": hosts,
        "instance_groups": groups,
        "network_interface_name": interface,
    }
    inputs = {
        name: {
            "TrainingInputMode": mode,
            "S3DistributionType": (distributions or {}).get(name, "FullyReplicated"),
            "RecordWrapperType": (wrappers or {}).get(name, "None"),
        }
        for name, mode in channels.items()
    }
    config = root / "input" / "config"
    (config / "resourceconfig.json").write_text(json.dumps(resource, indent=2))
    (config / "inputdataconfig.json").write_text(json.dumps(inputs, indent=2))
    (config / "hyperparameters.json").write_text(
        json.dumps({k: json.dumps(v) for k, v in (hyperparameters or {}).items()})
    )
    return root


def simulate_job(root: str | Path, groups: list[dict], channel_groups: dict[str, list[str]]) -> dict[str, Path]:
    """A tree per host of a job layout under `root/<host>/opt/ml`; returns host -> tree.

    `channel_groups` maps each File-mode channel to the groups that receive it.
    """
    trees = {}
    for group in groups:
        for host in group["hosts"]:
            channels = {c: "File" for c, gs in channel_groups.items() if group["instance_group_name"] in gs}
            trees[host] = write_host_tree(Path(root) / host / "opt" / "ml", host, groups, channels)
    return trees


def create_host_trees(plan: LaunchPlan) -> None:
    """The trees of a local run's simulated hosts."""
    groups: dict[str, dict] = {}
    for host in plan.hosts:
        group = groups.setdefault(
            host.group, {"instance_group_name": host.group, "instance_type": host.instance_type, "hosts": []}
        )
        group["hosts"].append(host.name)
    for host in plan.hosts:
        if host.opt_ml is None:
            raise ValueError(f"host {host.name} has no /opt/ml tree in this plan: only simulated hosts have one here")
        channels = {c.name: c.input_mode for c in plan.channels if host.name in c.hosts}
        write_host_tree(
            host.opt_ml,
            host.name,
            list(groups.values()),
            channels,
            distributions={c.name: c.distribution for c in plan.channels},
            wrappers={c.name: "RecordIO" for c in plan.channels if c.attribute_names},
        )
